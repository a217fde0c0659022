"""Routing by rule: one threshold on a query feature, chosen inside slice routing's nested cross-validation with its
guard and the constraints, and applied alike by `apply_rules`, `rqsweep route` and the docs' TypeScript."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from rqsweep.backends.base import RankedHit
from rqsweep.config import Constraint, Validation
from rqsweep.decide.cross_validation import FoldSums, assign_folds
from rqsweep.decide.query_features import search_features, text_features
from rqsweep.decide.routing import route
from rqsweep.decide.rules import Split, apply_rules
from rqsweep.golden import OVERALL
from tests.test_validation import fold_members, golden, per_query

B, SA, SB, Y = "k60_moff_h0.0", "k20_moff_h0.0", "k1_moff_h0.0", "k5_moff_h0.0"
DROP = [Constraint("mrr", "*", max_drop=0.1)]
DOC = Path(__file__).resolve().parents[1] / "docs" / "routing-rules.md"


def routing_of(rows: pl.DataFrame, features: pl.DataFrame, constraints=(), folds: int = 5):
    queries = rows.select("query_id", "slice").unique("query_id", maintain_order=True)
    slices = sorted(set(queries["slice"].to_list()))
    sums = FoldSums(queries, slices, ["mrr"], Validation(folds, 0), rows["setting_id"].n_unique())
    for _, chunk in rows.group_by("setting_id", maintain_order=True):
        sums.add(chunk)
    return route(sums, lambda ids: rows.filter(pl.col("setting_id").is_in(ids)), B, ("mrr", OVERALL),
                 list(constraints), features=features)


def two_slices(n: int = 20):
    """Slices a and b; B 0.5 everywhere, SA 0.9 on a and 0.3 on b, SB the other way round: both break a slice's
    max_drop, so the global setting is B, and each slice's own best is its own setting."""
    queries = golden({"a": n, "b": n})
    ids = queries["query_id"].to_list()
    rows = per_query(queries, {B: {"mrr": dict.fromkeys(ids, 0.5)},
                               SA: {"mrr": {q: 0.9 if q.startswith("a-") else 0.3 for q in ids}},
                               SB: {"mrr": {q: 0.3 if q.startswith("a-") else 0.9 for q in ids}}})
    return queries, ids, rows


def test_the_learner_finds_the_feature_that_separates_two_slices_and_keeps_the_noise_one_out():
    queries, ids, rows = two_slices()
    rng = np.random.default_rng(3)
    noise = rng.integers(1, 12, len(ids)).astype(float)
    features = pl.DataFrame({"query_id": ids, "words": noise,
                             "question": [1.0 if q.startswith("a-") else 0.0 for q in ids]})
    routing = routing_of(rows, features, DROP)
    rules = routing.rules
    assert rules.split == Split("question", 1.0, SA, SB) and rules.routed
    assert (rules.folds_won, rules.folds_compared) == (5, 5)
    assert rules.fold_rules == (Split("question", 1.0, SA, SB),) * 5
    n, base, global_, _ = routing.held_out(OVERALL)
    assert global_ == base and rules.values.mean() - base == pytest.approx(0.4)
    record = routing.record("run")["rules"]
    assert record["rule"]["feature"] == "question" and record["cost_searches"] == 0
    assert record["held_out"][OVERALL]["rules_gain"]["mean"] == pytest.approx(0.4)


def test_a_feature_of_the_text_wins_a_tie_with_one_that_costs_a_search():
    queries, ids, rows = two_slices()
    split = [1.0 if q.startswith("a-") else 0.0 for q in ids]
    features = pl.DataFrame({"query_id": ids, "memories_top10": [2 * v for v in split], "question": split})
    assert routing_of(rows, features, DROP).rules.split.feature == "question"
    assert routing_of(rows, features.drop("question"), DROP).rules.split == Split("memories_top10", 2.0, SA, SB)


def spike_run():
    """Slices a and b, 10 queries each; 5 folds of 2 a-queries and 2 b-queries.

    B: 0.5 everywhere. Y: 1.0 on fold 0's two a-queries, 0.45 on the other a-queries, 0.4 on the b-queries: on all
    queries Y is a's own best (0.56), not the global setting (0.48). `words` is 9 on fold 0's a-queries and 1 to 5
    elsewhere: noise whose in-sample gain is the luck of one fold's two queries."""
    queries = golden({"a": 10, "b": 10})
    folds = assign_folds(queries, 5, seed=0)
    spike = fold_members(queries, folds, 0, "a")
    ids = queries["query_id"].to_list()
    y = {q: 1.0 if q in spike else 0.45 if q.startswith("a-") else 0.4 for q in ids}
    rows = per_query(queries, {B: {"mrr": dict.fromkeys(ids, 0.5)}, Y: {"mrr": y}})
    words = [9.0 if q in spike else float(1 + i % 5) for i, q in enumerate(ids)]
    return rows, pl.DataFrame({"query_id": ids, "words": words}), folds, spike


def test_a_folds_own_queries_never_choose_its_rule():
    rows, features, folds, spike = spike_run()
    routing = routing_of(rows, features)
    rules = routing.rules
    # Whoever sees fold 0's queries picks the rule that sends the spike to Y: the leak this case makes visible.
    assert rules.split == Split("words", 9.0, Y, B)
    # Fold 0's rule is chosen without them: on folds 1-4, Y is not a's own best, so there is no rule, and fold 0's
    # queries are scored by the global setting B. A leak would have shown +0.5 on each spike query.
    assert rules.fold_rules[0] is None
    at = [routing.query_ids.index(q) for q in spike]
    assert list(rules.values[at]) == [0.5, 0.5]


def test_the_guard_keeps_a_noise_feature_whose_gain_is_one_folds_luck_out():
    rows, features, _, _ = spike_run()
    rules = routing_of(rows, features).rules
    # Without fold 0 there is no rule; with it, the rule fires on no other fold's query: no fold is won.
    assert (rules.folds_won, rules.folds_compared, rules.guard_gain) == (0, 5, 0.0)
    assert not rules.routed and rules.applied is None and rules.cost() == 0
    assert rules.sentence() == ("Every query gets the global setting: the best rule in sample did not hold out (0 of "
                                "5 folds won, pooled held-out gain +0.0000): when the query has at least 9 words "
                                "(words >= 9), send rrf_k=5 min_similarity=off half_life=0d; otherwise the global "
                                "setting.")


def test_changing_a_folds_queries_never_changes_that_folds_rule():
    rng = np.random.default_rng(11)
    queries = golden({"a": 12, "b": 9, "c": 9})
    ids = queries["query_id"].to_list()
    order = [B, SA, SB, Y, "k10_moff_h30.0"]
    folds = assign_folds(queries, 5, seed=0)
    fold = np.array([folds[q] for q in ids])

    def run(values, words):
        rows = per_query(queries, {sid: {"mrr": dict(zip(ids, values[i]))} for i, sid in enumerate(order)})
        return routing_of(rows, pl.DataFrame({"query_id": ids, "words": words, "digits": words % 3}), DROP).rules

    values, words = rng.choice([0.0, 0.25, 0.5, 1.0], size=(len(order), len(ids))), rng.integers(1, 9, len(ids))
    before = run(values, words.astype(float))
    moved = False
    for f in range(5):
        other_values, other_words = values.copy(), words.copy()
        other_values[:, fold == f] = rng.choice([0.0, 0.25, 0.5, 1.0], size=(len(order), int((fold == f).sum())))
        other_words[fold == f] = rng.integers(1, 9, int((fold == f).sum()))
        after = run(other_values, other_words.astype(float))
        assert after.fold_rules[f] == before.fold_rules[f]
        moved |= after.fold_rules != before.fold_rules or after.split != before.split
    assert any(r is not None for r in before.fold_rules)  # some fold has a rule to keep: the check is not vacuous
    assert moved  # and the new values move the other folds' rules


def test_a_rule_that_costs_a_slice_exactly_its_max_drop_is_feasible_and_one_query_more_is_not():
    """B and SA only: slice b pays 0.5 on each of its queries the rule sends to SA, so 4 of its 20 are a drop of
    exactly 0.1."""
    queries, ids, rows = two_slices()
    rows = rows.filter(pl.col("setting_id") != SB).with_columns(
        pl.when((pl.col("setting_id") == SA) & pl.col("query_id").str.starts_with("b-")).then(0.0)
        .otherwise(pl.col("mrr")).alias("mrr"))
    b = [q for q in ids if q.startswith("b-")]
    for strays, feasible in ((4, True), (5, False)):
        flagged = {q for q in ids if q.startswith("a-")} | set(b[:strays])
        features = pl.DataFrame({"query_id": ids, "question": [float(q in flagged) for q in ids]})
        split = routing_of(rows, features, DROP).rules.split
        assert (split == Split("question", 1.0, SA, B)) == feasible and (split is None) != feasible


RULES = {"default": {"setting_id": B, "request": {"rrf_k": 60, "recency_half_life_days": 0.0}},
         "rule": {"feature": "memories_top10", "threshold": 2.0,
                  "at_least": {"setting_id": "k40_m0.818_h5000.0",
                               "request": {"rrf_k": 40, "min_similarity": 0.818, "recency_half_life_days": 5000.0}},
                  "below": {"setting_id": "k2_moff_h0.0", "request": {"rrf_k": 2, "recency_half_life_days": 0.0}}}}


def test_a_feature_exactly_on_the_threshold_takes_the_at_least_side_and_a_missing_one_the_default():
    assert apply_rules(RULES, {"memories_top10": 2.0}) == RULES["rule"]["at_least"]["request"]
    assert apply_rules(RULES, {"memories_top10": 1.999}) == RULES["rule"]["below"]["request"]
    assert apply_rules(RULES, {"memories_top10": None}) == apply_rules(RULES, {}) == RULES["default"]["request"]
    assert apply_rules(RULES, {"memories_top10": float("nan")}) == RULES["default"]["request"]
    assert apply_rules({**RULES, "rule": None}, {"memories_top10": 5}) == RULES["default"]["request"]


def typescript() -> str:
    """docs/routing-rules.md's TypeScript block as JavaScript: its type declarations and annotations dropped (node 20
    runs no TypeScript; the block keeps its annotations to these forms)."""
    block = DOC.read_text().split("```typescript\n", 1)[1].split("```", 1)[0]
    block = re.sub(r"^type .*\n", "", block, flags=re.M)
    return re.sub(r": (?:string|any\[\]|Rules|Record<[^>]*>)", "", block)


def run_snippet(script: str) -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: docs/routing-rules.md's TypeScript cannot be run")
    done = subprocess.run([node, "-e", typescript() + "\n" + script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    from rqsweep import job
    from tests.minijob import STEADY_ENTITY_QUERIES, write_job

    folder = tmp_path_factory.mktemp("rules")
    return job.run(write_job(folder, extra_queries=STEADY_ENTITY_QUERIES,
                             constraints=[{"metric": "mrr", "slice": "*", "max_drop": 0.1}]), quiet=True)


def test_the_function_the_command_and_the_typescript_choose_the_same_fields(small_run, tmp_path, capsys):
    from rqsweep.cli import main

    run_dir = tmp_path / "run"
    shutil.copytree(small_run.run_dir, run_dir)
    routing = json.loads((run_dir / "routing.json").read_text())
    routing["rules"] |= RULES  # a rule to apply whatever the small run learned
    (run_dir / "routing.json").write_text(json.dumps(routing))
    cases = [{"memories_top10": v} for v in (0.0, 1.0, 2.0, 3.0)] + [{}]
    by_function = [apply_rules(routing["rules"], c) for c in cases]
    assert len({json.dumps(r, sort_keys=True) for r in by_function}) == 3  # both sides and the default

    by_typescript = json.loads(run_snippet(
        f"const rules = {json.dumps(routing['rules'])};\n"
        f"console.log(JSON.stringify({json.dumps(cases)}.map((f) => applyRules(rules, f))));"))
    assert by_typescript == by_function

    by_command = []
    for c in cases:
        out = subprocess.run([sys.executable, "-m", "rqsweep", "route", str(run_dir), "not a golden query",
                              *(f"--feature={k}={v}" for k, v in c.items())], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        by_command.append(json.loads(out.stdout.splitlines()[0]))
        assert out.stdout.splitlines()[1].startswith("why: ")
    assert by_command == by_function
    assert main(["route", str(run_dir), "x", "--feature", "memories_top1=2"]) == 2  # no such feature: named
    routing["rules"]["rule"] = {"feature": "memories_top10"}  # hand-edited: no threshold
    (run_dir / "routing.json").write_text(json.dumps(routing))
    assert main(["route", str(run_dir), "x", "--feature", "memories_top10=2"]) == 2
    assert f"{run_dir / 'routing.json'}: rules: damaged (KeyError" in capsys.readouterr().err


def test_a_golden_querys_search_features_come_from_the_runs_default_search(small_run, tmp_path):
    from rqsweep.report.route import route as route_command

    run_dir = small_run.run_dir
    hits = pl.read_parquet(run_dir / "hits.parquet").filter(pl.col("is_baseline") & (pl.col("query_id") == "f1"))
    kept = search_features([RankedHit(r["position"], r["key"], r["source_type"], r["chunk"], r["score"], r["vector"],
                                      r["lexical"], r["similarity_score"], r["blend_factor"])
                            for r in hits.sort("position").iter_rows(named=True)])
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    routing = json.loads((copy / "routing.json").read_text())
    routing["rules"] |= RULES
    (copy / "routing.json").write_text(json.dumps(routing))
    request, lines = route_command(copy, "pager number", {})
    assert request == apply_rules(RULES, {**text_features("pager number"), **kept})
    assert lines[-1] == "memories_top10 from: the run's default search of this golden query"


def test_the_runs_label_free_gain_is_the_one_queries_parquet_gives(small_run):
    """Recomputed from the run's files alone: each query's fold (the seed), its fold's rule applied to its features
    (its text and the baseline's kept list), its value at that setting in queries.parquet."""
    run_dir = small_run.run_dir
    data = json.loads((run_dir / "routing.json").read_text())
    queries = pl.read_parquet(run_dir / "queries.parquet")
    golden_queries = queries.select("query_id", "slice").unique("query_id")
    folds = assign_folds(golden_queries, data["held_out"]["folds"], data["held_out"]["seed"])
    hits = pl.read_parquet(run_dir / "hits.parquet").filter(pl.col("is_baseline"))
    text = dict(queries.select("query_id", "query").unique("query_id").rows())
    mrr = {(sid, q): v for sid, q, v in queries.select("setting_id", "query_id", "mrr").rows()}
    gains = []
    for q in golden_queries["query_id"]:
        f = folds[q]
        listed = hits.filter(pl.col("query_id") == q).sort("position")
        features = {**text_features(text[q]), **search_features([
            RankedHit(r["position"], r["key"], r["source_type"], r["chunk"], r["score"], r["vector"], r["lexical"],
                      r["similarity_score"], r["blend_factor"]) for r in listed.iter_rows(named=True)])}
        rule, sid = data["rules"]["fold_rules"][f], data["held_out"]["fold_globals"][f]
        if rule is not None and features[rule["feature"]] is not None:
            sid = rule["at_least" if features[rule["feature"]] >= rule["threshold"] else "below"]["setting_id"]
        gains.append(mrr[(sid, q)] - mrr[(data["baseline"], q)])
    held_out = data["rules"]["held_out"][OVERALL]
    assert held_out["queries"] == len(gains)
    assert held_out["rules_gain"]["mean"] == pytest.approx(np.mean(gains))
    low, high = held_out["rules_gain"]["ci"]
    assert low <= np.mean(gains) <= high
    lines = small_run.summary.splitlines()
    assert any(line.startswith("Rule routing held-out gain") for line in lines)
    assert "One setting per query by rule" in (run_dir / "report.md").read_text()


def test_a_rule_that_holds_its_guard_is_applied_only_on_a_significant_held_out_gain_over_the_global_setting():
    from dataclasses import replace

    from rqsweep.decide.significance import ALPHA, PairedTest

    _, ids, rows = two_slices()
    features = pl.DataFrame({"query_id": ids, "question": [1.0 if q.startswith("a-") else 0.0 for q in ids]})
    routing = routing_of(rows, features, DROP)
    rules = routing.rules
    test = routing.record("run")["rules"]["held_out"][OVERALL]["rules_over_global"]
    assert (rules.over_global.mean_difference, rules.over_global.p_value) == (test["mean"], test["p_value"])
    assert rules.routed and rules.applied == rules.split
    on_the_bound = replace(rules, over_global=PairedTest(40, 40, 0.4, 0.1, 0.7, ALPHA))
    assert on_the_bound.applied is None and on_the_bound.cost() == 0
    assert on_the_bound.sentence().startswith(
        "Every query gets the global setting: the best rule in sample held its guard (5 of 5 folds won, pooled "
        "held-out gain +0.4000), but rule routing's held-out gain over the global setting is not significant "
        "(+0.4000 [+0.1000, +0.7000], p = 0.0500): when")
    assert replace(rules, over_global=PairedTest(40, 40, 0.4, 0.1, 0.7, ALPHA - 1e-9)).applied == rules.split
    assert replace(rules, over_global=PairedTest(40, 40, -0.4, -0.7, -0.1, 0.001)).applied is None  # significant, worse
