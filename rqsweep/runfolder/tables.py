"""The tables of a run folder, each assembled here from what the backend returned (positions) and what the
metrics made of them, and written here (atomically, by `rqsweep.files`):

- grid.parquet (`grid_table`): one row per (setting, slice);
- queries.parquet (`query_table`): one row per (setting, query), written in row groups of whole settings;
- hits.parquet (`hits_table`): the baseline's and the chosen setting's ranked lists;
- ranked.parquet: every setting's ranked lists, with `ranked: all`;
- settings.parquet: the grid turned wide (`runfolder.settings`);
- routing.json: one setting per slice, with `validation:` (`rqsweep.report.routing`);
- label_health.parquet: queries no knob moves or no setting finds, likely unlabelled items
  (`rqsweep.report.label_health`);
- judgments.parquet (`write_judgments`): the golden set's judged pairs, with `golden: {judgments}`.

Each carries the run's key-value metadata (`table_metadata`), and is read back here too (`read_table`,
`table_parts`, `row_groups`, `read_metadata`, `scan_queries`, `read_ranked_lists`, `read_routing`). A column the whole run
shares is a field of `Stamp`; a column of one table is added to that table's function.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import polars as pl
import pyarrow.parquet as pq

from rqsweep import __version__, metrics
from rqsweep.backends.base import RankedHit
from rqsweep.decide.constraints import Verdicts
from rqsweep.errors import InputError
from rqsweep.files import ParquetGroups, reading_parquet, write_json, write_parquet, write_parquet_groups
from rqsweep.golden import GoldenSet
from rqsweep.inputs import Inputs
from rqsweep.knobs import KNOBS, Knobs
from rqsweep.runfolder.folder import GRID, HITS, JUDGMENTS, LABEL_HEALTH, QUERIES, RANKED, ROUTING, SETTINGS
from rqsweep.runfolder.record import redact
from rqsweep.runfolder.settings import settings_table


@dataclass(frozen=True)
class Stamp:
    """What identifies the run, on its tables' rows: the `front` fields lead every table's rows, the others close
    the grid's. A run-wide column is a field here."""

    run_id: str = field(metadata={"front": True})
    # The embedder's label: a sweep over several embedders unites their tables, whose rows it tells apart. Null
    # over HTTP, where the server's embedder is its own.
    embedder: str | None = field(metadata={"front": True})
    config_sha256: str = field(metadata={"front": False})
    golden_sha256: str = field(metadata={"front": False})

    @classmethod
    def of(cls, run_id: str, inputs: Inputs) -> Stamp:
        return cls(run_id, getattr(inputs.config.backend, "label", None), inputs.config.sha256, inputs.golden.sha256)

    def columns(self, front: bool) -> list[pl.Expr]:
        return [pl.lit(getattr(self, f.name), dtype=pl.String).alias(f.name) for f in fields(self)
                if f.metadata["front"] == front]

    def names(self, front: bool) -> list[str]:
        return [f.name for f in fields(self) if f.metadata["front"] == front]


def table_metadata(inputs: Inputs, profile: dict) -> dict[str, str]:
    """The key-value metadata of every table: what produced it, and how to read it."""
    return {
        "rqsweep.server_profile": json.dumps(profile),
        "rqsweep.version": __version__,
        "rqsweep.config": json.dumps(redact(inputs.config.raw), default=str),
        "rqsweep.metrics": json.dumps(metrics.definitions(inputs.metrics, inputs.config.relevance_level)),
        "rqsweep.golden": inputs.config.relative(inputs.golden.path),
        "rqsweep.strategy": inputs.config.sweep.strategy,
    }


# The columns queries.parquet's readers filter on. Min/max statistics of the others (query texts, lists of
# keys and positions) cost about a sixth of pyarrow's write at 100,000 settings, and no read uses them.
QUERY_STATISTICS = ["setting_id", "query_id", "error"]
# Rows of queries.parquet gathered before a row group is written: a run writes it during its evaluation, beside
# the backend's memory, and holds about three copies of a group's rows (gathered, turned to Arrow, being written).
# The job scores a batch this many rows of whole settings at a time (`Sweep.scored_parts`), each a row group.
QUERY_ROWS_PER_GROUP = 1 << 16


def write_queries(run_dir: Path, chunks: Iterable[pl.DataFrame], metadata: Mapping[str, str]) -> Path:
    """queries.parquet from `query_table` chunks of whole settings, in row groups of whole settings; returns its
    path. The temporary file of a run killed while writing it is deleted first, as by `open_queries`."""
    _delete_stale_queries(run_dir)
    write_parquet_groups(run_dir / QUERIES, chunks, metadata, QUERY_ROWS_PER_GROUP, QUERY_STATISTICS)
    return run_dir / QUERIES


def open_queries(run_dir: Path, metadata: Mapping[str, str]) -> ParquetGroups:
    """queries.parquet as `write_queries` writes it, `query_table` chunks added as they are made (a run's job writes
    it during its evaluation)."""
    _delete_stale_queries(run_dir)
    return ParquetGroups(run_dir / QUERIES, dict(metadata), QUERY_ROWS_PER_GROUP, QUERY_STATISTICS)


def _delete_stale_queries(run_dir: Path) -> None:
    """What a run killed while writing queries.parquet left (it writes it through its evaluation): the folder is
    locked by the run writing it now, so no other writer's file is touched."""
    for stale in run_dir.glob(f".{QUERIES}.*.tmp"):
        stale.unlink(missing_ok=True)


def write_grid(run_dir: Path, grid: pl.DataFrame, metadata: Mapping[str, str], validation: dict | None) -> None:
    """grid.parquet; its metadata also holds the held-out estimate (metadata `rqsweep.validation`) when there is one."""
    write_parquet(run_dir / GRID, grid, metadata if validation is None else {
        **metadata, "rqsweep.validation": json.dumps(validation)})


def write_hits(run_dir: Path, hits: pl.DataFrame, metadata: Mapping[str, str]) -> None:
    write_parquet(run_dir / HITS, hits, metadata)


def write_settings(run_dir: Path, grid: pl.DataFrame, objective: tuple[str, str], metric_names: Sequence[str],
                   metadata: Mapping[str, str]) -> None:
    """settings.parquet, from the grid table (`runfolder.settings`)."""
    write_parquet(run_dir / SETTINGS, settings_table(grid, objective, metric_names), metadata)


def write_label_health(run_dir: Path, findings: pl.DataFrame, metadata: Mapping[str, str]) -> None:
    write_parquet(run_dir / LABEL_HEALTH, findings, metadata)


JUDGMENTS_SCHEMA = {"query_id": pl.String, "key": pl.String, "grade": pl.Int64, "judge": pl.String,
                    "file": pl.String, "line": pl.String, "used": pl.Boolean}


def write_judgments(run_dir: Path, golden: GoldenSet, relative: Callable[[Path], str],
                    metadata: Mapping[str, str]) -> None:
    """judgments.parquet: every graded row of the golden set's judgments files (`relative` names each file as
    run outputs do), `used` where it is the grade the run used (a person's over the judge's); none without."""
    if not golden.judgments:
        return
    used = set(golden.judged)
    rows = [(j.query_id, j.key, j.grade, j.judge, relative(j.file), j.where, j in used) for j in golden.judgments]
    write_parquet(run_dir / JUDGMENTS, pl.DataFrame(rows, schema=JUDGMENTS_SCHEMA, orient="row"), metadata)


def write_routing(run_dir: Path, routing: dict) -> None:
    write_json(run_dir / ROUTING, routing)


def read_routing(run_dir: Path) -> dict | None:
    """routing.json as written, or None when the run has none (validation off); InputError when it is damaged."""
    path = run_dir / ROUTING
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, "", f"damaged, not valid JSON ({exc}): run the sweep again to rewrite it") from None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), dict) for k in ("slices", "held_out")):
        raise InputError(path, "", "damaged: expected an object with `slices` and `held_out`; run the sweep again")
    for name, route in data["slices"].items():
        routed = route.get("routed") if isinstance(route, dict) else None
        if not isinstance(routed, bool):
            raise InputError(path, f"slices.{name}.routed", f"expected true or false, got {routed!r}; run the sweep "
                             "again to rewrite it")
    return data


def read_table(run_dir: Path, table: str) -> pl.DataFrame:
    """One of the folder's tables (`GRID`, `HITS`, ... of `runfolder.folder`) whole; damaged, an InputError naming it."""
    with reading_parquet(run_dir / table):
        return pl.read_parquet(run_dir / table)


def table_parts(run_dir: Path, table: str) -> Iterator[pl.DataFrame]:
    """One of the folder's tables a million rows at a time: a large run's queries.parquet need not fit in memory."""
    path = run_dir / table
    with reading_parquet(path):
        yield from (pl.from_arrow(part) for part in pq.ParquetFile(path).iter_batches(batch_size=1 << 20))


def row_groups(run_dir: Path, table: str, columns: Sequence[str]) -> Iterator[pl.DataFrame]:
    """Some columns of one of the folder's tables, a row group at a time: queries.parquet's hold whole settings."""
    path = run_dir / table
    with reading_parquet(path):
        file = pq.ParquetFile(path)
        yield from (pl.from_arrow(file.read_row_group(g, columns=list(columns))) for g in range(file.num_row_groups))


def read_metadata(run_dir: Path, table: str) -> dict[str, str]:
    """A table's key-value metadata as `table_metadata` wrote it (Arrow's own schema key left out)."""
    with reading_parquet(run_dir / table):
        stored = pq.read_schema(run_dir / table).metadata or {}
    return {k.decode(): v.decode() for k, v in stored.items() if not k.startswith(b"ARROW")}


def scan_queries(run_dir: Path) -> pl.LazyFrame:
    """queries.parquet, read lazily: it holds a row per (setting, query)."""
    return pl.scan_parquet(run_dir / QUERIES)


def ranked_source(run_dir: Path) -> str | None:
    """Which ranked lists a run kept: ranked.parquet when it kept every setting's, else hits.parquet; None."""
    return next((name for name in (RANKED, HITS) if (run_dir / name).exists()), None)


def read_ranked_lists(run_dir: Path) -> pl.DataFrame:
    """The ranked lists a run kept (`ranked_source`), empty (hits.parquet's columns) when it kept none."""
    source = ranked_source(run_dir)
    if source is not None:
        return pl.read_parquet(run_dir / source)
    return pl.DataFrame(schema=HITS_SCHEMA)


def write_ranked(run_dir: Path, per_setting: Iterable[pl.DataFrame], metadata: Mapping[str, str]) -> None:
    """ranked.parquet: `hits_table` frames, a setting's lists each, streamed a row group at a time."""
    write_parquet_groups(run_dir / RANKED, per_setting, metadata)


def knobs_of(settings: pl.DataFrame, setting_id: str) -> Knobs:
    """The knobs of one setting of a `rqsweep.decide.accumulate.setting_knobs` frame."""
    return Knobs.from_columns(settings.row(by_predicate=pl.col("setting_id") == setting_id, named=True))


def grid_table(slice_metrics: pl.DataFrame, settings: pl.DataFrame, verdicts: Verdicts, baseline_id: str,
               metric_names: Sequence[str], stamp: Stamp) -> pl.DataFrame:
    """grid.parquet: one row per (setting, slice), settings in evaluation order (the order of `settings`, a
    `setting_knobs` frame (`rqsweep.decide.accumulate`), which is the order of `verdicts`' rows). `violations` lists the constraint keys a
    setting breaks, on each of its rows (`recall_at_10[billing]:min`, `mrr[factual]:max_drop`, `incomplete`).

    `stamp` holds the run-wide columns.
    """
    order = settings.select("setting_id", pl.int_range(pl.len(), dtype=pl.Int64).alias("evaluation_order"))
    per_setting = settings.with_columns(
        pl.Series("feasible", verdicts.feasible(), dtype=pl.Boolean),
        verdicts.violations(),
        (pl.col("setting_id") == baseline_id).alias("is_baseline"),
        (pl.col("setting_id") == verdicts.best).alias("is_best") if verdicts.best is not None
        else pl.lit(False).alias("is_best"),
    )
    # The rows are put in order before the settings' columns (the violations' lists above all) join them: sorting
    # the joined table copied all of it once more (0.2 GB at 100,000 settings).
    rows = slice_metrics.join(order, on="setting_id").sort("evaluation_order", "slice")
    grid = rows.join(per_setting, on="setting_id", maintain_order="left").with_columns(*stamp.columns(True),
                                                                                      *stamp.columns(False))
    return grid.select(
        *stamp.names(True), "setting_id", *KNOBS, "slice", "queries",
        *metric_names, "errors", "tie_sensitive", "numeric_sensitive", "feasible", "violations", "is_baseline", "is_best",
        "evaluation_order", *stamp.names(False),
    )


def golden_table(golden: GoldenSet) -> pl.DataFrame:
    """What each golden query is: its slice, text, expected keys and their grades, in the golden set's order."""
    return pl.DataFrame({
        "query_id": [q.id for q in golden.queries],
        "slice": [q.slice for q in golden.queries],
        "query": [q.query for q in golden.queries],
        "expected": pl.Series([[e.key for e in q.expected] for q in golden.queries], dtype=pl.List(pl.String)),
        "grades": pl.Series([list(q.grades) for q in golden.queries], dtype=pl.List(pl.Int64)),
    })


def query_table(scored: pl.DataFrame, golden: pl.DataFrame, metric_names: Sequence[str], stamp: Stamp) -> pl.DataFrame:
    """queries.parquet: one row per (setting, query), with the query's text, expected keys and their grades, each
    expected key's position, the first relevant rank and every metric's per-query value. `golden` is
    `golden_table`'s."""
    return (scored.join(golden, on="query_id", how="left", maintain_order="left")
            .with_columns(stamp.columns(True))
            .select(*stamp.names(True), "setting_id", *KNOBS, "query_id", "slice",
                    "query", "expected", "grades", "positions", "rank", *metric_names, "error", "tie_sensitive",
                    "numeric_sensitive"))


HITS_SCHEMA = {  # after the stamp's front columns
    "setting_id": pl.String, "is_baseline": pl.Boolean, "is_chosen": pl.Boolean,
    "query_id": pl.String, "position": pl.Int64, "key": pl.String, "source_type": pl.String, "chunk": pl.String,
    "score": pl.Float64, "vector": pl.Int64, "lexical": pl.Int64, "similarity_score": pl.Float64,
    "blend_factor": pl.Float64, "expected": pl.Boolean, "error": pl.String,
}


def hits_table(ranked: Mapping[str, Mapping[str, list[RankedHit] | str]], baseline_id: str, chosen_id: str,
               golden: GoldenSet, stamp: Stamp) -> pl.DataFrame:
    """hits.parquet: the ranked lists of the baseline and the chosen setting for every query.

    `ranked`: setting id -> query id -> its hits, or the error of a failed search (one row, no position).
    """
    expected = {q.id: {e.key for e in q.expected} for q in golden.queries}
    rows = []
    for sid, lists in ranked.items():
        for qid, hits in lists.items():
            common = {"setting_id": sid, "is_baseline": sid == baseline_id,
                      "is_chosen": sid == chosen_id, "query_id": qid}
            if isinstance(hits, str):
                rows.append({**common, "error": hits})
                continue
            for h in hits:
                rows.append({**common, **asdict(h), "expected": h.key in expected[qid], "error": None})
    return pl.DataFrame(rows, schema=HITS_SCHEMA).select(*stamp.columns(True), pl.all())
