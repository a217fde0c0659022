"""SOAT's recency step on a real clock: PostgreSQL 18 holds the rows, SOAT's arithmetic ranks them.

SOAT's eval seeds its rows, reads one clock after seeding and backdates each memory's `updated_at` by its
`age_days`; a search then reads `now` once, later still. Here the rows go into a real PostgreSQL, the clock is
its own (`clock_timestamp()` after the writes, `now()` at the search), and the search's steps 5 and 6 run in SQL
as SOAT runs them: RRF from the channel positions (V's term first, ties in first-insertion order), then each
memory's age in days from millisecond timestamps (`Date` arithmetic), `2 ** (-age / h)` when the age is
positive, and a stable re-sort. The engine gets the nominal ages (from the eval's clock reading) and must
rank as the real clock does: each case holds an exact tie after the blend, which the real delay breaks.

Not covered: two decayed memories of different ages that tie exactly. Their factors shrink together in real
arithmetic, but SOAT computes each age and power separately, so a live server orders them by rounding.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from rqsweep.engine.batch import SettingsBatch, expected_positions, plan_query
from rqsweep.engine.channels import Candidate, Candidates
from rqsweep.engine.fusion import fuse
from rqsweep.knobs import Knobs

# (source_type, row, vector position, lexical position, age in days for memories)
VECTOR_TIE = [("memory", 0, 1, None, "h")] + [("document", r, r + 1, None, None) for r in range(1, 7)]
CASES = {
    # Issue 10's case: at rrf_k 5 a vector-1 memory aged one half-life scores 1/6 x 1/2 = 1/12, as the vector-7
    # document does.
    "memory aged a half-life ties a document": (5, VECTOR_TIE),
    # V1 + L2 against V2 + L1: equal fused scores, the memory inserted first; age 0 leaves its score as it is.
    "memory of age 0 ties a document": (60, [("memory", 0, 1, 2, 0.0), ("document", 0, 2, 1, None),
                                             ("document", 1, 3, None, None)]),
    # Two memories written together (one updated_at) with equal fused scores (V2 + L3 against V3 + L2): equal
    # blended scores on any clock, so they keep their fused order.
    "memories of one age tie each other and a document": (60, [
        ("document", 0, 1, 1, None), ("memory", 0, 2, 3, 2.0), ("memory", 1, 3, 2, 2.0),
        ("document", 1, 4, None, None), ("document", 2, None, 4, None)]),
    # Three-way: memories at V1 and L1 (1/6 each, both one half-life old) and a document at V7 (1/12).
    "two memories and a document tie three ways": (5, [
        ("memory", 0, 1, None, "h"), ("memory", 1, None, 1, "h")] + [
        ("document", r, r + 1, None, None) for r in range(1, 7)]),
}
HALF_LIVES = (0.0, 1.0, 2.0, 30.0, 365.0)

SOAT_RANKING = """
WITH clock AS (SELECT floor(extract(epoch FROM now()) * 1000) AS now_ms),
fused AS (
    SELECT seq, source_type, updated_at,
           COALESCE(1.0::float8 / (%(k)s + v_pos), 0) + COALESCE(1.0::float8 / (%(k)s + l_pos), 0) AS score,
           COALESCE(v_pos, 1000000 + l_pos) AS insertion
    FROM knowledge
),
fused_order AS (
    SELECT *, row_number() OVER (ORDER BY score DESC, insertion) AS fused_position,
           ((SELECT now_ms FROM clock) - floor(extract(epoch FROM updated_at) * 1000))::float8
               / 86400000::float8 AS age_days
    FROM fused
)
SELECT seq, (SELECT now_ms FROM clock),
       CASE WHEN %(h)s::float8 > 0 AND source_type = 'memory' AND age_days > 0
            THEN score * power(2::float8, -age_days / %(h)s::float8) ELSE score END AS blended
FROM fused_order
ORDER BY blended DESC, fused_position
"""


def _seed(pg, items, half_life):
    """Write the rows, read the eval's clock after the writes and backdate the memories; nominal ages per row."""
    pg.execute("DROP TABLE IF EXISTS knowledge")
    pg.execute("CREATE TABLE knowledge (seq int, source_type text, row int, v_pos int, l_pos int, "
               "updated_at timestamptz NOT NULL DEFAULT clock_timestamp())")
    for seq, (source_type, row, v, lex, _) in enumerate(items):
        pg.execute("INSERT INTO knowledge (seq, source_type, row, v_pos, l_pos) VALUES (%s, %s, %s, %s, %s)",
                   (seq, source_type, row, v, lex))
    clock_ms = int(pg.execute("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)").fetchone()[0])
    ages = {}
    for seq, (source_type, row, _, _, age) in enumerate(items):
        if source_type == "memory":
            age_ms = round((half_life if age == "h" else age) * 86_400_000)
            pg.execute("UPDATE knowledge SET updated_at = to_timestamp(%s / 1000.0) WHERE seq = %s",
                       (clock_ms - age_ms, seq))
            ages[row] = age_ms / 86_400_000
    return clock_ms, np.array([ages[r] for r in sorted(ages)])


def _candidates(items) -> Candidates:
    def channel(slot):
        listed = sorted((it for it in items if it[slot] is not None), key=lambda it: it[slot])
        return tuple(Candidate(it[0], it[1], 1.0 - it[slot] / 100) for it in listed)

    return Candidates(channel(2), channel(3))


def _engine_order(items, knobs, ages):
    """Both engine paths' order of the items (as seq numbers): the reference path's, checked by the fast path's."""
    cands = _candidates(items)
    seq_of = {(it[0], it[1]): seq for seq, it in enumerate(items)}
    order = [seq_of[(f.source_type, f.row)] for f in fuse(cands, knobs, len(items), ages)]
    groups = [{(it[0], it[1])} for it in items]
    fast = expected_positions(plan_query(cands, groups, ages), SettingsBatch.from_knobs([knobs]), len(items))[0]
    assert [seq for _, seq in sorted(zip(fast.tolist(), range(len(items))))] == order
    return order


@pytest.mark.parametrize("case", CASES)
def test_engine_ranks_blended_ties_as_soat_on_a_real_clock(pg, case):
    rrf_k, items = CASES[case]
    for h in HALF_LIVES:
        knobs = Knobs(rrf_k=rrf_k, recency_half_life_days=h)
        clock_ms, ages = _seed(pg, items, h)
        time.sleep(0.005)  # the search follows the writes, as every search does
        ranked = pg.execute(SOAT_RANKING, {"k": rrf_k, "h": h}).fetchall()
        assert ranked[0][1] > clock_ms, "the search must come after the clock reading"
        want = [seq for seq, _, _ in ranked]
        assert _engine_order(items, knobs, ages) == want, (case, h)
        if h > 0:  # the blend leaves an exact tie at nominal ages involving a memory: only the delay decides it
            nominal = fuse(_candidates(items), knobs, len(items), ages)
            scores = [f.score for f in nominal]
            assert any(f.source_type == "memory" and scores.count(f.score) > 1 for f in nominal), (case, h)
