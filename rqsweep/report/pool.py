"""`rqsweep pool RUN_DIR [--k K] [--out FILE]`: the unlabelled (query, item) pairs the run's settings put in
their top k, as a CSV a person (or the judge, `rqsweep.judge`) grades and the golden set reads back
(`golden: {judgments: FILE}`).

The pool is drawn from the ranked lists the run kept: hits.parquet's, the baseline's and the chosen setting's, by
default; every evaluated setting's with `ranked: all` (ranked.parquet). Pairs come first that more of those
settings surface, then those placed higher. A pair is unlabelled when the golden set neither expects it nor judges
it (judgments.parquet, any grade).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import polars as pl

from rqsweep.corpus import Corpus
from rqsweep.files import write_json, write_text
from rqsweep.judge import ChatClient
from rqsweep.judge.grading import Pair, Spent, grade_pairs
from rqsweep.report.explain import Recompute
from rqsweep.runfolder import JUDGMENTS, RunFolder, read_run_folder
from rqsweep.runfolder.tables import read_ranked_lists

POOL_FILE = "pool.csv"
JUDGE_RECORD = "judge.json"  # what the judge spent on the run's pool
JUDGE_CACHE = "judge-cache.jsonl"
COLUMNS = ("query_id", "slice", "query", "key", "snippet", "settings", "best_position", "grade")
SNIPPET_CHARS = 240


def item_texts(corpus: Corpus, keys: set[str]) -> dict[str, str]:
    """Key -> its item's text on one line (a document's title first, when it has one)."""
    out = {}
    for table in (corpus.documents, corpus.memories):
        for i, key in enumerate(table.columns["key"]):
            if key in keys:
                title = table.columns.get("title", [""] * (i + 1))[i]
                out[key] = re.sub(r"\s+", " ", f"{title}: {table.contents[i]}" if title else table.contents[i]).strip()
    return out


def snippet(text: str, query: str) -> str:
    """`text` cut to SNIPPET_CHARS where the query's words (of three letters or more) occur most, with a little of
    what comes before; from its start when they do not occur. An ellipsis marks each cut."""
    if len(text) <= SNIPPET_CHARS:
        return text
    words = {w for w in re.findall(r"\w+", query.lower()) if len(w) > 2}
    hits = [m.start() for m in re.finditer(r"\w+", text.lower()) if m.group() in words]
    width = SNIPPET_CHARS - 2
    best, most, last = 0, 0, 0
    for first, at in enumerate(hits):  # the window that starts at a hit and holds the most hits; the earliest wins
        while last < len(hits) and hits[last] < at + width:
            last += 1
        if last - first > most:
            best, most = at, last - first
    before = SNIPPET_CHARS // 4
    space = text.find(" ", best - before, best)  # start on a word
    start = 0 if best <= before else space + 1 if space >= 0 else best - before
    end = start + width
    return ("…" if start else "") + text[start:end].strip() + ("…" if end < len(text) else "")


def judged_pairs(run: RunFolder) -> pl.DataFrame:
    """The (query_id, key) pairs the run's golden set judged outside `expected` (judgments.parquet, grade 0 too)."""
    judged = run.read(JUDGMENTS)
    return pl.DataFrame(schema={"query_id": pl.String, "key": pl.String}) if judged is None else \
        judged.select("query_id", "key").unique()


def pool_table(run: RunFolder, k: int) -> pl.DataFrame:
    """The pool, without snippets: one row per unlabelled pair some kept list ranks in its top k, ordered by how
    many settings rank it (most first), then its best position, query id and key."""
    lists = read_ranked_lists(run.path).filter(pl.col("error").is_null() & (pl.col("position") <= k) &
                                               ~pl.col("expected"))
    pairs = (lists.join(judged_pairs(run), on=["query_id", "key"], how="anti")
             .group_by("query_id", "key")
             .agg(pl.col("setting_id").unique().sort().alias("ranked_by"), pl.col("position").min().alias("best")))
    about = run.queries([run.baseline]).select("query_id", "slice", "query")
    return (pairs.join(about, on="query_id", how="left")
            .with_columns(pl.col("ranked_by").list.len().alias("n"))
            .sort(["n", "best", "query_id", "key"], descending=[True, False, False, False]))


def _csv(rows: list[list], columns: tuple[str, ...]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return buffer.getvalue()


def write_pool(run_dir: Path, k: int | None = None, out: Path | None = None) -> tuple[Path, int, Spent | None]:
    """Write the pool CSV (default RUN_DIR/pool.csv; `k` defaults to the run's limit); returns its path, its rows,
    and what the judge spent when the run's config has `judge:` (its grades in `<pool>.judged.csv`, what it cost in
    RUN_DIR/judge.json)."""
    run = read_run_folder(run_dir)
    table = pool_table(run, run.limit if k is None else k)
    inputs = Recompute(run).inputs
    texts = item_texts(inputs.corpus, set(table["key"].to_list())) if table.height else {}
    rows = [[r["query_id"], r["slice"], r["query"], r["key"], snippet(texts.get(r["key"], ""), r["query"]),
             " ".join(r["ranked_by"]), r["best"], ""] for r in table.iter_rows(named=True)]
    path = out or run.path / POOL_FILE
    write_text(path, _csv(rows, COLUMNS))
    judge = inputs.config.judge
    if judge is None:
        return path, len(rows), None
    pairs = [Pair(r[0], r[2], r[3], texts.get(r[3], "")) for r in rows]
    with ChatClient.of(judge) as client:
        # One cache for every run of the config: the folder above the run folders.
        spent = grade_pairs(client, pairs, run.path.parent / JUDGE_CACHE, judge.prompt, judge.budget)
    graded = [[*r[:-1], spent.grades.get((r[0], r[3]), ""), spent.judge] for r in rows]
    write_text(path.with_name(f"{path.stem}.judged.csv"), _csv(graded, (*COLUMNS, "judge")))
    write_json(run.path / JUDGE_RECORD, spent.as_json())
    return path, len(rows), spent
