"""Older SOAT releases: the probe finds their names and knobs; unsupported knobs stop the run clearly."""

from __future__ import annotations

import json

import polars as pl
import pytest
import yaml

from rqsweep import cli, job
from rqsweep.backends import BACKENDS
from rqsweep.backends.embedded import build_embedder
from rqsweep.backends.http.mapping import SEARCH_PATH, Dialect, ResponseShapeError, parse_hits
from rqsweep.config import load_config
from rqsweep.corpus import Chunking, chunk_document, load_corpus
from rqsweep.engine.cosine import cosine_distance
from rqsweep.knobs import Knobs
from tests.http_support import EMBEDDED, PASSWORD, serving, write_config, write_corpus

FLOOR_SWEEP = {"strategy": "grid", "knobs": {"min_similarity": {"values": [None, 0.2, 0.4]}}}
K_SWEEP = {"strategy": "grid", "knobs": {"rrf_k": {"values": [5, 60]}}}


@pytest.fixture(autouse=True)
def password(monkeypatch):
    monkeypatch.setenv("SOAT_PASSWORD", PASSWORD)


def _preloaded(tmp_path, server) -> dict:
    ids = server.store.preload(load_corpus(tmp_path / "corpus.yaml"), Chunking(), "old")
    (tmp_path / "ids.json").write_text(json.dumps(ids))
    return {"kind": "http", "base_url": server.url, "username": "admin", "ids": "ids.json",
            "project_id": ids["project_id"], "backoff": 0.002}


def _pure_cosine_ranks(folder, floors) -> dict[tuple[str, str], int]:
    """(setting id, query id) -> rank under v0.28.0's ranking, computed apart from the server: every chunk and
    memory by cosine, documents first among equals, top 10, then the floor (which never refills)."""
    corpus, golden = load_corpus(folder / "corpus.yaml"), yaml.safe_load((folder / "golden.yaml").read_text())
    embedder = build_embedder(load_config(folder / "embedded.yaml", BACKENDS).backend)  # the server's embedder
    rows = [(d.key, c.content) for d in corpus.documents for c in chunk_document(d, Chunking())]
    rows += [(m.key, m.content) for m in corpus.memories]
    vectors = embedder.embed([text for _, text in rows])
    ranks = {}
    for q in golden:
        expected = {q["expected"]} if isinstance(q["expected"], str) else set(q["expected"])
        similarity = 1.0 - cosine_distance(vectors, embedder.embed([q["query"]])[0])
        top = sorted(range(len(rows)), key=lambda i: -similarity[i])[:10]
        for floor in floors:
            kept = [rows[i][0] for i in top if floor is None or similarity[i] >= floor]
            rank = next((p for p, key in enumerate(kept, 1) if key in expected), 0)
            ranks[(Knobs(min_similarity=floor).id, q["id"])] = rank
    return ranks


def test_an_old_server_is_swept_with_its_names_and_ranks_by_cosine_alone(tmp_path, capsys):
    write_corpus(tmp_path)
    with serving(write_config(tmp_path, "embedded", EMBEDDED, FLOOR_SWEEP), old_server=True) as server:
        old = write_config(tmp_path, "old", _preloaded(tmp_path, server), FLOOR_SWEEP)
        outcome = job.run(old, quiet=False, output_dir=tmp_path / "out")
        searches = server.searches
    log = capsys.readouterr().err
    assert "knobs accepted: min_similarity; older field names: min_similarity as min_score, memory_store_ids as " \
           "memory_ids, memory_id as entry_id; no replay (results carry no signals)" in log
    assert "0 failed for good" in log  # the probe's deliberate 400 is an answer, not a failure
    measured = pl.read_parquet(outcome.run_dir / "queries.parquet")
    assert measured["error"].null_count() == measured.height
    want = _pure_cosine_ranks(tmp_path, FLOOR_SWEEP["knobs"]["min_similarity"]["values"])
    assert {(r["setting_id"], r["query_id"]): r["rank"] for r in measured.iter_rows(named=True)} == want
    moved = {q for (sid, q), rank in want.items() if rank != want[(Knobs().id, q)]}
    assert moved  # the floors change ranks: the comparison is not vacuous
    # Two probes (full, then adapted), one search per setting and query, and the ranked lists of the baseline and
    # the chosen setting for hits.parquet.
    assert searches == 2 + 3 * 20 + 20 * len({outcome.baseline, outcome.best or outcome.baseline})


def test_sweeping_a_knob_an_old_server_refuses_stops_before_any_search(tmp_path, capsys):
    write_corpus(tmp_path)
    with serving(write_config(tmp_path, "embedded", EMBEDDED), old_server=True) as server:
        config = write_config(tmp_path, "old-k", _preloaded(tmp_path, server), K_SWEEP)
        assert cli.main([str(config), "--output-dir", str(tmp_path / "out"), "--quiet"]) == 3
        assert server.searches <= 3
    err = capsys.readouterr().err
    assert "does not accept `rrf_k` (it answered: HTTP 400 VALIDATION_FAILED: Unknown field(s): " in err
    assert "this sweep varies rrf_k" in err


def test_a_response_not_of_soats_shape_names_what_is_missing():
    with pytest.raises(ResponseShapeError, match=r"got an object with keys \['data'\]"):
        parse_hits({"data": []}, Dialect())
    with pytest.raises(ResponseShapeError, match=r"results\[1\] is a memory without `memory_id`"):
        parse_hits({"results": [{"source_type": "document", "document_id": "doc_1"},
                                {"source_type": "memory", "entry_id": "mem_1"}]}, Dialect())
    with pytest.raises(ResponseShapeError, match=r"results\[0\]\.signals\.vector = 0"):
        parse_hits({"results": [{"source_type": "document", "document_id": "d", "signals": {"vector": 0}}]},
                   Dialect())


def test_serve_mimics_soat_validation_and_silent_knob_fallback(tmp_path):
    import httpx

    write_corpus(tmp_path)
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        ids = server.store.preload(load_corpus(tmp_path / "corpus.yaml"), Chunking(), "p")
        with httpx.Client(base_url=server.url) as http:
            token = http.post("/api/v1/users/login", json={"username": "admin", "password": PASSWORD}).json()["token"]
            auth = {"Authorization": f"Bearer {token}"}

            def search(**body):
                return http.post(SEARCH_PATH, json={"project_id": ids["project_id"]} | body, headers=auth)

            assert http.post(SEARCH_PATH, json={"query": "x"}).json()["error"]["code"] == "UNAUTHORIZED"
            bad = search(query="pager", colour="red")
            assert bad.status_code == 400 and bad.json()["error"]["meta"] == {"unknownFields": ["colour"]}
            assert search(query="pager", tags=["x"]).status_code == 400
            assert search(include_documents=False, include_memories=False, query="x").status_code == 400
            assert search().status_code == 400  # nothing to search by
            default = search(query="pager rotation").json()["results"]
            for invalid in ({"rrf_k": 0}, {"rrf_k": 2.5}, {"min_similarity": 1.5}, {"recency_half_life_days": -1}):
                assert search(query="pager rotation", **invalid).json()["results"] == default
            assert {r["source_type"] for r in default} == {"document", "memory"}
            assert all("signals" in r and "similarity_score" in r for r in default)
