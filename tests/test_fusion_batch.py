"""The fast path against the reference path (fusion.fuse), section 2's rules, and tie sensitivity."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from tests.reference_paths import delay_changes_positions
from rqsweep.backends.embedded import EmbeddedBackend
from rqsweep.corpus import Chunking, Corpus, Document, Memory
from rqsweep.engine import batch as fast_path
from rqsweep.engine.batch import (SettingsBatch, expected_positions, nudged_plans,
                                  numeric_changes, plan_query,
                                  later_search_changes, reciprocal_rank_fusion, similarity_floor, stack_both_orders,
                                  stack_plans, stacked_positions, tie_order_changes)
from rqsweep.engine.channels import Candidate, Candidates, merge_shards
from rqsweep.engine.embed import FeatureHashEmbedder
from rqsweep.engine.fusion import fuse
from rqsweep.engine.index import Index
from rqsweep.engine.recency import SEARCH_DELAY_DAYS, recency_factor
from rqsweep.golden import Expected, GoldenQuery, GoldenSet
from rqsweep.knobs import Knobs
from rqsweep.scope import Scope

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def C(source_type: str, row: int, score: float) -> Candidate:
    return Candidate(source_type, row, score)


def positions_from_reference(cands, knobs, limit, ages, groups):
    ranked = fuse(cands, knobs, limit, ages)
    out = []
    for group in groups:
        hits = [p for p, f in enumerate(ranked, 1) if (f.source_type, f.row) in group]
        out.append(min(hits) if hits else 0)
    return out


# Few distinct values so that exact ties are everywhere, as they are in SOAT's channels.
SIMS = [0.9, 0.8, 0.8125, 0.5, 0.5, 0.25]
RANKS = [0.1, 0.2, 0.1, 0.3, 0.05]
FLOORS = [None, 0.0, 0.25, 0.5, 0.8, 0.8125, 0.85, 1.0]


@st.composite
def query_case(draw, limit):
    """One query's candidates (each channel up to `limit` per store), memory ages and expected keys."""
    n_docs, n_mems = draw(st.integers(0, 12)), draw(st.integers(0, 8))
    doc_rows, mem_rows = list(range(n_docs)), list(range(n_mems))

    def channel(scores):
        docs = draw(st.lists(st.sampled_from(doc_rows), unique=True, max_size=limit)) if doc_rows else []
        mems = draw(st.lists(st.sampled_from(mem_rows), unique=True, max_size=limit)) if mem_rows else []
        d = sorted((C("document", r, draw(st.sampled_from(scores))) for r in docs), key=lambda c: -c.score)
        m = sorted((C("memory", r, draw(st.sampled_from(scores))) for r in mems), key=lambda c: -c.score)
        return merge_shards(d, m)

    cands = Candidates(channel(SIMS), channel(RANKS))
    ages = np.array(draw(st.lists(st.sampled_from([0.0, -2.0, 0.5, 1.0, 3.0, 30.0, 400.0, 5000.0]),
                                  min_size=n_mems, max_size=n_mems)))
    # A document key covers several chunk rows; a memory key one row.
    doc_keys = [set(("document", r) for r in doc_rows if r % 3 == k) for k in range(3)]
    groups = [g for g in doc_keys if g] + [{("memory", r)} for r in mem_rows]
    chosen = draw(st.lists(st.sampled_from(groups), min_size=1, max_size=3)) if groups else [set()]
    return cands, ages, chosen


@st.composite
def knob_lists(draw):
    # The fast path tabulates only the V prefixes the batch's floors keep: batches without a floor, with one
    # floor for all, and with a mix.
    floors = draw(st.sampled_from(["none", "single", "mixed"]))
    floor = {"none": st.none(), "single": st.just(draw(st.sampled_from(FLOORS))), "mixed": st.sampled_from(FLOORS)}
    return draw(st.lists(st.builds(
        Knobs,
        rrf_k=st.sampled_from([1, 2, 5, 20, 60, 61, 1000]),
        min_similarity=floor[floors],
        recency_half_life_days=st.sampled_from([0.0, 0.1, 1.0, 7.0, 30.0, 365.0]),
    ), min_size=1, max_size=20))


@st.composite
def scenario(draw):
    limit = draw(st.integers(1, 6))
    cands, ages, chosen = draw(query_case(limit))
    return cands, limit, ages, chosen, draw(knob_lists())


@hsettings(max_examples=600, deadline=None)
@given(scenario(), st.sampled_from([SEARCH_DELAY_DAYS, 0.5, 3.0]))
def test_fast_path_equals_reference(case, delay_days):
    cands, limit, ages, groups, knobs = case
    plan = plan_query(cands, groups, ages)
    fast = expected_positions(plan, SettingsBatch.from_knobs(knobs), limit)
    # The same search `delay_days` later (what tie_sensitive compares with): every memory that much older.
    later = expected_positions(plan.searched_later(delay_days), SettingsBatch.from_knobs(knobs), limit)
    changed = delay_changes_positions(plan, SettingsBatch.from_knobs(knobs), limit, fast, delay_days)
    if (ages >= 0).all():  # positions move one way with the delay: a change at a shorter one shows at this one
        sooner = delay_changes_positions(plan, SettingsBatch.from_knobs(knobs), limit, fast, delay_days / 3)
        assert (changed | ~sooner).all()
    for s, k in enumerate(knobs):
        now = positions_from_reference(cands, k, limit, ages, groups)
        assert fast[s].tolist() == now, k
        assert later[s].tolist() == positions_from_reference(cands, k, limit, ages + delay_days, groups), k
        assert changed[s] == (later[s].tolist() != now), k
    # A table restricted to some prefixes holds, bit for bit, the rows of the table over every prefix.
    if len(plan.v_pos) == 0:
        return
    batch = SettingsBatch.from_knobs(knobs)
    kept = np.unique(similarity_floor(plan, batch))
    every = reciprocal_rank_fusion(plan, batch.distinct_rrf_k, np.arange(len(plan.v_similarity) + 1))
    some = reciprocal_rank_fusion(plan, batch.distinct_rrf_k, kept)
    k_index = np.repeat(np.arange(len(batch.distinct_rrf_k)), len(kept))
    rows = every.rows(k_index, np.tile(kept, len(batch.distinct_rrf_k)))
    assert np.array_equal(some.score, every.score[rows]) and np.array_equal(some.position, every.position[rows])


def test_floor_is_inclusive_and_never_refills():
    vector = (C("document", 0, 0.9), C("document", 1, 0.5), C("memory", 0, 0.4))
    cands = Candidates(vector, ())
    kept = [(f.source_type, f.row) for f in fuse(cands, Knobs(min_similarity=0.5), 10, np.zeros(1))]
    assert kept == [("document", 0), ("document", 1)]
    # The cut already happened upstream: a floor that removes items leaves fewer, not others.
    assert len(fuse(cands, Knobs(min_similarity=0.95), 10, np.zeros(1))) == 0


def test_recency_never_promotes_future_items_and_never_touches_documents():
    vector = (C("document", 0, 0.9), C("memory", 0, 0.8), C("memory", 1, 0.7))
    ages = np.array([-10.0, 10.0])  # memory 0 is timestamped in the future
    ranked = fuse(Candidates(vector, ()), Knobs(rrf_k=60, recency_half_life_days=1.0), 10, ages)
    scores = {(f.source_type, f.row): f.score for f in ranked}
    assert scores[("document", 0)] == 1 / 61
    assert scores[("memory", 0)] == 1 / 62
    assert scores[("memory", 1)] == (1 / 63) * 2.0 ** -10


def test_fused_ties_keep_first_insertion_order():
    # Item a: V1 + L3, item b: V3 + L1 tie exactly; a was inserted first (V order), so it stays first.
    a, b, c = C("document", 0, 0.9), C("document", 1, 0.7), C("memory", 0, 0.8)
    vector = (a, c, b)
    lexical = (C("document", 1, 0.3), C("memory", 0, 0.2), C("document", 0, 0.1))
    ranked = fuse(Candidates(vector, lexical), Knobs(rrf_k=60), 10, np.zeros(1))
    assert [(f.source_type, f.row) for f in ranked] == [("document", 0), ("document", 1), ("memory", 0)]
    assert ranked[0].score == ranked[1].score


def test_shard_merge_puts_documents_first_on_equal_scores():
    merged = merge_shards([C("document", 5, 0.5)], [C("memory", 1, 0.5), C("memory", 2, 0.6)])
    assert [(c.source_type, c.row) for c in merged] == [("memory", 2), ("document", 5), ("memory", 1)]


def test_lexical_only_items_follow_vector_items_on_ties():
    # With the floor removing x from V, x becomes lexical-only and is inserted after V's items.
    x, y = C("document", 0, 0.3), C("document", 1, 0.9)
    cands = Candidates((x, y), (C("document", 1, 0.2), C("document", 0, 0.2)))
    ranked = fuse(cands, Knobs(rrf_k=1, min_similarity=0.5), 10, np.zeros(0))
    assert [f.row for f in ranked] == [1, 0]
    assert ranked[0].vector_position == 1 and ranked[1].vector_position is None


def test_cut_to_limit():
    vector = tuple(C("document", i, 1 - i / 100) for i in range(20))
    assert len(fuse(Candidates(vector, ()), Knobs(), 7, np.zeros(0))) == 7


def _both_paths(cands, knobs, limit, ages, items):
    """The ranked positions of `items` by the reference path, after checking the fast path agrees."""
    groups = [{item} for item in items]
    want = positions_from_reference(cands, knobs, limit, ages, groups)
    plan = plan_query(cands, groups, ages)
    assert expected_positions(plan, SettingsBatch.from_knobs([knobs]), limit)[0].tolist() == want
    return want


def test_a_search_after_the_writes_ranks_a_document_before_an_equally_scored_memory():
    # Issue 10's case: at rrf_k 5 a memory at vector position 1 aged one half-life scores 1/6 x 0.5 = 1/12,
    # exactly a vector-position-7 document's score. A live search comes a little later than the write, so the
    # memory is a little older and ranks second.
    vector = (C("memory", 0, 0.99),) + tuple(C("document", r, 0.9 - r / 100) for r in range(6))
    knobs = Knobs(rrf_k=5, recency_half_life_days=30.0)
    assert (1 / 6) * recency_factor(30.0, 30.0) == 1 / 12
    memory, document = ("memory", 0), ("document", 5)
    assert _both_paths(Candidates(vector, ()), knobs, 10, np.array([30.0]), [memory, document]) == [7, 6]


def test_a_memory_of_age_zero_follows_a_document_it_ties_only_when_the_blend_is_on():
    # The memory is inserted first (V1 + L2 against the document's V2 + L1): fused order puts it first.
    vector = (C("memory", 0, 0.9), C("document", 0, 0.8))
    lexical = (C("document", 0, 0.2), C("memory", 0, 0.1))
    cands = Candidates(vector, lexical)
    items = [("memory", 0), ("document", 0)]
    assert _both_paths(cands, Knobs(rrf_k=60), 10, np.zeros(1), items) == [1, 2]
    assert _both_paths(cands, Knobs(rrf_k=60, recency_half_life_days=7.0), 10, np.zeros(1), items) == [2, 1]
    # The cut keeps the document, not the memory it now precedes.
    assert _both_paths(cands, Knobs(rrf_k=60, recency_half_life_days=7.0), 1, np.zeros(1), items) == [0, 1]
    # A memory dated in the future is not decayed: the fused order stands.
    assert _both_paths(cands, Knobs(rrf_k=60, recency_half_life_days=7.0), 10, np.array([-1.0]), items) == [1, 2]


def test_decayed_memories_that_tie_keep_their_fused_order():
    # At rrf_k 5, memory 0 (vector 1, one half-life old), memory 1 (vector 7, age 0) and document 20 (lexical 7)
    # all score 1/12. The document goes first; the memories keep their fused order (one delay shrinks both).
    vector = (C("memory", 0, 0.99),) + tuple(C("document", r, 0.9 - r / 100) for r in range(1, 6)) + (
        C("memory", 1, 0.5),)
    lexical = tuple(C("document", r, 0.9 - r / 100) for r in range(10, 16)) + (C("document", 20, 0.1),)
    cands, ages = Candidates(vector, lexical), np.array([2.0, 0.0])
    items = [("document", 20), ("memory", 0), ("memory", 1)]
    # Above the tie: documents 10..15 and 1..5 (1/6 .. 1/11), twelve of them before the three.
    assert _both_paths(cands, Knobs(rrf_k=5, recency_half_life_days=2.0), 20, ages, items) == [12, 13, 14]
    assert _both_paths(cands, Knobs(rrf_k=5), 20, ages, items) == [14, 1, 13]


def _memory_lead_case(margin_days: float):
    """A memory ranked first, over a document, by a blended margin of `margin_days` of age at half-life 1 day."""
    k, h = 60, 1.0
    # The memory wins both channels (V1, L1), the document comes second in both: fused 2/61 against 2/62. At the
    # age where the factor equals 61/62 they would tie; `margin_days` younger, the memory leads.
    age = h * np.log2((k + 2) / (k + 1)) - margin_days
    corpus = Corpus((Document("doc", "alpha beta gamma"),), (Memory("mem", "alpha beta alpha beta", age_days=age),))
    index = Index.build(corpus, FeatureHashEmbedder(64), Chunking("whole"), now=NOW)
    golden = GoldenSet(Path("golden.json"), "", (GoldenQuery("q", "s", "alpha beta", (Expected("memory", "mem"),)),),
                       None, ())
    backend = EmbeddedBackend(index, golden, 10, Scope())
    out = backend.evaluate([Knobs(rrf_k=k, recency_half_life_days=h), Knobs(rrf_k=k)])
    return out["positions"].to_list(), out["tie_sensitive"].to_list()


def test_tie_sensitive_counts_a_memory_a_later_search_would_rank_lower():
    # The relative margin a one-minute delay eats at half-life 1 day: 60 s x ln 2 / 86,400 s = 4.8e-4.
    assert 1 - 2 ** -SEARCH_DELAY_DAYS == pytest.approx(SEARCH_DELAY_DAYS * np.log(2), rel=1e-3)
    # Ahead by 10 s of age (a relative margin of 8e-5): a search a minute later ranks the document first.
    assert _memory_lead_case(10 / 86_400) == ([[1], [1]], [True, False])
    # Ahead by an hour of age (2.9e-2): the minute changes nothing; without the blend nothing decays.
    assert _memory_lead_case(1 / 24) == ([[1], [1]], [False, False])


@hsettings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda limit: st.tuples(
    st.just(limit), st.lists(query_case(limit), min_size=1, max_size=8), knob_lists())))
def test_aged_memories_stacked_equal_the_reference(case):
    """Every memory older than 0 days: the blend changes scores, and every query's blended settings go through
    the stacked (floor, rrf_k, half-life) ranking instead of one query at a time."""
    limit, queries, knobs = case
    queries = [(cands, np.abs(ages) + 0.5, groups) for cands, ages, groups in queries]
    plans = [plan_query(cands, groups, ages) for cands, ages, groups in queries]
    found = stacked_positions(stack_plans(plans), SettingsBatch.from_knobs(knobs), limit)
    with mock.patch.object(fast_path, "_UNIT_BLOCK", 1):  # every (target, kept prefix) ranked in a block of its own
        assert np.array_equal(stacked_positions(stack_plans(plans), SettingsBatch.from_knobs(knobs), limit), found)
    for s, k in enumerate(knobs):
        for q, (cands, ages, groups) in enumerate(queries):
            assert found[s, q, : len(groups)].tolist() == positions_from_reference(cands, k, limit, ages, groups)


def _crossing_ages(knobs, offsets):
    """Ages at which a memory's blended score meets another item's, for the knobs' rrf_k and half-lives: the
    factor 2^(-age/h) equals a ratio of two fused scores (positions 1 to 4 in each list), times 1 + an offset."""
    ks = sorted({k.rrf_k for k in knobs})
    hs = sorted({k.recency_half_life_days for k in knobs if k.recency_half_life_days > 0}) or [1.0]
    fused = lambda k, a, b: (1.0 / (k + a) if a else 0.0) + (1.0 / (k + b) if b else 0.0)  # noqa: E731
    scores = {fused(k, a, b) for k in ks for a in range(5) for b in range(5) if a or b}
    ages = {h * np.log2(x / y) * (1 + e) for h in hs for x in scores for y in scores if x > y for e in offsets}
    return sorted(a for a in ages if a > 0)


@hsettings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda limit: st.tuples(
    st.just(limit), st.lists(query_case(limit), min_size=1, max_size=6), knob_lists(), st.randoms())))
def test_aged_memories_at_their_crossing_points_equal_the_reference(case):
    """Ages where a blended score meets another item's under one of the batch's half-lives, exactly and within
    rounding of it: the crossing the fast path finds by binary search is checked exactly there."""
    limit, queries, knobs, rng = case
    ages = _crossing_ages(knobs, [0.0, 2e-16, -2e-16, 1e-12, -1e-12, 1e-9, -1e-9, 1e-6])
    queries = [(cands, np.array([rng.choice(ages) for _ in range(len(a))]), groups) for cands, a, groups in queries]
    plans = [plan_query(cands, groups, a) for cands, a, groups in queries]
    found = stacked_positions(stack_plans(plans), SettingsBatch.from_knobs(knobs), limit)
    for s, k in enumerate(knobs):
        for q, (cands, a, groups) in enumerate(queries):
            assert found[s, q, : len(groups)].tolist() == positions_from_reference(cands, k, limit, a, groups)


@hsettings(max_examples=200, deadline=None)
@given(st.integers(1, 6).flatmap(lambda limit: st.tuples(
    st.just(limit), st.lists(st.tuples(query_case(limit), query_case(limit), st.booleans()), min_size=1, max_size=5),
    knob_lists())))
def test_one_stack_for_both_tie_orders_equals_two(case):
    """Stacking the other tie order only where its plan is another object flags the same (setting, query) pairs
    as stacking and ranking every query in both orders; the stacked later search flags what
    `delay_changes_positions` does query by query."""
    limit, pairs, knobs = case
    plans, alternates = [], []
    for (cands, ages, groups), (other_cands, other_ages, _), same in pairs:
        plans.append(plan_query(cands, groups, ages))
        alternates.append(plans[-1] if same else plan_query(other_cands, groups, other_ages))
    batch = SettingsBatch.from_knobs(knobs)
    found = stacked_positions(stack_plans(plans), batch, limit)
    both = stack_both_orders(plans, alternates)
    assert both.differs.tolist() == [q for q, (_, _, same) in enumerate(pairs) if not same]
    assert np.array_equal(stacked_positions(both.stack, batch, limit), found)
    expected = (stacked_positions(stack_plans(alternates), batch, limit) != found).any(axis=2)
    assert np.array_equal(tie_order_changes(both, batch, limit, found), expected)
    later = np.stack([delay_changes_positions(plan, batch, limit, found[:, q, : len(plan.groups)], SEARCH_DELAY_DAYS)
                      for q, plan in enumerate(plans)], axis=1)
    assert np.array_equal(later_search_changes(both, batch, limit, found), later)


@hsettings(max_examples=400, deadline=None)
@given(st.integers(1, 6).flatmap(lambda limit: st.tuples(
    st.just(limit), st.lists(query_case(limit), min_size=1, max_size=4), knob_lists())))
def test_stacked_fast_path_equals_reference(case):
    """Every query of a stack at once, each (floor, rrf_k) ranked by the contest of its undecided items."""
    limit, queries, knobs = case
    plans = [plan_query(cands, groups, ages) for cands, ages, groups in queries]
    found = stacked_positions(stack_plans(plans), SettingsBatch.from_knobs(knobs), limit)
    width = max(len(groups) for _, _, groups in queries)
    assert found.shape == (len(knobs), len(queries), width)
    for s, k in enumerate(knobs):
        for q, (cands, ages, groups) in enumerate(queries):
            reference = positions_from_reference(cands, k, limit, ages, groups)
            assert found[s, q].tolist() == reference + [0] * (width - len(groups)), (k, q)


def _moved(cands: Candidates, groups, by: float) -> Candidates:
    """The reference's own nudge: the expected rows' cosines moved by `by`, the vector list sorted again."""
    hits = set().union(*groups)
    vector = sorted((C(c.source_type, c.row, c.score + by) if (c.source_type, c.row) in hits else c
                     for c in cands.vector), key=lambda c: -c.score)
    return Candidates(tuple(vector), cands.lexical)


@hsettings(max_examples=200, deadline=None)
@given(st.integers(1, 6).flatmap(lambda limit: st.tuples(
    st.just(limit), st.lists(query_case(limit), min_size=1, max_size=5), knob_lists(),
    st.sampled_from([0.0, 0.0125, 0.05, 0.3]))))
def test_numeric_flags_equal_the_reference_with_moved_cosines(case):
    """A (setting, query) is numerically sensitive exactly when the reference path, with the expected rows'
    cosines moved up or down by the precision, puts some expected key elsewhere; with precision 0, never."""
    limit, queries, knobs, delta = case
    plans = [plan_query(cands, groups, ages) for cands, ages, groups in queries]
    nudges = [nudged_plans(cands, groups, ages, delta) for cands, ages, groups in queries]
    batch = SettingsBatch.from_knobs(knobs)
    both = stack_both_orders(plans, plans, nudges)
    found = stacked_positions(both.stack, batch, limit)
    flagged = numeric_changes(both, batch, limit, found)
    for s, k in enumerate(knobs):
        for q, (cands, ages, groups) in enumerate(queries):
            here = positions_from_reference(cands, k, limit, ages, groups)
            moved = [positions_from_reference(_moved(cands, groups, by), k, limit, ages, groups)
                     for by in (delta, -delta)] if delta else []
            assert flagged[s, q] == any(m != here for m in moved), (s, q)


def test_a_near_tie_within_the_precision_is_flagged_and_one_on_it_is_not():
    """The expected memory 0.0625 below its stale twin in the vector channel: within a precision of 0.125 the two
    may swap, so the query is flagged; a precision of exactly 0.0625 leaves them equal, and equal scores keep
    the stored order, so it is not; nor is a query whose expected row is no vector candidate."""
    cands = Candidates((C("memory", 1, 0.75), C("memory", 0, 0.6875), C("document", 0, 0.5)), ())
    groups, ages = [{("memory", 0)}], np.array([0.0, 0.0])
    batch = SettingsBatch.from_knobs([Knobs(60, None, 0.0)])
    for delta, flagged in ((0.125, True), (0.0625, False), (0.0, False)):
        plan = plan_query(cands, groups, ages)
        both = stack_both_orders([plan], [plan], [nudged_plans(cands, groups, ages, delta)])
        found = stacked_positions(both.stack, batch, 10)
        assert found[0, 0, 0] == 2
        assert numeric_changes(both, batch, 10, found)[0, 0] == flagged, delta
    assert nudged_plans(cands, [{("document", 7)}], ages, 0.125) is None
