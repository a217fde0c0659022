"""benchmarks/README.md lists every benchmark with figures quoted from benchmarks/HISTORY.md, its links resolving."""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
README = (BENCHMARKS / "README.md").read_text()
HISTORY = (BENCHMARKS / "HISTORY.md").read_text()


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives headings: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    anchors: set[str] = set()
    for title in re.findall(r"^#+ (.+)$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        anchor, n = slug, 1
        while anchor in anchors:
            anchor, n = f"{slug}-{n}", n + 1
        anchors.add(anchor)
    return anchors


def stated(figure: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(figure)}(?![A-Za-z])", HISTORY) is not None


def test_every_benchmark_script_has_an_entry():
    missing = [p.name for p in sorted(BENCHMARKS.glob("*.py")) if f"`{p.name}`" not in README]
    assert not missing, f"benchmarks/README.md names no entry for {missing}"


def test_links_into_the_history_resolve():
    links = re.findall(r"\]\(HISTORY\.md#([^)]+)\)", README)
    assert links
    assert set(links) <= github_anchors(HISTORY), set(links) - github_anchors(HISTORY)


def test_every_figure_is_quoted_from_the_history():
    """A figure with a unit (12.3 ms, 1.42x, 2.66 GB, 47%, 3.11 M) that the history does not state was made up."""
    figure = r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?: ?(?:ms|ns|s|GB|GiB|MB|kB)\b|x\b|%| M\b| /s)"
    invented = sorted({f for f in re.findall(figure, README) if not stated(f)})
    assert not invented, f"figures in benchmarks/README.md that benchmarks/HISTORY.md does not state: {invented}"
