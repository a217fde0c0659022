"""The index build cuts each portion of texts into runs once, for the lexical index and the feature hash alike, and
gives the same index, bit for bit, as each part built on its own."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rqsweep.engine.index as index_module
from rqsweep.config import Chunking
from rqsweep.corpus import Corpus, Document, Memory
from rqsweep.engine.embed import FeatureHashEmbedder
from rqsweep.engine.embed import feature_hash
from rqsweep.engine.index import Index
from rqsweep.engine.quarter_vectors import QuarterVectors
from rqsweep.engine.runs import split_runs
from rqsweep.engine.tsearch import LexicalIndex, parser
from rqsweep.engine.tsearch.parser import RunCache, lexemes

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
_PIECES = ["pager", "on-call", "SKU-4711", "w12", "Café", "ΣΑΣ", "<b>", "</b>", "<a href='x y'>", "<!-- c d -->", "https://a.b/c?d=1", "-5", "3.14",
           "a-b-c", "x.example.com", " ", " ", "\n", "\t", "\x1c", "\u3000", "..", ""]
_TEXTS = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)


def _state(value: object) -> dict:
    """An object's attributes, arrays as their type and bytes: equal states are the same object bit for bit."""
    return {name: (v.dtype, v.shape, v.tobytes()) if isinstance(v, np.ndarray)
            else [_state(x) for x in v] if isinstance(v, list) and v and hasattr(v[0], "__dict__")
            else v for name, v in vars(value).items()}


def _read(cache: RunCache, numbers: np.ndarray, ends: np.ndarray) -> list[list]:
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    return [[w for n in numbers[lo:hi] for w in cache.parts[n]] for lo, hi in zip(starts, ends)]


@settings(max_examples=200, deadline=None)
@given(st.lists(_TEXTS, max_size=12))
def test_rows_read_from_a_cut_made_beforehand_are_the_state_machines(rows):
    """`parts_of` given the block's runs (tags and runs that leave the parser unclean included: those rows are
    read whole) reads every row as the state machine does."""
    cache = RunCache()
    assert _read(cache, *cache.parts_of(rows, split_runs(rows))) == [lexemes(row, fast=False) for row in rows]


@pytest.mark.parametrize("rows", [["zz x", "a b"], ["x yy", "a b"], ["x zz", "a b"], ["a b", "c"]])
def test_a_row_with_an_unclean_run_is_read_whole(monkeypatch, rows):
    """A run that leaves the parser unclean, first in its row or not, has its row read whole; a block without one
    reads every row run by run. (No real run is known to leave the parser unclean: here yy does, and zz only as a
    text's first run.)"""
    read = parser._run_lexemes

    def unclean_zz(run, anywhere=True):
        if run == "yy" or run == "zz" and not anywhere:
            raise parser._Unclean(run)
        return read(run, anywhere)
    monkeypatch.setattr(parser, "_run_lexemes", unclean_zz)
    cache = RunCache()
    numbers, ends = cache.parts_of(rows, split_runs(rows))
    assert _read(cache, numbers, ends) == [lexemes(row, fast=False) for row in rows]
    assert np.diff(ends, prepend=0).tolist() == [1 if row.startswith("zz") or "yy" in row else len(row.split())
                                                    for row in rows]


def _corpus(texts: list[str]) -> Corpus:
    return Corpus(tuple(Document(f"doc-{i}", t) for i, t in enumerate(texts)),
                  tuple(Memory(f"mem-{i}", t, age_days=float(i)) for i, t in enumerate(texts[::3])))


def _assert_parts_alone(index: Index, corpus: Corpus, embedder_of) -> None:
    for kind, texts in (("document", [d.content for d in corpus.documents]),
                        ("memory", [m.content for m in corpus.memories])):
        store = index.stores[kind]
        assert _state(store.lexical) == _state(LexicalIndex(texts))
        alone = QuarterVectors.embed(embedder_of(), texts, 16_384)
        assert _state(store.vectors) == _state(alone)


@settings(max_examples=40, deadline=None)
@given(st.lists(_TEXTS, max_size=14))
def test_the_build_equals_each_part_built_alone(texts):
    """Portions of 4 texts (so rows cross portions): the stores' lexical indexes equal `LexicalIndex(texts)` and
    their quarter counts and divisors `QuarterVectors.embed`'s, attribute for attribute, bit for bit."""
    corpus = _corpus(texts)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(index_module, "_CUT_PORTION", 4)
        index = Index.build(corpus, FeatureHashEmbedder(64), Chunking("whole"), NOW)
    _assert_parts_alone(index, corpus, lambda: FeatureHashEmbedder(64))


def test_each_portion_is_cut_once(monkeypatch):
    """Neither the lexical reading nor the feature hash cuts texts again: only the build does, once per portion."""
    texts = [f"pager w{i} on-call <b>x</b> SKU-{i}" if i % 5 else f"rotation {i}" for i in range(23)]
    corpus = _corpus(texts)
    cuts = []

    def counted(block):
        cuts.append(len(block))
        return split_runs(block)
    for module in (parser, feature_hash):
        monkeypatch.setattr(module, "split_runs", lambda block: pytest.fail("a part cut the texts again"))
    monkeypatch.setattr(index_module, "split_runs", counted)
    monkeypatch.setattr(index_module, "_CUT_PORTION", 10)
    index = Index.build(corpus, FeatureHashEmbedder(64), Chunking("whole"), NOW)
    assert cuts == [10, 10, 3, 8]
    monkeypatch.undo()
    _assert_parts_alone(index, corpus, lambda: FeatureHashEmbedder(64))


def test_texts_arrow_cannot_hold_are_read_and_embedded_one_at_a_time():
    texts = ["a\ud800b pager", "on-call <b>x</b>", "SKU-4711 w12", ""]
    corpus = _corpus(texts)
    _assert_parts_alone(Index.build(corpus, FeatureHashEmbedder(64), Chunking("whole"), NOW), corpus,
                        lambda: FeatureHashEmbedder(64))


class _Dense:
    """An embedder without quarter counts: each text's length and word count, normalised."""

    identity = "dense-test"

    def __init__(self) -> None:
        self.queries = self

    def embed(self, texts):
        raw = np.array([[len(t) + 1.0, len(t.split()), 1.0] for t in texts], np.float64).reshape(-1, 3)
        return (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)


def test_other_embedders_keep_column_major_float32_rows(monkeypatch):
    texts = [f"pager w{i} on-call" * (i % 4) for i in range(11)]
    monkeypatch.setattr(index_module, "_EMBED_PORTION", 4)
    index = Index.build(Corpus(tuple(Document(f"doc-{i}", t) for i, t in enumerate(texts)), ()), _Dense(),
                        Chunking("whole"), NOW)
    vectors = index.stores["document"].vectors
    assert vectors.flags.f_contiguous and vectors.tobytes() == np.asfortranarray(_Dense().embed(texts)).tobytes()
    assert _state(index.stores["document"].lexical) == _state(LexicalIndex(texts))
    assert index.stores["memory"].vectors.shape == (0, 1)
