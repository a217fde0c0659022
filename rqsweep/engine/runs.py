"""Texts cut at ASCII whitespace into runs, a block of texts at a time, each distinct run numbered once.

Both the lexical port and the feature hash read a text run by run (neither a lexeme nor a token spans ASCII
whitespace where they cut), so each distinct run is parsed once in Python and numpy expands the codes. The cut
and the numbering run in polars' and Arrow's string kernels instead of one Python call per word.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import polars as pl
import pyarrow.compute as pc


@dataclass(frozen=True)
class Runs:
    """The runs of a block of texts: `codes[ends[i-1]:ends[i]]` are text i's, in text order.

    A text's first run is `""` when the text is empty or starts with whitespace, and whitespace in a row
    leaves `""` runs between: the cut is `text.split(c)` for every whitespace character c at once.
    """

    distinct: list[str]  # each distinct run once; a code is a position in it
    codes: np.ndarray  # int32, every run of every text
    ends: np.ndarray  # int64, where each text's runs end in `codes`

    @property
    def starts(self) -> np.ndarray:
        """Where each text's first run is in `codes`."""
        return np.concatenate([[0], self.ends[:-1]])


def split_runs(texts: Sequence[str]) -> Runs | None:
    """The runs of `texts`; None when Arrow cannot hold them (a lone surrogate is not UTF-8)."""
    try:
        series = pl.Series(texts, dtype=pl.String)
    except UnicodeEncodeError:
        return None
    if series.str.contains("[\t-\r]").any():
        series = series.str.replace_all("[\t-\r]", " ")
    lists = series.str.split(" ")
    encoded = pc.dictionary_encode(lists.explode().to_arrow(compat_level=pl.CompatLevel.newest()))  # string views: no copy
    return Runs(encoded.dictionary.to_pylist(), encoded.indices.to_numpy().astype(np.int32, copy=False),
                np.cumsum(lists.list.len().to_numpy(), dtype=np.int64))


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(start, start + length) for each pair."""
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, np.int64)
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift
