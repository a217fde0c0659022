from __future__ import annotations

import pytest

from tests.pgserver import PostgresUnavailable, start_cluster


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
