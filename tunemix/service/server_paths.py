"""Server paths kept out of what clients see: error messages and the training record that
``GET /models/{name}`` shows name model files relative to the models directory, never by the
server's absolute paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def without_server_paths(value: Any, models_dir: Path) -> Any:
    """``value`` (JSON-like) with every absolute path (or one with ``~`` or ``..``) replaced: a path
    inside ``models_dir`` by the part relative to it, any other by its file name alone."""
    if isinstance(value, dict):
        return {k: without_server_paths(v, models_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [without_server_paths(v, models_dir) for v in value]
    if not isinstance(value, str) or not _is_server_path(value):
        return value
    path = Path(value.replace("\\", "/"))
    for root in (models_dir, models_dir.resolve()):
        if root.is_absolute() and path.is_relative_to(root):
            return path.relative_to(root).as_posix()
    return path.name


def _is_server_path(text: str) -> bool:
    posix = text.replace("\\", "/")
    return (posix.startswith(("/", "~")) or (len(posix) > 2 and posix[1] == ":" and posix[2] == "/")
            or ".." in posix.split("/"))


def without_paths(message: str, models_dir: Path) -> str:
    """An error message with the server's directories taken out (clients see model/version): the
    models directory as given and as resolved (they differ when it is or lies under a symlink),
    the longer first. One may begin with the other (``/srv/models`` and ``/srv/models.real``):
    taken out first, the shorter would leave the longer's rest (``<models>.real/...``). The order
    is fixed (by length, then text), so every worker answers alike whatever its hash seed."""
    for root in sorted({str(models_dir.resolve()), str(models_dir)}, key=lambda r: (-len(r), r)):
        message = message.replace(root + "/", "").replace(root, "<models>")
    return message
