"""Cross-validation of the chosen setting: folds stratified by slice, picks on k-1 folds, scores on the held-out one."""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl
import pytest

from rqsweep.backends import BACKENDS
from rqsweep.config import Constraint, Validation, load_config
from rqsweep.errors import InputError
from rqsweep.golden import OVERALL
from rqsweep.decide.cross_validation import CrossValidation, FoldSums, Gain, assign_folds, cross_validate, summary_lines
from tests.minijob import write_job

B, S, X = "k60_moff_h0.0", "k20_moff_h0.0", "k1_moff_h0.0"  # baseline, steady gain, spike on one fold


def golden(sizes: dict[str, int]) -> pl.DataFrame:
    return pl.DataFrame([{"query_id": f"{s}-{i:02d}", "slice": s} for s, n in sizes.items() for i in range(n)])


def per_query(queries: pl.DataFrame, values: dict[str, dict[str, dict[str, float | None]]]) -> pl.DataFrame:
    """Rows from setting -> metric -> query_id -> value (None: the search failed)."""
    rows = []
    for sid, by_metric in values.items():
        for q, s in queries.select("query_id", "slice").rows():
            cells = {m: by_query[q] for m, by_query in by_metric.items()}
            failed = any(v is None for v in cells.values())
            rows.append({"setting_id": sid, "query_id": q, "slice": s, "error": "HTTP 503" if failed else None,
                         **cells})
    return pl.DataFrame(rows, schema_overrides={"error": pl.String, **{m: pl.Float64 for m in by_metric}})


def validate(rows: pl.DataFrame, order: list[str], baseline: str, objective: tuple[str, str], constraints,
             slices: list[str], metrics: list[str], settings: Validation):
    """Cross-validation as a run's end does it: fold sums gathered from the rows, the folds' choices read back."""
    sums = FoldSums(rows.select("query_id", "slice").unique("query_id"), slices, metrics, settings,
                    rows["setting_id"].n_unique())
    for _, chunk in rows.group_by("setting_id", maintain_order=True):  # a setting at a time, as a run's parts
        sums.add(chunk)
    assert sums.settings == order
    return cross_validate(sums, lambda ids: rows.filter(pl.col("setting_id").is_in(ids)), baseline, objective,
                          constraints)


def fold_members(queries: pl.DataFrame, folds: dict[str, int], fold: int, slice_: str) -> list[str]:
    return [q for q, s in queries.rows() if folds[q] == fold and s == slice_]


def test_folds_hold_each_slice_in_proportion_and_the_seed_fixes_them():
    queries = golden({"a": 23, "b": 12, "c": 3})
    folds = assign_folds(queries, 5, seed=0)
    assert folds == assign_folds(queries.reverse(), 5, seed=0)  # the input's row order does not matter
    assert folds != assign_folds(queries, 5, seed=1)
    by_fold = Counter(folds.values())
    assert sorted(by_fold.values()) == [7, 7, 8, 8, 8]  # 38 queries: sizes differ by one
    for s, n in {"a": 23, "b": 12, "c": 3}.items():
        counts = Counter(f for q, f in folds.items() if q.startswith(f"{s}-"))
        # Each fold holds floor or ceil of n / 5 of the slice; slice c, smaller than the folds, spreads over 3.
        assert all(c in (n // 5, -(-n // 5)) for c in (counts.get(f, 0) for f in range(5)))
        assert sum(counts.values()) == n
    assert len({f for q, f in folds.items() if q.startswith("c-")}) == 3


def overfitting_run() -> tuple[pl.DataFrame, dict[str, int]]:
    """Slice a: 10 queries, slice b: 5; 5 folds of 2 a-queries and 1 b-query each.

    Baseline B: MRR 0.5 everywhere, except 0 on fold 0's two a-queries.
    S: B's values, but 0.75 on every b-query: +0.25 on each of 5 queries, a steady +1.25 in all.
    X: 1.0 on fold 0's two a-queries (+1.0 each), 0.25 on the other eight (-0.25 each), 1.0 on every b-query
       (+0.5 each): +2.5 in all, the in-sample best, but +0 on each fold other than fold 0.
    """
    queries = golden({"a": 10, "b": 5})
    folds = assign_folds(queries, 5, seed=0)
    spike = fold_members(queries, folds, 0, "a")
    base = {q: 0.0 if q in spike else 0.5 for q in folds}
    steady = {q: 0.75 if q.startswith("b-") else base[q] for q in folds}
    spiky = {q: 1.0 if q in spike or q.startswith("b-") else 0.25 for q in folds}
    return per_query(queries, {B: {"mrr": base}, S: {"mrr": steady}, X: {"mrr": spiky}}), folds


def test_the_in_sample_best_that_overfits_one_fold_gains_less_held_out():
    rows, folds = overfitting_run()
    cv = validate(rows, [B, S, X], B, ("mrr", OVERALL), [], ["a", "b"], ["mrr"], Validation(5, 0))
    assert cv.in_sample_best == X
    # Fold 0 held out: X's training gain is 0 (its spike is held out), S's +1.0: S. Every other fold keeps
    # the spike in its training part: X's +2.5 beats S's +1.0.
    assert cv.choices == (S, X, X, X, X)
    assert cv.agreement() == (X, 4)
    assert cv.held_out_queries == (3, 3, 3, 3, 3)
    overall, a, b = cv.gains[OVERALL]["mrr"], cv.gains["a"]["mrr"], cv.gains["b"]["mrr"]
    # In-sample: X's +2.5 over 15 queries; held out: S on fold 0 (+0.25 on its b-query, 0 on its a-queries),
    # X on folds 1-4 (-0.25 -0.25 +0.5 = 0 each).
    assert overall.in_sample_gain == pytest.approx(2.5 / 15)
    assert overall.held_out_gain == pytest.approx(0.25 / 15)
    assert overall.baseline == pytest.approx(6.5 / 15) and overall.queries == 15
    assert a.in_sample_gain == pytest.approx(0.0) and a.held_out_gain == pytest.approx(-2.0 / 10)
    assert b.in_sample_gain == pytest.approx(0.5) and b.held_out_gain == pytest.approx(2.25 / 5)
    lines = summary_lines(cv, "MRR")
    assert lines[0] == ("Held-out gain (5-fold CV, stratified by slice): overall MRR +0.0167 (in-sample +0.1667); "
                        "folds agree on the setting 4 of 5")
    assert lines[1] == f"  4 of 5 folds chose {X} (as on all queries); by fold: 1: {S}; 2: {X}; 3: {X}; 4: {X}; 5: {X}"


def test_a_fold_without_a_feasible_setting_keeps_the_baseline():
    # Two folds, each one a-query and one b-query. Every slice's MRR must reach 0.6: the baseline (0.5) never
    # does; Y does on fold 0's queries but collapses b on fold 1's, so on all of them too.
    queries = golden({"a": 2, "b": 2})
    folds = assign_folds(queries, 2, seed=3)
    fold1_b = fold_members(queries, folds, 1, "b")
    y = {q: 0.0 if q in fold1_b else 1.0 for q in folds}
    rows = per_query(queries, {B: {"mrr": dict.fromkeys(folds, 0.5)}, "k5_moff_h0.0": {"mrr": y}})
    floor = [Constraint("mrr", "*", min=0.6)]
    cv = validate(rows, [B, "k5_moff_h0.0"], B, ("mrr", OVERALL), floor, ["a", "b"], ["mrr"],
                        Validation(2, 3))
    assert cv.in_sample_best is None
    # Fold 0 trains on fold 1's queries, where Y's b is 0: nothing feasible. Fold 1 trains on fold 0's: Y.
    assert cv.choices == (None, "k5_moff_h0.0")
    a, b, overall = cv.gains["a"]["mrr"], cv.gains["b"]["mrr"], cv.gains[OVERALL]["mrr"]
    assert a.held_out == pytest.approx(0.75) and b.held_out == pytest.approx(0.25)
    assert overall.held_out_gain == pytest.approx(0.0) and overall.in_sample_gain == pytest.approx(0.0)
    assert summary_lines(cv)[1] == (f"  1 of 2 folds chose {B} (as on all queries); by fold: "
                                    f"1: nothing feasible, the baseline {B} stands; 2: k5_moff_h0.0")


def test_a_failed_search_makes_a_setting_incomplete_on_the_folds_that_train_on_it():
    queries = golden({"a": 4})
    folds = assign_folds(queries, 2, seed=0)
    failed = fold_members(queries, folds, 0, "a")[0]
    better = {q: None if q == failed else 1.0 for q in folds}
    rows = per_query(queries, {B: {"mrr": dict.fromkeys(folds, 0.5)}, "k5_moff_h0.0": {"mrr": better}})
    cv = validate(rows, [B, "k5_moff_h0.0"], B, ("mrr", OVERALL), [], ["a"], ["mrr"], Validation(2, 0))
    assert cv.in_sample_best == B  # incomplete on all queries: never best
    assert cv.choices == ("k5_moff_h0.0", B)
    gain = cv.gains[OVERALL]["mrr"]
    # Held out: fold 0's queries by the better setting (one failed: left out), fold 1's by the baseline.
    assert gain.held_out == pytest.approx((1.0 + 0.5 + 0.5) / 3) and gain.baseline == 0.5


def reference_choice(rows: pl.DataFrame, order: list[str], baseline: str, constraints, train: set[str]):
    """The best feasible setting on `train`'s queries, setting by setting: polars means, each constraint checked
    in plain Python, the highest MRR winning (the earliest on a tie, unless the baseline ties)."""
    part = rows.filter(pl.col("query_id").is_in(sorted(train)))
    ok = pl.col("error").is_null()
    aggregations = [pl.col(m).filter(ok).mean() for m in ("mrr", "recall_at_10")] + [(~ok).sum().alias("errors")]
    means: dict = {}
    errors: dict = {}
    for frame in (part.group_by("setting_id", "slice").agg(aggregations),
                  part.group_by("setting_id").agg(aggregations).with_columns(pl.lit(OVERALL).alias("slice"))):
        for r in frame.iter_rows(named=True):
            means.setdefault(r["setting_id"], {})[r["slice"]] = r
            if r["slice"] == OVERALL:
                errors[r["setting_id"]] = r["errors"]
    present = sorted(set(part["slice"].to_list()))

    def feasible(sid: str) -> bool:
        if errors[sid]:
            return False
        for c in constraints:
            for s in present if c.slice == "*" else [c.slice]:
                value, base = means[sid][s][c.metric], means[baseline][s][c.metric]
                if value is None or (c.min is not None and c.min - value - 1e-9 > 0) or (
                        c.max_drop is not None and base is not None and base - value - c.max_drop - 1e-9 > 0):
                    return False
        return True

    best = None
    for sid in order:
        value = means[sid][OVERALL]["mrr"]
        if feasible(sid) and value is not None and (
                best is None or value > means[best][OVERALL]["mrr"]
                or (value == means[best][OVERALL]["mrr"] and sid == baseline)):
            best = sid
    return best


def test_the_vectorised_folds_choose_what_choose_best_chooses_over_every_setting():
    # 300 settings x 40 queries of discrete reciprocal ranks (many ties), a few failed searches, and
    # constraints that reject most settings: each fold's choice must match the plain computation.
    rng = np.random.default_rng(11)
    queries = golden({"a": 17, "b": 15, "c": 8})
    order = [f"k{k}_moff_h0.0" for k in range(1, 301)]
    ranks = rng.integers(0, 6, size=(len(order), queries.height))
    rows = pl.DataFrame({
        "setting_id": np.repeat(order, queries.height), "query_id": queries["query_id"].to_list() * len(order),
        "slice": queries["slice"].to_list() * len(order),
        "mrr": np.where(ranks > 0, 1 / np.maximum(ranks, 1), 0.0).ravel(),
        "recall_at_10": (ranks > 0).astype(float).ravel(),
        "error": pl.Series(np.where(rng.random(ranks.size) < 0.002, "timeout", "")).replace("", None),
    })
    baseline = order[150]
    constraints = [Constraint("recall_at_10", "*", max_drop=0.1), Constraint("mrr", "c", min=0.3)]
    cv = validate(rows, order, baseline, ("mrr", OVERALL), constraints, ["a", "b", "c"],
                        ["mrr", "recall_at_10"], Validation(5, 2))
    folds = assign_folds(queries, 5, seed=2)
    for f in range(5):
        train = {q for q, g in folds.items() if g != f}
        assert cv.choices[f] == reference_choice(rows, order, baseline, constraints, train)
    assert cv.in_sample_best == reference_choice(rows, order, baseline, constraints, set(folds))
    assert len({c for c in cv.choices if c}) >= 2  # the data is noisy enough for the folds to disagree


def test_validation_is_optional_and_checked(tmp_path):
    assert load_config(write_job(tmp_path / "default"), BACKENDS).validation == Validation(5, 0)
    assert load_config(write_job(tmp_path / "off", validation=False), BACKENDS).validation is None
    assert load_config(write_job(tmp_path / "zero", validation={"folds": 0}), BACKENDS).validation is None
    assert load_config(write_job(tmp_path / "ten", validation={"folds": 10, "seed": 4}), BACKENDS).validation == Validation(10, 4)
    for value, where, words in [({"folds": 1}, "validation.folds", "1: must be >= 2"),
                                ({"folds": "5"}, "validation.folds", "'5': expected int"),
                                ({"seed": -1}, "validation.seed", "-1: must be >= 0"),
                                ({"fold": 5}, "validation.fold", "unknown key"),
                                (3, "validation", "expected a mapping")]:
        with pytest.raises(InputError) as err:
            load_config(write_job(tmp_path / "bad", validation=value), BACKENDS)
        assert err.value.file.endswith("job.yaml") and err.value.where == where and words in err.value.problem


@pytest.mark.parametrize("held_out, says_why", [(0.62, True), (0.60, False), (0.55, False)],
                         ids=["above", "equal", "below"])
def test_a_held_out_gain_above_the_in_sample_one_says_why(held_out, says_why):
    # Folds that chose different settings can, as a mix, beat the one in-sample best; equal is no surprise.
    cv = CrossValidation(2, 0, ("mrr", OVERALL), "k60_moff_h0.0", "k5_moff_h0.0", ("k5_moff_h0.0", "k2_moff_h0.0"),
                         (5, 5), {OVERALL: {"mrr": Gain(10, 0.5, held_out, 0.60)}})
    lines = summary_lines(cv, "MRR")
    assert lines[0].endswith("folds agree on the setting 1 of 2")
    assert any("above the in-sample one because the folds did not all make the in-sample choice" in line
               for line in lines) is says_why


def paraphrases(groups: int, size: int = 2) -> pl.DataFrame:
    """`groups` groups of `size` queries, the queries of a group paraphrases of one answer (one expected key),
    slices alternating by group."""
    return pl.DataFrame([{"query_id": f"q{p:03d}{i}", "slice": "ab"[p % 2], "expected": [f"key-{p}"]}
                         for p in range(groups) for i in range(size)])


def test_grouped_folds_never_split_the_queries_of_an_expected_key():
    from rqsweep.decide.cross_validation import expected_groups

    queries = paraphrases(30)
    # Two pairs joined through a third key: q0000 and q0010 both also expect `shared`, so four queries are one group.
    queries = queries.with_columns(pl.when(pl.col("query_id").is_in(["q0000", "q0010"]))
                                   .then(pl.col("expected").list.concat(pl.lit(["shared"])))
                                   .otherwise(pl.col("expected")).alias("expected"))
    groups = expected_groups(queries)
    assert groups["q0000"] == groups["q0001"] == groups["q0010"] == groups["q0011"] != groups["q0020"]
    folds = assign_folds(queries, 5, seed=3, groups=groups)
    for g in set(groups.values()):
        assert len({folds[q] for q, h in groups.items() if h == g}) == 1
    sizes = sorted(Counter(folds.values()).values())
    assert sum(sizes) == 60 and sizes[-1] - sizes[0] <= 2  # whole groups of 2: near-equal folds
    assert assign_folds(queries, 5, seed=3) != folds  # ungrouped deals queries, and splits pairs


def test_a_paraphrase_split_across_folds_inflates_the_ungrouped_held_out_gain():
    """A leak made on purpose: 8 groups of 10 paraphrases, 200 settings whose values are pure noise shared by a
    group's queries (paraphrases rank alike), the baseline at 0.5. No setting is better than the baseline on every
    group, but a fold's choice tuned on some paraphrases scores well on the others: ungrouped, the held-out gain is
    inflated; grouped by expected key, it is not."""
    queries = paraphrases(8, 10)
    rng = np.random.default_rng(2)
    settings = [f"k{k}_moff_h0.0" for k in range(1, 201)]
    values = {B: {"mrr": {q: 0.5 for q in queries["query_id"]}}}
    for sid in settings:
        by_group = rng.choice([0.0, 1.0], size=8)
        assert by_group.mean() < 1  # no setting is truly better everywhere
        values[sid] = {"mrr": {q: float(by_group[int(q[1:4])]) for q in queries["query_id"]}}
    rows = per_query(queries, values)
    order = [B, *settings]

    def held_out(group: str | None) -> float:
        sums = FoldSums(queries, ["a", "b"], ["mrr"], Validation(5, 0, group), len(order))
        for _, chunk in rows.group_by("setting_id", maintain_order=True):
            sums.add(chunk)
        cv = cross_validate(sums, lambda ids: rows.filter(pl.col("setting_id").is_in(ids)), B, ("mrr", OVERALL), [])
        assert cv.grouped_by == (group or "query")
        return cv.gains[OVERALL]["mrr"].held_out_gain

    ungrouped, grouped = held_out(None), held_out("expected")
    assert ungrouped > 0.3 and grouped <= 0.0


def test_a_grouped_test_counts_a_group_once():
    from rqsweep.decide.significance import paired_test

    # Ten queries gain 0.1, but they are two groups of five paraphrases: two observations, whose signs flip to
    # a mean as large in 2 of their 4 labellings.
    d = np.full(10, 0.1)
    alone, grouped = paired_test(d), paired_test(d, groups=np.repeat([0, 1], 5))
    assert alone.p_value < 0.01 and grouped.p_value == pytest.approx(0.5, abs=0.02)
    assert grouped.mean_difference == alone.mean_difference


def test_validation_group_must_be_query_or_expected(tmp_path):
    config = write_job(tmp_path / "job", validation={"folds": 5, "group": "answer"})
    with pytest.raises(InputError, match=r"validation\.group.*'answer'.*query.*expected"):
        load_config(config, BACKENDS)
    grouped = load_config(write_job(tmp_path / "ok", validation={"group": "expected"}), BACKENDS).validation
    assert grouped == Validation(5, 0, "expected")
