"""Label health in a run folder and in the report; its rules are `rqsweep.decide.label_health`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import polars as pl

from rqsweep.decide.label_health import KINDS, Tally, label_health
from rqsweep.decide.leaks import MIN_TOKENS, SHARE
from rqsweep.report.render import Block, Heading, Paragraph, Table
from rqsweep.runfolder import LABEL_HEALTH, RunFolder
from rqsweep.runfolder.tables import ranked_source, read_ranked_lists, scan_queries


def run_label_health(run_dir: Path, baseline: str, chosen: str, tallies: Sequence[Tally] | None = None,
                     leaks: pl.DataFrame | None = None) -> pl.DataFrame:
    """The findings of a run folder's per-query table (or its `tallies`, made already) and the ranked lists it
    kept, with the leak check's `leaks` (which need the golden set and corpus, not the folder)."""
    return label_health(scan_queries(run_dir), read_ranked_lists(run_dir), baseline, chosen, tallies, leaks)


def label_health_blocks(run: RunFolder) -> list[Block]:
    stored = run.read(LABEL_HEALTH)
    findings = stored if stored is not None else run_label_health(run.path, run.baseline, run.chosen)
    # Only the name: ranked.parquet of a `ranked: all` run is large, and the findings above are already read.
    source = ranked_source(run.path) or "no ranked lists"
    queries = run.slice_rows(run.baseline)["overall"]["queries"]
    counts = {k: findings.filter(pl.col("kind") == k).height for k in KINDS}
    moved = queries - counts["unmoved"] - counts["never_found"]
    blocks: list[Block] = [Heading("Label health"), Paragraph(
        f"The knobs move {moved} of {queries} queries: {counts['unmoved']} rank the same at every setting and "
        f"{counts['never_found']} are found at none (the label or the corpus, not the knobs, decides those). "
        f"{counts['tie_sensitive']} queries' expected keys become tie-sensitive at some setting; "
        f"{counts['suspect_unlabelled']} items look like unlabelled relevant ones (both channels rank them above "
        f"the expected item in most of the ranked lists kept: {source}; a stale memory whose fresher twin is the "
        f"expected item is listed too, since both channels rank the twins alike and only the recency blend parts "
        f"them). Every finding is in {LABEL_HEALTH}."), Paragraph(
        f"Leak check: {counts['leak_own']} queries' text occurs nearly verbatim in their own expected item (they "
        f"rank it first at every setting, so they inflate every arm alike: rewrite them in a user's words) and "
        f"{counts['leak_other']} (query, item) pairs in an item not labelled (likely an unlabelled answer: label it "
        f"or reword the query; a stale twin of a freshness query's expected memory is listed too: the twins share their "
        f"subject by design). Nearly: a run of {SHARE:.0%} of a query's tokens or more, in order, for queries of "
        f"{MIN_TOKENS} tokens or more.")]
    for kind in ("never_found", "tie_sensitive", "suspect_unlabelled", "leak_own", "leak_other"):
        rows = findings.filter(pl.col("kind") == kind)
        if rows.height:
            blocks += [Heading(kind.replace("_", " "), 3), Table(rows.select(
                "slice", "query_id", "query", pl.col("expected").list.join(", "), "key", "detail")
                .drop([] if kind in ("suspect_unlabelled", "leak_other") else ["key"]))]
    return blocks
