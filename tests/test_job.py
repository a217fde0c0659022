"""The sweep job end to end on the embedded backend: files, types, values, resume."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest

from rqsweep import job
from rqsweep.corpus import Chunking, load_corpus
from rqsweep.engine.embed import FeatureHashEmbedder
from rqsweep.engine.index import Index
from rqsweep.errors import InputError, NoFeasibleSetting, RqsweepError
from rqsweep.golden import load_golden
from rqsweep.backends import build_backend
from rqsweep.knobs import Knobs
from tests.minijob import run_study, write_job

GRID_TYPES = {
    "run_id": "string", "setting_id": "string", "rrf_k": "int64", "min_similarity": "double",
    "recency_half_life_days": "double", "slice": "string", "queries": "int64", "recall_at_5": "double",
    "recall_at_10": "double", "mrr": "double", "errors": "int64", "feasible": "bool",
    "violations": "list<element: string>",
    "is_baseline": "bool", "is_best": "bool", "config_sha256": "string", "golden_sha256": "string",
}


@pytest.fixture()
def finished_run(tmp_path):
    config = write_job(tmp_path / "job")
    outcome = job.run(config, quiet=True, output_dir=tmp_path / "out")
    return config, outcome


def test_grid_parquet_types_and_metadata(finished_run):
    _, outcome = finished_run
    table = pq.read_table(outcome.run_dir / "grid.parquet")
    types = {f.name: str(f.type) for f in table.schema}
    for column, kind in GRID_TYPES.items():
        assert types[column] == kind, column
    meta = table.schema.metadata
    assert json.loads(meta[b"rqsweep.config"])["name"] == "mini"
    assert b"mrr" in meta[b"rqsweep.metrics"]
    assert meta[b"rqsweep.version"]
    # 3 rrf_k x 4 floors x 4 half-lives; 4 slices + overall each.
    assert table.num_rows == 48 * 5


def test_duckdb_reads_the_grid_and_the_query_table(finished_run):
    _, outcome = finished_run
    con = duckdb.connect()
    grid = str(outcome.run_dir / "grid.parquet")
    queries = str(outcome.run_dir / "queries.parquet")
    n_settings, n_best, n_base = con.execute(
        f"SELECT count(DISTINCT setting_id), sum(is_best::int) FILTER (WHERE slice = 'overall'), "
        f"sum(is_baseline::int) FILTER (WHERE slice = 'overall') FROM read_parquet('{grid}')").fetchone()
    assert (n_settings, n_best, n_base) == (48, 1, 1)
    floors = con.execute(f"SELECT count(*) FROM read_parquet('{grid}') WHERE min_similarity IS NULL "
                         "AND slice = 'overall'").fetchone()[0]
    assert floors == 12  # the floor-off column is a real NULL, not NaN
    rows, errors = con.execute(f"SELECT count(*), count(error) FROM read_parquet('{queries}')").fetchone()
    assert (rows, errors) == (48 * 10, 0)
    # The overall MRR in the grid is the mean of 1/rank over the query table.
    diff = con.execute(f"""
        SELECT max(abs(g.mrr - q.mrr)) FROM read_parquet('{grid}') g
        JOIN (SELECT setting_id, avg(CASE WHEN rank > 0 THEN 1.0 / rank ELSE 0 END) AS mrr
              FROM read_parquet('{queries}') GROUP BY setting_id) q USING (setting_id)
        WHERE g.slice = 'overall'""").fetchone()[0]
    assert diff < 1e-12


def test_grid_metrics_equal_the_reference_search(finished_run):
    """Every setting's per-query ranks, recomputed one by one with Index.search, match the job's table."""
    config, outcome = finished_run
    folder = config.parent
    golden = load_golden(folder / "golden.yaml", load_corpus(folder / "corpus.yaml"))
    index = Index.build(load_corpus(folder / "corpus.yaml"), FeatureHashEmbedder(256), Chunking("size", 120, 20))
    queries = pl.read_parquet(outcome.run_dir / "queries.parquet")
    # The engine's clock is the build time: ages are exact, so ranks do not depend on when we recompute.
    for setting in queries["setting_id"].unique().to_list():
        knobs = Knobs.from_id(setting)
        got = dict(queries.filter(pl.col("setting_id") == setting).select("query_id", "rank").iter_rows())
        for q in golden.queries:
            keys = {e.key for e in q.expected}
            ranked = index.search(q.query, knobs, 10)
            rank = next((p for p, r in enumerate(ranked, 1) if r.key in keys), 0)
            assert got[q.id] == rank, (setting, q.id)


def test_best_is_feasible_and_maximises_the_objective(finished_run):
    _, outcome = finished_run
    overall = outcome.grid.filter(pl.col("slice") == "overall")
    best = overall.filter(pl.col("is_best"))
    assert best.height == 1 and best["feasible"][0]
    assert best["mrr"][0] == overall.filter(pl.col("feasible"))["mrr"].max()
    infeasible = overall.filter(~pl.col("feasible"))
    assert (infeasible["violations"].list.len() > 0).all()
    assert overall.filter(pl.col("feasible"))["violations"].list.len().max() == 0
    keys = set(infeasible["violations"].explode().to_list())
    assert keys and all(re.fullmatch(r"recall_at_10\[\w+\]:max_drop", k) for k in keys)  # minijob's one constraint
    run_json = json.loads((outcome.run_dir / "run.json").read_text())
    assert run_json["status"] == "complete"
    assert run_json["best"]["setting_id"] == best["setting_id"][0]
    assert set(run_json["baseline"]["slices"]) == {"document", "entity", "exact_token", "freshness", "overall"}


def test_run_json_records_the_corpus_searched_and_the_embedder(finished_run, tmp_path):
    config, outcome = finished_run
    run_json = json.loads((outcome.run_dir / "run.json").read_text())
    corpus = load_corpus(config.parent / "corpus.yaml")
    assert run_json["corpus_sha256"] == corpus.sha256
    # The hash is of what is searched, not of the file's bytes: the same corpus written as JSON hashes alike.
    data = {"documents": [{"key": d.key, "content": d.content, "path": d.path, "title": d.title, "tags": d.tags}
                          for d in corpus.documents],
            "memories": [{"key": m.key, "content": m.content, "store": m.store, "tags": m.tags, "age_days": m.age_days}
                         for m in corpus.memories]}
    (tmp_path / "corpus.json").write_text(json.dumps(data, indent=3))
    assert load_corpus(tmp_path / "corpus.json").sha256 == corpus.sha256
    assert run_json["server_profile"]["embedder"] == "feature-hash/256"  # minijob's embedder


def test_no_feasible_setting_is_an_error_after_writing(tmp_path):
    config = write_job(tmp_path / "job", constraints=[{"metric": "mrr", "slice": "*", "min": 1.0}])
    with pytest.raises(NoFeasibleSetting) as err:
        job.run(config, quiet=True, output_dir=tmp_path / "out")
    assert err.value.exit_code == 4
    assert (Path(err.value.run_dir) / "grid.parquet").exists()


def test_optimize_gives_constraints_to_optuna(tmp_path):
    sweep = {"strategy": "optimize", "knobs": {
        "rrf_k": {"low": 1, "high": 100, "log": True},
        "min_similarity": {"include_off": True, "low": 0.0, "high": 0.5},
        "recency_half_life_days": {"include_off": True, "low": 0.5, "high": 400, "log": True},
    }, "optimize": {"sampler": "tpe", "n_trials": 24, "seed": 3}}
    config = write_job(tmp_path / "job", sweep=sweep)
    outcome = job.run(config, quiet=True, output_dir=tmp_path / "out")
    trials = run_study(outcome.run_dir).get_trials()
    assert len({t.user_attrs["setting_id"] for t in trials if not t.user_attrs["repeat"]}) == 24
    told = [t for t in trials if not t.user_attrs["repeat"]]
    assert all(len(t.constraints) == 1 for t in told)
    feasible_ids = set(outcome.grid.filter(pl.col("feasible"))["setting_id"].to_list())
    # Optuna's feasibility (the one constraint <= 0) is the grid's, setting by setting.
    assert {t.user_attrs["setting_id"] for t in told if max(t.constraints.values()) <= 0} == \
        feasible_ids & {t.user_attrs["setting_id"] for t in told}
    assert outcome.best in feasible_ids


@pytest.mark.parametrize("sampler", ["random", "nsga2"])
def test_other_samplers_run_under_constraints(tmp_path, sampler):
    sweep = {"strategy": "optimize", "knobs": {"rrf_k": {"low": 1, "high": 100},
                                                "recency_half_life_days": {"values": [0, 1, 30]}},
             "optimize": {"sampler": sampler, "n_trials": 10, "seed": 1}}
    outcome = job.run(write_job(tmp_path / "job", sweep=sweep), quiet=True, output_dir=tmp_path / "out")
    trials = run_study(outcome.run_dir).get_trials()
    assert all(t.constraints for t in trials)  # a repeat is told its setting's value and constraint too
    assert len({t.user_attrs["setting_id"] for t in trials if not t.user_attrs["repeat"]}) == 10
    proposed = {(t.params["rrf_k"], [0.0, 1.0, 30.0][t.params["recency_half_life_days_index"]]) for t in trials}
    evaluated = set(outcome.grid["setting_id"].unique().to_list())
    assert evaluated == {f"k{k}_moff_h{h!r}" for k, h in proposed} | {"k60_moff_h0.0"}
    assert outcome.best in evaluated


def _run_cli(args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "rqsweep.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def _big_grid():
    return {"strategy": "grid", "knobs": {
        "rrf_k": {"low": 1, "high": 400},
        "min_similarity": {"include_off": True, "low": 0.02, "high": 0.4, "step": 0.02},
        "recency_half_life_days": {"values": [0, 1, 7, 30, 365]},
    }}


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_resume_after_a_kill_gives_the_uninterrupted_grid(tmp_path, how):
    config = write_job(tmp_path / "job", sweep=_big_grid())  # 400 x 21 x 5 = 42,000 settings
    out = tmp_path / "out"
    proc = _run_cli([str(config), "--quiet", "--output-dir", str(out)])
    deadline = time.monotonic() + 120
    parts: list[Path] = []
    while time.monotonic() < deadline and len(parts) < 3 and proc.poll() is None:
        parts = list(out.glob("mini/*/state/part-*.parquet"))
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be interrupted"
    proc.send_signal(how)
    proc.wait(timeout=60)
    if how == signal.SIGINT:
        assert proc.returncode == 130
    run_dir = next(out.glob("mini/*"))
    assert not (run_dir / "grid.parquet").exists()
    done_before = len(list((run_dir / "state").glob("part-*.parquet")))
    assert done_before >= 3

    resumed = _run_cli([str(config), "--quiet", "--resume", str(run_dir)])
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    clean = job.run(config, quiet=True, output_dir=tmp_path / "clean")
    a = pl.read_parquet(run_dir / "grid.parquet").drop("run_id")
    b = clean.grid.drop("run_id")
    assert a.height == 42_000 * 5
    assert a.equals(b)
    qa = pl.read_parquet(run_dir / "queries.parquet").drop("run_id").sort("setting_id", "query_id")
    qb = pl.read_parquet(clean.run_dir / "queries.parquet").drop("run_id").sort("setting_id", "query_id")
    assert qa.equals(qb)


def test_resume_refuses_changed_inputs(tmp_path):
    config = write_job(tmp_path / "job")
    outcome = job.run(config, quiet=True, output_dir=tmp_path / "out")
    write_job(tmp_path / "job", workers=2)  # the config file changes
    with pytest.raises(InputError) as err:
        job.run(config, quiet=True, resume=outcome.run_dir)
    assert err.value.exit_code == 2 and err.value.where == "inputs_sha256" and "changed" in err.value.problem


def test_resume_refuses_a_changed_corpus_or_named_sweep(tmp_path):
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    (sweeps / "tiny.yaml").write_text("strategy: grid\nknobs:\n  rrf_k: {values: [1, 60]}\n")
    config = write_job(tmp_path / "configs", sweep="tiny")
    outcome = job.run(config, quiet=True, output_dir=tmp_path / "out")
    (sweeps / "tiny.yaml").write_text("strategy: grid\nknobs:\n  rrf_k: {values: [1, 5, 60]}\n")
    with pytest.raises(InputError, match="sweep, corpus or golden set changed"):
        job.run(config, quiet=True, resume=outcome.run_dir)
    (sweeps / "tiny.yaml").write_text("strategy: grid\nknobs:\n  rrf_k: {values: [1, 60]}\n")
    corpus = tmp_path / "configs" / "corpus.yaml"
    corpus.write_text(corpus.read_text().replace("nightly", "weekly"))
    with pytest.raises(InputError, match="changed"):
        job.run(config, quiet=True, resume=outcome.run_dir)


def test_resume_keeps_the_original_start_time(tmp_path):
    config = write_job(tmp_path / "job")
    outcome = job.run(config, quiet=True, output_dir=tmp_path / "out")
    before = json.loads((outcome.run_dir / "run.json").read_text())
    job.run(config, quiet=True, resume=outcome.run_dir)
    after = json.loads((outcome.run_dir / "run.json").read_text())
    assert after["started_at"] == before["started_at"] and "resumed_at" in after


def test_a_backend_that_cannot_start_leaves_no_run_folder(tmp_path, monkeypatch):
    config = write_job(tmp_path / "job", backend={
        "kind": "embedded", "embedder": {"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:9"}})
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(RqsweepError):
        job.run(config, quiet=True, output_dir=tmp_path / "out")
    assert not list((tmp_path / "out").glob("mini/*"))


def test_cli_exit_codes(tmp_path):
    config = write_job(tmp_path / "job")
    ok = _run_cli([str(config), "--quiet", "--output-dir", str(tmp_path / "out")])
    stdout, _ = ok.communicate(timeout=120)
    assert ok.returncode == 0
    assert "Best feasible setting" in stdout and "overall" in stdout
    zero = _run_cli([str(config), "--workers", "0"])
    _, stderr = zero.communicate(timeout=60)
    assert zero.returncode == 2 and "--workers" in stderr and "must be >= 1" in stderr
    bad = write_job(tmp_path / "bad", baseline={"rrf_k": 0})
    proc = _run_cli([str(bad), "--quiet"])
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "job.yaml: baseline.rrf_k: 0: must be an integer >= 1" in stderr
    infeasible = write_job(tmp_path / "inf", constraints=[{"metric": "mrr", "slice": "*", "min": 1.0}])
    proc = _run_cli([str(infeasible), "--quiet", "--output-dir", str(tmp_path / "out")])
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 4
    assert "No feasible setting" in stdout + stderr


def test_parallel_workers_give_the_serial_rows(tmp_path, monkeypatch):
    from rqsweep.backends import embedded

    monkeypatch.setattr(embedded, "_MIN_PARALLEL_WORK", 0)
    config = write_job(tmp_path / "job")
    inputs = job.load_inputs(config)
    settings = [Knobs.from_id(s) for s in ("k1_moff_h0.0", "k5_m0.2_h30.0", "k60_m0.1_h1.0", "k20_moff_h365.0",
                                              "k2_m0.3_h0.5")]
    serial = build_backend(inputs.config, inputs.golden, inputs.corpus, workers=1, log=lambda _: None).evaluate(settings)
    # Two parallel backends in one process, each with its own worker pool and plans.
    for _ in range(2):
        backend = build_backend(inputs.config, inputs.golden, inputs.corpus, workers=2, log=lambda _: None)
        try:
            assert backend.evaluate(settings).equals(serial)
            assert backend.evaluate(settings[:2]).equals(serial.head(20))
        finally:
            backend.close()
    assert serial.height == len(settings) * 10


def test_the_metrics_list_adds_registry_metrics_to_the_grid_and_the_query_table(tmp_path):
    config = write_job(tmp_path / "job", metrics=["ndcg_at_10", "hit_at_1", "r_precision"],
                       objective={"metric": "ndcg_at_10", "slice": "overall"})
    try:
        outcome = job.run(config, quiet=True)
    except NoFeasibleSetting as exc:  # the constraints may reject every setting: the files are written all the same
        outcome = exc
    run_dir = Path(outcome.run_dir)
    grid = pl.read_parquet(run_dir / "grid.parquet")
    queries = pl.read_parquet(run_dir / "queries.parquet")
    # The listed metrics, the objective's, and the gate's (recall@10 and MRR) are computed; nothing else.
    for table in (grid, queries):
        assert {"ndcg_at_10", "hit_at_1", "r_precision", "recall_at_10", "mrr"} <= set(table.columns)
        assert "recall_at_5" not in table.columns
    # Every per-query value is the registry's function of that row's positions.
    from rqsweep import metrics

    positions, n = metrics.padded_positions(queries["positions"])
    for name in ("ndcg_at_10", "hit_at_1", "r_precision"):
        assert queries[name].to_list() == metrics.get(name).per_query(metrics.Judged.binary(positions, n)).tolist()
    # The grid's means are those values averaged per slice.
    means = queries.group_by("setting_id", "slice").agg(pl.col("ndcg_at_10").mean().alias("want"))
    joined = grid.join(means, on=["setting_id", "slice"])
    assert joined.height == queries.select("setting_id", "slice").unique().height
    assert (joined["ndcg_at_10"] - joined["want"]).abs().max() < 1e-12


def test_the_verdict_is_printed_first_then_the_held_out_gain_and_both_are_kept_in_run_json(tmp_path, capsys):
    from rqsweep import cli

    config = write_job(tmp_path / "job", validation={"folds": 3, "seed": 1}, constraints=[])
    assert cli.main([str(config), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("Verdict: ")
    assert out.index("Held-out gain (3-fold CV, stratified by slice): overall MRR ") < out.index(
        "Best feasible setting, in sample: ")
    run_dir = Path(out.split("Results: ")[1].splitlines()[0])
    record = json.loads((run_dir / "run.json").read_text())
    assert record["validation"]["folds"] == 3 and record["validation"]["seed"] == 1
    assert record["decision"]["lines"][0] == out.splitlines()[0] and record["decision"]["held_out"] is True
    assert (run_dir / "report.md").read_text().split("\n\n")[1] == out.splitlines()[0]


def test_validation_false_turns_the_estimate_off(tmp_path, capsys):
    from rqsweep import cli

    config = write_job(tmp_path / "job", validation=False, constraints=[])
    assert cli.main([str(config), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "Held-out" not in out and out.startswith("Verdict: ") and "\nBest feasible setting, in sample" in out
