"""What a run's end needs of each scored batch of settings, gathered as the batches are scored, and the decisions
made of it once every batch is in: the best feasible setting, the held-out gain, routing and the noise figures.

A new decision that needs something of every setting's rows adds it to `Scores` here, not to the job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import polars as pl

from rqsweep import metrics
from rqsweep.config import JobConfig
from rqsweep.decide.constraints import SliceMeans, Verdicts, choose_best
from rqsweep.decide.cross_validation import CrossValidation, FoldSums, PartSums, cross_validate
from rqsweep.decide.label_health import Tally, tally
from rqsweep.decide.noise import SliceNoise, baseline_values, noise_of, setting_spreads
from rqsweep.decide.routing import Routing, route
from rqsweep.knobs import KNOBS


def owned(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with string columns holding bytes of their own. Polars' strings are views: a group-by's or a
    unique's keys point into the buffers of the rows they came from, so the few rows a run keeps of each batch
    held every batch's bytes (0.6 GB of them at 100,000 settings x 165 queries). A concatenation writes new ones."""
    return frame.with_columns(pl.col(pl.String) + "")


def setting_knobs(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per setting (setting_id and the knob columns) from per-query rows, in the order settings first
    appear: a frame, not objects, since a run's end holds one row per setting of a million-setting grid."""
    return rows.select("setting_id", *KNOBS).unique("setting_id", keep="first", maintain_order=True)


@dataclass(frozen=True)
class Scores:
    """What the run's end needs of some settings' per-query rows: their slice means, knobs (one row per setting,
    in evaluation order), fold sums (with `validation:`), label health's tally and the noise figures' spreads."""

    slices: pl.DataFrame
    knobs: pl.DataFrame
    folds: PartSums | None
    tally: Tally
    spreads: pl.DataFrame | None = None


@dataclass(frozen=True)
class Decided:
    """The decisions made of every setting's `Scores`."""

    slice_rows: pl.DataFrame  # each setting's slice means
    settings: pl.DataFrame  # one row per setting: setting_id and its knobs, in evaluation order
    verdicts: Verdicts  # each setting's violations, and the best feasible setting
    validation: CrossValidation | None  # the held-out estimate of the gain, when `validation:` asks for one
    routing: Routing | None  # one setting per slice, validated by nested cross-validation (with `validation:`)
    kept: Routing | None  # the same with the baseline as every fold's global setting (`verdict`)
    tallies: list[Tally]  # label health's, of every setting's rows
    noise: list[SliceNoise] | None  # the report's noise figures, when every batch's spreads were taken


class Accumulator:
    """Every scored batch's `Scores`, in evaluation order. With `spreads`, each batch's noise spreads are taken
    too, against the baseline's values (the baseline is evaluated first)."""

    def __init__(self, config: JobConfig, golden_table: pl.DataFrame, slices: Sequence[str],
                 names: Sequence[str], *, spreads: bool):
        self.config, self.golden_table, self.slices, self.names = config, golden_table, list(slices), list(names)
        self.baseline = config.baseline.id
        validation = config.validation
        self._folds = None if validation is None else FoldSums(golden_table, slices, names, validation, 0)
        self._spreads = spreads
        self._base: pl.DataFrame | None = None  # the baseline's values, from its batch
        self.parts: list[Scores] = []

    def add(self, scored: pl.DataFrame, table: pl.DataFrame) -> None:
        """A row group of whole settings: `scored`, the backend's rows with every metric's per-query value and
        the slice; `table`, the same as queries.parquet's rows."""
        held = tally(table)
        spreads = None
        if self._spreads:
            if self._base is None and (table["setting_id"] == self.baseline).any():
                self._base = owned(baseline_values(table.lazy(), self.baseline, self.names))
            if self._base is not None:
                spreads = owned(setting_spreads(table.lazy(), self._base, self.baseline, self.names))
        self.parts.append(Scores(
            owned(metrics.slice_metrics(scored, self.names)),
            owned(setting_knobs(scored)),
            None if self._folds is None else self._folds.part(scored),
            Tally(owned(held.counts), owned(held.ranks), owned(held.settings)), spreads))

    def decide(self, rows_of: Callable[[list[str]], pl.DataFrame], features: pl.DataFrame | None = None) -> Decided:
        """The decisions of every batch added; `rows_of`: queries.parquet's rows of some settings; `features`: each
        query's (`query_features.features_table`), for routing by rule."""
        parts, self.parts = self.parts, []  # kept past the run's end, they would sit under the report (0.1 GB)
        names, obj, constraints = self.names, self.config.objective, self.config.constraints
        slice_rows, settings = pl.concat([p.slices for p in parts]), pl.concat([p.knobs for p in parts])
        noise = None
        if self._base is not None and all(p.spreads is not None for p in parts):
            noise = noise_of(self._base, pl.concat([p.spreads for p in parts]), names)
        folds = None if self.config.validation is None else FoldSums(
            self.golden_table, self.slices, names, self.config.validation, settings.height)
        if folds is not None:
            for p in parts:
                folds.extend(p.folds)
        means = SliceMeans.from_frame(slice_rows, settings["setting_id"].to_list(), self.slices, names)
        objective = (obj.metric, obj.slice)
        verdicts = choose_best(means, self.baseline, objective, constraints, self.slices)
        cv = None if folds is None else cross_validate(folds, rows_of, self.baseline, objective, constraints)
        routes, kept = ((None, None) if folds is None else
                        (route(folds, rows_of, self.baseline, objective, constraints, fixed, features)
                         for fixed in (None, self.baseline)))
        return Decided(slice_rows, settings, verdicts, cv, routes, kept, [p.tally for p in parts], noise)
