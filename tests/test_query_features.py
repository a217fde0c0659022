"""Query features: the same values from the text, from the embedded engine's ranked lists, from a SOAT answer's fields
and from docs/routing-rules.md's TypeScript."""

from __future__ import annotations

import json

import polars as pl

from rqsweep.backends.base import RankedHit
from rqsweep.decide.query_features import (FEATURES, SEARCH_FEATURES, TEXT_FEATURES, answer_hits, features_table,
                                           search_features, text_features)
from tests.test_rules import run_snippet

TEXTS = ["ERR_VPN_5002", "what's the latest on-call pager number?", "who is our data protection officer",
         'the "standing desk" policy', "QUEUE_DEPTH_CRITICAL fired, what do i check", "config.yaml in it/vpn",
         "PostgreSQL 18 still current", "  spaces   around  ", "", "«Zitat» über café naïve NOW?"]


def test_the_text_features_count_what_they_say():
    f = text_features("ERR_VPN_5002")
    assert (f["words"], f["identifiers"], f["digits"], f["question"]) == (1, 1, 1, 0)
    f = text_features("what's the latest on-call pager number?")
    assert (f["words"], f["identifiers"], f["time_words"], f["question"]) == (6, 0, 1, 1)
    f = text_features('the "standing desk" policy, SEV-1 and PostgreSQL')
    assert (f["quotes"], f["identifiers"], f["digits"]) == (2, 2, 1)  # SEV-1 and PostgreSQL; "policy," is a word
    assert text_features("") == dict.fromkeys(TEXT_FEATURES, 0.0)


def _hit(position, source_type, vector, lexical, cosine=0.8, key=None):
    return RankedHit(position, key or f"k{position}", source_type, None, 1.0 / position, vector, lexical, cosine, 1.0)


def test_the_search_features_read_the_ranked_list_and_a_failed_search_has_none():
    hits = [_hit(1, "memory", 1, 1, 0.91), _hit(2, "document", 2, None), _hit(3, "memory", None, 2),
            *(_hit(p, "document", p, None) for p in range(4, 11)), _hit(11, "memory", 11, None)]
    f = search_features(hits)
    assert f == {"memories_top10": 2.0, "top1_cosine": 0.91, "channels_agree": 1.0, "lexical_hits": 2.0}
    # The vector channel's first is not the lexical channel's: they disagree.
    assert search_features([_hit(1, "document", 1, 2), _hit(2, "document", 2, 1)])["channels_agree"] == 0.0
    # Without signals (an older server), the channels' features are missing, not zero.
    bare = search_features([_hit(1, "document", None, None, None)])
    assert bare == {"memories_top10": 0.0, "top1_cosine": None, "channels_agree": None, "lexical_hits": None}
    assert search_features("HTTP 503") == dict.fromkeys(SEARCH_FEATURES)


def _answer(hits: list[RankedHit]) -> list[dict]:
    """The ranked hits as a SOAT search answer's `results` carry them."""
    return [{"source_type": h.source_type, "similarity_score": h.similarity_score, "score": h.score,
             **({"memory_id": h.key} if h.source_type == "memory" else {"chunk_id": h.key}),
             "signals": {k: v for k, v in (("vector", h.vector), ("lexical", h.lexical)) if v is not None}}
            for h in hits]


def test_a_soat_answers_fields_give_the_engines_features(tmp_path):
    # The embedded engine's ranked lists of a small run, and the same lists as SOAT's answer fields.
    from rqsweep.backends import build_backend
    from rqsweep.inputs import load_inputs
    from tests.minijob import write_job

    inputs = load_inputs(write_job(tmp_path))
    backend = build_backend(inputs.config, inputs.searched, inputs.corpus, log=lambda _: None, run_dir=tmp_path,
                            workers=inputs.config.workers)
    try:
        lists = backend.ranked(inputs.config.baseline)
    finally:
        backend.close()
    assert any(search_features(h)["memories_top10"] for h in lists.values())  # the lists hold memories
    for query_id, hits in lists.items():
        assert search_features(answer_hits(_answer(hits))) == search_features(hits), query_id
    table = features_table({q.id: q.query for q in inputs.golden.queries}, lists)
    assert table.columns == ["query_id", *FEATURES] and table.height == len(inputs.golden.queries)
    assert table.filter(pl.col("query_id") == "t1")["identifiers"].item() == 1.0  # VPN-4012


def test_the_typescript_in_the_docs_computes_the_same_features():
    answers = [[_hit(1, "memory", 1, 1, 0.91), _hit(2, "document", 2, None), _hit(3, "memory", None, 2)],
               [_hit(1, "document", None, None, None)], [], [_hit(p, "memory", p, None) for p in range(1, 13)]]
    script = (f"const texts = {json.dumps(TEXTS)};\nconst answers = {json.dumps([_answer(a) for a in answers])};\n"
              "console.log(JSON.stringify({text: texts.map(textFeatures), search: answers.map(searchFeatures)}));")
    out = json.loads(run_snippet(script))
    assert out["text"] == [text_features(t) for t in TEXTS]
    assert out["search"] == [search_features(a) for a in answers]
    assert out["search"] == [search_features(answer_hits(_answer(a))) for a in answers]



def _default_search_features(run_dir) -> pl.DataFrame:
    """Each query's search features, from the baseline's ranked list the run kept."""
    hits = pl.read_parquet(run_dir / "hits.parquet").filter(pl.col("is_baseline")).sort("query_id", "position")
    lists = {q: [RankedHit(r["position"], r["key"], r["source_type"], r["chunk"], r["score"], r["vector"],
                           r["lexical"], r["similarity_score"], None) for r in rows.iter_rows(named=True)]
             for (q,), rows in hits.group_by("query_id", maintain_order=True)}
    return pl.DataFrame([{"query_id": q, **search_features(h)} for q, h in lists.items()])


def test_over_http_a_run_reads_the_same_features_and_learns_the_same_rule(tmp_path, monkeypatch):
    from rqsweep import job
    from tests.http_support import EMBEDDED, PASSWORD, http_backend, serving, write_config, write_corpus

    monkeypatch.setenv("SOAT_PASSWORD", PASSWORD)
    write_corpus(tmp_path)
    embedded = write_config(tmp_path, "embedded", EMBEDDED)
    with serving(embedded) as server:
        over_http = job.run(write_config(tmp_path, "http", http_backend(server.url, mode="direct")), quiet=True)
    local = job.run(embedded, quiet=True)
    got, want = (_default_search_features(r.run_dir) for r in (over_http, local))
    assert got.equals(want) and got["lexical_hits"].null_count() == 0 and got["memories_top10"].sum() > 0
    rules = [json.loads((r.run_dir / "routing.json").read_text())["rules"] for r in (over_http, local)]
    assert rules[0] == rules[1]
