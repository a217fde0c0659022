"""Every registry metric against a reference implementation (pytrec_eval, trec_eval's code; ir_measures reports
the same numbers), on generated qrels and ranked lists with graded items, ties and multi-chunk documents.

The reference reads the TREC run file `rqsweep export` writes (rqsweep.report.export.run_lines). Where SOAT's
conventions differ from trec_eval's, the tests below state the difference and check it.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from rqsweep import metrics
from rqsweep.report.export import run_lines

pytrec_eval = pytest.importorskip("pytrec_eval")

# registry family or metric -> trec_eval's measure (with the cut-off appended: P.5, ndcg_cut.10, ...)
REFERENCE = {"recall": "recall", "precision": "P", "hit": "success", "ndcg": "ndcg_cut", "mrr": "recip_rank",
             "r_precision": "Rprec"}
CUTOFFS = (1, 3, 5, 10)
DOCUMENTS = [f"doc-{i:02d}" for i in range(30)]
MEMORIES = [f"mem-{i:02d}" for i in range(10)]


def registry_names() -> list[str]:
    return [*(f"{f}_at_{k}" for f in metrics._FAMILIES for k in CUTOFFS), *metrics._METRICS]


def measure(name: str) -> tuple[str, str]:
    """trec_eval's measure for a registry name, and the key its result carries."""
    family, _, k = name.rpartition("_at_")
    if family in metrics._FAMILIES:
        return f"{REFERENCE[family]}.{k}", f"{REFERENCE[family]}_{k}"
    return REFERENCE[name], REFERENCE[name]


def generated(seed: int, n_queries: int = 300):
    """qrels (query -> key -> grade 0..3) and SOAT ranked lists (query -> the key each slot holds): documents
    hold several slots (their chunks), memories one; some lists are empty (nothing returned)."""
    rng = np.random.default_rng(seed)
    qrels, lists = {}, {}
    for i in range(n_queries):
        qid = f"q{i:03d}"
        judged = rng.choice(DOCUMENTS + MEMORIES, size=int(rng.integers(1, 7)), replace=False)
        grades = rng.integers(0, 4, size=len(judged))
        grades[0] = max(grades[0], 1)  # the golden set keeps a query only with an item graded 1 or more
        qrels[qid] = dict(zip(judged.tolist(), grades.tolist()))
        slots: list[str] = []
        for _ in range(int(rng.integers(0, 11))):
            pool = [*DOCUMENTS[:12], *(m for m in MEMORIES if m not in slots)]
            if slots and rng.random() < 0.3:
                pool = [k for k in slots if k.startswith("doc")] or pool  # another chunk of a listed document
            slots.append(str(rng.choice(pool)))
        lists[qid] = slots
    return qrels, lists


def rqsweep_values(qrels, lists, names, level):
    """What a run computes: positions of each relevant-or-graded item's first slot, scored with its grades."""
    ids = list(qrels)
    expected = {q: [k for k, g in qrels[q].items() if g > 0] for q in ids}
    positions = [[lists[q].index(k) + 1 if k in lists[q] else None for k in expected[q]] for q in ids]
    outcomes = pl.DataFrame({
        "setting_id": ["s"] * len(ids), "query_id": ids,
        "positions": pl.Series(positions, dtype=pl.List(pl.Int64)),
        "error": pl.Series([None] * len(ids), dtype=pl.String),
        "tie_sensitive": pl.Series([None] * len(ids), dtype=pl.Boolean),
        "numeric_sensitive": pl.Series([None] * len(ids), dtype=pl.Boolean)})
    grades = {q: [qrels[q][k] for k in expected[q]] for q in ids}
    return metrics.score_queries(outcomes, names, grades, level)


def reference_values(qrels, lists, names, level, lines=run_lines):
    run: dict[str, dict[str, float]] = {}
    for q, slots in lists.items():
        for line in lines(q, slots, "t"):
            qid, _, doc, _, score, _ = line.split()
            run.setdefault(qid, {})[doc] = float(score)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {measure(n)[0] for n in names}, relevance_level=level)
    return evaluator.evaluate(run)


def test_every_registry_metric_has_a_reference_measure():
    assert set(REFERENCE) == set(metrics._FAMILIES) | set(metrics._METRICS)


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("seed", [0, 1])
def test_every_registry_metric_equals_trec_eval_per_query(seed, level):
    qrels, lists = generated(seed)
    names = registry_names()
    ours = rqsweep_values(qrels, lists, names, level)
    reference = reference_values(qrels, lists, names, level)
    assert sum(1 for s in lists.values() if len(s) != len(set(s))) > 30  # multi-chunk documents are exercised
    for name in names:
        _, key = measure(name)
        for row in ours.select("query_id", name).iter_rows():
            qid, value = row
            # trec_eval leaves out a query its run does not hold; SOAT's eval scores a search that returned
            # nothing as a miss, 0 on every metric.
            want = reference[qid][key] if qid in reference else 0.0
            assert value == pytest.approx(want, abs=1e-12), (name, qid, lists[qid], qrels[qid])


def test_the_averages_count_queries_that_returned_nothing_where_trec_eval_drops_them():
    qrels, lists = generated(0)
    empty = [q for q, s in lists.items() if not s]
    assert empty
    reference = reference_values(qrels, lists, ["mrr"], 1)
    ours = rqsweep_values(qrels, lists, ["mrr"], 1)["mrr"]
    assert set(reference) == set(lists) - set(empty)
    trec_mean = np.mean([r["recip_rank"] for r in reference.values()])
    assert ours.mean() == pytest.approx(trec_mean * len(reference) / len(lists))
    assert ours.mean() < trec_mean


def test_soat_counts_every_slot_of_a_document_where_a_document_level_run_would_not():
    # doc-a's two chunks take slots 1 and 2; the relevant doc-b is at slot 3: SOAT's rank is 3.
    qrels, lists = {"q": {"doc-b": 1}}, {"q": ["doc-a", "doc-a", "doc-b"]}
    assert rqsweep_values(qrels, lists, ["mrr"], 1)["mrr"].to_list() == [1 / 3]
    assert reference_values(qrels, lists, ["mrr"], 1)["q"]["recip_rank"] == 1 / 3

    def document_level(q, slots, tag):  # one line per document, ranks closed up
        unique = list(dict.fromkeys(slots))
        return [f"{q} Q0 {k} {i} {len(unique) - i} {tag}" for i, k in enumerate(unique, 1)]

    assert reference_values(qrels, lists, ["mrr"], 1, document_level)["q"]["recip_rank"] == 1 / 2


def test_soat_keeps_the_servers_order_among_tied_scores_where_trec_eval_sorts_them_by_doc_id():
    # SOAT returned doc-a then doc-b with one score; trec_eval puts the greater doc id first.
    qrels, lists = {"q": {"doc-a": 1}}, {"q": ["doc-a", "doc-b"]}
    assert rqsweep_values(qrels, lists, ["mrr"], 1)["mrr"].to_list() == [1.0]
    assert reference_values(qrels, lists, ["mrr"], 1)["q"]["recip_rank"] == 1.0  # the export's decreasing scores

    def tied(q, slots, tag):
        return [f"{q} Q0 {k} {i} 0.5 {tag}" for i, k in enumerate(slots, 1)]

    assert reference_values(qrels, lists, ["mrr"], 1, tied)["q"]["recip_rank"] == 1 / 2
    # On the generated lists, with scores tied in runs as SOAT's fused scores tie: the export's scores give
    # rqsweep's values for every query, the raw scores another value for some.
    qrels, lists = generated(1)
    rng = np.random.default_rng(5)
    scores = {q: np.sort(rng.integers(0, 3, size=len(s)))[::-1] for q, s in lists.items()}

    def raw(q, slots, tag):
        return [line.rsplit(" ", 2)[0] + f" {scores[q][i]} {tag}" for i, line in enumerate(run_lines(q, slots, tag))]

    ours = dict(rqsweep_values(qrels, lists, ["mrr"], 1).select("query_id", "mrr").iter_rows())
    exported = reference_values(qrels, lists, ["mrr"], 1)
    with_ties = reference_values(qrels, lists, ["mrr"], 1, raw)
    assert all(exported[q]["recip_rank"] == pytest.approx(ours[q]) for q in exported)
    assert sum(with_ties[q]["recip_rank"] != pytest.approx(ours[q]) for q in with_ties) > 10


def test_ndcg_ignores_the_relevance_level_in_both():
    qrels, lists = {"q": {"doc-a": 1, "doc-b": 3}}, {"q": ["doc-a", "doc-b"]}
    at_1 = rqsweep_values(qrels, lists, ["ndcg_at_10"], 1)["ndcg_at_10"].to_list()
    at_3 = rqsweep_values(qrels, lists, ["ndcg_at_10"], 3)["ndcg_at_10"].to_list()
    assert at_1 == at_3 == [pytest.approx(reference_values(qrels, lists, ["ndcg_at_10"], 3)["q"]["ndcg_cut_10"])]
