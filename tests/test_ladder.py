"""The constraint ladder: the best setting under each max_drop, read off one run's grid, is what a rerun chooses."""

from __future__ import annotations

import polars as pl

from rqsweep import job
from rqsweep.config import Constraint
from rqsweep.errors import NoFeasibleSetting
from rqsweep.decide.ladder import LADDER, with_max_drop
from rqsweep.report.ladder import ladder_table
from rqsweep.runfolder import read_run_folder
from tests.minijob import STEADY_ENTITY_QUERIES, write_job

FLOOR = {"metric": "recall_at_10", "slice": "*", "min": 0.3}


def trade_off_job(folder, max_drop: float):
    # Objective freshness: the blend lifts it and costs entity, so the bound decides how far it may go.
    return write_job(folder, extra_queries=STEADY_ENTITY_QUERIES, objective={"metric": "mrr", "slice": "freshness"},
                     constraints=[{"metric": "mrr", "slice": "*", "max_drop": max_drop}, FLOOR], validation=False)


def best_of(config) -> tuple[str | None, int]:
    try:
        out = job.run(config, quiet=True)
    except NoFeasibleSetting as exc:
        out_dir = exc.run_dir
        grid = pl.read_parquet(out_dir / "grid.parquet")
    else:
        grid = out.grid
    overall = grid.filter(pl.col("slice") == "overall")
    best = overall.filter(pl.col("is_best"))["setting_id"].to_list()
    return (best[0] if best else None), overall["feasible"].sum()


def test_the_ladder_equals_reruns_with_each_max_drop(tmp_path):
    run = read_run_folder(job.run(trade_off_job(tmp_path / "once", 0.1), quiet=True).run_dir)
    table = ladder_table(run)
    assert table["max_drop"].to_list() == [f"{d:g}" for d in LADDER]
    label_of = {sid: run.label(sid) for sid in run.overall()["setting_id"]}
    answers = []
    for n, drop in enumerate(LADDER):
        best, feasible = best_of(trade_off_job(tmp_path / f"rerun-{n}", drop))
        answers.append(best)
        row = table.row(n, named=True)
        assert row["best setting"] == (label_of[best] if best else "none feasible")
        assert row["feasible settings"] == feasible
        if best is not None:  # the rung's per-slice cost is the rerun's best minus the baseline
            chosen, base = run.slice_rows(best), run.slice_rows(run.baseline)
            for s in run.slices:
                assert row[f"Δ MRR {s}"] == chosen[s]["mrr"] - base[s]["mrr"]
    assert len(set(answers)) > 1  # the bounds choose differently here, so the comparison means something


def test_a_rung_replaces_every_max_drop_bound_and_keeps_the_floors():
    floor = Constraint("recall_at_10", "*", min=0.3)
    drops = [Constraint("mrr", "*", max_drop=0.1), Constraint("recall_at_10", "entity", max_drop=0.05), floor]
    assert with_max_drop(drops, 0.02, "mrr") == [Constraint("mrr", "*", max_drop=0.02),
                                                 Constraint("recall_at_10", "entity", max_drop=0.02), floor]
    # No max_drop constraint: the rung adds one on the objective's metric for every slice.
    assert with_max_drop([floor], 0.05, "ndcg_at_10") == [floor, Constraint("ndcg_at_10", "*", max_drop=0.05)]
