"""The README and docs/ say what is, in today's names: every file path they cite exists, every
``python -m`` module they name exists, the README's first screen stays short, and no line tells
the story of a change (issue numbers, run labels, "now", "no longer"). The story belongs in the
commit messages, CHANGELOG.md and the decision pages under docs/decisions/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
DECISIONS = sorted((ROOT / "docs" / "decisions").glob("*.md"))
SKIPPED: set[Path] = set()

#: pages whose cited paths must exist
CITING = [README, *(p for p in DOCS if p not in SKIPPED), *DECISIONS]
#: pages that say what is, in the present tense (decision pages and the changelog may tell history)
PRESENT = [README, *(p for p in DOCS if p not in SKIPPED)]

PREFIXES = ("tunemix", "tests", "bench", "docs", "configs", "scripts", "deploy")
#: a repo-relative path anywhere in the text (code spans and prose alike), not part of a URL or of a
#: longer path such as ../shared/data
PATH = re.compile(r"(?<![\w/.:~-])((?:" + "|".join(PREFIXES) + r")/[\w./-]*[\w/])")
LINK = re.compile(r"\]\(([^)\s]+)\)")
MODULE = re.compile(r"python -m ((?:tunemix|bench)(?:\.\w+)*)")
#: a command run in a worktree of an older commit (``git worktree add DIR SHA && cd DIR && ...``)
OLDER_TREE = re.compile(r"git worktree add \S+ [0-9a-f]{7,40} && cd \S+ && ")

STORY = [
    r"\bissues? #?\d+",
    r"\b(?:session|run)\s?\d+\b",
    r"\bsessions?\b",
    r"_s\d+_",
    r"\bs\d{1,2}\b",
    r"\b(?:cost|fit|explain|serve|perf|integ)\d+[a-z]?\b",
    r"\bnow\b",
    r"\bno longer\b",
    r"\bbefore the fix\b",
    r"\bwas\b[^.]*\buntil\b",
    r"\bsince (?:then|issue|session|commit|\d)",
]


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", page.read_text(), flags=re.M)}


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", CITING, ids=_rel)
def test_every_cited_path_exists(page: Path) -> None:
    text = page.read_text()
    missing = []
    for m in PATH.finditer(text):
        if text[m.end():m.end() + 1] in ("<", "{", "*", "$"):  # a pattern such as bench/results/<name>.json
            continue
        path = m.group(1).split("::")[0]
        if not (ROOT / path).exists():
            missing.append(path)
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        resolved = (page.parent / file).resolve() if file else page
        if not resolved.exists():
            missing.append(target)
        elif anchor and resolved.suffix == ".md" and resolved not in SKIPPED and anchor not in _anchors(resolved):
            missing.append(target)
    for m in MODULE.finditer(text):
        line = text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.end())]
        if OLDER_TREE.search(line):
            continue  # a decided question's script, run from the commit that still has it
        parts = m.group(1).split(".")
        base = ROOT.joinpath(*parts)
        if not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()):
            missing.append(f"python -m {m.group(1)}")
    assert not missing, f"{_rel(page)} cites what does not exist: {sorted(set(missing))}"


def test_the_readme_is_short_and_its_table_cells_too() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, len(lines)
    long = [(i + 1, len(cell.strip())) for i, line in enumerate(lines) if line.startswith("|")
            for cell in re.split(r"(?<!\\)\|", line.strip("|")) if len(cell.strip()) > 160]
    assert not long, f"README table cells over 160 characters (line, length): {long}"


def test_the_readme_has_one_figures_table_between_its_markers() -> None:
    text = README.read_text()
    lines = text.splitlines()
    assert lines.count("<!-- table:readme -->") == 1 and lines.count("<!-- /table -->") == 1
    block = text.split("<!-- table:readme -->\n", 1)[1].split("<!-- /table -->", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("|")]
    assert len(rows) >= 3, block
    after = text.split("<!-- /table -->", 1)[1].strip().splitlines()[0]
    assert re.search(r"\d{4}-\d{2}-\d{2}", after), f"the line under the table gives no date: {after!r}"


@pytest.mark.parametrize("page", PRESENT, ids=_rel)
def test_no_line_tells_the_story_of_a_change(page: Path) -> None:
    found = [f"{_rel(page)}:{i + 1}: {pattern} in {line.strip()[:120]!r}"
             for i, line in enumerate(page.read_text().splitlines())
             for pattern in STORY if re.search(pattern, line, flags=re.I)]
    assert not found, "\n".join(found)


def test_decision_pages_are_short() -> None:
    for page in DECISIONS:
        assert len(page.read_text().splitlines()) <= 120, page.name


DOTTED = re.compile(r"(?<![\w./])(tunemix(?:\.[A-Za-z_]\w*)+)")


def _resolves(name: str) -> bool:
    """``name`` is a module of the package, or an attribute (a pydantic field too) of one."""
    import importlib

    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            fields = getattr(obj, "model_fields", {})
            if not hasattr(obj, attr) and attr not in fields:
                return False
            obj = getattr(obj, attr, None)
        return True
    return False


def test_every_dotted_name_resolves() -> None:
    """``tunemix.x.y`` in the README, the docs and the package's own docstrings and comments names
    a module or an attribute that exists (a file name such as ``tunemix.core.x.py`` aside)."""
    pages = [README, *DOCS, *DECISIONS, ROOT / "CHANGELOG.md", *sorted((ROOT / "tunemix").rglob("*.py"))]
    missing = []
    for page in pages:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for m in DOTTED.finditer(line):
                name = m.group(1)
                if name.rsplit(".", 1)[-1] in ("py", "md", "toml", "json"):
                    name = name.rsplit(".", 1)[0]
                if not _resolves(name):
                    missing.append(f"{_rel(page)}:{n}: {name}")
    assert not missing, "\n".join(missing)
