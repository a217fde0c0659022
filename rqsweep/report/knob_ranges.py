"""Knob ranges that do not act: a knob value that changes no rank, and a chosen or routed setting at the edge of
a swept range (docs/sweeps.md).

A value v of knob K changes no rank when, in every combination of the other knobs it was evaluated with, another
value of K gives every query exactly the same positions. Settings are compared by a fingerprint of their positions,
made a row group of queries.parquet at a time: memory grows with the settings, not with settings x queries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import polars as pl
import pyarrow.parquet as pq

from rqsweep.golden import OVERALL
from rqsweep.knobs import HALF_LIFE, KNOBS, MAX_RRF_K, MIN_SIMILARITY, OFF, RRF_K, Knobs
from rqsweep.report.render import Block, Heading, Paragraph
from rqsweep.report.tables import knob_label
from rqsweep.runfolder import QUERIES
from rqsweep.runfolder.tables import read_routing, row_groups

_SEED = 20_301  # any fixed seed: fingerprints are compared within one run only


def fingerprints(groups: Iterable[pl.DataFrame]) -> pl.DataFrame:
    """One row per setting: its knobs and `fingerprint`, the wrapping sum of a 64-bit hash of each (query,
    positions) row, so that parts of a setting in several groups add up and equal positions give equal sums.

    Keyed by the knobs, which name a setting, not by its id: a group-by's string keys are views into the whole
    row group's buffers, and a part per row group kept them all (0.6 GB at 100,000 settings x 165 queries)."""
    keys = list(KNOBS)
    parts = [group.group_by(keys).agg(pl.struct("query_id", "positions").hash(_SEED).sum().alias("fingerprint"))
             for group in groups]
    return pl.concat(parts).group_by(keys).agg(pl.col("fingerprint").sum())


def inert_values(prints: pl.DataFrame) -> dict[str, list]:
    """Knob -> its values (ascending, "off" first) that change no rank, for knobs with two values or more."""
    out = {}
    for knob in KNOBS:
        if prints[knob].n_unique() < 2:
            continue
        others = [k for k in KNOBS if k != knob]
        # A setting is matched when another setting of its combination (so another value of `knob`) has its print.
        matched = (prints.with_columns((pl.len().over(*others, "fingerprint") > 1).alias("matched"))
                   .group_by(knob).agg(pl.col("matched").all()))
        inert = matched.filter("matched")[knob].sort(nulls_last=False).to_list()
        if inert:
            out[knob] = inert
    return out


# Knob -> the lowest and highest values SOAT takes: a range cannot be extended past them.
_LIMITS = {RRF_K: (1, MAX_RRF_K), MIN_SIMILARITY: (0.0, 1.0), HALF_LIFE: (0.0, math.inf)}


def edge_warnings(overall: pl.DataFrame, chosen: Mapping[str, Knobs]) -> list[str]:
    """A warning for each knob of a chosen setting (`chosen`: what it is called -> its knobs) at the lowest or
    highest value the run swept of it ("off" aside), where the knob has two such values or more and the range
    can be extended on that side."""
    out = []
    for knob in KNOBS:
        swept = [v for v in overall[knob].unique().to_list() if v is not None and v != OFF.get(knob)]
        if len(swept) < 2:
            continue
        low, high = min(swept), max(swept)
        for who, knobs in chosen.items():
            value = getattr(knobs, knob)
            if value in (low, high) and value not in _LIMITS[knob]:
                side = "lowest" if value == low else "highest"
                out.append(f"{who} sits at the {side} {knob} swept ({knob_label(knob, value)}, of "
                           f"{knob_label(knob, low)}-{knob_label(knob, high)}): extend the range "
                           f"{'below' if value == low else 'above'} it to see whether the gain goes on")
    return out


@dataclass(frozen=True)
class KnobRanges:
    settings: int
    duplicates: int  # settings whose positions, every query's, equal an earlier setting's
    inert: dict[str, list]  # knob -> values that change no rank
    edges: list[str]
    compared: bool = True  # False: the run's queries.parquet has no positions to compare (made by hand)

    def warnings(self) -> list[str]:
        out = [f"{knob} {', '.join(knob_label(knob, v) for v in values)} changed no rank: with every combination "
               f"of the other knobs, another {knob} gave every query the same positions; sweep values where the "
               f"data is (docs/sweeps.md)" for knob, values in self.inert.items()]
        if self.duplicates:
            out.append(f"{self.duplicates:,} of {self.settings:,} settings ranked every query exactly as another "
                       "setting did")
        return out + self.edges


def knob_ranges(run_dir: Path, grid: pl.DataFrame, best: str | None) -> KnobRanges:
    """What a finished run's folder says of its knob ranges; `grid`: its grid.parquet, `best` its chosen setting."""
    overall = grid.filter(pl.col("slice") == OVERALL)
    chosen = {} if best is None else {"the chosen setting": Knobs.from_id(best)}
    routing = read_routing(run_dir)
    for s, route in (routing or {}).get("slices", {}).items():
        if route.get("routed"):
            chosen[f"{s}'s routed setting"] = Knobs.from_id(route["setting_id"])
    edges = edge_warnings(overall, chosen)
    if "positions" not in pq.read_schema(run_dir / QUERIES).names:
        return KnobRanges(overall.height, 0, {}, edges, compared=False)
    prints = fingerprints(row_groups(run_dir, QUERIES, [*KNOBS, "query_id", "positions"]))
    return KnobRanges(prints.height, prints.height - prints["fingerprint"].n_unique(), inert_values(prints), edges)


def knob_range_blocks(ranges: KnobRanges) -> list[Block]:
    warnings = ranges.warnings()
    blocks: list[Block] = [Heading("Do the knob ranges act")]
    if not ranges.compared:
        blocks.append(Paragraph("Values that change no rank are not looked for: this run's queries.parquet has no "
                                "`positions` column."))
    elif not ranges.inert:
        blocks.append(Paragraph("Every value of every swept knob changed some query's rank somewhere."))
    if not ranges.edges:
        blocks.append(Paragraph("No chosen or routed setting sits at the lowest or highest value swept of a knob."))
    return blocks + [Paragraph(f"Warning: {w}.") for w in warnings]
