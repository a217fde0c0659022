"""What a caller can know of a query before it picks the request's knobs: features of its text, free, and of one
default search (SOAT's defaults, the run's baseline), which costs the caller a second search.

Routing by rule (`rqsweep.decide.rules`) reads only these. Each is defined on what every side has alike, so the
embedded engine, a SOAT server over HTTP and a caller compute the same value: the text's tokens (ASCII classes only,
so that JavaScript's regular expressions read them as Python's do; docs/routing-rules.md has them in TypeScript), and
a search's results as SOAT answers them (`source_type`, `similarity_score`, `signals.vector`, `signals.lexical`),
which `RankedHit` carries for both backends. In a run, the default search is the baseline's ranked lists, which the
run keeps for every query anyway (hits.parquet): learning a rule costs no search.

A feature a search cannot give is missing (None): a failed search gives none, and `channels_agree` and
`lexical_hits` need the results' `signals`, which an older server leaves out.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

import polars as pl

from rqsweep.backends.base import RankedHit

TIME_WORDS = frozenset({"latest", "current", "currently", "now", "still", "today", "newest", "recent", "recently",
                        "updated", "anymore", "nowadays", "changed", "new"})
WH_WORDS = frozenset({"what", "what's", "who", "who's", "whom", "whose", "when", "where", "which", "why", "how"})
_EDGE = re.compile(r"^[^A-Za-z0-9_']+|[^A-Za-z0-9_']+$")
_IDENTIFIER = re.compile(r"[A-Za-z].*[0-9]|[0-9].*[A-Za-z]|_|[a-z][A-Z]|^[A-Z]{2,}|[A-Za-z0-9][./][A-Za-z0-9]")
_QUOTES = re.compile("[\"`\u201c\u201d\u201e\u00ab\u00bb]")
TOP = 10  # memories_top10 counts the default search's first TOP results

# name -> (searches a caller spends to know it, what it is, "{t}" at least the threshold in words). The search
# features share their one default search.
FEATURES: dict[str, tuple[int, str, str]] = {
    "words": (0, "whitespace-separated tokens in the query", "the query has at least {t} words"),
    "identifiers": (0, "identifier-like tokens: letters and digits mixed, an underscore, an inner capital, two or "
                       "more capitals first, or a dot or slash between letters or digits (VPN-4012, ERR_VPN_5002)",
                    "the query holds at least {t} identifier-like tokens"),
    "digits": (0, "tokens holding a digit", "the query holds at least {t} tokens with a digit"),
    "quotes": (0, "quote characters (\" ` \u201c \u201d \u201e \u00ab \u00bb)",
               "the query holds at least {t} quote marks"),
    "time_words": (0, "tokens that speak of time: " + ", ".join(sorted(TIME_WORDS)),
                   "the query holds at least {t} words about time (latest, current, now, still, ...)"),
    "question": (0, "1 when the query ends with '?' or holds a question word (" + ", ".join(sorted(WH_WORDS))
                    + "), else 0", "the query is a question"),
    "memories_top10": (1, f"memories among the default search's first {TOP} results",
                       f"the default search's first {TOP} results hold at least {{t}} memories"),
    "top1_cosine": (1, "the default search's first result's similarity_score (cosine)",
                    "the default search's first result has a cosine of at least {t}"),
    "channels_agree": (1, "1 when one result is first in both channels (signals.vector = signals.lexical = 1), "
                          "else 0; missing without signals", "the default search's two channels agree on their first"),
    "lexical_hits": (1, "results that the lexical channel returned (signals.lexical set); missing without signals",
                     "the lexical channel returned at least {t} of the default search's results"),
}
TEXT_FEATURES = tuple(name for name, (cost, _, _) in FEATURES.items() if cost == 0)
SEARCH_FEATURES = tuple(name for name, (cost, _, _) in FEATURES.items() if cost > 0)


def _words(query: str) -> list[str]:
    return [_EDGE.sub("", t) for t in query.split()]


def text_features(query: str) -> dict[str, float]:
    """The features of a query's text alone."""
    tokens = query.split()
    words = _words(query)
    lower = [w.lower() for w in words]
    return {
        "words": float(len(tokens)),
        "identifiers": float(sum(bool(_IDENTIFIER.search(w)) for w in words)),
        "digits": float(sum(any(c in "0123456789" for c in t) for t in tokens)),
        "quotes": float(len(_QUOTES.findall(query))),
        "time_words": float(sum(w in TIME_WORDS for w in lower)),
        "question": float(query.rstrip().endswith("?") or any(w in WH_WORDS for w in lower)),
    }


def search_features(hits: Sequence[RankedHit] | str) -> dict[str, float | None]:
    """The features of the default search's results (best first); a string is a failed search's error."""
    if isinstance(hits, str):
        return dict.fromkeys(SEARCH_FEATURES)
    signals = any(h.vector is not None or h.lexical is not None for h in hits)
    top = hits[0].similarity_score if hits else None
    return {
        "memories_top10": float(sum(h.position <= TOP and h.source_type == "memory" for h in hits)),
        "top1_cosine": None if top is None else float(top),
        "channels_agree": float(any(h.vector == 1 and h.lexical == 1 for h in hits)) if signals else None,
        "lexical_hits": float(sum(h.lexical is not None for h in hits)) if signals else None,
    }


def answer_hits(results: Sequence[Mapping]) -> list[RankedHit]:
    """A SOAT search answer's `results` (best first) as the ranked hits `search_features` reads."""
    return [RankedHit(p, str(r.get("memory_id") or r.get("chunk_id") or p), r.get("source_type", ""),
                      r.get("chunk_id"), r.get("score"), (r.get("signals") or {}).get("vector"),
                      (r.get("signals") or {}).get("lexical"), r.get("similarity_score"), None)
            for p, r in enumerate(results, 1)]


def features_table(queries: Mapping[str, str], default_search: Mapping[str, Sequence[RankedHit] | str]) -> pl.DataFrame:
    """One row per query (query id -> its text): query_id and a Float64 column per feature, null where missing.
    `default_search`: query id -> its default search's ranked list (or error); a query without one has its search
    features missing."""
    rows = [{"query_id": q, **text_features(text), **search_features(default_search.get(q, "not searched"))}
            for q, text in queries.items()]
    return pl.DataFrame(rows, schema={"query_id": pl.String, **dict.fromkeys(FEATURES, pl.Float64)})
