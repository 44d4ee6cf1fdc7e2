"""bench/ and docs/performance.md stay what they are: no import circle between benchmarks, no
history in them (issue numbers, run labels: that story lives in commit messages and
docs/decisions/), a short performance page whose cited files exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
PERFORMANCE = ROOT / "docs" / "performance.md"
DECISIONS = ROOT / "docs" / "decisions"

#: an issue number; a run label (run3, _s14, 39g, cost39g, explain_38c); a working session
NARRATION = re.compile(r"[Ii]ssue[ -]?#?\d+|\b(?:run|try)_?\d+\b|(?:\b|_)s\d{1,2}(?:_|\b)|(?<![\w:%.])\d{2}[a-h]\b"
                       r"|\b(?:cost|fit|perf|serve|explain|mix)_?\d{2}[a-h]?\b|\bsession\b")
GENERATED = re.compile(r"<!-- table:[\w-]+ -->\n.*?<!-- /table -->", re.S)


def bench_imports() -> dict[str, set[str]]:
    modules = {p.stem for p in BENCH.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in BENCH.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):  # imports inside functions count too
            if isinstance(node, ast.ImportFrom) and node.module == "bench":
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bench."):
                deps.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith("bench.")}
        graph[path.stem] = deps & modules - {path.stem}
    return graph


def test_no_import_circle_in_bench() -> None:
    graph = bench_imports()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        for dep in sorted(graph[module]):
            assert dep not in path, f"import circle: {' -> '.join([*path[path.index(dep):], dep])}"
            if dep not in done:
                visit(dep, [*path, dep])
        done.add(module)

    for module in sorted(graph):
        visit(module, [module])


def test_bench_and_the_performance_page_narrate_no_history() -> None:
    hits = []
    for path in [*sorted(BENCH.glob("*.py")), PERFORMANCE]:
        text = path.read_text()
        if path == PERFORMANCE:
            text = GENERATED.sub("", text)  # the tables: figures, dates and commands from the results
        for n, line in enumerate(text.splitlines(), 1):
            if NARRATION.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_the_performance_page_is_short_and_its_paths_exist() -> None:
    assert len(PERFORMANCE.read_text().splitlines()) <= 300
    pages = [PERFORMANCE, *sorted(DECISIONS.glob("*.md"))]
    assert len(pages) - 1 <= 10  # a few short decision pages, not a second notebook
    cited = re.compile(r"`((?:bench|tunemix|tests|docs|configs)/[\w./-]+\.(?:py|md|json|toml))`|\]\(([\w./-]+\.md)\)")
    for page in pages:
        for m in cited.finditer(page.read_text()):
            rel = m.group(1) or m.group(2)
            path = ROOT / rel if m.group(1) else page.parent / rel
            assert path.exists(), f"{page.relative_to(ROOT)} cites {rel}"
