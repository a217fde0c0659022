"""One optimise study, many machines: a real PostgreSQL, a coordinator and `rqsweep worker` processes over HTTP,
one of them SIGKILLed mid-trial, the coordinator SIGKILLed, or the database restarted mid-study."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import polars as pl
import pytest

from rqsweep.backends import build_backend
from rqsweep.inputs import load_inputs
from rqsweep.sweep import Sweep
from rqsweep.knobs import Knobs
from rqsweep.progress import Progress
from rqsweep.serve import Faults
from rqsweep.search.strategy import TOLD
from rqsweep.search.study import StudyStorage
from tests.http_support import EMBEDDED, PASSWORD, http_backend, serving, write_config, write_corpus
from tests.pgserver import PostgresUnavailable, start_cluster

SWEEP = {"strategy": "optimize", "knobs": {"rrf_k": {"low": 1, "high": 200, "log": True},
                                            "min_similarity": {"include_off": True, "low": 0.0, "high": 0.5}},
         "optimize": {"sampler": "random", "n_trials": 14, "seed": 4, "batch_size": 2}}
SMALL = {**SWEEP, "optimize": {**SWEEP["optimize"], "n_trials": 6}}
METRICS = ["setting_id", "slice", "queries", "recall_at_5", "recall_at_10", "mrr", "errors"]


def _url(dsn: str) -> str:
    parts = dict(p.split("=", 1) for p in dsn.split())
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


def _cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rqsweep.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "SOAT_PASSWORD": PASSWORD})


def _distinct(trials) -> set[str]:
    return {t.user_attrs["setting_id"] for t in trials
            if t.state in TOLD and not t.user_attrs["repeat"]}


def _holds_a_trial(storage, study_name: str, proc: subprocess.Popen):
    """A predicate for `_wait`: the running trials that `proc` has held for a fifth of a second at least, so is
    evaluating (a trial that raced past the budget is declined within milliseconds of being asked)."""
    holder = f"{socket.gethostname()}:{proc.pid}"
    seen: dict[int, float] = {}

    def mid_trial():
        try:
            trials = optuna.load_study(study_name=study_name, storage=storage).get_trials()
        except KeyError:  # not created yet
            return []
        now = time.monotonic()
        held = {t.number for t in trials
                if t.state == optuna.trial.TrialState.RUNNING and t.user_attrs.get("worker") == holder}
        for number in set(seen) - held:
            del seen[number]
        for number in held:
            seen.setdefault(number, now)
        return sorted(n for n, since in seen.items() if now - since >= 0.2)

    return mid_trial


def _study_named(runs: Path) -> str:
    """The study of the run that a coordinator started under `runs`, named as soon as its run folder is: workers
    started then wait for the study, and have their backends ready by the coordinator's first trials."""

    def run_started():
        return [json.loads(f.read_text()) for f in runs.glob("*/run.json")]

    info = _wait(run_started)[0]
    return f"{info['name']}/{info['run_id']}"


def _wait(what, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what.__name__}")


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_three_workers_one_killed_mid_trial_every_trial_once_and_the_grid_re_evaluates(tmp_path, pg_dsn):
    folder = tmp_path / "job"
    write_corpus(folder)
    embedded = write_config(folder, "embedded", EMBEDDED, SWEEP)
    url = _url(pg_dsn)
    storage = StudyStorage(url, None).optuna
    # Every search answers after 50 ms: a trial lasts long enough to be killed in the middle of it.
    with serving(embedded, faults=Faults(rate=1.0, kinds=("slow",), slow_seconds=0.05)) as server:
        config = write_config(folder, "pgstudy", http_backend(server.url, mode="direct"), SWEEP)
        coordinator = _cli(config, "--storage", url, "--output-dir", tmp_path / "out", "--quiet")
        study_name = _study_named(tmp_path / "out" / "pgstudy")
        workers = [_cli("worker", config, "--storage", url, "--study", study_name, "--quiet") for _ in range(3)]
        victim = workers[0]
        killed = _wait(_holds_a_trial(storage, study_name, victim))
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        for proc in [coordinator, *workers[1:]]:
            _, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err
            assert "Traceback" not in err and "postgresql" not in err

    trials = optuna.load_study(study_name=study_name, storage=storage).get_trials()
    states = {t.number: t.state for t in trials}
    assert all(states[n] == optuna.trial.TrialState.FAIL for n in killed)
    assert set(states.values()) <= {*TOLD, optuna.trial.TrialState.FAIL}
    retried = {optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(t): t for t in trials}
    complete = [t for t in trials if t.state in TOLD]
    # Each killed trial was asked again with its parameters, and its setting was evaluated: by the retry, or by
    # another worker whose sampler proposed it while the victim held it (the retry is then a repeat, told FAIL).
    # A retry declined or failed otherwise leaves the killed setting unevaluated, and fails here.
    for n in killed:
        again, original = retried[n], next(t for t in trials if t.number == n)
        assert again.params == original.params
        evaluated_elsewhere = again.user_attrs.get("repeat") and any(
            t.params == original.params and not t.user_attrs["repeat"] for t in complete)
        assert again.state in TOLD or evaluated_elsewhere, (again.state, again.user_attrs)
    # Counted once: the budget is distinct settings (two workers may evaluate one setting at the same moment).
    evaluated = sorted(_distinct(trials))
    assert len(evaluated) == 14
    assert len({t.user_attrs["worker"] for t in complete}) >= 3  # the coordinator and the surviving workers

    run_dir = next((tmp_path / "out" / "pgstudy").iterdir())
    grid = pl.read_parquet(run_dir / "grid.parquet")
    baseline = Knobs(60, None, 0.0)
    assert set(grid["setting_id"]) == set(evaluated) | {baseline.id}
    assert grid.filter(pl.col("slice") == "overall").height == grid["setting_id"].n_unique()
    # The collected rows equal an in-process re-evaluation of the same settings on the embedded engine.
    inputs = load_inputs(embedded)
    backend = build_backend(inputs.config, inputs.golden, inputs.corpus, workers=1, log=lambda _: None,
                            run_dir=tmp_path / "again")
    again = Sweep(inputs, backend, tmp_path / "again", "again", Progress(0, "again", quiet=True))
    again.evaluate([baseline, *(Knobs.from_id(s) for s in evaluated)])
    backend.close()
    want = again.finish({}).grid.select(METRICS).sort("setting_id", "slice")
    assert grid.select(METRICS).sort("setting_id", "slice").equals(want)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_with_the_coordinator_killed_workers_evaluate_no_more_settings_than_its_budget(tmp_path, pg_dsn):
    folder = tmp_path / "job"
    write_corpus(folder)
    embedded = write_config(folder, "embedded", EMBEDDED, SMALL)
    url = _url(pg_dsn)
    storage = StudyStorage(url, None).optuna
    with serving(embedded, faults=Faults(rate=1.0, kinds=("slow",), slow_seconds=0.05)) as server:
        config = write_config(folder, "killed", http_backend(server.url, mode="direct"), SMALL)
        coordinator = _cli(config, "--storage", url, "--output-dir", tmp_path / "out", "--quiet")
        study_name = _wait(lambda: [n for n in optuna.get_all_study_names(storage) if n.startswith("killed/")])[0]
        _wait(_holds_a_trial(storage, study_name, coordinator))
        coordinator.send_signal(signal.SIGKILL)  # its trials are left running, to be failed and asked again
        coordinator.wait()
        workers = [_cli("worker", config, "--storage", url, "--study", study_name, "--quiet") for _ in range(2)]
        for proc in workers:
            _, err = proc.communicate(timeout=240)
            assert proc.returncode == 0 and "Traceback" not in err, err
        trials = optuna.load_study(study_name=study_name, storage=storage).get_trials()
        assert len(_distinct(trials)) == 6
        # The coordinator's --resume gathers them: its grid holds the budget and the baseline, no more.
        run_dir = next((tmp_path / "out" / "killed").iterdir())
        resumed = _cli(config, "--resume", run_dir, "--storage", url, "--quiet")
        _, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, err
    assert pl.read_parquet(run_dir / "grid.parquet")["setting_id"].n_unique() == 7


@pytest.fixture()
def restartable_pg():
    """A PostgreSQL cluster of the test's own, which it may restart."""
    try:
        cluster = start_cluster()
    except PostgresUnavailable as exc:
        pytest.fail(f"the PostgreSQL restart test needs a server: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_postgresql_restarting_mid_study_ends_in_carrying_on_or_exit_3_and_resume_finishes_it(tmp_path,
                                                                                             restartable_pg):
    folder = tmp_path / "job"
    write_corpus(folder)
    embedded = write_config(folder, "embedded", EMBEDDED, SWEEP)
    url = _url(restartable_pg.dsn)
    storage = StudyStorage(url, None).optuna
    with serving(embedded, faults=Faults(rate=1.0, kinds=("slow",), slow_seconds=0.05)) as server:
        config = write_config(folder, "restart", http_backend(server.url, mode="direct"), SWEEP)
        coordinator = _cli(config, "--storage", url, "--output-dir", tmp_path / "out", "--quiet")
        study_name = _study_named(tmp_path / "out" / "restart")
        workers = [_cli("worker", config, "--storage", url, "--study", study_name, "--quiet") for _ in range(2)]
        holding = [_holds_a_trial(storage, study_name, proc) for proc in workers]
        _wait(lambda: any(held() for held in holding))  # the study is shared: a worker is mid-trial
        restartable_pg.restart(down_seconds=6)  # longer than a heartbeat
        ends = {}
        for name, proc in [("coordinator", coordinator), ("worker 1", workers[0]), ("worker 2", workers[1])]:
            _, err = proc.communicate(timeout=240)
            ends[name] = proc.returncode
            assert proc.returncode in (0, 3), (name, err)
            assert "Traceback" not in err and "Exception in thread" not in err, (name, err)
            if proc.returncode == 3:
                assert f"the study storage {url} stopped answering" in err, (name, err)
                assert ("--resume" if name == "coordinator" else "start the worker again") in err, (name, err)
        run_dir = next((tmp_path / "out" / "restart").iterdir())
        resumed = _cli(config, "--resume", run_dir, "--storage", url, "--quiet")
        _, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, (ends, err)
    trials = optuna.load_study(study_name=study_name, storage=StudyStorage(url, None).optuna).get_trials()
    assert len(_distinct(trials)) == 14
    assert pl.read_parquet(run_dir / "grid.parquet")["setting_id"].n_unique() == 15
