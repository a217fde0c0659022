"""SOAT's golden.json, versions 1 to 4 (section 6 of the SOAT contract): one layout, with its corpus inline."""

from __future__ import annotations

from pathlib import Path

from rqsweep.corpus import corpus_from_rows
from rqsweep.errors import InputError, shown
from rqsweep.golden.rows import Layout, Row, text

# Version 1 has no ages and four kinds; 2 to 4 add age_days, a second memory store (`memory`) and the freshness
# kind, all in the layout version 1 has.
VERSIONS = (1, 2, 3, 4)


def _check_version(data: dict, path: Path) -> int:
    """Refuse a golden.json of another version: its fields could mean something else than we read."""
    version = data.get("version")
    if isinstance(version, bool) or version not in VERSIONS:
        found = shown(version) if "version" in data else "missing"
        raise InputError(path, "version", f"{found}: not a SOAT golden-set version rqsweep reads (supported: "
                                          f"{', '.join(str(v) for v in VERSIONS)})")
    return version


def _check_inline(documents: object, path: Path) -> None:
    """Older commits point some documents at a section of SOAT's module docs instead of carrying their content."""
    for i, doc in enumerate(documents if isinstance(documents, list) else []):
        if isinstance(doc, dict) and "content" not in doc and ("source" in doc or "section" in doc):
            raise InputError(path, f"corpus.documents[{i}]",
                             f"document {shown(doc.get('key'))} is a pointer (source {shown(doc.get('source'))}, "
                             f"section {shown(doc.get('section'))}), not inline content: rqsweep cannot resolve "
                             "pointers; use the golden.json whose documents carry their content (the frozen corpus)")


def read_soat(path: Path, data: dict, raw: bytes) -> Layout:
    version = _check_version(data, path)
    corpus = data.get("corpus")
    if not isinstance(corpus, dict):
        raise InputError(path, "corpus", "SOAT golden.json needs a `corpus` with documents and memories")
    _check_inline(corpus.get("documents"), path)
    inline = corpus_from_rows(corpus.get("documents", []), corpus.get("memories", []), path)
    queries = data.get("queries")
    if not isinstance(queries, list):
        raise InputError(path, "queries", "expected a list")
    rows = []
    for i, row in enumerate(queries):
        where = f"queries[{i}]"
        if not isinstance(row, dict):
            raise InputError(path, where, f"expected a mapping, got {shown(row)}")
        expected = row.get("expected")
        if not isinstance(expected, list) or not expected:
            raise InputError(path, f"{where}.expected", f"expected a non-empty list, got {shown(expected)}")
        items = []
        for j, item in enumerate(expected):
            ewhere = f"{where}.expected[{j}]"
            if not isinstance(item, dict) or item.get("source_type") not in ("document", "memory"):
                raise InputError(path, ewhere, f"expected {{source_type: document|memory, key}}, got {shown(item)}")
            items.append((item["source_type"], text(item, "key", path, ewhere), 1))
        rows.append(Row(path, where, text(row, "id", path, where), text(row, "kind", path, where),
                        text(row, "query", path, where), items))
    return Layout(f"SOAT golden.json v{version}", rows, inline, [raw])
