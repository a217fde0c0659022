"""Replay's completeness rule: whenever it claims a query's candidates at the sweep's limit, they are exact.

The embedded engine stands in for SOAT: its searches at a larger limit (neutral knobs), over both stores or
one, are what replay fetches, and its candidate lists at the sweep's limit (PostgreSQL's tie order) are the
truth. The corpus is full of exact ties, in both channels, so that LIMIT L and LIMIT L' really do disagree
among tied rows.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from rqsweep.backends.http.completeness import NEUTRAL, Answer, Unprovable, fused_score, rebuild
from rqsweep.backends.http.mapping import Hit
from rqsweep.corpus import Chunking, Corpus, Document, Memory
from rqsweep.engine.channels import Candidate
from rqsweep.engine.embed import FeatureHashEmbedder
from rqsweep.engine.fusion import reciprocal_rank_fusion
from rqsweep.engine.index import Index
from rqsweep.scope import Scope

DOCUMENTS = ("document",)  # the synthetic answers below hold documents only
STORES = ("document", "memory")
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


def _answer(index: Index, query: str, fetched_limit: int, stores: tuple[str, ...] = STORES) -> Answer:
    now_ms = round(index.now.timestamp() * 1000)
    scope = Scope(include_documents="document" in stores, include_memories="memory" in stores)
    hits = []
    for r in index.search(query, NEUTRAL, fetched_limit, scope, now=index.now):
        item = r.chunk_id if r.source_type == "document" else r.key
        hits.append(Hit(r.source_type, r.key, item, r.similarity_score, r.signals.get("vector"),
                        r.signals.get("lexical"), round(r.updated_at.timestamp() * 1000) or now_ms))
    return Answer(hits, fetched_limit, stores)


def _identities(index: Index, channel) -> list[tuple[str, str]]:
    return [(c.source_type, index.stores[c.source_type].ids[c.row]) for c in channel]


@pytest.mark.parametrize("seed", range(4))
def test_whatever_replay_claims_is_exact(seed):
    index = Index.build(_tied_corpus(seed), FeatureHashEmbedder(64), Chunking("whole"))
    rng = random.Random(seed)
    outcomes = {"combined": [0, 0], "with single-store answers": [0, 0]}  # proven, refused
    reasons = []
    for _ in range(80):
        query = " ".join(rng.sample(WORDS, rng.randint(1, 2)) + rng.sample(["filler3", "note5", ""], 1))
        limit = rng.choice([1, 2, 3, 5])
        fetched = rng.choice([limit, limit + 1, 2 * limit, 4 * limit, 50])
        truth = index.candidates(query, limit)
        combined = _answer(index, query, fetched)
        # Any subset of the single-store answers replay may ask for, in any order: each must be sound alone.
        singles = [_answer(index, query, n, (store,)) for store in STORES for n in {fetched, limit}]
        some = rng.sample(singles, rng.randint(1, len(singles)))
        for kind, extra in (("combined", []), ("with single-store answers", some)):
            try:
                rebuilt = rebuild([combined, *extra], limit, round(index.now.timestamp() * 1000))
            except Unprovable as exc:
                reasons.append(str(exc))
                outcomes[kind][1] += 1
                continue
            outcomes[kind][0] += 1
            for channel in ("vector", "lexical"):
                got = [rebuilt.hits[c.source_type][c.row].identity for c in getattr(rebuilt.candidates, channel)]
                assert got == _identities(index, getattr(truth, channel)), (query, limit, fetched, channel, kind)
            assert [c.score for c in rebuilt.candidates.vector] == [c.score for c in truth.vector]
    (proven, refused), (proven_more, refused_more) = outcomes.values()
    assert proven >= 10 and refused >= 10, reasons  # the corpus exercises both outcomes
    assert proven_more > proven + 5 and refused_more >= 5, (outcomes, reasons)  # single-store answers prove more


def _hit(i: int, vector: int | None, lexical: int | None, similarity: float | None = None,
         source: str = "document") -> Hit:
    return Hit(source, f"t{i}", f"c{i}", similarity, vector, lexical, 0)


def test_a_cut_answer_proves_a_list_complete_only_when_a_missing_item_would_have_outranked_the_last():
    # Lexical list of 2, vector list seen to 3 of more; 4 results returned at fetched limit 4.
    hits = [_hit(0, 1, 1, 0.9), _hit(1, 2, None, 0.8), _hit(2, None, 2, 0.1), _hit(3, 3, None, 0.7)]
    # limit 1: vector top 1+1 is visible with distinct similarities; lexical: position 3 would score
    # 1/(1+3) = 0.25 > the last result's 1/(1+3)? No: equal, so the lexical list is not provably complete.
    with pytest.raises(Unprovable, match="lexical"):
        rebuild([Answer(hits, 4, DOCUMENTS)], 1, 0, DOCUMENTS)
    # Fewer results than asked for: nothing was cut, every list is complete.
    rebuilt = rebuild([Answer(hits[:3], 4, DOCUMENTS)], 1, 0, DOCUMENTS)
    assert [c.row for c in rebuilt.candidates.lexical] == [0]


def test_tied_similarities_at_the_boundary_are_refused():
    hits = [_hit(0, 1, None, 0.5), _hit(1, 2, None, 0.5), _hit(2, 3, None, 0.4)]
    with pytest.raises(Unprovable, match="tied"):
        rebuild([Answer(hits + [_hit(i, i + 1, None, 0.1 - i / 100) for i in range(3, 30)], 30, DOCUMENTS)], 1, 0,
                DOCUMENTS)


def test_a_long_lexical_list_is_refused_because_its_ties_cannot_be_seen():
    hits = [_hit(i, None, i + 1) for i in range(7)]  # complete (uncut), 7 > 2 x 3 candidates
    with pytest.raises(Unprovable, match="ties unknowable"):
        rebuild([Answer(hits, 10, DOCUMENTS)], 3, 0, DOCUMENTS)
    assert len(rebuild([Answer(hits[:6], 10, DOCUMENTS)], 3, 0, DOCUMENTS).candidates.lexical) == 3


def test_a_single_store_answer_proves_that_store_only():
    # A cut answer whose vector list shows four document rows and no memory: documents are proven at limit 1
    # (rule 3), the memories' vector list could hold anything.
    documents = [_hit(0, 1, None, 0.9), _hit(1, 2, None, 0.5), _hit(2, 3, None, 0.5), _hit(3, 4, None, 0.4)]
    with pytest.raises(Unprovable) as refused:
        rebuild([Answer(documents, 4, STORES)], 1, 0)
    assert refused.value.stores == ("memory",)
    memories = Answer([_hit(8, 1, None, 0.3, "memory"), _hit(9, 2, None, 0.2, "memory")], 4, ("memory",))
    rebuilt = rebuild([Answer(documents, 4, STORES), memories], 1, 0)
    # The memory is outside the combined answer's seen list, so after every document row of it.
    assert [(c.source_type, c.score) for c in rebuilt.candidates.vector] == [("document", 0.9), ("memory", 0.3)]
    # With tied documents, the memory-only answer, empty of documents as it is, proves nothing about them.
    tied = [_hit(0, 1, None, 0.5)] + documents[1:]
    with pytest.raises(Unprovable) as refused:
        rebuild([Answer(tied, 4, STORES), memories], 1, 0)
    assert refused.value.stores == ("document",)


@hsettings(max_examples=300, deadline=None)
@given(rows=st.lists(st.sampled_from([(True, False), (False, True), (True, True)]), min_size=1, max_size=30),
       rrf_k=st.sampled_from([1, 2, 5, 20, 60, 61, 1000, 2**31 - 1]), data=st.data())
def test_replay_completeness_scores_results_as_fusion_does(rows, rrf_k, data):
    """The completeness rule's RRF formula gives, from a result's signals, the bit-identical fused score."""
    vector = [Candidate("document", i, 0.5) for i, (in_v, _) in enumerate(rows) if in_v]
    lexical = [Candidate("document", i, 0.1) for i, (_, in_l) in enumerate(rows) if in_l]
    vector, lexical = data.draw(st.permutations(vector)), data.draw(st.permutations(lexical))
    fused = reciprocal_rank_fusion(vector, lexical, rrf_k)
    assert len(fused) == len(rows)
    for f in fused:
        hit = _hit(f.row, f.vector_position, f.lexical_position)
        assert fused_score(hit, rrf_k) == f.score, (f, rrf_k)
