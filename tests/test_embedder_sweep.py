"""A sweep over several embedders: one ordinary run per embedder, their union, and the robust choice."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
import yaml

from rqsweep import cli, job
from rqsweep.dry_run import dry_run
from rqsweep.errors import InputError
from rqsweep.report.explain import Recompute
from rqsweep.runfolder import read_run_folder
from tests.minijob import write_job

CHUNKING = {"strategy": "size", "chunk_size": 120, "chunk_overlap": 20}
TWO = [{"kind": "feature-hash", "dimensions": 256}, {"kind": "feature-hash", "dimensions": 48, "label": "tiny-hash"}]


def backend(embedder) -> dict:
    return {"kind": "embedded", "embedder": embedder, "chunking": CHUNKING}


def tables(run_dir: Path) -> dict[str, pl.DataFrame]:
    # run_id and config_sha256 differ by design: other runs, other config files.
    return {name: pl.read_parquet(run_dir / f"{name}.parquet").drop("run_id", "config_sha256", strict=False)
            for name in ("grid", "queries", "hits")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedders")
    both = job.run(write_job(root / "both", backend=backend(TWO)), quiet=True)
    alone = {label: job.run(write_job(root / label, backend=backend(e)), quiet=True)
             for label, e in (("feature-hash-256", TWO[0]), ("tiny-hash", TWO[1]))}
    return both, alone


def test_a_run_over_two_embedders_has_the_rows_of_the_two_single_runs(runs):
    both, alone = runs
    union = tables(both.run_dir)
    for name, frame in union.items():
        assert frame["embedder"].unique(maintain_order=True).to_list() == ["feature-hash-256", "tiny-hash"]
        single = pl.concat(tables(alone[label].run_dir)[name] for label in ("feature-hash-256", "tiny-hash"))
        assert frame.equals(single), name
    # Each embedder's own run folder is an ordinary run, with its own baseline, constraints and choice.
    for label, single in alone.items():
        folder = both.run_dir / "embedders" / label
        assert tables(folder)["grid"].equals(tables(single.run_dir)["grid"])
        assert json.loads((folder / "run.json").read_text())["status"] == "complete"
    # The two embedders rank differently, so the union is not one run twice.
    grids = union["grid"].partition_by("embedder", as_dict=True)
    assert not grids[("feature-hash-256",)].drop("embedder").equals(grids[("tiny-hash",)].drop("embedder"))


def test_the_run_records_every_embedder_and_the_robust_choice(runs):
    both, _ = runs
    info = json.loads((both.run_dir / "run.json").read_text())
    assert info["status"] == "complete" and info["embedders"] == ["feature-hash-256", "tiny-hash"]
    assert info["per_embedder"]["tiny-hash"]["embedder"] == "feature-hash/48"
    robust = info["robust"]["setting_id"]
    assert robust == both.best
    grid = pl.read_parquet(both.run_dir / "grid.parquet")
    at = grid.filter((pl.col("setting_id") == robust) & (pl.col("slice") == "overall"))
    assert at["feasible"].all() and at.height == 2
    assert info["robust"]["worst_objective"] == at["mrr"].min()
    report = (both.run_dir / "report.md").read_text()
    assert "Does the decision hold across embedders" in report and f"Robust choice: {robust}" in report
    assert "Under tiny-hash" in report and "embedders/tiny-hash/report.html" in report


def test_readers_of_the_union_point_at_each_embedders_run(runs, capsys):
    both, _ = runs
    with pytest.raises(InputError, match="embedders/feature-hash-256, embedders/tiny-hash"):
        read_run_folder(both.run_dir)
    assert cli.main(["gate", str(both.run_dir), str(both.run_dir / "embedders" / "tiny-hash")]) == 2
    assert "a sweep over several embedders" in capsys.readouterr().err
    (both.run_dir / "report.md").unlink()
    assert cli.main(["report", str(both.run_dir)]) == 0
    assert "Does the decision hold across embedders" in (both.run_dir / "report.md").read_text()
    # `explain` on one embedder's run rebuilds that embedder's index, not the config's first.
    second = Recompute(read_run_folder(both.run_dir / "embedders" / "tiny-hash"))
    assert second.index().embedder.identity == "feature-hash/48"


def test_report_on_a_damaged_union_grid_names_the_file(runs, tmp_path, capsys):
    both, _ = runs
    copy = tmp_path / both.run_dir.name
    shutil.copytree(both.run_dir, copy)
    grid = copy / "grid.parquet"
    grid.write_bytes(grid.read_bytes()[:200])
    assert cli.main(["report", str(copy)]) == 2
    err = capsys.readouterr().err
    assert f"{grid}: damaged: cannot be read as Parquet" in err and "Traceback" not in err
    shutil.rmtree(copy)  # conftest reads every finished run folder a test leaves


def test_resuming_a_finished_run_over_two_embedders_changes_nothing(runs):
    both, _ = runs
    config = both.run_dir / json.loads((both.run_dir / "run.json").read_text())["config_path"]
    again = job.run(config, resume=both.run_dir, quiet=True)
    assert again.run_dir == both.run_dir and again.best == both.best
    for name, frame in tables(both.run_dir).items():
        assert frame.height > 0, name
    assert again.grid.equals(both.grid)


@pytest.mark.parametrize("embedder, problem", [
    ([], r"backend\.embedder: \[\]: expected an embedder, or a non-empty list"),
    ([{"kind": "feature-hash"}, {"kind": "feature-hash", "dimensions": 1024}],
     r"backend\.embedder\[1\]\.label: 'feature-hash-1024': another embedder has this label"),
    ([{"kind": "feature-hash", "label": "a/b"}], r"backend\.embedder\[0\]\.label: 'a/b': must be letters"),
])
def test_embedder_lists_are_checked(tmp_path, embedder, problem):
    with pytest.raises(InputError, match=problem):
        dry_run(write_job(tmp_path, backend=backend(embedder)))


def test_a_shared_study_storage_takes_one_embedder(tmp_path):
    sweep = {"strategy": "optimize", "knobs": {"rrf_k": {"low": 1, "high": 60}},
             "optimize": {"n_trials": 3, "storage": "sqlite:///" + str(tmp_path / "s.db")}}
    config = write_job(tmp_path, sweep, backend=backend(TWO))
    with pytest.raises(InputError, match=r"sweep\.storage: a sweep over several embedders"):
        job.run(config, quiet=True)
    assert yaml.safe_load(config.read_text())["backend"]["embedder"] == TWO


def test_a_hand_edited_record_or_routing_file_is_named_not_a_traceback(runs, capsys, tmp_path):
    both, _ = runs
    record = json.loads((both.run_dir / "run.json").read_text())
    try:
        (both.run_dir / "run.json").write_text(json.dumps({k: v for k, v in record.items() if k != "per_embedder"}))
        assert cli.main(["report", str(both.run_dir)]) == 2
        assert f"{both.run_dir / 'run.json'}: damaged" in capsys.readouterr().err
    finally:
        (both.run_dir / "run.json").write_text(json.dumps(record))
    one = both.run_dir / "embedders" / "tiny-hash"
    routing = (one / "routing.json").read_text()
    for damaged in (routing[: len(routing) // 2], json.dumps({"slices": {}, "held_out": {}})):
        (one / "routing.json").write_text(damaged)
        assert cli.main(["report", str(one)]) == 2
        err = capsys.readouterr().err
        assert f"{one / 'routing.json'}: damaged" in err and "Traceback" not in err
    (one / "routing.json").write_text(routing)
