"""Routing: one setting per slice, guarded and validated held out by nested cross-validation on the grid."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from rqsweep.config import Constraint, Validation
from rqsweep.decide.constraints import choose_best
from rqsweep.golden import OVERALL
from rqsweep.decide.choices import Chooser, fold_sum, guard
from rqsweep.decide.routing import Route, route
from rqsweep.decide.cross_validation import FoldSums, Rule, assign_folds
from tests.test_validation import fold_members, golden, per_query

B, S, X, N = "k60_moff_h0.0", "k20_moff_h0.0", "k1_moff_h0.0", "k5_moff_h0.0"
DROP = [Constraint("mrr", "*", max_drop=0.1)]


def routing_of(rows: pl.DataFrame, constraints=(), folds: int = 5, seed: int = 0):
    queries = rows.select("query_id", "slice").unique("query_id", maintain_order=True)
    slices = sorted(set(queries["slice"].to_list()))
    sums = FoldSums(queries, slices, ["mrr"], Validation(folds, seed), rows["setting_id"].n_unique())
    for _, chunk in rows.group_by("setting_id", maintain_order=True):
        sums.add(chunk)
    return route(sums, lambda ids: rows.filter(pl.col("setting_id").is_in(ids)), B, ("mrr", OVERALL),
                 list(constraints))


def leak_run():
    """Slices a and b, 10 queries each; 5 folds of 2 a-queries and 2 b-queries.

    B: 0.5 everywhere. S: 0.55 on every a-query (+0.05 each, +0.5 in all), 0.25 on every b-query (so S breaks
    b's max_drop: infeasible globally, not as a's route). X: 1.0 on fold 0's two a-queries (+1.0 in all),
    0.5 on the other a-queries, 0.35 on the b-queries (globally infeasible too): on all queries X is a's best,
    though its whole gain sits in fold 0.
    """
    queries = golden({"a": 10, "b": 10})
    folds = assign_folds(queries, 5, seed=0)
    spike = fold_members(queries, folds, 0, "a")
    base = dict.fromkeys(folds, 0.5)
    steady = {q: 0.55 if q.startswith("a-") else 0.25 for q in folds}
    spiky = {q: 1.0 if q in spike else 0.5 if q.startswith("a-") else 0.35 for q in folds}
    return per_query(queries, {B: {"mrr": base}, S: {"mrr": steady}, X: {"mrr": spiky}}), folds


def test_a_folds_own_queries_never_choose_its_routing():
    rows, folds = leak_run()
    routing = routing_of(rows, DROP)
    # Whoever sees fold 0's queries picks X for slice a: the leak this case makes visible.
    assert routing.routes["a"].own == X
    # Fold 0's routing is chosen without them: S, which holds on every other fold (4 of 4). A leak would have
    # sent fold 0's a-queries to X and shown +0.5 on each.
    assert routing.fold_routes[0]["a"] == S
    # Folds 1-4 train with fold 0: a's own best there is X, which wins only the inner fold holding the spike
    # (1 of 4), so the guard keeps a on the global setting: the baseline, since S breaks b's max_drop.
    assert routing.fold_globals == (B,) * 5
    assert [r["a"] for r in routing.fold_routes[1:]] == [B] * 4
    n, base, global_, routed = routing.held_out("a")
    assert n == 10 and routed - base == pytest.approx(2 * 0.05 / 10) and global_ == base
    # On all queries the guard compares fold by fold: only the fold holding the spike is won (by S, chosen
    # without it); on the others, X (chosen with the spike) merely ties the baseline.
    assert (routing.routes["a"].folds_won, routing.routes["a"].folds_compared) == (1, 5)
    assert not routing.routes["a"].routed and routing.routes["a"].setting == B


def test_changing_a_folds_queries_never_changes_that_folds_choices():
    rng = np.random.default_rng(5)
    queries = golden({"a": 12, "b": 9, "c": 6})
    order = [B, *(f"k{k}_moff_h{h}.0" for k in (1, 5, 20) for h in (0, 30))]
    ranks = rng.integers(0, 4, size=(len(order), queries.height))

    def rows_for(r):
        return pl.DataFrame({
            "setting_id": np.repeat(order, queries.height), "query_id": queries["query_id"].to_list() * len(order),
            "slice": queries["slice"].to_list() * len(order), "error": pl.Series([None] * r.size, dtype=pl.String),
            "mrr": np.where(r > 0, 1 / np.maximum(r, 1), 0.0).ravel()})

    before = routing_of(rows_for(ranks), DROP)
    folds = assign_folds(queries, 5, seed=0)
    fold = np.array([folds[q] for q in queries["query_id"]])
    changed_anything = False
    for f in range(5):
        other = ranks.copy()
        other[:, fold == f] = rng.integers(0, 4, size=(len(order), int((fold == f).sum())))
        after = routing_of(rows_for(other), DROP)
        assert after.fold_routes[f] == before.fold_routes[f] and after.fold_globals[f] == before.fold_globals[f]
        changed_anything |= after.fold_routes != before.fold_routes or after.routes != before.routes
    assert changed_anything  # the new values do move the other folds' choices: the invariance is not vacuous


def small_slice_run(noisy: bool):
    """Slice a: 20 queries where nothing moves; slice s: 3 queries (3 folds hold one each).

    N, noisy: one s-query 0.5 -> 1.0, another 0.5 -> 0.25: +0.25 in-sample on 3 queries, luck of one query.
    N, steady: every s-query 0.5 -> 0.75.
    """
    queries = golden({"a": 20, "s": 3})
    s_queries = [q for q in queries["query_id"] if q.startswith("s-")]
    base = dict.fromkeys(queries["query_id"], 0.5)
    if noisy:
        other = {**base, s_queries[0]: 1.0, s_queries[1]: 0.25}
    else:
        other = {**base, **dict.fromkeys(s_queries, 0.75)}
    # N costs slice a a little everywhere, so the global choice stays the baseline.
    other |= {q: 0.45 for q in queries["query_id"] if q.startswith("a-")}
    return per_query(queries, {B: {"mrr": base}, N: {"mrr": other}})


def test_the_guard_keeps_a_small_slice_whose_gain_is_noise_on_the_global_setting():
    routing = routing_of(small_slice_run(noisy=True))
    s = routing.routes["s"]
    assert s.own == N  # in-sample, N is the small slice's best
    assert s.folds_compared == 3 and s.folds_won == 0 and not s.routed and s.setting == B
    assert routing.global_setting == B
    assert all(r["s"] == B for r in routing.fold_routes if "s" in r)
    n, base, global_, routed = routing.held_out("s")
    assert n == 3 and routed == base


def test_the_guard_routes_a_small_slice_whose_gain_holds_on_every_fold():
    routing = routing_of(small_slice_run(noisy=False))
    s = routing.routes["s"]
    assert (s.own, s.routed, s.setting, s.folds_won, s.folds_compared) == (N, True, N, 3, 3)
    assert s.guard_gain == pytest.approx(0.25)
    n, base, global_, routed = routing.held_out(OVERALL)
    # Held out: each fold holding an s-query routes s on the other two such folds (2 of 2 won): +0.25 on each.
    assert n == 23 and global_ == base and routed - base == pytest.approx(0.75 / 23)


def test_routing_json_holds_each_slices_request_and_held_out_figures_the_per_query_table_gives(tmp_path):
    from rqsweep import job
    from rqsweep.knobs import Knobs
    from rqsweep.report.routing import read_routing
    from tests.minijob import STEADY_ENTITY_QUERIES, write_job

    config = write_job(tmp_path, extra_queries=STEADY_ENTITY_QUERIES,
                       constraints=[{"metric": "mrr", "slice": "*", "max_drop": 0.1}])
    out = job.run(config, quiet=True)
    data = read_routing(out.run_dir)
    queries = pl.read_parquet(out.run_dir / "queries.parquet")
    assert set(data["slices"]) == set(queries["slice"])
    for s, r in data["slices"].items():
        knobs = Knobs.from_id(r["setting_id"])
        assert r["request"]["rrf_k"] == knobs.rrf_k
        assert r["request"]["recency_half_life_days"] == knobs.recency_half_life_days
        assert r["request"].get("min_similarity") == knobs.min_similarity
        assert r["setting_id"] == (r["own_best"] if r["routed"] else data["global"]["setting_id"])
    assert Knobs.from_id("k5_m0.25_h30.0").request() == {"rrf_k": 5, "min_similarity": 0.25,
                                                         "recency_half_life_days": 30.0}
    assert "min_similarity" not in Knobs.from_id("k5_moff_h30.0").request()
    # Each query scored by the setting its fold's routing gave its slice, read back from queries.parquet.
    golden_queries = queries.select("query_id", "slice").unique("query_id")
    folds = assign_folds(golden_queries, data["held_out"]["folds"], data["held_out"]["seed"])
    mrr = {(sid, q): v for sid, q, v in queries.select("setting_id", "query_id", "mrr").rows()}
    routed, base = [], []
    for q, s in golden_queries.rows():
        f = folds[q]
        routed.append(mrr[(data["held_out"]["fold_routes"][f].get(s, data["held_out"]["fold_globals"][f]), q)])
        base.append(mrr[(data["baseline"], q)])
    overall = data["held_out"]["slices"][OVERALL]
    assert overall["queries"] == len(routed)
    assert overall["routing_gain"]["mean"] == pytest.approx(np.mean(routed) - np.mean(base))
    low, high = overall["routing_over_global"]["ci"]
    assert low <= overall["routing_over_global"]["mean"] <= high
    assert any(line.startswith("Routing held-out gain") for line in out.summary.splitlines())
    assert "One setting per slice (routing)" in (out.run_dir / "report.md").read_text()


def test_without_cross_validation_there_is_no_routing_and_the_report_says_why(tmp_path):
    from rqsweep import job
    from tests.minijob import write_job

    out = job.run(write_job(tmp_path, validation=False), quiet=True)
    assert not (out.run_dir / "routing.json").exists()
    assert "Routing held-out gain" not in out.summary
    assert "No routing table: the config turns cross-validation off" in (out.run_dir / "report.md").read_text()


def test_the_guard_keeps_a_slice_that_wins_exactly_half_its_folds_whatever_its_pooled_gain():
    """Slice s: 4 queries in 4 folds; N lifts two by 0.5 and costs the other two 0.1 (slice a pays for N, so the
    global choice stays the baseline). Without each fold N is still s's own best, and wins the two folds holding
    a lifted query: 2 of 4 folds, a pooled held-out gain of +0.2, and no strict majority."""
    queries = golden({"a": 20, "s": 4})
    s_queries = [q for q in queries["query_id"] if q.startswith("s-")]
    base = dict.fromkeys(queries["query_id"], 0.5)
    other = {**base, **{q: 0.4 for q in queries["query_id"] if q.startswith("a-")},
             s_queries[0]: 1.0, s_queries[1]: 1.0, s_queries[2]: 0.4, s_queries[3]: 0.4}
    routing = routing_of(per_query(queries, {B: {"mrr": base}, N: {"mrr": other}}))
    s = routing.routes["s"]
    assert routing.global_setting == B and s.own == N
    assert (s.folds_won, s.folds_compared) == (2, 4) and s.guard_gain == pytest.approx(0.2)
    assert not s.routed and s.setting == B


def test_a_slice_whose_own_best_only_ties_the_global_setting_stays_on_it_unguarded():
    """G lifts slice a and is the global choice; T ties G on slice s to the last query and costs a. Among the
    settings tied on s, the earlier one (T) is s's own best; a tie is no gain, so s keeps G, the guard not run."""
    queries = golden({"a": 10, "s": 5})
    base = dict.fromkeys(queries["query_id"], 0.5)
    lifted = {q: 0.75 for q in queries["query_id"] if q.startswith("s-")}
    g = {**base, **lifted, **{q: 0.6 for q in queries["query_id"] if q.startswith("a-")}}
    t = {**base, **lifted, **{q: 0.4 for q in queries["query_id"] if q.startswith("a-")}}
    routing = routing_of(per_query(queries, {B: {"mrr": base}, X: {"mrr": t}, S: {"mrr": g}}))
    assert routing.global_setting == S
    assert routing.routes["s"] == Route(S, S, False, 0, 0, None)


def reference_choice(sums: FoldSums, folds: tuple[int, ...], baseline: str, objective, constraints):
    """The choices on a part of the folds as the rule states them: `choose_best` on the fold sums of every metric,
    once for the global setting and once per slice with the constraints covering it."""
    total, successes, failures = sums.arrays()
    f = list(folds)
    rule = Rule(sums.settings, baseline, objective, constraints, sums.slices, sums.metrics)
    means = rule.means(total[:, :, f].sum(axis=2), successes[:, f].sum(axis=1), failures[:, f].sum(axis=1))
    checked = [s for s, n in zip(sums.slices, sums.members[f].sum(axis=0)) if n]
    chosen = choose_best(means, baseline, objective, constraints, checked).best or baseline
    own = {}
    for s in checked:
        covering = [c for c in constraints if c.slice in ("*", s)]
        best = choose_best(means, baseline, (objective[0], s), covering, [s]).best
        at_global = means.value(chosen, s, objective[0])
        beats = best is not None and means.value(best, s, objective[0]) > (-np.inf if at_global is None else at_global)
        own[s] = best if beats else chosen
    return chosen, own


CONSTRAINTS = [Constraint("mrr", "*", max_drop=0.1), Constraint("recall_at_10", "*", min=0.5),
               Constraint("recall_at_10", "a", max_drop=0.0), Constraint("mrr", "b", min=0.4),
               Constraint("mrr", OVERALL, min=0.3)]


@hsettings(max_examples=150, deadline=None)
@given(st.data())
def test_the_choices_on_any_part_of_the_folds_are_the_rules(data):
    """Few values (ties everywhere), failed searches, a slice too small for some folds, constraints on every slice,
    on one slice and on overall: the chooser's global and per-slice choices equal `choose_best`'s on every part of
    the folds, the empty part included."""
    sizes = data.draw(st.dictionaries(st.sampled_from("abc"), st.integers(1, 6), min_size=1))
    queries = golden(sizes)
    order = [B, *data.draw(st.lists(st.sampled_from([S, X, N, "k2_moff_h0.0", "k3_m0.5_h7.0"]), unique=True,
                                    min_size=1, max_size=4))]
    value = st.sampled_from([0.0, 0.25, 1 / 3, 0.5, 0.7, 1.0])
    values = {sid: {m: {q: data.draw(st.none() if data.draw(st.integers(0, 9)) == 0 else value) for q in
                        queries["query_id"]} for m in ("mrr", "recall_at_10")} for sid in order}
    rows = per_query(queries, values)
    constraints = data.draw(st.lists(st.sampled_from([c for c in CONSTRAINTS if c.slice in (*sizes, "*", OVERALL)]),
                                     unique=True, max_size=3))
    objective = ("mrr", data.draw(st.sampled_from([OVERALL, *sizes])))
    slices = sorted(sizes)
    sums = FoldSums(queries, slices, ["recall_at_5", "mrr", "recall_at_10"], Validation(data.draw(
        st.integers(2, 6)), 0), len(order))
    sums.add(rows.with_columns(pl.col("mrr").alias("recall_at_5")))
    chooser = Chooser(sums, B, objective, constraints)
    for r in range(sums.folds + 1):
        for folds in itertools.combinations(range(sums.folds), r):
            assert chooser.choose(folds) == reference_choice(sums, folds, B, objective, constraints)


@hsettings(max_examples=100, deadline=None)
@given(st.integers(1, 3), st.integers(2, 40), st.integers(2, 10), st.integers(1, 5), st.data())
def test_a_sum_over_some_folds_has_the_bits_of_numpys_sum_over_them(metrics, settings, folds, slices, data):
    """For two settings or more. A lone setting with one metric and one slice can differ past 7 folds (numpy
    then adds in pairs), and its choices do not depend on its sums: it is the only candidate."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    total = rng.random((metrics, settings, folds, slices)) * rng.integers(1, 50, (metrics, settings, folds, slices))
    part = tuple(sorted(data.draw(st.sets(st.integers(0, folds - 1)))))
    summed = fold_sum(np.ascontiguousarray(np.moveaxis(total, 2, 0)), part)
    assert np.array_equal(summed.view(np.int64), total[:, :, list(part)].sum(axis=2).view(np.int64))


@pytest.mark.parametrize("noisy", [False, True])
def test_routing_json_writes_routed_as_a_json_boolean(tmp_path, noisy):
    """A guarded slice's `routed` is a JSON true or false, never the string "True" or a truthy "False"."""
    from rqsweep.runfolder.tables import read_routing, write_routing

    write_routing(tmp_path, routing_of(small_slice_run(noisy=noisy)).record("run"))
    data = read_routing(tmp_path)
    assert data["slices"]["s"]["routed"] is (not noisy)
    assert data["slices"]["s"]["guard"]["folds_compared"] == 3


def test_a_routing_json_whose_routed_is_not_a_boolean_is_refused_naming_the_slice(tmp_path):
    from rqsweep.errors import InputError
    from rqsweep.runfolder.tables import read_routing, write_routing

    data = routing_of(small_slice_run(noisy=True)).record("run")
    data["slices"]["s"]["routed"] = "False"
    write_routing(tmp_path, data)
    with pytest.raises(InputError, match=r"slices\.s\.routed.*'False'"):
        read_routing(tmp_path)


def test_the_guard_wants_a_strict_majority_of_folds_and_a_pooled_gain_above_zero():
    # The guard slice routing and rule routing share, at its edges: half the folds won is not a majority, an exact
    # tie of means is not a win, a pooled gain of exactly zero does not route, and a fold with no mean counts as
    # compared but neither wins nor weighs in the pooled gain.
    assert guard([(0.6, 0.5, 10), (0.5, 0.6, 10)]) == (1, 2, 0.0, False)
    assert guard([(0.75, 0.5, 4), (0.5, 0.5, 4), (0.625, 0.5, 4)]) == (2, 3, 0.125, True)
    assert guard([(0.5, 0.5, 4), (0.5, 0.5, 4)]) == (0, 2, 0.0, False)
    assert guard([(0.75, 0.5, 4), (0.75, 0.5, 4), (0.0, 0.5, 4)]) == (2, 3, 0.0, False)
    assert guard([(0.75, 0.5, 4), (None, 0.5, 4), (0.5, 0.25, 4)]) == (2, 3, 0.25, True)
    assert guard([(0.75, 0.5, 4), (None, 0.5, 4), (None, None, 4)]) == (1, 3, 0.25, False)
    assert guard([]) == (0, 0, None, False)
