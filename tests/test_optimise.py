"""Optimise mode: distinct settings are the budget, repeats cost nothing, a stopped or finished study goes on."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time

import optuna
import polars as pl
import pytest

from rqsweep import job
from rqsweep.backends.embedded import EmbeddedBackend
from rqsweep.scrub import redact_url
from tests.minijob import run_study, write_job

CONTINUOUS = {"strategy": "optimize", "knobs": {
    "rrf_k": {"low": 1, "high": 100, "log": True},
    "min_similarity": {"include_off": True, "low": 0.0, "high": 0.5},
    "recency_half_life_days": {"include_off": True, "low": 0.5, "high": 400, "log": True},
}, "optimize": {"sampler": "tpe", "n_trials": 12, "seed": 5, "warm_start": 8, "batch_size": 4}}


@pytest.fixture()
def searched(monkeypatch):
    """Every setting the embedded backend is asked to evaluate, in order."""
    seen: list[str] = []
    original = EmbeddedBackend.evaluate

    def counting(self, settings):
        seen.extend(s.id for s in settings)
        return original(self, settings)

    monkeypatch.setattr(EmbeddedBackend, "evaluate", counting)
    return seen


def _distinct(trials) -> list[str]:
    return [t.user_attrs["setting_id"] for t in trials if not t.user_attrs["repeat"]]


def test_repeated_proposals_cost_nothing_and_do_not_count(tmp_path, searched):
    # 3 x 2 = 6 settings, the baseline among them: random proposals repeat themselves soon.
    sweep = {"strategy": "optimize", "knobs": {"rrf_k": {"values": [1, 5, 60]},
                                                "recency_half_life_days": {"values": [0, 30]}},
             "optimize": {"sampler": "random", "n_trials": 4, "seed": 2, "batch_size": 3}}
    outcome = job.run(write_job(tmp_path / "job", sweep=sweep), quiet=True, output_dir=tmp_path / "out")
    trials = run_study(outcome.run_dir).get_trials()
    repeats = [t for t in trials if t.user_attrs["repeat"]]
    assert repeats, "the sampler never repeated itself: the test proves nothing"
    assert len(searched) == len(set(searched)) == 5  # the baseline, then 4 distinct settings, each searched once
    assert len(set(_distinct(trials))) == len(_distinct(trials)) == 4
    assert outcome.grid["setting_id"].n_unique() == 5
    # The sampler is told a repeat's known value, so that it learns without a search.
    value = {t.user_attrs["setting_id"]: t.value for t in trials if not t.user_attrs["repeat"]}
    value["k60_moff_h0.0"] = outcome.grid.filter((pl.col("setting_id") == "k60_moff_h0.0")
                                                 & (pl.col("slice") == "overall"))["mrr"][0]
    assert all(t.value == pytest.approx(value[t.user_attrs["setting_id"]]) for t in repeats)


def test_an_exhausted_space_ends_the_run(tmp_path, searched):
    sweep = {"strategy": "optimize", "knobs": {"rrf_k": {"values": [1, 5, 60]},
                                                "recency_half_life_days": {"values": [0, 30]}},
             "optimize": {"sampler": "tpe", "n_trials": 50, "seed": 1}}
    outcome = job.run(write_job(tmp_path / "job", sweep=sweep), quiet=True, output_dir=tmp_path / "out")
    assert sorted(set(searched)) == sorted(searched) and len(searched) == 6
    assert outcome.grid["setting_id"].n_unique() == 6


def test_the_study_names_itself_its_objective_and_feasibility(tmp_path):
    outcome = job.run(write_job(tmp_path / "job", sweep=CONTINUOUS), quiet=True, output_dir=tmp_path / "out")
    study = run_study(outcome.run_dir)
    info = json.loads((outcome.run_dir / "run.json").read_text())
    assert study.study_name == f"mini/{info['run_id']}"
    assert study.metric_names == ["mrr[overall]"]
    assert study.user_attrs["run_id"] == info["run_id"] and study.user_attrs["config_sha256"] == info["config_sha256"]
    grid = outcome.grid.filter(pl.col("slice") == "overall")
    feasible = dict(zip(grid["setting_id"], grid["feasible"]))
    for t in study.get_trials():
        assert set(t.user_attrs) == {"setting_id", "repeat", "worker"}  # what the collector needs, no more
        if t.user_attrs["repeat"]:
            continue
        # One constraint, in the list form optuna-dashboard reads: the sum of the violated ones, or the least slack.
        (violation,) = t.system_attrs["constraints"]
        assert feasible[t.user_attrs["setting_id"]] == (violation <= 0) == (t.state == optuna.trial.TrialState.COMPLETE)


def test_extending_a_finished_study_adds_exactly_the_asked_settings(tmp_path, searched):
    config = write_job(tmp_path / "job", sweep=CONTINUOUS)
    first = job.run(config, quiet=True, output_dir=tmp_path / "out")
    before = list(searched)
    assert len(before) == 13
    second = job.run(config, quiet=True, resume=first.run_dir, n_trials=20)
    assert second.run_dir == first.run_dir
    added = searched[len(before):]
    assert len(added) == len(set(added)) == 8 and not set(added) & set(before)
    assert len(set(_distinct(run_study(first.run_dir).get_trials()))) == 20
    assert second.grid["setting_id"].n_unique() == 21


def test_a_storage_url_password_is_redacted():
    assert redact_url("postgresql://tuner:s3cret@db.example:5432/studies") == \
        "postgresql://tuner:***@db.example:5432/studies"
    assert redact_url("sqlite:///tmp/study.db") == "sqlite:///tmp/study.db"


def _cli(*args):
    return subprocess.Popen([sys.executable, "-m", "rqsweep.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _comparable(grid: pl.DataFrame) -> pl.DataFrame:
    return grid.drop("run_id", "evaluation_order").sort("setting_id", "slice")


# 20 tries per signal is the bar; the default run makes fewer (each try is a Python start-up and a resume),
# RQSWEEP_SIGNAL_TRIES=20 makes all of them.
TRIES = int(__import__("os").environ.get("RQSWEEP_SIGNAL_TRIES", "4"))


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_at_any_moment_ends_cleanly_and_resume_gives_the_uninterrupted_result(tmp_path, how):
    sweep = {**CONTINUOUS, "optimize": {**CONTINUOUS["optimize"], "n_trials": 60}}
    config = write_job(tmp_path / "job", sweep=sweep)
    began = time.monotonic()
    reference = job.run(config, quiet=True, output_dir=tmp_path / "reference")
    span = time.monotonic() - began  # about how long the search lasts (index build and report included)
    rng = random.Random(how)
    stopped = 0
    for attempt in range(TRIES):
        out = tmp_path / f"out{attempt}"
        proc = _cli(str(config), "--quiet", "--output-dir", str(out))
        # Wait for the run folder, then stop it somewhere inside its search (or just after it).
        deadline = time.monotonic() + 60
        while not list(out.glob("mini/*/state")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.6 * span))
        proc.send_signal(how)
        _, err = proc.communicate(timeout=120)
        run_dir = next(out.glob("mini/*"))
        assert "Traceback" not in err, err
        status = json.loads((run_dir / "run.json").read_text())["status"]
        if status == "complete":  # the search finished before the signal, which may have cut the report short or
            # (-how) met the interpreter's exit, after its handlers are gone
            assert proc.returncode in (0, 128 + how, -how), err
        else:
            assert proc.returncode == 128 + how, err
            assert status == "interrupted" and str(run_dir) in err
            stopped += 1
        resumed = job.run(config, quiet=True, resume=run_dir)
        assert resumed.best == reference.best
        assert _comparable(resumed.grid).equals(_comparable(reference.grid))
    assert stopped >= TRIES // 2, f"only {stopped} of {TRIES} runs were stopped mid-search"


def test_a_study_in_a_database_carries_every_setting_to_the_collector(tmp_path, searched):
    """What a worker on another machine evaluated reaches `collect` through the study alone (its positions ride
    on the trials), and the collected grid equals the coordinator's."""
    config = write_job(tmp_path / "job", sweep=CONTINUOUS)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    first = job.run(config, quiet=True, output_dir=tmp_path / "out", storage=url)
    assert json.loads((first.run_dir / "run.json").read_text())["storage"] == url
    assert not list((first.run_dir / "state").glob("part-*.parquet"))  # queries.parquet holds the rows
    (first.run_dir / "queries.parquet").unlink()  # as if evaluated elsewhere
    before = len(searched)
    collected = job.collect(first.run_dir, quiet=True)
    assert len(searched) == before + 1  # the baseline only: nothing else is searched again
    assert _comparable(collected.grid).equals(_comparable(first.grid))
    queries = pl.read_parquet(first.run_dir / "queries.parquet")
    assert queries["setting_id"].n_unique() == 13


def test_an_unreachable_storage_is_a_backend_error_without_its_password(tmp_path):
    from rqsweep.errors import BackendError
    from rqsweep.runfolder import redact
    from rqsweep.search.study import StudyStorage

    url = "postgresql://tuner:pw-never-shown@127.0.0.1:1/studies"
    with pytest.raises(BackendError) as err:
        StudyStorage(url, None)
    assert "pw-never-shown" not in str(err.value) and "127.0.0.1" in str(err.value)
    assert redact({"sweep": {"optimize": {"storage": url}}}) == \
        {"sweep": {"optimize": {"storage": "postgresql://tuner:***@127.0.0.1:1/studies"}}}


def test_a_journal_line_cut_by_a_kill_is_dropped_so_the_next_append_starts_its_own(tmp_path):
    from rqsweep.search.study import BatchedJournalFile

    path = tmp_path / "optuna.journal"
    journal = BatchedJournalFile(path)
    journal.append_logs([{"op_code": 0, "n": 1}, {"op_code": 0, "n": 2}])
    journal.commit()
    with open(path, "ab") as f:  # what a SIGKILL in the middle of the next append leaves
        f.write(b'{"op_code":0,"n":')
    reopened = BatchedJournalFile(path)
    assert [log["n"] for log in reopened.read_logs(0)] == [1, 2]
    reopened.append_logs([{"op_code": 0, "n": 3}])
    reopened.commit()
    assert [log["n"] for log in BatchedJournalFile(path).read_logs(0)] == [1, 2, 3]


def test_a_fixed_seed_gives_the_same_search_and_every_trial_has_every_knob(tmp_path, searched):
    config = write_job(tmp_path / "job", sweep=CONTINUOUS)
    first = job.run(config, quiet=True, output_dir=tmp_path / "a")
    order = list(searched)
    second = job.run(config, quiet=True, output_dir=tmp_path / "b")
    assert searched[len(order):] == order  # the same settings, in the same order
    assert second.best == first.best and _comparable(second.grid).equals(_comparable(first.grid))
    trials = run_study(first.run_dir).get_trials()
    # No conditional parameter: multivariate TPE models the three knobs jointly.
    assert {frozenset(t.params) for t in trials} == {
        frozenset({"rrf_k", "min_similarity_index", "recency_half_life_days_index"})}


def test_a_real_range_is_cut_to_its_precision_with_off_first():
    from rqsweep.config import KnobSpec
    from rqsweep.search.space import knob_levels

    linear = knob_levels("min_similarity", KnobSpec(low=0.0, high=0.6, off=True))
    assert linear[0] is None and len(linear) == 102 and linear[1:4] == [0.0, 0.006, 0.012] and linear[-1] == 0.6
    log = knob_levels("recency_half_life_days", KnobSpec(low=0.25, high=730, log=True, off=True))
    assert log[:4] == [0.0, 0.25, 0.26, 0.27] and log[-3:] == [710.0, 720.0, 730.0]
    assert all(float(f"{v:.2g}") == v for v in log) and log == sorted(set(log))
    assert knob_levels("rrf_k", KnobSpec(low=1, high=500, log=True)) is None  # an integer parameter
