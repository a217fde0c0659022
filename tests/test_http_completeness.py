"""Replay's completeness rule: whenever it claims a query's candidates at the sweep's limit, they are exact.

The embedded engine stands in for SOAT: its search at a larger limit (neutral knobs) is what replay
fetches, and its candidate lists at the sweep's limit (PostgreSQL's tie order) are the truth. The corpus
is full of exact ties, in both channels, so that LIMIT L and LIMIT L' really do disagree among tied rows.
"""

from __future__ import annotations

import random

import pytest

from rqsweep.backends.http.completeness import NEUTRAL, Unprovable, rebuild
from rqsweep.backends.http.mapping import Hit
from rqsweep.corpus import Chunking, Corpus, Document, Memory
from rqsweep.engine.embed import FeatureHashEmbedder
from rqsweep.engine.index import Index

DOCUMENTS = ("document",)  # the synthetic answers below hold documents only
WORDS = ["pager", "rotation", "deploy", "freeze", "vpn", "gateway", "backup", "restore", "alert", "ticket"]


def _tied_corpus(seed: int) -> Corpus:
    rng = random.Random(seed)
    docs, mems = [], []
    for i in range(40):
        # A third are copies of three texts (exact ties in both channels); the rest differ by a filler word,
        # and share query words often enough that lexical ranks (0.1, 0.2, ...) tie too.
        words = [WORDS[i % 3]] if i % 3 == 0 else rng.sample(WORDS, rng.randint(1, 3)) + [f"filler{i}"]
        docs.append(Document(f"d{i}", " ".join(words)))
    for i in range(30):
        words = [WORDS[i % 2]] if i % 4 == 0 else rng.sample(WORDS, rng.randint(1, 2)) + [f"note{i}"]
        mems.append(Memory(f"m{i}", " ".join(words), age_days=rng.choice([0, 1, 5])))
    return Corpus(tuple(docs), tuple(mems))


def _hits(index: Index, query: str, fetched_limit: int) -> list[Hit]:
    now_ms = round(index.now.timestamp() * 1000)
    out = []
    for r in index.search(query, NEUTRAL, fetched_limit, now=index.now):
        item = r.chunk_id if r.source_type == "document" else r.key
        out.append(Hit(r.source_type, r.key, item, r.similarity_score, r.signals.get("vector"),
                       r.signals.get("lexical"), round(r.updated_at.timestamp() * 1000) or now_ms, True))
    return out


def _identities(index: Index, channel) -> list[tuple[str, str]]:
    return [(c.source_type, index.stores[c.source_type].ids[c.row]) for c in channel]


@pytest.mark.parametrize("seed", range(4))
def test_whatever_replay_claims_is_exact(seed):
    index = Index.build(_tied_corpus(seed), FeatureHashEmbedder(64), Chunking("whole"))
    rng = random.Random(seed)
    proven = refused = 0
    reasons = []
    for _ in range(80):
        query = " ".join(rng.sample(WORDS, rng.randint(1, 2)) + rng.sample(["filler3", "note5", ""], 1))
        limit = rng.choice([1, 2, 3, 5])
        fetched = rng.choice([limit, limit + 1, 2 * limit, 4 * limit, 50])
        truth = index.candidates(query, limit)
        try:
            rebuilt = rebuild(_hits(index, query, fetched), limit, fetched, round(index.now.timestamp() * 1000))
        except Unprovable as exc:
            reasons.append(str(exc))
            refused += 1
            continue
        proven += 1
        for channel in ("vector", "lexical"):
            got = [rebuilt.hits[c.source_type][c.row].identity for c in getattr(rebuilt.candidates, channel)]
            assert got == _identities(index, getattr(truth, channel)), (query, limit, fetched, channel)
        assert [c.score for c in rebuilt.candidates.vector] == [c.score for c in truth.vector]
    assert proven >= 10 and refused >= 10, reasons  # the corpus exercises both outcomes


def _hit(i: int, vector: int | None, lexical: int | None, similarity: float | None = None,
         source: str = "document") -> Hit:
    return Hit(source, f"t{i}", f"c{i}", similarity, vector, lexical, 0, True)


def test_a_cut_answer_proves_a_list_complete_only_when_a_missing_item_would_have_outranked_the_last():
    # Lexical list of 2, vector list seen to 3 of more; 4 results returned at fetched limit 4.
    hits = [_hit(0, 1, 1, 0.9), _hit(1, 2, None, 0.8), _hit(2, None, 2, 0.1), _hit(3, 3, None, 0.7)]
    # limit 1: vector top 1+1 is visible with distinct similarities; lexical: position 3 would score
    # 1/(1+3) = 0.25 > the last result's 1/(1+3)? No: equal, so the lexical list is not provably complete.
    with pytest.raises(Unprovable, match="lexical"):
        rebuild(hits, 1, 4, 0, DOCUMENTS)
    # Fewer results than asked for: nothing was cut, every list is complete.
    rebuilt = rebuild(hits[:3], 1, 4, 0, DOCUMENTS)
    assert [c.row for c in rebuilt.candidates.lexical] == [0]


def test_tied_similarities_at_the_boundary_are_refused():
    hits = [_hit(0, 1, None, 0.5), _hit(1, 2, None, 0.5), _hit(2, 3, None, 0.4)]
    with pytest.raises(Unprovable, match="tied"):
        rebuild(hits + [_hit(i, i + 1, None, 0.1 - i / 100) for i in range(3, 30)], 1, 30, 0, DOCUMENTS)


def test_a_long_lexical_list_is_refused_because_its_ties_cannot_be_seen():
    hits = [_hit(i, None, i + 1) for i in range(7)]  # complete (uncut), 7 > 2 x 3 candidates
    with pytest.raises(Unprovable, match="ties unknowable"):
        rebuild(hits, 3, 10, 0, DOCUMENTS)
    assert len(rebuild(hits[:6], 3, 10, 0, DOCUMENTS).candidates.lexical) == 3
