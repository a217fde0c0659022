"""Run folders built by hand for the report and gate tests: every number in them is one a test states."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from rqsweep.files import write_parquet
from rqsweep.knobs import Knobs
from rqsweep.metrics import DEFAULT_METRICS, definitions

Metrics = tuple[float | None, float | None, float | None]  # recall@5, recall@10, MRR

CONFIG = {
    "name": "handmade",
    "sweep": {"strategy": "grid", "knobs": {}},
    "search": {"limit": 10},
    "objective": {"metric": "mrr", "slice": "overall"},
    "constraints": [{"metric": "recall_at_10", "slice": "*", "min": 0.5},
                    {"metric": "mrr", "slice": "*", "max_drop": 0.1}],
}


def write_run(run_dir: Path, settings: dict[str, dict[str, Metrics]], *, baseline: str, best: str | None,
              infeasible: dict[str, list[str]] | None = None, queries: pl.DataFrame | None = None,
              sizes: dict[str, int] | None = None, config: dict | None = None, run_id: str = "20260101T000000Z-aaaa",
              golden_sha256: str = "g" * 64, profile: dict | None = None, corpus_sha256: str | None = None,
              decision: dict | None = None) -> Path:
    """A run folder: grid.parquet from `settings` (setting id -> slice -> metrics, in evaluation order),
    queries.parquet from `queries` (rows: setting_id, query_id, slice, rank, error), run.json; `profile` is the
    server profile the Parquet metadata records (none by default), `corpus_sha256` the corpus hash of run.json,
    `decision` its verdict (`verdict.Verdict.as_json`)."""
    infeasible = infeasible or {}
    sizes = sizes or {}
    rows = []
    for order, (sid, slices) in enumerate(settings.items()):
        knobs = Knobs.from_id(sid)
        for s, (r5, r10, mrr) in slices.items():
            rows.append({
                "run_id": run_id, "setting_id": sid, "rrf_k": knobs.rrf_k, "min_similarity": knobs.min_similarity,
                "recency_half_life_days": knobs.recency_half_life_days, "slice": s,
                "queries": sizes.get(s, 10), "recall_at_5": r5, "recall_at_10": r10, "mrr": mrr,
                "errors": 0, "tie_sensitive": 0, "numeric_sensitive": 0, "feasible": sid not in infeasible,
                "violations": infeasible.get(sid, []), "is_baseline": sid == baseline, "is_best": sid == best,
                "evaluation_order": order, "config_sha256": "c" * 64, "golden_sha256": golden_sha256,
            })
    grid = pl.DataFrame(rows, schema_overrides={"min_similarity": pl.Float64, "recall_at_5": pl.Float64,
                                                "recall_at_10": pl.Float64, "mrr": pl.Float64,
                                                "violations": pl.List(pl.String)})
    metadata = {"rqsweep.version": "test", "rqsweep.config": json.dumps(config or CONFIG),
                "rqsweep.golden": "golden.yaml", "rqsweep.metrics": json.dumps(definitions(DEFAULT_METRICS))}
    if profile is not None:
        metadata["rqsweep.server_profile"] = json.dumps(profile)
    if queries is None:
        queries = query_rows("", "", [])
    cv = _cross_validation(queries, list(settings), baseline, config or CONFIG)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_parquet(run_dir / "grid.parquet", grid,
                  metadata if cv is None else {**metadata, "rqsweep.validation": json.dumps(cv.as_json())})
    knobs = pl.DataFrame([{"setting_id": sid, **Knobs.from_id(sid).columns()} for sid in queries["setting_id"].unique()],
                         schema={"setting_id": pl.String, "rrf_k": pl.Int64, "min_similarity": pl.Float64,
                                 "recency_half_life_days": pl.Float64})
    queries = queries.cast({"setting_id": pl.String}).join(knobs, on="setting_id", how="left", maintain_order="left").with_columns(
        pl.lit(run_id).alias("run_id"), pl.lit(False).alias("tie_sensitive"),
        pl.lit(False).alias("numeric_sensitive"))
    write_parquet(run_dir / "queries.parquet", queries, metadata)
    info = {"run_id": run_id, "status": "complete"}
    if corpus_sha256 is not None:
        info["corpus_sha256"] = corpus_sha256
    if decision is not None:
        info["decision"] = decision
    (run_dir / "run.json").write_text(json.dumps(info))
    return run_dir


def _cross_validation(queries: pl.DataFrame, order: list[str], baseline: str, config: dict):
    """What the run's end computes from its per-query rows (`validation:` as in `config`); a setting without rows
    counts as failed searches, as a run whose searches all failed."""
    from rqsweep.config import Constraint, read_validation
    from rqsweep.decide.cross_validation import FoldSums, cross_validate

    settings = read_validation(config.get("validation"), Path("job.yaml"))
    if settings is None or queries.is_empty():
        return None
    golden = queries.select("query_id", "slice").unique("query_id", maintain_order=True)
    sums = FoldSums(golden, sorted(set(golden["slice"].to_list())), DEFAULT_METRICS, settings, len(order))
    def rows_of(ids: list[str]) -> pl.DataFrame:
        present = queries.filter(pl.col("setting_id").is_in(ids))
        missing = [sid for sid in ids if sid not in set(present["setting_id"].to_list())]
        failed = pl.concat([golden.with_columns(pl.lit(sid).alias("setting_id"), pl.lit("no row").alias("error"))
                            for sid in missing]) if missing else None
        return present if failed is None else pl.concat([present, failed], how="diagonal_relaxed")

    for sid in order:
        sums.add(rows_of([sid]))
    objective = config.get("objective") or {}
    constraints = [Constraint(c["metric"], c.get("slice", "*"), c.get("min"), c.get("max_drop"))
                   for c in config.get("constraints") or []]
    return cross_validate(sums, rows_of, baseline, (objective.get("metric", "mrr"), objective.get("slice", "overall")),
                          constraints)


def query_rows(setting_id: str, slice_: str, ranks: list[int | None], prefix: str | None = None) -> pl.DataFrame:
    """Per-query rows of one setting and slice; a rank of None is a failed search."""
    return pl.DataFrame({
        "setting_id": [setting_id] * len(ranks),
        "query_id": [f"{prefix or slice_}-{i}" for i in range(len(ranks))],
        "slice": [slice_] * len(ranks),
        "rank": [0 if r is None else r for r in ranks],
        "error": [("HTTP 503" if r is None else None) for r in ranks],
    }, schema_overrides={"rank": pl.Int64, "error": pl.String}).with_columns(
        ("what about " + pl.col("query_id")).alias("query"),
        pl.concat_list("key-" + pl.col("query_id")).alias("expected"),
    ).with_columns(
        pl.col("rank").is_between(1, 5).cast(pl.Float64).alias("recall_at_5"),
        pl.col("rank").is_between(1, 10).cast(pl.Float64).alias("recall_at_10"),
        pl.when(pl.col("rank") > 0).then(1.0 / pl.col("rank")).otherwise(0.0).alias("mrr"),
    ).with_columns(pl.when(pl.col("error").is_null()).then(pl.col(m)).alias(m)
                   for m in ("rank", "recall_at_5", "recall_at_10", "mrr"))


def outcome_rows(setting_id: str, errors: list[str | None], position: int = 1) -> pl.DataFrame:
    """A backend's rows for one setting, one query per entry of `errors` (None: found at `position`)."""
    from rqsweep.backends.base import OUTCOME_SCHEMA

    n = len(errors)
    return pl.DataFrame({
        "setting_id": [setting_id] * n, "rrf_k": [60] * n, "min_similarity": [None] * n,
        "recency_half_life_days": [0.0] * n, "query_id": [f"q{i}" for i in range(n)],
        "positions": [None if e else [position] for e in errors], "error": errors, "tie_sensitive": [None] * n,
        "numeric_sensitive": [None] * n,
    }, schema=OUTCOME_SCHEMA)


def state_rows(state) -> pl.DataFrame:
    """Every row a run state holds, as a run's end reads them (one part at a time), in one frame."""
    return pl.concat(list(state.chunks()))
