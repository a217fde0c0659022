"""The embedding phase, planned and seen: the estimate's arithmetic, the caches it counts (read, never written),
`--dry-run` and a run saying it, and a progress that shows the rate and the time left as a model embeds."""

from __future__ import annotations

import io

import numpy as np
import pytest

from rqsweep import job, progress
from rqsweep.backends.embed_estimate import EmbeddingEstimate, embedding_processes, estimate
from rqsweep.backends.embedded import EMBEDDERS, build_embedder
from rqsweep.backends.embedded_config import EmbeddedConfig, EmbedderConfig
from rqsweep.config import Chunking, WorkersConfig
from rqsweep.dry_run import dry_run
from rqsweep.engine import index as index_module
from rqsweep.engine.index import Index
from rqsweep.inputs import load_inputs
from rqsweep.progress import Progress
from tests.minijob import write_job

GRID = {"strategy": "grid", "knobs": {"rrf_k": {"values": [1, 60]}}}
HASH = {"kind": "feature-hash", "dimensions": 64}


def test_the_estimate_spreads_the_rows_over_the_processes_and_embeds_the_queries_in_one():
    made = EmbeddingEstimate(rows=100, cached=20, queries=10, cpu_per_row=0.5, cpu_per_query=0.1, sample=8, processes=2)
    assert made.to_embed == 80
    assert made.cpu_seconds == pytest.approx(80 * 0.5 + 10 * 0.1)
    assert made.wall_seconds == pytest.approx(80 * 0.5 / 2 + 10 * 0.1)
    assert made.line() == ("embedding: 80 of 100 chunks and memories to embed (20 in the caches) and 10 queries; "
                           "500.0 ms of CPU per text (measured on 8), 100.0 ms per query: about 41.0 s of CPU, "
                           "21.0 s of wall time on 2 processes")
    # A day of CPU reads in hours; everything cached costs nothing.
    assert "about 27.8 h of CPU" in EmbeddingEstimate(100_000, 0, 0, 1.0, 0.0, 8).line()
    assert EmbeddingEstimate(5, 5, 0, 1.0, 1.0, 0).cpu_seconds == 0


def test_a_provider_s_phase_is_counted_not_timed():
    made = EmbeddingEstimate(rows=10, cached=0, queries=3, cpu_per_row=None, cpu_per_query=None, sample=0)
    assert made.cpu_seconds is None and made.wall_seconds is None
    assert made.line().endswith("3 queries; not timed here: a provider embeds them")


@pytest.mark.parametrize("workers, processes", [(WorkersConfig(n=1), 1), (WorkersConfig(n=4), 4),
                                                (WorkersConfig("dask", 4), 1), (WorkersConfig("dask", 4, corpus_shards=2), 2),
                                                (WorkersConfig("dask", 2, corpus_shards=8), 2)])
def test_the_rows_embed_on_the_loky_workers_or_the_corpus_shards_workers(workers, processes):
    assert embedding_processes(workers) == processes


def test_the_caches_are_counted_and_left_as_they_are(tmp_path):
    config_path = write_job(tmp_path, GRID, constraints=[],
                            backend={"kind": "embedded", "embedder": HASH, "cache_dir": "cache"})
    inputs = load_inputs(config_path, lambda _: None)
    config, queries = inputs.config.backend, [q.query for q in inputs.golden.queries]
    fresh = estimate(config, inputs.corpus, queries, EMBEDDERS["feature-hash"](config.embedder, lambda _: None))
    assert fresh.cached == 0 and fresh.to_embed == fresh.rows > 0 and fresh.queries == len(queries)
    assert not (tmp_path / "cache").exists()  # looked for, never made
    job.run(config_path, quiet=True)
    files = sorted(p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*"))
    again = estimate(config, inputs.corpus, queries, EMBEDDERS["feature-hash"](config.embedder, lambda _: None))
    assert (again.rows, again.cached, again.to_embed, again.queries) == (fresh.rows, fresh.rows, 0, 0)
    assert sorted(p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*")) == files


def test_dry_run_prints_the_estimate_of_a_model_and_embeds_into_no_cache(tmp_path):
    config = write_job(tmp_path, GRID, constraints=[],
                       backend={"kind": "embedded", "embedder": {"kind": "onnx"}, "cache_dir": "cache"})
    said = dry_run(config)
    line = next(line for line in said.splitlines() if line.startswith("embedding: "))
    assert " of CPU per text (measured on " in line and " of wall time on 1 process" in line
    assert "(0 in the caches)" in line
    assert not (tmp_path / "cache").exists()


def test_a_run_logs_the_estimate_before_it_embeds(tmp_path, capsys):
    config = write_job(tmp_path, GRID, constraints=[], backend={"kind": "embedded", "embedder": {"kind": "onnx"}})
    job.run(config, quiet=False)
    err = capsys.readouterr().err
    assert err.index("embedding: ") < err.index("mini vectors: ")


def test_the_progress_shows_the_rate_and_the_time_left(monkeypatch):
    clock = iter([100.0, 110.0, 120.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    stream = io.StringIO()
    bar = Progress(100, "mini vectors", stream=stream, unit="rows")
    bar(50)
    bar(50)
    assert stream.getvalue().splitlines() == ["mini vectors: 50/100 rows, 10.0s, 5.0 rows/s, 10s left",
                                              "mini vectors: 100/100 rows, 20.0s, 5.0 rows/s"]


class Stepped:
    """A model in this process that embeds 3 texts between reports of progress."""

    identity, dimensions, texts_per_step = "stepped/4", 4, 3

    def __init__(self):
        self.queries, self.calls = self, []

    def embed(self, texts):
        self.calls.append(len(texts))
        return np.ones((len(texts), 4), np.float32)


@pytest.mark.parametrize("later", [True, False])
def test_a_model_s_progress_moves_every_few_texts_within_a_portion(later, monkeypatch):
    from tests.test_engine import NOW, corpus
    from tests.test_index_cache import Told

    monkeypatch.setattr(index_module, "_EMBED_PORTION", 8)
    told, model = Told(), Stepped()
    index = Index.build(corpus(), model, Chunking("size", 1000, 200), now=NOW, vectors_later=later, progress=told)
    index.embed_vectors()
    (total, portions), = told.phases
    assert total == sum(portions) == sum(len(s.ids) for s in index.stores.values())
    assert max(model.calls) <= 3 and max(portions) <= 3


def test_the_vector_cache_steps_as_its_model_does(tmp_path):
    onnx = EmbedderConfig(kind="onnx", model="all-MiniLM-L6-v2")
    assert build_embedder(EmbeddedConfig(cache_dir=tmp_path, embedders=(("m", onnx),))).texts_per_step == 32


def test_a_model_embeds_over_the_loky_workers_with_the_vectors_of_one_process(tmp_path):
    from rqsweep.engine.embed import OnnxEmbedder
    from rqsweep.engine.embed.onnx import installed_onnx_models
    from rqsweep.engine.embed.processes import ProcessEmbedder
    from tests.test_embed_local import TEXTS

    model = OnnxEmbedder(installed_onnx_models()["all-MiniLM-L6-v2"])
    spread = ProcessEmbedder(model, 2)
    assert np.array_equal(spread.embed(TEXTS), model.embed(TEXTS))
    assert spread.queries is spread and spread.texts_per_step == 64 and spread.identity == model.identity
    onnx = EmbedderConfig(kind="onnx", model="all-MiniLM-L6-v2")
    config = EmbeddedConfig(cache_dir=tmp_path, embedders=(("m", onnx),))
    built = build_embedder(config, processes=2)
    assert isinstance(built.inner, ProcessEmbedder) and built.key.startswith(model.identity)
    assert not isinstance(build_embedder(config, processes=1).inner, ProcessEmbedder)


def test_a_run_on_two_loky_workers_ranks_as_one_process_does(tmp_path):
    backend = {"kind": "embedded", "embedder": {"kind": "onnx"}}
    one = job.run(write_job(tmp_path / "one", GRID, constraints=[], backend=backend), quiet=True)
    two = job.run(write_job(tmp_path / "two", GRID, constraints=[], backend=backend, workers=2), quiet=True)
    assert one.grid.drop("run_id", "config_sha256").equals(two.grid.drop("run_id", "config_sha256"))


def test_dry_run_spreads_only_a_model_over_the_loky_workers(tmp_path):
    backend = {"kind": "embedded", "embedder": [HASH | {"label": "hash"}, {"kind": "onnx", "label": "minilm"}]}
    said = dry_run(write_job(tmp_path, GRID, constraints=[], backend=backend, workers=2)).splitlines()
    at = next(i for i, line in enumerate(said) if line.startswith("embedders: "))
    assert said[at + 1].startswith("hash: embedding: ") and said[at + 1].endswith(" on 1 process")
    assert said[at + 2].startswith("minilm: embedding: ") and said[at + 2].endswith(" on 2 processes")
