"""A pure-Python port of PostgreSQL 18 full text search with the `simple` configuration.

SOAT's lexical channel is ``to_tsvector('simple', content) @@ websearch_to_tsquery('simple', q)``
ranked by ``ts_rank_cd`` (normalization 0). This package reproduces each piece exactly:

- `to_tsvector(text)`: lexeme -> sorted positions;
- `websearch_to_tsquery(text)`: a `TsQuery` whose ``str()`` is PostgreSQL's text output;
- `matches(vector, query)`: ``@@``; `ts_rank_cd(vector, query)`: the float4 rank as a float;
- `LexicalIndex`: all of it over many rows at once, for the search hot path.

Character classes follow glibc in a UTF-8 locale (SOAT's images use en_US.UTF-8, which glibc
>= 2.35 classifies like C.UTF-8) and lower-casing is per code point, as PostgreSQL does there.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from rqsweep.engine.tsearch.execute import execute
from rqsweep.engine.tsearch.index import LexicalIndex
from rqsweep.engine.tsearch.parser import MAX_POSITION, MAX_POSITIONS, lexemes
from rqsweep.engine.tsearch.query import TsQuery, TsQueryError, websearch_to_tsquery
from rqsweep.engine.tsearch.rank import ts_rank_cd

__all__ = ["LexicalIndex", "TsQuery", "TsQueryError", "matches", "to_tsvector", "ts_rank_cd",
           "websearch_to_tsquery"]

def _vector(words: Sequence[str | None]) -> dict[str, tuple[int, ...]]:
    """The tsvector of lexemes in position order (position i + 1, capped at 16383; None: no lexeme)."""
    out: dict[str, list[int]] = {}
    for index, word in enumerate(words):
        if word is None:
            continue
        pos = min(index + 1, MAX_POSITION)
        found = out.get(word)
        if found is None:
            out[word] = [pos]
        elif len(found) < MAX_POSITIONS and found[-1] != MAX_POSITION:
            found.append(pos)
    return {word: tuple(found) for word, found in out.items()}


def to_tsvector(text: str) -> dict[str, tuple[int, ...]]:
    """``to_tsvector('simple', text)`` as lexeme -> ascending positions."""
    return _vector(lexemes(text))


def matches(vector: Mapping[str, Sequence[int]], query: TsQuery) -> bool:
    """``vector @@ query``; the empty query matches nothing."""
    return query.root is not None and execute(query.root, vector.get)
