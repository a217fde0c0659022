"""`rqsweep explain RUN_DIR QUERY_ID`: what the baseline and another setting ranked for one query, side by side,
where each expected item sits, and which knob moved it.

The ranked lists come from hits.parquet (the baseline and the chosen setting, for every query) or, for any
other setting, are recomputed from the run's config. On the embedded backend each expected item is also
followed through the ranking's steps (`engine.trace`): the floor, RRF, the recency blend and the cut.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import polars as pl

from rqsweep.backends.base import RankedHit
from rqsweep.engine.trace import ItemTrace
from rqsweep.errors import InputError
from rqsweep.inputs import load_inputs
from rqsweep.knobs import Knobs
from rqsweep.runfolder import HITS, QUERIES, RANKED, RUN_JSON, RunFolder, read_run_folder

_LIST_WIDTH = 44


def moved_by(before: ItemTrace, after: ItemTrace, old: Knobs, new: Knobs, limit: int) -> list[str]:
    """Each step whose effect on the item differs between two settings, in the ranking's order, in words."""
    reasons = []
    if after.floored_out and not before.floored_out:
        reasons.append(f"min_similarity: the floor {new.min_similarity:g} removed it from the vector channel "
                       f"(cosine {after.similarity:.4f})")
    elif before.floored_out and not after.floored_out:
        reasons.append(f"min_similarity: the floor no longer removes it from the vector channel "
                       f"(cosine {after.similarity:.4f})")
    if before.fused != after.fused and not (after.fused is None and after.floored_out):
        if old.rrf_k != new.rrf_k:
            reasons.append(f"rrf_k: fused position {_at(before.fused)} -> {_at(after.fused)} (rrf_k {old.rrf_k} -> "
                           f"{new.rrf_k}; vector {_at(after.vector)}, lexical {_at(after.lexical)})")
        else:  # same k: the floor changed which other candidates are fused
            reasons.append(f"min_similarity: the floor changed the other vector candidates: fused position "
                           f"{_at(before.fused)} -> {_at(after.fused)}")
    shift_before, shift_after = _shift(before), _shift(after)
    if shift_before != shift_after:
        reasons.append(f"recency_half_life_days: the blend moved it {shift_after:+d} place(s) instead of "
                       f"{shift_before:+d} (half-life {new.recency_half_life_days:g} d, its factor "
                       f"{after.blend_factor:.4f})")
    if after.final is None and after.blended is not None:
        reasons.append(f"cut: position {after.blended} is past limit {limit}")
    return reasons


def _shift(t: ItemTrace) -> int:
    return 0 if t.fused is None or t.blended is None else t.fused - t.blended


def _at(position: int | None) -> str:
    return "-" if position is None else f"#{position}"


def _steps(t: ItemTrace) -> list[tuple[str, str]]:
    similarity = "" if t.similarity is None else f" (cosine {t.similarity:.4f})"
    return [
        ("vector", _at(t.vector) + similarity),
        ("floor", "removed" if t.floored_out else ("kept" if t.vector is not None else "-")),
        ("lexical", _at(t.lexical)),
        ("RRF", _at(t.fused) + ("" if t.fused_score is None else f" ({t.fused_score:.5f})")),
        ("blend", f"x{t.blend_factor:.4f} -> {_at(t.blended)}"),
        ("returned", _at(t.final)),
    ]


def _hit_line(h: RankedHit, expected: set[str]) -> str:
    mark = "*" if h.key in expected else " "
    return f"{h.position:>3}{mark}{h.key} ({h.source_type})"


def _lists(hits: pl.DataFrame) -> list[RankedHit] | str:
    error = hits.filter(pl.col("error").is_not_null())
    if error.height:
        return f"search failed: {error['error'][0]}"
    fields = ["position", "key", "source_type", "chunk", "score", "vector", "lexical", "similarity_score",
              "blend_factor"]
    return [RankedHit(**r) for r in hits.sort("position").select(fields).iter_rows(named=True)]


class Recompute:
    """The run's inputs rebuilt from its config, for lists and traces not stored in the run folder."""

    def __init__(self, run: RunFolder):
        if not run.record.config_path:
            raise InputError(run.path / RUN_JSON, "config_path",
                             "missing (a run.json written before rqsweep kept it): this list is not stored in the "
                             "run folder, and explain and export recompute it from the run's config, which this "
                             "run.json does not name")
        config_path = run.path / run.record.config_path  # relative to the run folder (absolute before)
        if not config_path.is_file():
            raise InputError(run.path / RUN_JSON, "config_path",
                             f"{str(config_path)!r} is not a file: explain and export recompute from the run's "
                             "config")
        self.inputs = load_inputs(config_path)
        if self.inputs.sha256 != run.record.inputs_sha256:
            raise InputError(config_path, "", "changed since the run (config, sweep, corpus or golden set): "
                                              "lists recomputed now would not be what the run measured")
        backend = self.inputs.config.backend
        if len(getattr(backend, "embedders", ())) > 1:  # one embedder's run of a sweep over several
            config = dataclasses.replace(self.inputs.config, backend=backend.only(run.record.embedder))
            self.inputs = dataclasses.replace(self.inputs, config=config)
        run.record.check_embedder(self.inputs, run.path)
        self._index = None

    @property
    def embedded(self) -> bool:
        return self.inputs.config.backend.kind == "embedded"

    def index(self):
        if self._index is None:
            from rqsweep.backends.embedded import build_embedder, index_cache
            from rqsweep.engine.index import Index

            engine = self.inputs.config.backend
            embedder = build_embedder(engine)
            # The run's index cache: explaining a query of a large corpus should not rebuild the index.
            self._index = Index.build(self.inputs.corpus, embedder, engine.chunking, tie_order=engine.tie_order,
                                      cache=index_cache(engine, embedder, lambda line: print(line, file=sys.stderr)))
        return self._index

    def all_ranked(self, knobs: Knobs) -> dict[str, list[RankedHit] | str]:
        """Every query's ranked list under `knobs` (or its failed search's error), from the run's backend."""
        from rqsweep.backends import build_backend

        backend = build_backend(self.inputs.config, self.inputs.golden, self.inputs.corpus, workers=1,
                                log=lambda _: None)
        try:
            return backend.ranked(knobs)
        finally:
            backend.close()

    def ranked(self, query: str, query_id: str, knobs: Knobs) -> list[RankedHit] | str:
        cfg = self.inputs.config
        if self.embedded:
            return [RankedHit(p, r.key, r.source_type, r.chunk_id, r.score, r.signals.get("vector"),
                              r.signals.get("lexical"), r.similarity_score, r.recency_factor)
                    for p, r in enumerate(self.index().search(query, knobs, cfg.limit, cfg.scope), 1)]
        from rqsweep.backends import build_backend

        backend = build_backend(cfg, self.inputs.golden, self.inputs.corpus, workers=1, log=lambda _: None)
        try:
            return backend.ranked(knobs, [query_id])[query_id]
        finally:
            backend.close()

    def traces(self, query: str, keys: list[str], knobs: Knobs) -> list[ItemTrace]:
        from rqsweep.engine.trace import trace_item

        cfg = self.inputs.config
        index = self.index()
        candidates = index.candidates(query, cfg.limit, cfg.scope)
        ages = index.memory_age_days()
        return [trace_item(candidates, rows, knobs, cfg.limit, ages) for rows in index.expected_rows(keys)]


def stored_lists(run: RunFolder, setting_id: str) -> dict[str, list[RankedHit] | str] | None:
    """Query id -> the setting's ranked list (or its failed search's error) as the run folder stored it: in
    hits.parquet (the baseline and the chosen setting) or ranked.parquet (every setting, with `ranked: all`);
    None when it stored none for this setting."""
    for table in (HITS, RANKED):
        hits = run.read(table, pl.col("setting_id") == setting_id)
        if hits is not None and hits.height:
            return {qid: _lists(rows) for (qid,), rows in hits.group_by("query_id", maintain_order=True)}
    return None


def explain(run_dir: Path, query_id: str, setting_id: str | None = None) -> str:
    """The side-by-side text `rqsweep explain` prints."""
    run = read_run_folder(run_dir)
    other = run.chosen if setting_id is None else setting_id
    try:
        other_knobs = Knobs.from_id(other)
    except ValueError as exc:
        raise InputError("--setting", "", str(exc)) from None
    rows = run.queries([run.baseline]).filter(pl.col("query_id") == query_id)
    if rows.is_empty():
        known = run.queries([run.baseline])["query_id"].head(3).to_list()
        raise InputError(run.path / QUERIES, "query_id",
                         f"{query_id!r}: no such query in this run (e.g. {', '.join(known)})")
    row = rows.row(0, named=True)
    expected = list(row["expected"])
    base_knobs = run.knobs(run.baseline)
    stored = run.read(HITS, pl.col("query_id") == query_id)
    recompute: Recompute | None = None
    lists = {}
    for sid, knobs in ((run.baseline, base_knobs), (other, other_knobs)):
        mine = None if stored is None else stored.filter(pl.col("setting_id") == sid)
        if mine is not None and mine.height:
            lists[sid] = _lists(mine)
        else:
            recompute = recompute or Recompute(run)
            lists[sid] = recompute.ranked(row["query"], query_id, knobs)

    role = "chosen" if other == run.chosen and setting_id is None else "setting"
    lines = [f"Query {query_id} (slice {row['slice']}): {row['query']!r}",
             f"Expected: {', '.join(_graded(expected, row.get('grades')))}   (* marks an expected item)", "",
             f"     {'baseline ' + run.baseline:<{_LIST_WIDTH}}{role} {other}"]
    columns = [lists[run.baseline], lists[other]] if other != run.baseline else [lists[run.baseline]] * 2
    texts = [[c] if isinstance(c, str) else [_hit_line(h, set(expected)) for h in c] for c in columns]
    for i in range(max(len(t) for t in texts)):
        left = texts[0][i] if i < len(texts[0]) else ""
        right = texts[1][i] if i < len(texts[1]) else ""
        lines.append(f"  {left:<{_LIST_WIDTH + 3}}{right}")

    traces = None
    if run.config.get("backend", {}).get("kind", "embedded") == "embedded":
        recompute = recompute or Recompute(run)
        traces = [recompute.traces(row["query"], expected, k) for k in (base_knobs, other_knobs)]
    for i, key in enumerate(expected):
        where = [_position_of(key, c) for c in columns]
        lines += ["", f"{key}: {_at(where[0])} at the baseline -> {_at(where[1])} at {other}"]
        if traces is None:
            lines.append("  (over HTTP only the returned lists are known: an item the server did not return "
                         "cannot be followed through the steps)")
            continue
        before, after = traces[0][i], traces[1][i]
        lines.append(f"  {'step':<10}{'baseline':<30}{other}")
        lines += [f"  {step:<10}{a:<30}{b}" for (step, a), (_, b) in zip(_steps(before), _steps(after))]
        reasons = moved_by(before, after, base_knobs, other_knobs, run.limit)
        lines.append("  moved by: " + ("; ".join(reasons) if reasons else "nothing: the same path under both"))
    return "\n".join(lines)


def _graded(keys: list[str], grades: list[int] | None) -> list[str]:
    """Keys as the golden set grades them (`key=grade`), when it grades any other than 1 (older runs: no grades)."""
    if not grades or all(g == 1 for g in grades):
        return keys
    return [f"{k}={g}" for k, g in zip(keys, grades)]


def _position_of(key: str, hits: list[RankedHit] | str) -> int | None:
    if isinstance(hits, str):
        return None
    return next((h.position for h in hits if h.key == key), None)
