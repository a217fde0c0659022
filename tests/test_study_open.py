"""Processes that open one new study storage at once (a coordinator and its workers started together) each make its
tables: one that finds a table or a row another made first opens the storage again, rather than stopping."""

from __future__ import annotations

import multiprocessing
import uuid

import pytest

from rqsweep.errors import BackendError
from rqsweep.search.study import StudyStorage


def _open(url: str, meet, said) -> None:
    """In a process of its own: open the storage at `url`, meeting the other process (`meet`, a barrier) once both
    have looked for its tables and are about to make them, the moment of the race."""
    from optuna.storages._rdb import models
    from sqlalchemy import event

    met = []

    def before_create(*_args, **_kwargs) -> None:
        if not met:
            met.append(True)
            meet.wait(300)

    # First among the listeners: PostgreSQL's enum types are made by one, which would hold the other process back.
    event.listen(models.BaseModel.metadata, "before_create", before_create, insert=True)
    try:
        StudyStorage(url, None)
        said.put("opened")
    except BackendError as exc:
        said.put(str(exc))


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_two_processes_opening_one_new_storage_at_once_both_open_it(tmp_path, request, database):
    if database == "sqlite":
        url = f"sqlite:///{tmp_path / 'study.db'}"
    else:
        name = f"race_{uuid.uuid4().hex[:12]}"
        request.getfixturevalue("pg").execute(f"CREATE DATABASE {name}")
        parts = dict(p.split("=", 1) for p in request.getfixturevalue("pg_dsn").split())
        url = f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{name}"
    spawn = multiprocessing.get_context("spawn")
    meet, said = spawn.Barrier(2), spawn.Queue()
    processes = [spawn.Process(target=_open, args=(url, meet, said)) for _ in range(2)]
    for process in processes:
        process.start()
    outcomes = [said.get(timeout=600) for _ in processes]
    for process in processes:
        process.join(timeout=600)
    assert outcomes == ["opened", "opened"]
