"""What a golden set is once read, whatever its layout: queries with a slice and graded expected items."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

from rqsweep.corpus import Corpus

OVERALL = "overall"
SourceType = Literal["document", "memory"]


@dataclass(frozen=True)
class Expected:
    source_type: SourceType
    key: str
    grade: int = 1  # relevance grade (>= 1; items graded 0 or below are not relevant and are not kept)


@dataclass(frozen=True)
class GoldenQuery:
    id: str
    slice: str
    query: str
    expected: tuple[Expected, ...]
    synthetic: str | None = None  # the generator that drafted it (`rqsweep draft`); None: written by a person

    @property
    def grades(self) -> tuple[int, ...]:
        return tuple(e.grade for e in self.expected)


@dataclass(frozen=True)
class GoldenSet:
    path: Path
    sha256: str
    queries: tuple[GoldenQuery, ...]
    corpus: Corpus | None  # SOAT's golden.json and a BEIR folder carry their corpus
    warnings: tuple[str, ...]
    layout: str = "rqsweep"  # which layout it was read from, e.g. "BEIR (split test)"
    judgments: tuple = ()  # every graded row of `golden: {judgments}` (`rqsweep.golden.judgments.Judgment`)
    judged: tuple = ()  # the judgments the run uses, one per pair: a person's over the judge's

    @cached_property
    def slices(self) -> list[str]:
        return sorted({q.slice for q in self.queries})

    @cached_property
    def graded(self) -> bool:
        """Whether any expected item carries a grade other than 1."""
        return any(e.grade != 1 for q in self.queries for e in q.expected)
