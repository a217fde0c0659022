"""The leak check, run on every golden set (drafted or written by hand): queries whose text an item holds nearly
verbatim.

A query of MIN_TOKENS tokens or more leaks into an item when a run of at least SHARE of its tokens (rounded up)
occurs in the item's text, contiguous and in order (both lowercased and cut into words: letters and digits, with
`-`, `.`, `:`, `/`, `@`, `+` or `'` inside a word joining it, so a host name or an error code is one word). In its own
expected item (`leak_own`) the query ranks that item first trivially, at every setting alike, so it inflates every
arm and tells none apart (a query written by copying a sentence of its answer). In another item (`leak_other`) that
item likely answers the query too, unlabelled. Shorter queries (a code, a name) are left out: an exact match on
them is what the lexical channel is for, and the exact_token slice asks exactly that.
"""

from __future__ import annotations

import math
import re
from itertools import chain
from typing import Iterable

import polars as pl

from rqsweep.corpus import Corpus
from rqsweep.decide.label_health import SCHEMA
from rqsweep.golden import GoldenQuery

SHARE = 0.8
MIN_TOKENS = 4
_WORD = re.compile(r"\w+(?:[-.:/@+']\w+)*")
OTHERS_LISTED = 5  # leak_other rows per query: a sentence of boilerplate may recur in every page


def tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def run_needed(n: int) -> int:
    """The shortest run of a query of n tokens that leaks: SHARE of them, rounded up."""
    return math.ceil(SHARE * n - 1e-9)


def longest_run(query: list[str], item: list[str]) -> int:
    """The longest run of tokens `query` and `item` share, contiguous and in order."""
    best, previous = 0, [0] * (len(item) + 1)
    for q in query:
        current = [0] * (len(item) + 1)
        for j, t in enumerate(item, 1):
            if q == t:
                current[j] = previous[j - 1] + 1
                best = max(best, current[j])
        previous = current
    return best


def _stretches(words: list[str], vocabulary: set[str], shortest: int) -> Iterable[list[str]]:
    """The runs of `words` every word of which some query holds, `shortest` long or more: only there can a query's
    run occur (most of a large corpus's text is in none)."""
    start = 0
    for i, word in enumerate([*words, None]):
        if word not in vocabulary:
            if i - start >= shortest:
                yield words[start:i]
            start = i + 1


def leaks(queries: Iterable[GoldenQuery], corpus: Corpus) -> pl.DataFrame:
    """label health's rows (SCHEMA) of every leak: `leak_own` rows first, then `leak_other` (at most OTHERS_LISTED a
    query, by key), each sorted by slice and query id."""
    checked = {q.id: (q, toks) for q in queries if len(toks := tokens(q.query)) >= MIN_TOKENS}
    windows: dict[int, dict[tuple[str, ...], list[str]]] = {}  # run length -> a query's run of it -> query ids
    for qid, (_, toks) in checked.items():
        r = run_needed(len(toks))
        for i in range(len(toks) - r + 1):
            windows.setdefault(r, {}).setdefault(tuple(toks[i:i + r]), []).append(qid)
    vocabulary = {t for _, toks in checked.values() for t in toks}
    found: dict[str, dict[str, int]] = {}  # query id -> item key -> longest shared run
    for item in chain(corpus.documents, corpus.memories):
        key, words, hit = item.key, tokens(item.content), set()
        for stretch in _stretches(words, vocabulary, min(windows, default=0)):
            for r, runs in windows.items():
                for i in range(len(stretch) - r + 1):
                    hit.update(runs.get(tuple(stretch[i:i + r]), ()))
        for qid in hit:
            found.setdefault(qid, {})[key] = longest_run(checked[qid][1], words)
    rows = []
    for qid, items in found.items():
        q, toks = checked[qid]
        expected = [e.key for e in q.expected]
        others = sorted(k for k in items if k not in expected)
        more = len(others) - OTHERS_LISTED
        for key in [k for k in expected if k in items] + others[:OTHERS_LISTED]:
            own = key in expected
            detail = (f"a run of {items[key]} of its {len(toks)} tokens ({items[key] / len(toks):.0%}) occurs in "
                      + ("its expected item" if own else "this item, not labelled"))
            if not own and more > 0:
                detail += f" (and in {more} more items not listed)"
            rows.append({"kind": "leak_own" if own else "leak_other", "query_id": qid, "slice": q.slice,
                         "query": q.query, "expected": expected, "key": key, "detail": detail})
    frame = pl.DataFrame(rows, schema=SCHEMA)
    return frame.sort(pl.col("kind") != "leak_own", "slice", "query_id", "key")
