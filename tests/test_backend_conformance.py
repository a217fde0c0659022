"""What every backend must do, in the manner of Optuna's StorageTestCase: one class of tests, run against each
backend by a subclass that says how to build it. A new backend gets its subclass and passes the same tests.

The contract (`backends.base.Backend`): `evaluate` returns one row per (setting, query) in `OUTCOME_SCHEMA`,
settings-major in the order given, queries in the golden set's order, each expected key at its first slot's
position in the ranked list SOAT would return; `ranked` returns those lists. Small corpus and few settings:
the whole class runs in seconds per backend.
"""

from __future__ import annotations

import contextlib
import json
from typing import Iterator

import polars as pl
import pytest

from rqsweep.backends import OUTCOME_SCHEMA, Backend, build_backend
from rqsweep.backends.base import SENSITIVITY
from rqsweep.inputs import Inputs, load_inputs
from rqsweep.knobs import Knobs
from tests.http_support import EMBEDDED, PASSWORD, http_backend, serving, write_config, write_corpus

SETTINGS = [Knobs(), Knobs(2, None, 0.0), Knobs(60, 0.3, 0.0), Knobs(5, None, 7.0), Knobs(2, 0.3, 7.0)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conformance")
    write_corpus(folder)  # without memory ages, which cannot be seeded over HTTP
    return folder


def _build(config, run_dir) -> tuple[Backend, Inputs]:
    inputs = load_inputs(config)
    backend = build_backend(inputs.config, inputs.golden, inputs.corpus, workers=inputs.config.workers,
                            log=lambda _: None, run_dir=run_dir)
    return backend, inputs


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory) -> pl.DataFrame:
    """The embedded engine's rows in this process: what every backend must agree with."""
    backend, _ = _build(write_config(corpus, "reference", EMBEDDED), tmp_path_factory.mktemp("reference"))
    try:
        return backend.evaluate(SETTINGS)
    finally:
        backend.close()


def _first_slots(hits, expected: list[str]) -> list[int | None]:
    first: dict[str, int] = {}
    for h in hits:
        first.setdefault(h.key, h.position)
    return [first.get(key) for key in expected]


class BackendConformance:
    """The tests every backend passes. A subclass says what its backend calls itself (`NAME`) and how to open one
    (`opened(corpus folder, scratch folder)`: a context manager of (backend, inputs)), which the class-scoped
    fixture `made` calls once for the class."""

    NAME = ""

    def test_evaluate_answers_every_setting_and_query_in_order_in_the_contract_schema(self, made):
        backend, inputs = made
        rows = backend.evaluate(SETTINGS)
        assert dict(rows.schema) == OUTCOME_SCHEMA
        queries = [q.id for q in inputs.golden.queries]
        assert rows["setting_id"].to_list() == [s.id for s in SETTINGS for _ in queries]
        assert rows["query_id"].to_list() == queries * len(SETTINGS)
        for knobs, part in zip(SETTINGS, rows.partition_by("setting_id", maintain_order=True)):
            assert part.select("rrf_k", "min_similarity", "recency_half_life_days").unique().to_dicts() == \
                [knobs.columns()]
        assert rows["error"].null_count() == rows.height
        keys = [len(q.expected) for q in inputs.golden.queries]
        assert rows["positions"].list.len().to_list() == keys * len(SETTINGS)

    def test_positions_equal_the_embedded_engines(self, made, reference):
        backend, _ = made
        rows = backend.evaluate(SETTINGS)
        assert rows.drop(*SENSITIVITY).equals(reference.drop(*SENSITIVITY))
        # The knobs move positions in this corpus: equal rows are not equal by accident of a dead sweep.
        assert reference.group_by("setting_id").agg(pl.col("positions")).n_unique("positions") > 1

    def test_each_position_is_the_first_slot_of_its_key_in_the_ranked_list(self, made):
        backend, inputs = made
        rows = backend.evaluate(SETTINGS)
        for knobs in SETTINGS:
            lists = backend.ranked(knobs)
            got = rows.filter(pl.col("setting_id") == knobs.id)
            for q, positions in zip(inputs.golden.queries, got["positions"].to_list()):
                assert positions == _first_slots(lists[q.id], [e.key for e in q.expected]), (knobs.id, q.id)

    def test_a_setting_is_answered_alike_alone_and_in_a_batch(self, made):
        backend, _ = made
        together = backend.evaluate(SETTINGS).drop(*SENSITIVITY)
        apart = pl.concat([backend.evaluate([s]) for s in reversed(SETTINGS)]).drop(*SENSITIVITY)
        assert apart.sort("setting_id", maintain_order=True).equals(together.sort("setting_id", maintain_order=True))

    def test_ranked_lists_of_some_queries_are_those_of_all(self, made):
        backend, inputs = made
        some = [q.id for q in inputs.golden.queries[1:3]]
        knobs = SETTINGS[-1]
        assert backend.ranked(knobs, some) == {q: backend.ranked(knobs)[q] for q in some}

    def test_it_names_itself_and_states_its_profile_and_checkpoints(self, made):
        backend, _ = made
        assert backend.name == self.NAME
        assert backend.checkpoint_every >= 1
        json.dumps(backend.profile)  # kept in run.json and the Parquet metadata
        assert backend.profile["knobs_refused"] == {}


@contextlib.contextmanager
def _opened(corpus, folder, name: str, section: dict, **overrides) -> Iterator[tuple[Backend, Inputs]]:
    backend, inputs = _build(write_config(corpus, name, section, **overrides), folder)
    try:
        yield backend, inputs
    finally:
        backend.close()


@pytest.fixture(scope="class")
def made(request, corpus, tmp_path_factory):
    """The backend of the test's class (its `opened`), built once for the class, and the inputs it evaluates."""
    with request.cls.opened(corpus, tmp_path_factory.mktemp(request.cls.__name__)) as backend_and_inputs:
        yield backend_and_inputs


class TestEmbedded(BackendConformance):
    NAME = "embedded"

    @staticmethod
    def opened(corpus, folder):
        return _opened(corpus, folder, "embedded", EMBEDDED)


class TestDask(BackendConformance):
    NAME = "embedded"

    @staticmethod
    def opened(corpus, folder):
        return _opened(corpus, folder, "dask", EMBEDDED, workers={"backend": "dask", "n": 1})


@contextlib.contextmanager
def _over_http(corpus, folder, mode: str) -> Iterator[tuple[Backend, Inputs]]:
    with pytest.MonkeyPatch.context() as env, serving(write_config(corpus, "served", EMBEDDED)) as server:
        env.setenv("SOAT_PASSWORD", PASSWORD)
        with _opened(corpus, folder, f"http-{mode}", http_backend(server.url, mode=mode)) as opened:
            yield opened


class TestHttpDirect(BackendConformance):
    NAME = "http-direct"

    @staticmethod
    def opened(corpus, folder):
        return _over_http(corpus, folder, "direct")


class TestHttpReplay(BackendConformance):
    NAME = "http-replay"

    @staticmethod
    def opened(corpus, folder):
        return _over_http(corpus, folder, "replay")
