"""SOAT as it is deployed: the newest public release (v0.28.0), emulated by `rqsweep serve --old-server` in a
subprocess on loopback. Its facts, as measured from outside: pure cosine ranking with `min_score` applied after
the top-`limit` cut, `memory_ids`, no `tags` filter, no `include_*` flags, unknown fields -> 400 with
`error.meta.unknownFields`, memory containers at `/api/v1/memories`, entries at `/api/v1/memory-entries` with
tags as strings, unknown routes -> 404 in plain text, results without signals.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import polars as pl
import pyarrow.parquet as pq
import pytest
import yaml

from rqsweep import cli, job
from rqsweep.backends.http.auth import Secret, Target
from rqsweep.backends.http.client import SoatClient
from rqsweep.backends.http.mapping import SEARCH_PATH, SearchScope
from rqsweep.backends.http.probe import probe
from rqsweep.backends.http.seed import IdMap, Journal, seed_corpus
from rqsweep.backends.http.config import SeedConfig
from rqsweep.corpus import load_corpus
from rqsweep.errors import BackendError
from rqsweep.serve import EMBEDDER_FAULT, TORN_FAULT, Faults
from tests.http_support import EMBEDDED, PASSWORD, ROOT, http_backend, serving, write_config, write_corpus

FLOOR_SWEEP = {"strategy": "grid", "knobs": {"min_similarity": {"values": [0.1, 0.3], "include_off": True}}}
VERSION = "0.28.0"


@pytest.fixture(autouse=True)
def password(monkeypatch):
    monkeypatch.setenv("SOAT_PASSWORD", PASSWORD)


@pytest.fixture()
def old_server(tmp_path):
    """`rqsweep serve --old-server` as its own process; yields its base URL."""
    write_corpus(tmp_path)
    config = write_config(tmp_path, "serve", EMBEDDED)
    env = os.environ | {"RQSWEEP_SERVE_PASSWORD": PASSWORD}
    process = subprocess.Popen([sys.executable, "-m", "rqsweep.cli", "serve", str(config), "--old-server", "--port",
                                "0", "--server-version", VERSION], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline()
        assert line.startswith("listening on "), line
        yield line.split()[-1]
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextlib.contextmanager
def _api(url: str) -> Iterator[httpx.Client]:
    """A client logged in as the admin."""
    with httpx.Client(base_url=url) as client:
        token = client.post("/api/v1/users/login", json={"username": "admin", "password": PASSWORD}).json()["token"]
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def _config(folder: Path, name: str, backend: dict, sweep: dict, search: dict | None = None) -> Path:
    path = write_config(folder, name, backend, sweep)
    if search:
        data = yaml.safe_load(path.read_text())
        data["search"] |= search
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_emulation_answers_as_v0_28_0_does(old_server):
    with _api(old_server) as api:
        project = api.post("/api/v1/projects", json={"name": "facts"}).json()["id"]
        missing = api.get("/api/v1/memory-stores", params={"project_id": project})
        assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/plain")
        container = api.post("/api/v1/memories", json={"project_id": project, "name": "team"}).json()["id"]
        assert api.get("/api/v1/memories", params={"project_id": project}).json()["data"] == [
            {"id": container, "name": "team"}]
        assert api.post("/api/v1/memory-entries", json={"memory_id": container, "content": "pager is 555",
                                                        "tags": {"team": "ops"}}).status_code == 400
        entry = api.post("/api/v1/memory-entries", json={"memory_id": container, "content": "pager is 555",
                                                         "tags": ["team:ops"]})
        assert entry.status_code == 201 and entry.json()["action"] == "created"
        texts = ["the pager rota lists who is on call", "pager duty rota for the weekend", "rota of the kitchen",
                 "how to silence a pager at night", "the holiday rota and its pager handover", "budget review notes"]
        for i, text in enumerate(texts):
            api.post("/api/v1/documents", json={"project_id": project, "content": text, "path": f"/ops/{i}.md"})
        for field in ({"tags": {"team": "ops"}}, {"include_memories": False}, {"rrf_k": 60}):
            bad = api.post(SEARCH_PATH, json={"project_id": project, "query": "pager"} | field)
            assert bad.status_code == 400 and bad.json()["error"]["meta"] == {"unknownFields": list(field)}

        def search(**extra) -> list[dict]:
            return api.post(SEARCH_PATH, json={"project_id": project, "query": "pager rota", "limit": 4,
                                               "memory_ids": [container]} | extra).json()["results"]

        top = search()
        assert len(top) == 4 and all("signals" not in r for r in top)
        similarities = [r["similarity_score"] for r in top]
        assert similarities == sorted(similarities, reverse=True) and similarities[1] > similarities[2]
        assert any(r["source_type"] == "memory" and r["entry_id"] == entry.json()["id"] and r["memory_id"] == container
                   for r in search(limit=10))
        floor = (top[1]["similarity_score"] + top[2]["similarity_score"]) / 2
        assert search(min_score=floor) == top[:2]  # the floor removes from the top 4, the order stays cosine
        without_filter = api.post(SEARCH_PATH, json={"project_id": project, "query": "pager rota"}).json()["results"]
        assert {r["source_type"] for r in without_filter} == {"document"}  # memories only when named
    assert httpx.get(f"{old_server}/health").json()["version"] == VERSION


def test_the_emulation_refuses_unknown_write_fields_as_v0_28_0_does(old_server):
    """v0.28.0 checks every body against its route's request schema; the near-duplicate threshold is an entry's."""
    with _api(old_server) as api:
        project = api.post("/api/v1/projects", json={"name": "strict"}).json()["id"]
        refused = api.post("/api/v1/memories", json={"project_id": project, "name": "team", "duplicate_threshold": 1,
                                                     "supersede_threshold": 0.9})
        assert refused.status_code == 400 and refused.json() == {"error": {
            "code": "VALIDATION_FAILED", "message": "Unknown field(s): duplicate_threshold, supersede_threshold",
            "meta": {"unknownFields": ["duplicate_threshold", "supersede_threshold"]}}}
        assert api.get("/api/v1/memories", params={"project_id": project}).json()["data"] == []
        for path, body in (("/api/v1/projects", {"name": "p", "colour": "red"}),
                           ("/api/v1/documents", {"project_id": project, "content": "text", "colour": "red"})):
            answer = api.post(path, json=body)
            assert answer.status_code == 400 and answer.json()["error"]["meta"] == {"unknownFields": ["colour"]}
        container = api.post("/api/v1/memories", json={"project_id": project, "name": "team"}).json()["id"]
        old, new = "the pager number is 555-0100", "the pager number is now 555-0199"
        assert api.post("/api/v1/memory-entries", json={"memory_id": container, "content": old}).status_code == 201
        twin = {"memory_id": container, "content": new}
        skipped = api.post("/api/v1/memory-entries", json=twin | {"duplicate_threshold": 0.5})
        assert skipped.status_code == 200 and skipped.json()["action"] == "skipped"
        created = api.post("/api/v1/memory-entries", json=twin | {"duplicate_threshold": 1})
        assert created.status_code == 201 and created.json()["action"] == "created"


@pytest.mark.parametrize("threshold, skipped", [(None, []), (0.85, ["mem-pager-number-current",
                                                                   "mem-home-office-stipend-current"])])
def test_the_handbook_seeds_its_memories_into_v0_28_0_at_the_configured_threshold(tmp_path, capsys, threshold,
                                                                                  skipped):
    """v0.28.0 takes the threshold on each entry and refuses it on the container: seeding sends it there."""
    for name in ("corpus.yaml", "golden.yaml"):
        (tmp_path / name).write_text((ROOT / "configs" / "handbook" / name).read_text())
    with serving(write_config(tmp_path, "serve", EMBEDDED), old_server=True) as server:
        seed = {} if threshold is None else {"duplicate_threshold": threshold}
        backend = http_backend(server.url, seed=seed or True)
        config = _config(tmp_path, "handbook", backend, {"strategy": "grid", "knobs": {"min_similarity": {
            "values": [0.1]}}})
        assert cli.main([str(config), "--output-dir", str(tmp_path / "out")]) == 0
        stored = list(server.store.memories.values())
    err = capsys.readouterr().err
    assert f"seed: 37 documents, 4 memory stores, 32 memories ({len(skipped)} not created)" in err
    assert len(stored) == 32 - len(skipped)
    seeded = json.loads((_run_dir(tmp_path / "out", "handbook") / "seed.json").read_text())
    assert [a["key"] for a in seeded["actions"]] == skipped and {a["action"] for a in seeded["actions"]} <= {"skipped"}


def _run_dir(out: Path, name: str) -> Path:
    (run_dir,) = (out / name).iterdir()
    return run_dir


def test_seeding_with_memories_and_a_floor_sweep_record_the_server_profile(tmp_path, old_server, capsys):
    config = _config(tmp_path, "old", http_backend(old_server), FLOOR_SWEEP)
    assert cli.main([str(config), "--output-dir", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "seed: 8 documents, 3 memory stores, 12 memories (0 not created)" in err
    assert "0 failed for good" in err
    run_dir = _run_dir(tmp_path / "out", "old")
    grid = pl.read_parquet(run_dir / "grid.parquet")
    assert sorted(grid["setting_id"].unique()) == ["k60_m0.1_h0.0", "k60_m0.3_h0.0", "k60_moff_h0.0"]
    assert grid["errors"].sum() == 0 and grid["tie_sensitive"].null_count() == grid.height
    run = json.loads((run_dir / "run.json").read_text())
    assert run["best"]["slices"]["overall"]["tie_sensitive"] is None
    profile = run["server_profile"]
    assert profile == {
        "backend": "http", "base_url": old_server, "version": VERSION, "ranking": "pure cosine",
        "knobs_accepted": ["min_similarity"],
        "knobs_refused": {k: profile["knobs_refused"][k] for k in ("recency_half_life_days", "rrf_k")},
        "field_names": {"min_similarity": "min_score", "memory_store_ids": "memory_ids", "memory_id": "entry_id",
                        "/api/v1/memory-stores": "/api/v1/memories", "/api/v1/memories": "/api/v1/memory-entries",
                        "memory_store_id": "memory_id"},
        "include_flags": False, "signals": False, "mode": "direct", "embedder": profile["embedder"]}
    assert "VALIDATION_FAILED" in profile["knobs_refused"]["rrf_k"]
    assert re.fullmatch(r"1024 dims, [0-9a-f]{12}", profile["embedder"])  # the serve's feature hash
    for table in ("grid", "queries"):
        metadata = pq.read_schema(run_dir / f"{table}.parquet").metadata
        assert json.loads(metadata[b"rqsweep.server_profile"]) == profile
    sentence = (f"SOAT {VERSION} at {old_server}: pure cosine ranking; recency_half_life_days and rrf_k refused; "
                "older names (min_similarity as min_score, ")
    for report in ("report.md", "report.html"):
        text = (run_dir / report).read_text()
        assert sentence in text and f"results without signals; embedder {profile['embedder']}; direct mode" in text
    report = (run_dir / "report.md").read_text().split("\n\n")
    assert report[1].startswith("Verdict: ") and f"\n\nRankings from {sentence}" in "\n\n".join(report)


def test_a_documents_only_sweep_into_a_given_empty_project(tmp_path, old_server):
    with _api(old_server) as api:
        project = api.post("/api/v1/projects", json={"name": "given"}).json()["id"]
    backend = http_backend(old_server, project_id=project)
    config = _config(tmp_path, "docs", backend, FLOOR_SWEEP, {"include_memories": False})
    outcome = job.run(config, quiet=True, output_dir=tmp_path / "out")
    queries = pl.read_parquet(outcome.run_dir / "queries.parquet").filter(pl.col("setting_id") == "k60_moff_h0.0")
    golden = {q["id"]: q["expected"] for q in yaml.safe_load((tmp_path / "golden.yaml").read_text())}
    memory_only = [q for q, e in golden.items()
                   if all(k.startswith("mem-") for k in ([e] if isinstance(e, str) else e))]
    assert memory_only and queries["error"].null_count() == queries.height
    found = dict(zip(queries["query_id"], queries["rank"]))
    assert all(found[q] == 0 for q in memory_only)  # no memory was searched
    assert any(rank > 0 for q, rank in found.items() if q not in memory_only)
    with _api(old_server) as api:  # seeded into the given project, not a new one
        assert [p["id"] for p in api.get("/api/v1/projects").json()["data"]] == [project]


def test_a_baseline_only_run_may_name_a_refused_knob_at_its_default(tmp_path, old_server):
    config = _config(tmp_path, "k60", http_backend(old_server), {"strategy": "grid",
                                                                "knobs": {"rrf_k": {"values": [60]}}})
    outcome = job.run(config, quiet=True, output_dir=tmp_path / "out")
    assert outcome.grid["setting_id"].unique().to_list() == ["k60_moff_h0.0"]
    moved = _config(tmp_path, "k5", http_backend(old_server), {"strategy": "grid",
                                                              "knobs": {"rrf_k": {"values": [5, 60]}}})
    with pytest.raises(Exception, match="does not accept `rrf_k`.*this sweep varies rrf_k"):
        job.run(moved, quiet=True, output_dir=tmp_path / "out")
    assert not (tmp_path / "out" / "k5").exists()  # the refused run leaves no folder, not even its name's


def test_a_killed_seed_resumes_without_a_second_project(tmp_path, old_server):
    write_corpus(tmp_path, n_documents=8, n_memories=12)
    # Paced, so that the kill lands mid-seed: 25 writes at 15 per second.
    config = _config(tmp_path, "killed", http_backend(old_server, requests_per_second=15), FLOOR_SWEEP)
    out = tmp_path / "out"
    job_process = subprocess.Popen([sys.executable, "-m", "rqsweep.cli", str(config), "--output-dir", str(out),
                                    "--quiet"], cwd=ROOT, env=os.environ.copy(), stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    journal = None
    while time.monotonic() < deadline:
        journal = next(out.glob("killed/*/seed.journal"), None)
        if journal is not None and journal.read_text().count("\n") >= 6:  # project + some documents
            break
        time.sleep(0.01)
    job_process.send_signal(signal.SIGKILL)
    job_process.wait(timeout=10)
    assert journal is not None
    written = journal.read_text().count("\n")
    assert 6 <= written < 1 + 1 + 8 + 3 + 12, "the kill must land mid-seed"
    run_dir = journal.parent
    assert not (run_dir / "seed.json").exists()

    assert cli.main([str(config), "--resume", str(run_dir), "--quiet"]) == 0
    with _api(old_server) as api:
        projects = api.get("/api/v1/projects").json()["data"]
        assert len(projects) == 1
        project = projects[0]["id"]
        assert len(api.get("/api/v1/documents", params={"project_id": project}).json()["data"]) == 8
        assert len(api.get("/api/v1/memories", params={"project_id": project}).json()["data"]) == 3
    seed = json.loads((run_dir / "seed.json").read_text())
    assert seed["project_id"] == project and len(seed["memories"]) == 12 and seed["actions"] == []
    grid = pl.read_parquet(run_dir / "grid.parquet")
    assert grid["errors"].sum() == 0


def _seed_after_kill(tmp_path: Path, url: str, name: str, unrecorded: int) -> tuple[IdMap, str]:
    """Seed as a killed run resumes one: the first `unrecorded` + 1 writes reached the server (through the
    same code), the last of them without its journal line."""
    corpus = load_corpus(tmp_path / "corpus.yaml")
    client = SoatClient(Target(url, None, "admin", Secret(PASSWORD)), retries=0)
    client.connect()
    dialect = probe(client, "pager", SearchScope()).dialect
    journal = Journal(tmp_path / f"{name}.journal")

    class Killed(Exception):
        pass

    def kill_after(entry: dict, record=journal.record) -> None:
        if len(journal.entries) == unrecorded:
            raise Killed  # the write was made, its line is never written
        record(entry)

    journal.record = kill_after
    with pytest.raises(Killed):
        seed_corpus(client, corpus, SeedConfig(project_name=name), None, name, lambda _: None, dialect, journal)
    logged: list[str] = []
    ids = seed_corpus(client, corpus, SeedConfig(project_name=name), None, name, logged.append, dialect,
                      Journal(journal.path))
    client.close()
    assert f"seed: continuing from {journal.path} ({unrecorded} writes recorded)" in logged
    return ids, ids.project_id


@pytest.mark.parametrize("unrecorded", [4, 1 + 1 + 8 + 3 + 2], ids=["document", "memory"])
def test_a_write_made_but_not_recorded_before_the_kill_is_adopted_not_repeated(tmp_path, old_server, unrecorded):
    """The kill can land between the server's answer and the journal line: resuming must not write it twice."""
    ids, project = _seed_after_kill(tmp_path, old_server, "p", unrecorded)
    assert len(ids.documents) == 8 and len(ids.memories) == 12 and ids.actions == []
    with _api(old_server) as api:
        assert len(api.get("/api/v1/projects").json()["data"]) == 1
        documents = api.get("/api/v1/documents", params={"project_id": project}).json()["data"]
        assert sorted(d["id"] for d in documents) == sorted(ids.documents.values())
        memories = api.post(SEARCH_PATH, json={"project_id": project, "query": "pager", "limit": 100,
                                               "memory_ids": list(ids.memory_stores.values())}).json()["results"]
        entries = [r["entry_id"] for r in memories if r["source_type"] == "memory"]
        assert sorted(entries) == sorted(ids.memories.values())  # each memory once


def test_a_seed_through_an_embedding_outage_stops_naming_the_items_stored_without_an_embedding(tmp_path):
    """v0.28.0 stores what it cannot embed without an embedding and answers 201: the seed must not end there."""
    write_corpus(tmp_path)
    corpus = load_corpus(tmp_path / "corpus.yaml")
    with serving(write_config(tmp_path, "serve", EMBEDDED), old_server=True) as server:
        client = SoatClient(Target(server.url, None, "admin", Secret(PASSWORD)), retries=0)
        client.connect()
        journal = Journal(None)
        # Recorded: start, project, 8 documents, 3 stores, memories. The provider is down for the write after
        # the 4th line (the 3rd document) and after the 14th (the 2nd memory).
        outage, healthy = Faults(1.0, (EMBEDDER_FAULT,), all_routes=True), server.faults

        def record(entry: dict, record=journal.record) -> None:
            record(entry)
            server.faults = outage if len(journal.entries) in (4, 14) else healthy

        journal.record = record
        dialect = probe(client, "pager", SearchScope()).dialect
        with pytest.raises(BackendError) as stopped:
            seed_corpus(client, corpus, SeedConfig(), None, "outage", lambda _: None, dialect, journal)
        document, memory = corpus.documents[2].key, corpus.memories[1].key
        (document_id,) = [e["id"] for e in journal.entries if e.get("key") == document]
        found = client.request("POST", SEARCH_PATH, {"query": "pager", "limit": 100,
                                                     "document_ids": [document_id]}).body["results"]
        assert [r["similarity_score"] for r in found] == [0.0] * 3  # as v0.28.0 returns them: found, scored 0
        client.close()
    assert (f"2 seeded items cannot be found by the server's vector search: document {document!r} (0 of 3 chunks "
            f"found), memory {memory!r} (not found); the server stored them without an embedding") in str(stopped.value)


def test_a_resumed_seed_writes_again_the_document_a_dying_database_left_without_chunks(tmp_path):
    """v0.28.0 writes a document's row, then its chunks, with no transaction: a database that dies in between
    leaves a `ready` document with no chunks and answers 500. Resuming must not adopt it."""
    write_corpus(tmp_path)
    corpus = load_corpus(tmp_path / "corpus.yaml")
    with serving(write_config(tmp_path, "serve", EMBEDDED), old_server=True) as server:
        client = SoatClient(Target(server.url, None, "admin", Secret(PASSWORD)), retries=0)
        client.connect()
        dialect = probe(client, "pager", SearchScope()).dialect
        journal = Journal(tmp_path / "torn.journal")
        healthy = server.faults

        def record(entry: dict, record=journal.record) -> None:  # the write after the 4th line: the 3rd document
            record(entry)
            server.faults = Faults(1.0, (TORN_FAULT,), all_routes=True) if len(journal.entries) == 4 else healthy

        journal.record = record
        with pytest.raises(BackendError, match="seeding stopped at document .* answered HTTP 500 INTERNAL_ERROR"):
            seed_corpus(client, corpus, SeedConfig(), None, "torn", lambda _: None, dialect, journal)
        server.faults = healthy
        (torn,) = [d.id for d in server.store.documents.values() if not d.chunks]
        logged: list[str] = []
        ids = seed_corpus(client, corpus, SeedConfig(), None, "torn", logged.append, dialect, Journal(journal.path))
        client.close()
        kept = server.store.documents
    key = corpus.documents[2].key
    assert torn not in kept and ids.documents[key] in kept and sorted(ids.documents.values()) == sorted(kept)
    assert all(d.chunks for d in kept.values())
    assert (f"seed: document {key!r} (id {torn}) was left incomplete by the stopped seed (0 of 3 chunks found): "
            "deleted, and written again") in logged


def test_the_gate_refuses_an_embedded_run_against_an_old_server_run(tmp_path, old_server, capsys):
    old = _config(tmp_path, "old", http_backend(old_server), FLOOR_SWEEP)
    embedded = _config(tmp_path, "embedded", EMBEDDED, FLOOR_SWEEP)
    old_dir = job.run(old, quiet=True, output_dir=tmp_path / "out").run_dir
    embedded_dir = job.run(embedded, quiet=True, output_dir=tmp_path / "out").run_dir
    capsys.readouterr()
    assert cli.main(["gate", str(embedded_dir), str(old_dir)]) == 6  # not comparable
    err = capsys.readouterr().err
    assert f"was measured on SOAT {VERSION} at {old_server}: pure cosine ranking" in err
    assert re.search(r"on Embedded engine \(SOAT-exact\), embedder feature-hash/\d+: hybrid ranking; every knob accepted",
                     err)
    assert "(backend http -> embedded; ranking pure cosine -> hybrid;" in err
    assert "pass --allow-different" in err
    code = cli.main(["gate", str(embedded_dir), str(old_dir), "--allow-different", "--tolerance", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "(compared as asked by --allow-different)" in out and "Gate passed" in out
