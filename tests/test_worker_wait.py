"""A worker started before its coordinator has created the study waits for it, a bounded time, saying so."""

from __future__ import annotations

import threading
import time

import optuna
import pytest

from rqsweep.errors import InputError
from rqsweep.search.study import StudyStorage
from rqsweep.search.trials import joined_study


def test_a_worker_waits_for_a_study_that_appears_and_joins_it(tmp_path):
    storage = StudyStorage(f"sqlite:///{tmp_path / 'studies.db'}", None)
    said, waiting = [], threading.Event()

    def coordinator() -> None:  # creates the study once the worker says it is waiting for it
        assert waiting.wait(timeout=300)
        study = optuna.create_study(study_name="mini/run1", storage=storage.optuna)
        study.set_user_attr("inputs_sha256", "abc")
        study.set_user_attr("run_id", "run1")

    def log(line: str) -> None:
        said.append(line)
        waiting.set()

    thread = threading.Thread(target=coordinator)
    thread.start()
    attrs = joined_study(storage, "mini/run1", "abc", tmp_path / "job.yaml", wait_seconds=300, log=log)
    thread.join()
    assert attrs["run_id"] == "run1"
    assert said == [f"waiting up to 300 s for study 'mini/run1' to appear in {storage.describe()} "
                    "(its coordinator creates it once its index is built)"]


def test_a_study_that_never_appears_is_invalid_input_once_the_wait_is_over(tmp_path):
    storage = StudyStorage(f"sqlite:///{tmp_path / 'studies.db'}", None)
    started = time.monotonic()
    with pytest.raises(InputError, match=r"--study: 'mini/none': no such study in .* after waiting 2 s"):
        joined_study(storage, "mini/none", "abc", tmp_path / "job.yaml", wait_seconds=2, log=lambda _: None)
    assert time.monotonic() - started >= 2  # it waited out its bound: a loaded machine only makes that longer
