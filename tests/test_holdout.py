"""The locked holdout: its queries never reach a choice, are read once at the run's end, and each read is counted."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml

from rqsweep import cli
from rqsweep.errors import InputError
from rqsweep.golden.split import held_out
from rqsweep.inputs import load_inputs
from tests.minijob import QUERIES, STEADY_ENTITY_QUERIES, write_job

FRACTION = 0.3
HELD = [q for q in (*QUERIES, *STEADY_ENTITY_QUERIES) if held_out(q[0], FRACTION)]


def _run(folder: Path, relabel: str | None = None) -> Path:
    config = write_job(folder, extra_queries=STEADY_ENTITY_QUERIES, holdout={"fraction": FRACTION})
    if relabel is not None:  # one holdout query's expected key changed: it now expects another document
        golden = yaml.safe_load((folder / "golden.yaml").read_text())
        for row in golden:
            if row["id"] == relabel:
                row["expected"] = "doc-expenses" if row["expected"] != "doc-expenses" else "doc-vpn"
        (folder / "golden.yaml").write_text(yaml.safe_dump(golden, sort_keys=False))
    assert cli.main([str(config), "--quiet"]) in (0, 4)
    (run_dir,) = (folder / "results" / "mini").iterdir()
    return run_dir


def test_the_holdout_is_a_stable_draw_by_id():
    assert HELD and len(HELD) < len(QUERIES) + len(STEADY_ENTITY_QUERIES)
    assert [held_out(q[0], FRACTION) for q in QUERIES] == [held_out(q[0], FRACTION) for q in QUERIES]
    assert all(held_out(q[0], 0.9) for q in HELD)  # a larger fraction keeps every query a smaller one held out


def test_a_holdout_querys_labels_change_no_choice_only_the_holdout_figures(tmp_path):
    first, second = _run(tmp_path / "a"), _run(tmp_path / "b", relabel=HELD[0][0])
    queries = pl.read_parquet(first / "queries.parquet")
    assert not set(queries["query_id"]) & {q[0] for q in HELD}  # never recorded, so never chosen on

    def choices(run_dir: Path) -> tuple:
        grid = pl.read_parquet(run_dir / "grid.parquet").drop("run_id", "golden_sha256", "config_sha256",
                                                                strict=False)
        record = json.loads((run_dir / "run.json").read_text())
        routing = json.loads((run_dir / "routing.json").read_text()) if (run_dir / "routing.json").exists() else {}
        return grid, record["decision"]["setting_id"], record["decision"]["routes"], routing.get("slices")

    (grid_a, *rest_a), (grid_b, *rest_b) = choices(first), choices(second)
    assert grid_a.equals(grid_b) and rest_a == rest_b
    a, b = (json.loads((r / "run.json").read_text())["holdout"] for r in (first, second))
    assert a["queries"] == b["queries"] == len(HELD) and a["key"] == b["key"] and a["fraction"] == FRACTION
    assert a["gain"] != b["gain"] or a["routing_gain"] != b["routing_gain"]


def test_each_run_that_reads_the_holdout_is_counted_and_says_so(tmp_path, capsys):
    config = write_job(tmp_path, extra_queries=STEADY_ENTITY_QUERIES, holdout={"fraction": FRACTION})
    for n in (1, 2):
        assert cli.main([str(config)]) in (0, 4)
        out = capsys.readouterr().out
        assert f"Locked holdout ({len(HELD)} queries, fraction 0.3, never chosen on; read by {n} run" in out
    runs = sorted((tmp_path / "results" / "mini").iterdir())
    assert [json.loads((r / "run.json").read_text())["holdout"]["reads"] for r in runs] == [1, 2]
    assert "Locked holdout" in (runs[-1] / "report.md").read_text()


@pytest.mark.parametrize("fraction", [0, 1, 1.5, "half"])
def test_a_holdout_fraction_must_be_between_0_and_1(tmp_path, fraction):
    config = write_job(tmp_path, holdout={"fraction": fraction})
    with pytest.raises(InputError, match=r"holdout\.fraction"):
        load_inputs(config)


def test_a_fraction_that_holds_out_no_query_is_refused(tmp_path):
    config = write_job(tmp_path, holdout={"fraction": 1e-12})
    with pytest.raises(InputError, match=r"holdout\.fraction.*no query in the holdout"):
        load_inputs(config)
