"""The report's discrimination check: per slice, whether its queries tell the settings apart
(`rqsweep.decide.discrimination`)."""

from __future__ import annotations

from typing import Sequence

import polars as pl

from rqsweep.decide.discrimination import COLUMNS, UNMOVED, SliceCheck, discrimination
from rqsweep.decide.noise import SliceNoise
from rqsweep.report.noise import run_noise
from rqsweep.report.render import Block, Heading, Paragraph, Table
from rqsweep.report.tables import metric_label
from rqsweep.runfolder import QUERIES, RunFolder
from rqsweep.runfolder.tables import row_groups


def run_discrimination(run: RunFolder, figures: Sequence[SliceNoise] | None = None) -> list[SliceCheck]:
    """The check of a run folder; `figures`: the noise figures its job made already."""
    metric = run.objective[0]
    noise = {s: n for (s, m), n in run_noise(run, [metric], figures).items() if m == metric}
    base, chosen = run.slice_rows(run.baseline), run.slice_rows(run.chosen)
    change = {s: None if run.chosen == run.baseline else chosen[s][metric] - base[s][metric]
              for s in base if s in chosen}
    return discrimination(row_groups(run.path, QUERIES, COLUMNS), noise, change)


def discrimination_blocks(run: RunFolder, figures: Sequence[SliceNoise] | None = None) -> list[Block]:
    checks = run_discrimination(run, figures)
    metric = metric_label(run.objective[0])
    frame = pl.DataFrame([{"slice": c.slice, "queries": c.queries, "moved": c.moved,
                           "moved share": c.moved / c.queries, "rank vectors": c.vectors,
                           f"Δ {metric} best": c.change, "MDD": c.mdd, "queries needed": c.needed,
                           "tells apart": "yes" if c.tells else "no",
                           "advice": "no setting moves it: see below" if c.vectors <= 1 else c.advice} for c in checks],
                         schema_overrides={f"Δ {metric} best": pl.Float64, "MDD": pl.Float64,
                                           "queries needed": pl.Int64})
    unmoved = [c.slice for c in checks if c.vectors <= 1]
    blocks: list[Block] = [Heading("Which slices tell the settings apart"), Paragraph(
        "Per slice: the queries some setting moves (their first relevant rank differs between two settings), the "
        "distinct vectors of the slice's ranks across the settings (1: every setting ranks it alike), and whether "
        f"the change of {metric} from the baseline of the best setting in sample (not necessarily the verdict's) is at least the slice's minimum detectable "
        "difference at its size (the queries needed, as in the noise section, at most the queries it has).")]
    if frame.height:
        blocks.append(Table(frame, note="Δ –: the baseline is the best in sample. queries needed –: no spread or no "
                                        "change to size."))
    if unmoved:
        blocks.append(Paragraph(f"No setting moves {', '.join(unmoved)}: {UNMOVED}."))
    return blocks
