"""Routing by rule: a setting per query from features a caller can compute (`rqsweep.decide.query_features`), for a
caller that does not know the query's slice, validated held out as slice routing is.

The rule is one threshold on one feature: queries whose feature is at least the threshold are sent one setting,
the others another, and a query whose feature is missing keeps the global setting. The settings a rule may send
are the candidates of slice routing on the same queries (`rqsweep.decide.choices`): the global setting and each
slice's own best. On the queries it is chosen on, the rule is the feasible one of highest objective, and it must
beat the global setting there:

- feasible: the routed policy (every query scored by the setting the rule sends it) is checked as a setting is,
  under every constraint on every slice against the baseline: a rule that costs a slice past its floor or its
  max_drop is infeasible, as is one that sends a query to a failed search.
- ties: the earlier feature wins (the free ones, of the text, before those of a default search), then the
  candidates' order (global first), then the lower threshold.
- the guard (GUARD), as slice routing's: the rule replaces the global setting only when it holds out on the folds
  it is chosen on;
- and, as the verdict changes the baseline only on a significant gain, the rule is applied (routing.json's `rule`)
  only when rule routing's held-out gain over the global setting is significant (`significance.paired_test`).

Its held-out gain is measured by nested cross-validation on the folds of the global estimate: each outer fold's
rule, guard included, is chosen without the fold's queries and scores them. No search is repeated: the
candidates' per-query values are read back from the run (`rows_of`), and the default search's features come from
the baseline's ranked lists, which every run keeps.

`apply_rules` applies routing.json's `rules` to a caller's features.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Mapping

import numpy as np
import polars as pl

from rqsweep.decide.choices import Chooser, guard
from rqsweep.decide.constraints import SliceMeans, constraint_checks
from rqsweep.decide.cross_validation import matrices
from rqsweep.decide.query_features import FEATURES
from rqsweep.decide.significance import PairedTest
from rqsweep.golden import OVERALL
from rqsweep.knobs import Knobs

GUARD = ("the rule replaces the global setting only when, chosen again without each fold, it beats the global choice "
         "made without that fold on the fold's queries in a strict majority of the folds, with a pooled held-out "
         "gain above zero")
RULES_FORMAT = 1
_THRESHOLDS = 64  # at most this many thresholds per feature, spread over its observed values
_SLACK = 1e-12  # a policy that only reorders the global setting's sums must not "beat" it by their last bit


@dataclass(frozen=True)
class Split:
    """Queries whose `feature` is at least `threshold` are sent `at_least`, the others `below`; a query whose
    feature is missing keeps the global setting."""

    feature: str
    threshold: float
    at_least: str
    below: str

    def sentence(self, default: str) -> str:
        def name(sid: str) -> str:
            return "the global setting" if sid == default else Knobs.from_id(sid).label()

        return (f"when {FEATURES[self.feature][2].format(t=f'{self.threshold:g}')} ({self.feature} >= "
                f"{self.threshold:g}), send {name(self.at_least)}; otherwise {name(self.below)}")


@dataclass(frozen=True)
class Rules:
    """The rule chosen on all queries and what nested cross-validation says of it; per query (in the routing's
    order), the objective at the setting its fold's rule sent it (`values`) and whether that search succeeded."""

    split: Split | None  # the rule before the guard (None: no feasible rule beats the global setting)
    routed: bool  # the guard let it replace the global setting
    global_setting: str
    folds_won: int
    folds_compared: int
    guard_gain: float | None
    fold_rules: tuple[Split | None, ...]  # per outer fold, the rule its queries were sent by (None: its global)
    values: np.ndarray
    ok: np.ndarray
    # Held out, rule routing minus the global setting over all queries (`routing.route` sets it): a rule is applied
    # only when this gain is significant, as a verdict changes the baseline only on a significant gain.
    over_global: PairedTest | None = None

    @property
    def holds(self) -> bool:
        return self.over_global is not None and self.over_global.significant and self.over_global.mean_difference > 0

    @property
    def applied(self) -> Split | None:
        return self.split if self.routed and self.holds else None

    def cost(self) -> int:
        """Searches per query a caller spends on the features the applied rule reads, beyond its own search."""
        return 0 if self.applied is None else FEATURES[self.applied.feature][0]

    def sentence(self) -> str:
        if self.applied is None:
            guard = (f"{self.folds_won} of {self.folds_compared} folds won, pooled held-out gain "
                     f"{'n/a' if self.guard_gain is None else f'{self.guard_gain:+.4f}'}")
            test = self.over_global
            why = ("no feasible rule beats the global setting" if self.split is None else
                   f"the best rule in sample did not hold out ({guard}): {self.split.sentence(self.global_setting)}"
                   if not self.routed or test is None else
                   f"the best rule in sample held its guard ({guard}), but rule routing's held-out gain over the global "
                   f"setting is not significant ({test.mean_difference:+.4f} [{test.ci_low:+.4f}, {test.ci_high:+.4f}], "
                   f"p = {test.p_value:.4f}): {self.split.sentence(self.global_setting)}")
            return f"Every query gets the global setting: {why}."
        words = self.applied.sentence(self.global_setting)
        return f"{words[0].upper()}{words[1:]}."

    def record(self) -> dict:
        """routing.json's `rules`, without the held-out figures (`Routing.record` adds them)."""
        def leaf(sid: str) -> dict:
            return {"setting_id": sid, "request": Knobs.from_id(sid).request()}

        def split(s: Split | None) -> dict | None:
            return None if s is None else {"feature": s.feature, "threshold": s.threshold,
                                           "at_least": leaf(s.at_least), "below": leaf(s.below)}

        return {
            "rqsweep_rules": RULES_FORMAT,
            "features": {name: {"cost_searches": cost, "definition": words}
                         for name, (cost, words, _) in FEATURES.items()},
            "default": leaf(self.global_setting), "rule": split(self.applied), "cost_searches": self.cost(),
            "sentence": self.sentence(), "in_sample_rule": split(self.split), "guard": GUARD,
            "guard_result": {"folds_won": self.folds_won, "folds_compared": self.folds_compared,
                             "held_out_gain": self.guard_gain},
            "fold_rules": [split(s) for s in self.fold_rules],
        }


def choose_request(rules: Mapping, features: Mapping[str, float | None]) -> tuple[dict, str]:
    """The request fields routing.json's `rules` send a query with these features, and why, in words."""
    rule, default = rules["rule"], rules["default"]["request"]
    if rule is None:
        return dict(default), "no rule: the global setting for every query"
    value = features.get(rule["feature"])
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return dict(default), f"{rule['feature']} is missing: the global setting"
    above = value >= rule["threshold"]
    return (dict(rule["at_least" if above else "below"]["request"]),
            f"{rule['feature']} = {value:g} is {'at least' if above else 'below'} {rule['threshold']:g}")


def apply_rules(rules: Mapping, features: Mapping[str, float | None]) -> dict:
    """The request fields (`rrf_k`, `recency_half_life_days`, and `min_similarity` unless there is no floor) to send
    with a query, from routing.json's `rules` and the query's features (name -> value; None or absent: missing):
    `rules["rule"]` is None (every query gets `rules["default"]`) or one threshold on one feature; a query whose
    feature is at least the threshold gets the `at_least` leaf, one below it the `below` leaf, and one whose
    feature is missing the default. `rqsweep.decide.query_features` computes the features."""
    return choose_request(rules, features)[0]


class _Learner:
    """The rule chosen on a part of the folds, and after its guard; every part's choice made once."""

    def __init__(self, chooser: Chooser, features: pl.DataFrame, query_ids: list[str], fold: np.ndarray,
                 slice_of: np.ndarray, rows_of: Callable[[list[str]], pl.DataFrame]):
        self.chooser, self.fold, self.slice_of = chooser, fold, slice_of
        folds = tuple(range(chooser.members.shape[0]))
        # Every part a choice is made on: all folds, all but one (the outer folds), all but two (their guards).
        parts = {tuple(x for x in folds if x not in out) for f in folds for out in ({f}, *({f, h} for h in folds))}
        parts.add(folds)
        wanted = [chooser.baseline]
        for part in sorted(parts, key=len, reverse=True):
            chosen, own = chooser.choose(part)
            wanted += [chosen, *own.values()]
        self.settings = list(dict.fromkeys(wanted))
        self.position = {sid: i for i, sid in enumerate(self.settings)}
        self.metrics = chooser.rule.metrics
        self.values, self.ok = matrices(rows_of(self.settings), self.settings, query_ids, self.metrics)
        # Features in `FEATURES`' order (the free ones first): a tie keeps the earlier.
        named = pl.DataFrame({"query_id": query_ids}).join(features, on="query_id", how="left")
        self.names = [n for n in FEATURES if n in features.columns]
        self.x = named.select(self.names).to_numpy().astype(float) if self.names else np.zeros((len(query_ids), 0))
        self.fit = lru_cache(maxsize=None)(self._fit)

    def policy(self, split: Split | None, default: str) -> np.ndarray:
        """Per query, the position of the setting `split` sends it (`default` where it is None or missing)."""
        at = np.full(len(self.fold), self.position[default])
        if split is not None:
            x = self.x[:, self.names.index(split.feature)]
            at = np.where(np.isnan(x), at, np.where(x >= split.threshold, self.position[split.at_least],
                                                     self.position[split.below]))
        return at

    def _fit(self, folds: tuple[int, ...]) -> Split | None:
        """The best feasible rule on `folds`' queries that beats their global setting, before the guard."""
        chosen, own = self.chooser.choose(folds)
        candidates = list(dict.fromkeys([chosen, *own.values()]))
        if len(candidates) < 2 or not self.names:
            return None
        train = np.isin(self.fold, folds)
        slices = self.chooser.slices
        present = [k for k in range(len(slices)) if (train & (self.slice_of == k)).any()]
        # (slices + overall, queries): which training queries each mean averages.
        member = np.array([train & (self.slice_of == k) for k in range(len(slices))] + [train])
        c = np.array([self.position[s] for s in candidates])
        v, ok = self.values[:, c], self.ok[c].astype(float)  # (metrics, candidates, queries), (candidates, queries)
        g = 0  # the global setting is the first candidate
        pairs = [(a, b) for a in range(len(c)) for b in range(len(c)) if a != b]
        rules, sums, counts = [], [], []
        for j, name in enumerate(self.names):
            x = self.x[:, j]
            seen = np.unique(x[train & ~np.isnan(x)])
            if seen.size < 2:
                continue
            thresholds = seen[1:]  # each observed value above the lowest: both sides hold training queries
            if thresholds.size > _THRESHOLDS:
                thresholds = np.unique(thresholds[np.linspace(0, thresholds.size - 1, _THRESHOLDS).round().astype(int)])
            missing = np.isnan(x)
            above = ~missing[None, :] & (x[None, :] >= thresholds[:, None])  # (thresholds, queries)
            below = ~missing[None, :] & ~above
            # (metrics, candidates, thresholds, slices) sums and (candidates, thresholds, slices) successes.
            s_above, s_below = (np.einsum("mcq,tq,kq->mctk", v, side, member, optimize=True) for side in (above, below))
            n_above, n_below = (np.einsum("cq,tq,kq->ctk", ok, side, member, optimize=True) for side in (above, below))
            s_missing = np.einsum("mq,kq->mk", v[:, g], member * missing)[:, None, :]
            n_missing = np.einsum("q,kq->k", ok[g], member * missing)[None, :]
            for a, b in pairs:
                rules += [Split(name, float(t), candidates[a], candidates[b]) for t in thresholds]
                sums.append(s_above[:, a] + s_below[:, b] + s_missing)
                counts.append(n_above[a] + n_below[b] + n_missing)
        if not rules:
            return None
        total = np.concatenate(sums, axis=1)  # (metrics, rules, slices)
        n = np.concatenate(counts, axis=0)  # (rules, slices)
        queries = member.sum(axis=1)
        base = self.position[self.chooser.baseline]
        base_sums = (self.values[:, base] @ member.T)[:, None, :]
        base_n = (self.ok[base].astype(float) @ member.T)[None, :]
        global_sums = (v[:, g] @ member.T)[:, None, :]
        global_n = (ok[g] @ member.T)[None, :]
        every_n = np.concatenate([base_n, global_n, n], axis=0)  # (baseline, global, rules..., slices)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(every_n > 0, np.concatenate([base_sums, global_sums, total], axis=1) / every_n, np.nan)
        failed = (queries[None, :] - every_n)[:, -1]
        rows = ["baseline", "global", *map(str, range(len(rules)))]
        slice_means = SliceMeans(rows, [*slices, OVERALL], list(self.metrics), means.transpose(1, 2, 0), failed)
        checked = [slices[k] for k in present]
        violated = np.logical_or.reduce([failed > 0, *(check > 0 for _, _, check in constraint_checks(
            slice_means, "baseline", self.chooser.constraints, checked))])
        score = slice_means.values[:, slice_means.slices.index(self.chooser.objective[1]), 0]
        at_global = -np.inf if np.isnan(score[1]) else score[1]
        winners = np.flatnonzero(~violated[2:] & (score[2:] > at_global + _SLACK))
        if not winners.size:
            return None
        return rules[winners[np.argmax(score[2:][winners])]]

    def held_out_mean(self, at: np.ndarray, fold: int) -> float | None:
        """The objective's mean on `fold`'s queries, each scored by the setting at its position `at`."""
        columns = np.flatnonzero(self.fold == fold)
        ok = self.ok[at[columns], columns]
        return float(self.values[0, at[columns], columns][ok].mean()) if ok.any() else None

    def guarded(self, folds: tuple[int, ...]) -> tuple[Split | None, bool, int, int, float | None]:
        """The rule on `folds`, whether its guard lets it replace the global setting, the folds won and compared,
        and the pooled held-out gain."""
        split = self.fit(folds)
        if split is None:
            return None, False, 0, 0, None

        def fold_means(h: int) -> tuple[float | None, float | None, int]:
            inner = tuple(x for x in folds if x != h)
            inner_global = self.chooser.choose(inner)[0]
            return (self.held_out_mean(self.policy(self.fit(inner), inner_global), h),
                    self.held_out_mean(self.policy(None, inner_global), h), int((self.fold == h).sum()))

        won, n_compared, gain, routed = guard(fold_means(h) for h in folds)
        return split, routed, won, n_compared, gain


def learn(chooser: Chooser, features: pl.DataFrame, query_ids: list[str], fold: np.ndarray, slice_of: np.ndarray,
          rows_of: Callable[[list[str]], pl.DataFrame]) -> Rules:
    """The rule chosen on all queries and its nested cross-validation, on the chooser's folds.

    `features`: query_id and a Float64 column per feature (`query_features.features_table`), null where missing;
    `query_ids`, `fold`, `slice_of`: per query, in the order of the returned values (`FoldSums`')."""
    learner = _Learner(chooser, features, query_ids, fold, slice_of, rows_of)
    everything = tuple(range(chooser.members.shape[0]))
    split, routed, won, compared, gain = learner.guarded(everything)
    at = np.zeros(len(query_ids), np.int64)
    fold_rules = []
    for f in everything:
        part = tuple(x for x in everything if x != f)
        inner_split, inner_routed, *_ = learner.guarded(part)
        applied = inner_split if inner_routed else None
        fold_rules.append(applied)
        mine = fold == f
        at[mine] = learner.policy(applied, chooser.choose(part)[0])[mine]
    columns = np.arange(len(query_ids))
    return Rules(split, routed, chooser.choose(everything)[0], won, compared, gain, tuple(fold_rules),
                 learner.values[0, at, columns], learner.ok[at, columns])
