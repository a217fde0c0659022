"""What optuna-dashboard 0.21 shows of an optimise run's study, read through its own JSON API on loopback: its
"Best Trial" is a feasible setting, and its History draws infeasible settings as such and repeats marked."""

from __future__ import annotations

import threading
import wsgiref.simple_server

import httpx
import optuna
import polars as pl
import pytest
from optuna_dashboard import wsgi

from rqsweep import job
from rqsweep.errors import NoFeasibleSetting
from tests.minijob import run_study, write_job

# 12 settings, the baseline among them: random proposals repeat themselves. Freshness is the objective and
# entity may not lose any MRR, so the settings that score best (a recency blend) are all infeasible.
SWEEP = {"strategy": "optimize", "knobs": {"rrf_k": {"values": [1, 5, 60]},
                                            "recency_half_life_days": {"values": [0, 1, 30, 365]}},
         "optimize": {"sampler": "random", "n_trials": 11, "seed": 2, "batch_size": 3}}


class _Quiet(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def dashboard():
    """A function that serves a study's storage with optuna-dashboard on loopback and returns its base URL."""
    servers = []

    def serve(storage: optuna.storages.BaseStorage) -> str:
        server = wsgiref.simple_server.make_server("127.0.0.1", 0, wsgi(storage), handler_class=_Quiet)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def _attr(trial: dict, key: str) -> str:
    return next(a["value"] for a in trial["user_attrs"] if a["key"] == key)


def test_the_dashboard_shows_a_feasible_best_trial_and_marks_repeats(tmp_path, dashboard):
    config = write_job(tmp_path / "job", sweep=SWEEP, objective={"metric": "mrr", "slice": "freshness"},
                       constraints=[{"metric": "mrr", "slice": "entity", "max_drop": 0.0}])
    try:
        run_dir = job.run(config, quiet=True, output_dir=tmp_path / "out").run_dir
    except NoFeasibleSetting as exc:  # not expected, but the dashboard must not show an infeasible best either way
        run_dir = exc.run_dir
    grid = pl.read_parquet(run_dir / "grid.parquet").filter(pl.col("slice") == "freshness")
    feasible = dict(zip(grid["setting_id"], grid["feasible"]))
    mrr = dict(zip(grid["setting_id"], grid["mrr"]))
    best_feasible = max(v for s, v in mrr.items() if feasible[s])
    assert max(mrr.values()) > best_feasible, "no infeasible setting scores better: the test proves nothing"
    study = run_study(run_dir)
    assert len(study.trials) > len(feasible), "the sampler never repeated itself: the test proves nothing"

    base = dashboard(study._storage)
    (listed,) = httpx.get(f"{base}/api/studies").json()["study_summaries"]
    detail = httpx.get(f"{base}/api/studies/{listed['study_id']}").json()
    (best,) = detail["best_trials"]
    assert feasible[_attr(best, "setting_id")] and best["values"] == [pytest.approx(best_feasible)]
    # The History draws complete trials (and, when asked, pruned ones), feasible ones apart from the rest by
    # their `constraints`: each evaluated setting once unmarked, the infeasible ones drawn as such.
    drawn = [t for t in detail["trials"] if t["state"] in ("Complete", "Pruned")]
    ids = [_attr(t, "setting_id") for t in drawn if _attr(t, "repeat") == "False"]  # the API's text of the value
    assert len(ids) == len(set(ids)) == len(feasible) - 1  # every setting but the baseline, which is no trial
    assert len(drawn) > len(ids), "no repeat was drawn: the test proves nothing"
    for trial in drawn:
        assert trial["constraints"] and all(c <= 0 for c in trial["constraints"]) == feasible[_attr(trial, "setting_id")]
        assert (trial["state"] == "Complete") == feasible[_attr(trial, "setting_id")]
