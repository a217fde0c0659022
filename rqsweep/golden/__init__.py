"""Golden sets: labelled queries `{slice, query, expected}` in the common layouts, validated against their corpus.

One reader per layout (own.py: rqsweep's rows, CSV and TSV; soat.py: SOAT's golden.json; qrels.py: BEIR and
TREC), each giving rows (rows.py) that the slice rule (slices.py) and the validation here turn into a `GoldenSet`.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

from rqsweep.config import GoldenRules
from rqsweep.corpus import Corpus
from rqsweep.errors import InputError, shown
from rqsweep.files import read_data
from rqsweep.golden.judgments import Judgment, merge, read_judgments
from rqsweep.golden.model import OVERALL, Expected, GoldenQuery, GoldenSet, SourceType
from rqsweep.golden.own import read_rows, read_table
from rqsweep.golden.qrels import read_beir, read_trec
from rqsweep.golden.rows import FORMATS, Layout, read_raw, unsupported
from rqsweep.golden.slices import assign_slices
from rqsweep.golden.soat import VERSIONS as SOAT_GOLDEN_VERSIONS
from rqsweep.golden.soat import read_soat

__all__ = ["OVERALL", "Expected", "GoldenQuery", "GoldenSet", "Judgment", "SourceType", "FORMATS",
           "SOAT_GOLDEN_VERSIONS", "load_golden"]


def _layout(path: Path, rules: GoldenRules) -> Layout:
    """Read `path` in the layout it is in, or refuse it naming the layouts that are read."""
    if rules.topics is not None:
        return read_trec(path, rules.topics)
    if path.is_dir():
        return read_beir(path, rules.split)
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return read_table(path, read_raw(path))
    if suffix in (".qrels", ".txt") and path.is_file():
        raise unsupported(path, "TREC qrels need their topics: golden: {path: QRELS, topics: TOPICS}")
    if suffix not in (".yaml", ".yml", ".json", ".jsonl"):
        if not path.exists():
            raise InputError(path, "", "cannot read golden set: No such file or directory")
        raise unsupported(path, f"{shown(suffix or path.name)}: not a golden-set layout rqsweep reads")
    raw, data = read_data(path, "golden set")
    if isinstance(data, dict) and "queries" in data:
        return read_soat(path, data, raw)
    return read_rows(path, data, raw)


def load_golden(path: Path, corpus: Corpus | None = None, rules: GoldenRules = GoldenRules(),
                config: Path | None = None) -> GoldenSet:
    """Load and validate a golden set against its corpus (given, or the one its layout carries).

    Every expected key must exist, ids must be unique and slice names non-empty; items graded 0 or below are
    not relevant and are dropped, and a query left with none is not run; duplicate query texts are allowed.
    `rules.judgments`' graded pairs join `expected` by the same rules (`rqsweep.golden.judgments`).
    `warnings` reports queries not run, duplicate texts and a golden set without slices (`config` is the file
    slice-rule errors name).
    """
    layout = _layout(path, rules)
    if corpus is None:
        corpus = layout.corpus
    if corpus is None:
        raise InputError(path, "", "no corpus: name one in the config (`corpus:`), or use a layout that carries its "
                                   "corpus (SOAT's golden.json, a BEIR folder)")
    warnings = list(assign_slices(layout, rules.slices, config, path))
    types = (dict.fromkeys(corpus.documents.columns["key"], "document")
             | dict.fromkeys(corpus.memories.columns["key"], "memory"))
    read = [read_judgments(p) for p in rules.judgments]
    judgments = [j for rows, _ in read for j in rows]
    judged = merge(judgments, {row.id: {key: g for _, key, g in row.expected} for row in layout.rows})
    extra: dict[str, list[Judgment]] = {}
    for j in judged:
        if j.grade > 0:
            extra.setdefault(j.query_id, []).append(j)
        if j.key not in types:
            raise InputError(j.file, f"{j.where}.key", f"key {shown(j.key)} (query {shown(j.query_id)}) does not "
                                                       "exist in the corpus")
    queries, ids, unjudged = [], {}, []
    for row in layout.rows:
        if row.id in ids:
            raise InputError(row.file, f"{row.where}.id",
                             f"duplicate query id {shown(row.id)} (first at {ids[row.id]})")
        ids[row.id] = row.where
        if row.slice == OVERALL:
            raise InputError(row.file, f"{row.where}.slice", f"{OVERALL!r} is reserved for the figure over all queries")
        expected: dict[str, Expected] = {}
        graded: dict[str, int] = {}
        for j, (stype, key, grade) in enumerate(row.expected):
            where = f"{row.where}.expected[{j}]"
            if graded.setdefault(key, grade) != grade:
                raise InputError(row.file, where, f"key {shown(key)} is graded twice ({graded[key]}, {grade})")
            if grade <= 0:
                continue
            if key not in types:
                raise InputError(row.file, where, f"key {shown(key)} (query {shown(row.id)}) does not exist in the "
                                                  "corpus")
            if stype is not None and stype != types[key]:
                raise InputError(row.file, where, f"key {shown(key)} is a {types[key]}, not a {stype}")
            expected[key] = Expected(types[key], key, grade)
        expected |= {j.key: Expected(types[j.key], j.key, j.grade) for j in extra.get(row.id, ())}
        if expected:
            queries.append(GoldenQuery(row.id, row.slice, row.query, tuple(expected.values()), row.synthetic))
        else:
            unjudged.append(row.id)
    if not queries:
        raise InputError(path, "", "the golden set has no queries"
                         + (" with an item graded 1 or more" * bool(unjudged)))
    if unjudged:
        warnings.append(f"{len(unjudged)} queries have no item graded 1 or more and are not run (first: "
                        f"{shown(unjudged[0])})")
    if layout.unjudged:
        warnings.append(f"{len(layout.unjudged)} queries of the queries file are not judged in the qrels and are not "
                        "run")
    dupes = [t for t, n in Counter(q.query for q in queries).items() if n > 1]
    warnings += [f"query text {shown(t)} appears more than once" for t in dupes]
    raws = [*layout.raw, *(raw for _, raw in read)]
    digest = hashlib.sha256()
    for raw in raws:
        digest.update(hashlib.sha256(raw).digest())
    sha256 = digest.hexdigest() if len(raws) > 1 else hashlib.sha256(raws[0]).hexdigest()
    return GoldenSet(path, sha256, tuple(queries), layout.corpus, tuple(warnings), layout.name, tuple(judgments),
                     tuple(judged))
