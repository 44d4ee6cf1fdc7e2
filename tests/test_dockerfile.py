"""The container image's build steps, read statically (no container engine in CI): every stage that
installs tunemix from source copies the package pyproject.toml ships, and the builder runs the demo
and the runtime warms the default model."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def stages(text: str) -> dict[str, list[str]]:
    """The Dockerfile's instructions by stage name, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out: dict[str, list[str]] = {}
    name = ""
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.IGNORECASE)
        if m:
            name = m.group(1)
            out[name] = []
        elif name:
            out[name].append(line)
    return out


def shipped_packages() -> set[str]:
    """The top-level packages pyproject.toml's setuptools find includes (``tunemix*`` -> tunemix)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    return {pattern.rstrip("*") for pattern in include}


def copied_sources(lines: list[str]) -> set[str]:
    """The source folders a stage copies into /tmp/build/src before it installs from there."""
    found = set()
    for line in lines:
        m = re.match(r"COPY\s+(\S+)\s+/tmp/build/src/(\S+)$", line)
        if m and m.group(1) == m.group(2):
            found.add(m.group(1))
    return found


def test_the_stages_that_build_from_source_copy_every_shipped_package() -> None:
    text = (ROOT / "Dockerfile").read_text()
    by_stage = stages(text)
    packages = shipped_packages()
    assert packages == {"tunemix"}
    builders = [name for name, lines in by_stage.items()
                if any(re.search(r"pip (install|wheel)\b.*/tmp/build/src", line) for line in lines)]
    assert set(builders) == {"builder", "wheel"}, builders
    for name in builders:
        missing = packages - copied_sources(by_stage[name])
        assert not missing, f"stage {name!r} installs tunemix from source without {sorted(missing)}"


def test_the_builder_runs_the_demo_and_the_runtime_warms_the_default_model() -> None:
    by_stage = stages((ROOT / "Dockerfile").read_text())
    assert any(line.startswith("RUN tunemix demo ") for line in by_stage["builder"])
    assert any("python -m tunemix.compile.serving" in line for line in by_stage["runtime"])
    # the runtime installs the wheel with [serve] only: no training extras in the serving image
    assert any(re.search(r'pip install .*tunemix-\*\.whl\)\[serve\]', line) for line in by_stage["runtime"])


def test_a_builder_without_the_package_is_caught() -> None:
    """The check above fails on a Dockerfile whose builder stage does not copy the package."""
    text = (ROOT / "Dockerfile").read_text()
    head, tail = text.split("FROM builder AS wheel", 1)
    broken = "\n".join(line for line in head.splitlines() if line != "COPY tunemix /tmp/build/src/tunemix")
    broken += "\nFROM builder AS wheel" + tail
    assert copied_sources(stages(broken)["builder"]) == set()
    assert copied_sources(stages(broken)["wheel"]) == {"tunemix"}


def test_the_wheel_carries_the_compiled_code_and_the_runtime_warms_the_hosts() -> None:
    """The wheel stage builds the shipped numba cache into the copy it wheels, before ``pip wheel``
    (pyproject.toml's package-data takes it in); the runtime checks the installed wheel has it and
    warms the service's kernels with the build host's own code."""
    by_stage = stages((ROOT / "Dockerfile").read_text())
    wheel = by_stage["wheel"]
    ship = next(i for i, line in enumerate(wheel) if "python -m tunemix.compile.ship" in line)
    build = next(i for i, line in enumerate(wheel) if re.search(r"pip wheel\b.*/tmp/build/src", line))
    assert ship < build and "PYTHONPATH=/tmp/build/src" in wheel[ship]
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["tunemix"]
    assert {"_compiled/*.json", "_compiled/**/*.nbi", "_compiled/**/*.nbc"} <= set(data)
    runtime = by_stage["runtime"]
    assert any("read_manifest(SHIPPED)" in line and "complete" in line for line in runtime)
    assert any(line.startswith("RUN TUNEMIX_SHIPPED_CACHE=0 python -m tunemix.compile.serving") for line in runtime)
