"""`rqsweep worker` on a shared study, in process: the coordinator's budget is the one spent, and a trial failed
under a worker (its heartbeat missed) costs one line, not the worker."""

from __future__ import annotations

import re

import optuna
import pytest

from rqsweep import job
from rqsweep.backends.embedded import EmbeddedBackend
from rqsweep.search.strategy import TOLD
from rqsweep.search.study import MAX_RETRIES, StudyStorage
from tests.minijob import write_job

SWEEP = {"strategy": "optimize", "knobs": {"rrf_k": {"low": 1, "high": 200, "log": True},
                                            "min_similarity": {"include_off": True, "low": 0.0, "high": 0.5}},
         "optimize": {"sampler": "random", "n_trials": 12, "seed": 3, "batch_size": 2}}

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def _study(url: str) -> optuna.Study:
    (name,) = optuna.get_all_study_names(url)
    return optuna.load_study(study_name=name, storage=url)


def _distinct(study: optuna.Study) -> set[str]:
    return {t.user_attrs["setting_id"] for t in study.get_trials()
            if t.state in TOLD and not t.user_attrs["repeat"]}


def test_a_worker_spends_the_coordinators_budget_not_its_configs(tmp_path):
    config = write_job(tmp_path / "job", sweep=SWEEP)  # the config's budget: 12
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    job.run(config, quiet=True, output_dir=tmp_path / "out", n_trials=4, storage=url)
    study = _study(url)
    assert len(_distinct(study)) == 4
    # The coordinator's budget is spent: a worker that joins now evaluates nothing.
    assert job.work(config, url, study.study_name, quiet=True) == 0
    assert len(_distinct(_study(url))) == 4


def test_a_trial_failed_under_its_worker_costs_one_line_and_the_worker_carries_on(tmp_path, monkeypatch, capsys):
    config = write_job(tmp_path / "job", sweep=SWEEP)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    result = job.run(config, quiet=True, output_dir=tmp_path / "out", n_trials=4, storage=url)
    outside = StudyStorage(url, None).optuna  # another process's view of the study
    study = optuna.load_study(study_name=_study(url).study_name, storage=outside)
    # The coordinator resumed with --n-trials 8 (as `rqsweep RUN --resume ... --n-trials 8` would say it).
    study.set_user_attr("n_trials", 8)
    failed: list[int] = []
    original = EmbeddedBackend.evaluate

    def failing_under_it(self, settings):
        running = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
        if running and not failed:
            # What another worker does to trials whose heartbeat it finds stale: fail them and ask them again.
            for trial in running:
                outside.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
                optuna.storages.RetryHeartbeatStaleTrialCallback(MAX_RETRIES)(study, outside.get_trial(trial._trial_id))
                failed.append(trial.number)
        return original(self, settings)

    monkeypatch.setattr(EmbeddedBackend, "evaluate", failing_under_it)
    capsys.readouterr()
    assert job.work(config, url, study.study_name) >= 4
    err = capsys.readouterr().err
    assert failed and "Traceback" not in err
    said = [line for line in err.splitlines() if "failed under this worker" in line]
    assert len(said) == len(failed), err
    assert all(f"trial {n} " in line for n, line in zip(failed, said))
    # Its progress counts toward the coordinator's budget (8), never past it ("51/40 settings").
    shown = [tuple(map(int, m)) for m in re.findall(r"mini worker: (\d+)/(\d+) settings", err)]
    assert shown and all(total == 8 and done <= 8 for done, total in shown) and shown[-1][0] == 8, err
    trials = {t.number: t for t in study.get_trials()}
    assert all(trials[n].state == optuna.trial.TrialState.FAIL for n in failed)
    assert len(_distinct(study)) == 8
    # Each failed trial was asked again and told, its setting's positions on it (what the coordinator gathers).
    retried = {optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(t): t for t in trials.values()}
    for n in failed:
        again = retried[n]
        assert again.state in TOLD and again.params == trials[n].params
        assert not again.user_attrs["repeat"] and "positions" in again.user_attrs
    # The coordinator's --resume gathers all 8 from the study (the baseline besides).
    grown = job.run(config, quiet=True, resume=result.run_dir, storage=url, n_trials=8)
    assert grown.grid["setting_id"].n_unique() == 9
