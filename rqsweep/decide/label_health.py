"""Label health: what the golden set's labels, rather than the knobs, decide.

Four kinds of finding, one row each in label_health.parquet (and in the report):

- `unmoved`: a query whose first relevant rank is the same at every evaluated setting (failed searches left
  out): no knob moves it, so it only dilutes every difference the sweep measures.
- `never_found`: a query no setting returns any relevant item for (rank 0 everywhere): the label or the corpus
  is suspect (a wrong key, a missing page), not the knobs. These are `unmoved` too and are listed only here.
- `tie_sensitive`: a query whose expected key's rank is not tie-sensitive at the baseline but is at some
  setting (it depends on storage order there: `tie_sensitive` in queries.parquet); the detail says at how many
  settings, and whether the chosen one is among them.
- `suspect_unlabelled`: an item not labelled relevant that both channels (vector and lexical positions, the
  `signals` of the ranked lists) rank above the query's best-placed expected item, in a strict majority of
  the settings whose ranked lists the run kept (hits.parquet: the baseline and the chosen setting; every
  setting with `ranked: all`), counting those where the expected item was returned. Listed for curation:
  it may well be relevant and unlabelled.
- `leak_own`, `leak_other`: a query whose text its own expected item, or another item, holds nearly verbatim
  (`rqsweep.decide.leaks`, from the golden set and the corpus: no setting needed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import polars as pl

from rqsweep.files import in_passes

KINDS = ("never_found", "unmoved", "tie_sensitive", "suspect_unlabelled", "leak_own", "leak_other")
SCHEMA = {"kind": pl.String, "query_id": pl.String, "slice": pl.String, "query": pl.String,
          "expected": pl.List(pl.String), "key": pl.String, "detail": pl.String}


@dataclass(frozen=True)
class Tally:
    """What label health keeps of some settings' per-query rows, exact across any split of the settings:
    per query its best rank, successful searches and tie-sensitive ones, its distinct ranks, and the settings."""

    counts: pl.DataFrame
    ranks: pl.DataFrame
    settings: pl.DataFrame


def tally(rows: pl.DataFrame) -> Tally:
    """The `Tally` of per-query rows (setting_id, query_id, rank, error, tie_sensitive): a run's job tallies each
    batch of settings as it is evaluated, so that its end reads no per-query row again for label health."""
    ok = pl.col("error").is_null()
    return Tally(rows.group_by("query_id").agg(
        pl.col("rank").filter(ok).max().alias("max_rank"), ok.sum().alias("settings"),
        pl.col("tie_sensitive").sum().alias("tie_settings")),
        rows.filter(ok).select("query_id", "rank").unique(), rows.select(pl.col("setting_id").unique()))


def _by_query(queries: pl.LazyFrame, baseline: str, chosen: str,
              tallies: Sequence[Tally] | None) -> tuple[pl.DataFrame, int]:
    """Per query, what every setting's row says of it, and the number of settings: from `tallies` of every
    setting's rows, else from the table read a pass at a time (aggregated whole, 100,000 settings x 165 queries
    held 1.7 GB), each pass tallied. A query's text, slice and labels are the same at every setting, so they come
    from the baseline's rows."""
    marked_as = pl.col("setting_id").is_in([baseline, chosen])
    if tallies is None:
        tallies, marked = [], []
        for rows in in_passes(queries, "setting_id", "query_id", "rank", "error", "tie_sensitive"):
            tallies.append(tally(rows))
            marked.append(rows.filter(marked_as))
        marks = pl.concat(marked).lazy()
    else:
        marks = queries.filter(marked_as).select("setting_id", "query_id", "tie_sensitive")
    distinct = pl.concat([t.ranks for t in tallies]).unique().group_by("query_id").agg(
        pl.len().alias("ranks")).lazy()
    summed = pl.concat([t.counts for t in tallies]).group_by("query_id").agg(
        pl.col("max_rank").max(), pl.col("settings").sum(), pl.col("tie_settings").sum()).lazy()

    def tie_at(setting: str, name: str) -> pl.LazyFrame:
        return (marks.filter(pl.col("setting_id") == setting).group_by("query_id")
                .agg(pl.col("tie_sensitive").any().alias(name)))

    about = (queries.filter(pl.col("setting_id") == baseline).select("query_id", "slice", "query", "expected")
             .join(summed, on="query_id").join(distinct, on="query_id", how="left")
             .with_columns(pl.col("ranks").fill_null(0))
             .join(tie_at(baseline, "tie_at_baseline"), on="query_id", how="left")
             .join(tie_at(chosen, "tie_at_chosen"), on="query_id", how="left"))
    total = pl.concat([t.settings for t in tallies]).n_unique()
    return about.sort("slice", "query_id").collect().cast(
        {c: SCHEMA[c] for c in ("query_id", "slice", "query", "expected")}), total


def _suspects(ranked: pl.DataFrame, about: pl.DataFrame) -> pl.DataFrame:
    """Items both channels rank above the best-placed expected item, in most of the lists read."""
    listed = ranked.filter(pl.col("error").is_null() & pl.col("position").is_not_null())
    lists = listed.group_by("query_id").agg(pl.col("setting_id").n_unique().alias("lists"))
    anchor = (listed.filter(pl.col("expected")).sort("position")
              .group_by("setting_id", "query_id", maintain_order=True).first()
              .select("setting_id", "query_id", pl.col("vector").alias("v0"), pl.col("lexical").alias("l0")))
    items = listed.filter(~pl.col("expected")).group_by("setting_id", "query_id", "key").agg(
        pl.col("vector").min(), pl.col("lexical").min())
    above = items.join(anchor, on=["setting_id", "query_id"]).filter(
        pl.col("vector").is_not_null() & pl.col("lexical").is_not_null()
        & (pl.col("v0").is_null() | (pl.col("vector") < pl.col("v0")))
        & (pl.col("l0").is_null() | (pl.col("lexical") < pl.col("l0"))))
    counted = above.group_by("query_id", "key").agg(pl.len().alias("above")).join(lists, on="query_id")
    flagged = counted.filter(2 * pl.col("above") > pl.col("lists"))
    return flagged.join(about.select("query_id", "slice", "query", "expected"), on="query_id").select(
        pl.lit("suspect_unlabelled").alias("kind"), "query_id", "slice", "query", "expected", "key",
        pl.format("both channels rank it above the expected item in {} of {} ranked lists", "above", "lists")
        .alias("detail"))


def label_health(queries: pl.LazyFrame, ranked: pl.DataFrame, baseline: str, chosen: str,
                 tallies: Sequence[Tally] | None = None, leaks: pl.DataFrame | None = None) -> pl.DataFrame:
    """The findings (schema SCHEMA), kind by kind in KINDS' order, from the per-query table (a lazy scan:
    setting_id, query_id, slice, query, expected, rank, error, tie_sensitive) and ranked lists (hits.parquet's
    or ranked.parquet's columns). `tallies`: of every setting's rows, when they are made already (then the
    table is read only for the baseline's and the chosen setting's rows). `leaks`: the leak check's rows
    (`rqsweep.decide.leaks`), when the golden set and corpus are at hand."""
    about, total = _by_query(queries, baseline, chosen, tallies)
    never = about.filter((pl.col("max_rank") == 0) & (pl.col("settings") > 0)).select(
        pl.lit("never_found").alias("kind"), "query_id", "slice", "query", "expected", pl.lit(None).alias("key"),
        pl.format("no relevant item returned at any of {} settings", "settings").alias("detail"))
    unmoved = about.filter((pl.col("ranks") == 1) & (pl.col("max_rank") > 0)).select(
        pl.lit("unmoved").alias("kind"), "query_id", "slice", "query", "expected", pl.lit(None).alias("key"),
        pl.format("rank {} at all {} settings", "max_rank", "settings").alias("detail"))
    ties = about.filter(~pl.col("tie_at_baseline").fill_null(False) & (pl.col("tie_settings") > 0)).select(
        pl.lit("tie_sensitive").alias("kind"), "query_id", "slice", "query", "expected", pl.lit(None).alias("key"),
        pl.format("its rank depends on storage order at {} of {} settings ({}), not at the baseline",
                  "tie_settings", pl.lit(total),
                  pl.when(pl.col("tie_at_chosen").fill_null(False)).then(pl.lit("the chosen one among them"))
                  .otherwise(pl.lit("not the chosen one"))).alias("detail"))
    parts = [never, unmoved, ties, _suspects(ranked, about), *([] if leaks is None else [leaks])]
    return pl.concat([p.cast(SCHEMA) for p in parts]).sort(
        pl.col("kind").replace_strict({k: i for i, k in enumerate(KINDS)}, return_dtype=pl.Int64), "slice",
        "query_id", "key", maintain_order=True)
