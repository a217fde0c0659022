"""`rqsweep draft CONFIG`: a draft golden set from the config's corpus, for a team that has none.

Typed by the slices SOAT's own eval uses, each drafted by a stated rule (rules.py: exact_token, exact_name,
freshness, entity; no model), and semantic only through the judge endpoint when the config names one
(semantic.py). Every row carries `synthetic`: the generator that drafted it. At most ROWS_PER_SLICE rows a slice, a
seeded sample when a rule finds more; the same corpus and seed write the same bytes. The draft is a file to edit,
not a hidden step: a person rewords, deletes and adds rows (and drops `synthetic` from a row they rewrite), and the
leak check (`rqsweep.decide.leaks`) runs on it here and on every run.
"""

from __future__ import annotations

import csv
import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

from rqsweep.backends import BACKENDS
from rqsweep.config import JudgeConfig, load_config
from rqsweep.corpus import Corpus, load_corpus
from rqsweep.decide.leaks import leaks
from rqsweep.draft.rules import RULES, Candidate
from rqsweep.draft.semantic import semantic, unmade
from rqsweep.errors import InputError, shown
from rqsweep.files import write_text
from rqsweep.golden import Expected, GoldenQuery

ROWS_PER_SLICE = 40
SLICES = ("exact_token", "exact_name", "freshness", "entity", "semantic")


@dataclass(frozen=True)
class Draft:
    queries: tuple[GoldenQuery, ...]
    found: dict[str, int]  # per slice, the candidates its rule found (before the cap)
    notes: tuple[str, ...]  # what the draft could not make, and why


def _capped(candidates: list[Candidate], seed: int) -> list[Candidate]:
    """One row per query text (the first by expected key), then at most ROWS_PER_SLICE, seeded."""
    unique: dict[str, Candidate] = {}
    for c in sorted(candidates, key=lambda c: (c.expected, c.query)):
        unique.setdefault(c.query, c)
    rows = list(unique.values())
    if len(rows) > ROWS_PER_SLICE:
        rows = sorted(random.Random(seed).sample(rows, ROWS_PER_SLICE), key=lambda c: (c.expected, c.query))
    return rows


def draft(corpus: Corpus, judge: JudgeConfig | None = None, seed: int = 0) -> Draft:
    """The draft of `corpus`; `judge`: a `JudgeConfig` for the semantic slice, or None."""
    found: dict[str, list[Candidate]] = {rule.__name__: rule(corpus) for rule in RULES}
    found["semantic"] = [] if judge is None else semantic(corpus, judge, ROWS_PER_SLICE, seed)
    queries, documents = [], set(corpus.documents.columns["key"])
    for name in SLICES:
        for i, c in enumerate(_capped(found[name], seed), 1):
            types = ["document" if k in documents else "memory" for k in c.expected]
            queries.append(GoldenQuery(f"{name}-{i:03d}", name, c.query,
                                       tuple(Expected(t, k) for t, k in zip(types, c.expected)), c.generator))
    return Draft(tuple(queries), {name: len(found[name]) for name in SLICES}, tuple(unmade(judge)))


def _expected_cell(q: GoldenQuery) -> list[str] | str:
    keys = [e.key for e in q.expected]
    return keys[0] if len(keys) == 1 else keys


def render(d: Draft, suffix: str, header: str) -> str:
    """The draft as rqsweep's rows: YAML (with `header` as comments) or, for `.csv`, CSV."""
    if suffix == ".csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["id", "slice", "query", "expected", "synthetic"])
        for q in d.queries:
            writer.writerow([q.id, q.slice, q.query, ";".join(e.key for e in q.expected), q.synthetic])
        return buffer.getvalue()
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for q in d.queries:  # JSON's strings and lists are YAML's flow scalars: every text quoted, nothing reinterpreted
        lines += [f"- id: {q.id}", f"  slice: {q.slice}", f"  query: {json.dumps(q.query, ensure_ascii=False)}",
                  f"  expected: {json.dumps(_expected_cell(q), ensure_ascii=False)}",
                  f"  synthetic: {json.dumps(q.synthetic, ensure_ascii=False)}"]
    return "\n".join(lines) + "\n"


def write_draft(config_path: Path, out: Path | None = None, seed: int = 0) -> tuple[Path, Draft, list[str]]:
    """Draft the config's corpus into `out` (default: the config's `golden:` path, which must not exist yet); returns
    where, the draft and the lines that report it (rows per slice, what was not made, the leak check)."""
    config = load_config(config_path, BACKENDS)
    if config.corpus is None:
        raise InputError(config.path, "corpus", "is missing: a draft is made from the config's corpus")
    target = out or config.golden
    if out is None and target.exists():
        raise InputError(config.path, "golden", f"{shown(str(target))} exists: rqsweep draft writes no golden set "
                                                "over another; name a new file with --out FILE")
    if target.suffix.lower() not in (".yaml", ".yml", ".csv"):
        raise InputError("--out", "", f"{shown(str(target))}: a draft is written as .yaml, .yml or .csv")
    corpus = load_corpus(config.corpus, config.corpus_files)
    d = draft(corpus, config.judge, seed)
    if not d.queries:
        raise InputError(config.corpus, "", "no rule drafts a query from this corpus (no identifier in exactly one "
                                            "item, no heading, no twin memories, no name only memories hold)")
    header = (f"A draft golden set: `rqsweep draft {config_path.name} --seed {seed}` ({len(d.queries)} rows).\n"
              "Each row's `synthetic` names the rule that drafted it (docs/start-without-a-golden-set.md). Edit it:\n"
              "reword queries into your users' words, delete rows that ask nothing a user would, add the\n"
              "questions you know people ask; drop `synthetic` from a row you rewrite.\n"
              + "".join(f"{note}\n" for note in d.notes))
    write_text(target, render(d, target.suffix.lower(), header))
    counts = {s: sum(q.slice == s for q in d.queries) for s in SLICES}
    lines = [f"draft: {len(d.queries)} rows -> {out if out is not None else config.relative(target)}"]
    lines += [f"  {s:<12}{counts[s]:>4} of {d.found[s]} found" for s in SLICES if d.found[s] or s != "semantic"]
    lines += [f"  {note}" for note in d.notes]
    flagged = leaks(d.queries, corpus)
    own, other = (flagged.filter(flagged["kind"] == k) for k in ("leak_own", "leak_other"))
    lines.append(f"leak check: {own['query_id'].n_unique()} queries occur nearly verbatim in their expected item, "
                 f"{other['query_id'].n_unique()} in an item not labelled")
    lines += [f"  {r['kind']} {r['query_id']} {r['query']!r} in {r['key']}: {r['detail']}"
              for r in flagged.iter_rows(named=True)]
    return target, d, lines
