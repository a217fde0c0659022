"""A remote provider's embeddings on a Dask cluster: the local run's vectors and results, the provider's limits
held for the whole run (a loopback fake provider counts), vectors merged into the coordinator's cache."""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import polars as pl
import pytest
import yaml

from rqsweep import job
from tests.test_dask import handbook_job, tables
from tests.test_dask_http import most_started_within
from tests.test_embed_remote import KEY, FakeProvider

RATE, IN_FLIGHT = 15.0, 3


class CountingProvider(FakeProvider):
    """The fake provider, each answer `delay` seconds late; records when each request started and the most in
    flight at once."""

    def __init__(self, delay: float):
        super().__init__()
        self.starts: list[float] = []
        self.in_flight = self.most_in_flight = 0
        lock = threading.Lock()

        def reply(path, body, headers):
            with lock:
                self.starts.append(time.monotonic())
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
            time.sleep(delay)
            with lock:
                self.in_flight -= 1
            return self.default_reply(path, body, headers)

        self.reply = reply


@pytest.fixture()
def provider(monkeypatch):
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    fake = CountingProvider(delay=0.3)  # longer than a lane's interval: its share fills up
    yield fake
    fake.close()


def remote_job(folder: Path, provider: CountingProvider, workers: object) -> Path:
    """The handbook job, embedded by the fake provider in batches of 8, with a vector cache in `folder`."""
    path = handbook_job(folder, workers)
    config = yaml.safe_load(path.read_text())
    config["backend"] |= {"embedder": {"kind": "openai", "base_url": f"{provider.base}/v1", "model": "fake-3",
                                       "api_key_env": "TEST_EMBED_KEY", "batch_size": 8,
                                       "max_in_flight": IN_FLIGHT, "requests_per_second": RATE},
                          "cache_dir": "cache"}
    config["constraints"] = []  # 3-dimensional fake vectors rank poorly: no setting would be feasible
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def cached_vectors(folder: Path) -> dict[bytes, bytes]:
    (path,) = (folder / "cache").glob("*.sqlite3")
    with closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT sha256, vector FROM vectors"))


def test_a_remote_provider_embeds_over_the_cluster_within_its_limits(tmp_path, provider, capfd):
    local = job.run(remote_job(tmp_path / "local", provider, 1), quiet=True).run_dir
    local_batches = sorted(map(tuple, provider.inputs()))
    assert provider.most_in_flight <= IN_FLIGHT  # here too, batches go out concurrently within the limit
    provider.requests.clear()
    provider.starts.clear()
    provider.most_in_flight = 0

    spread = job.run(remote_job(tmp_path / "dask", provider, {"backend": "dask", "n": 2}), quiet=False).run_dir
    out, err = capfd.readouterr()
    # The same batches were sent, from the workers: the corpus in two lanes' chunks, "embeddings: ..." lines.
    assert sorted(map(tuple, provider.inputs())) == local_batches
    assert "texts on the cluster" in err
    assert provider.most_in_flight == IN_FLIGHT  # lanes of 2 and 1 in flight: both workers at once, no more
    starts = provider.starts
    assert (len(starts) - 1) / (max(starts) - min(starts)) <= RATE
    assert most_started_within(starts, 1.0) <= RATE + 2  # one per lane whose interval straddles the window's edges
    assert all(r["headers"]["Authorization"] == f"Bearer {KEY}" for r in provider.requests)
    assert KEY not in out + err
    # The coordinator's cache holds every vector, as the local run's; results are the local run's.
    assert cached_vectors(tmp_path / "dask") == cached_vectors(tmp_path / "local")
    (grid, queries), (want_grid, want_queries) = tables(spread), tables(local)
    assert grid.height > 0 and grid.equals(want_grid) and queries.equals(want_queries)

    provider.requests.clear()
    again = job.run(remote_job(tmp_path / "dask", provider, {"backend": "dask", "n": 2}), quiet=True).run_dir
    assert provider.requests == []  # all from the cache
    assert pl.read_parquet(again / "grid.parquet").drop("run_id").equals(
        pl.read_parquet(spread / "grid.parquet").drop("run_id"))


@pytest.mark.parametrize("limits, where, problem", [
    ({"max_in_flight": 0}, "backend.embedder.max_in_flight", "0: must be >= 1"),
    ({"requests_per_second": 0}, "backend.embedder.requests_per_second", "0: must be > 0"),
])
def test_bad_provider_limits_name_file_key_and_value(tmp_path, limits, where, problem):
    from rqsweep.backends import BACKENDS
    from rqsweep.config import load_config
    from rqsweep.errors import InputError

    path = handbook_job(tmp_path, 1)
    config = yaml.safe_load(path.read_text())
    config["backend"]["embedder"] = {"kind": "ollama", "model": "m"} | limits
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(InputError) as caught:
        load_config(path, BACKENDS)
    assert caught.value.where == where and problem in caught.value.problem
