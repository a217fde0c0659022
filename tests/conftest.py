from __future__ import annotations

import signal

import pytest

from tests.finished_runs import FinishedRuns, assert_knob_columns_match_ids
from tests.pgserver import PostgresUnavailable, start_cluster


def pytest_configure(config):
    # Started in the background of a non-interactive shell (`make test &`, nohup), the tests inherit SIGINT ignored,
    # and so would every process they start: the interrupt tests send SIGINT and need it to interrupt.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def pg_dsn():
    """DSN of a fresh PostgreSQL 18 + pgvector cluster, shared by the session."""
    try:
        cluster = start_cluster()
    except PostgresUnavailable as exc:
        pytest.fail(f"PostgreSQL conformance tests need a server: {exc}")
    try:
        yield cluster.dsn
    finally:
        cluster.stop()


@pytest.fixture()
def pg(pg_dsn):
    """A psycopg connection in autocommit mode."""
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


_finished_runs = FinishedRuns()


@pytest.fixture(autouse=True)
def finished_runs_agree_with_their_setting_ids(tmp_path_factory):
    """Every run folder a test finished (in its own process or a subprocess, under pytest's temporary folders)
    passes `assert_knob_columns_match_ids`."""
    yield
    for run_dir in _finished_runs.new_under(tmp_path_factory.getbasetemp()):
        assert_knob_columns_match_ids(run_dir)
