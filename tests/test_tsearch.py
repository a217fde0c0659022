"""Unit tests of the `simple` full text search port, without PostgreSQL.

The expected values are real outputs of PostgreSQL 18 (see docs/soat-knowledge-search.md section 3
and tests/test_tsearch_postgres.py, which checks the port against a live server).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rqsweep.engine.tsearch import (
    LexicalIndex, TsQueryError, matches, to_tsvector, ts_rank_cd, websearch_to_tsquery,
)
from rqsweep.engine.tsearch import _vector
from rqsweep.engine.tsearch.index import LexicalIndexBuilder
from rqsweep.engine.tsearch.parser import RunCache, lexemes
from rqsweep.engine.tsearch.query import Lexeme, Not, Or, Phrase, TsQuery


@pytest.mark.parametrize("text, expected", [
    ("SKU-4711", {"sku": (1,), "-4711": (2,)}),
    ("WH-ROT-02", {"wh-rot": (1,), "wh": (2,), "rot": (3,), "02": (4,)}),
    ("orion-r7", {"orion-r7": (1,), "orion": (2,), "r7": (3,)}),
    ("TELEMETRY_LAG_HIGH", {"telemetry": (1,), "lag": (2,), "high": (3,)}),
    ("user@example.com https://a.b/c/d.html /etc/x.conf v1.2.3 3.14 -5",
     {"user@example.com": (1,), "a.b/c/d.html": (2,), "/etc/x.conf": (3,), "v1.2.3": (4,), "3.14": (5,),
      "-5": (6,)}),
    ("Café naïve-résumé 2nd", {"café": (1,), "naïve-résumé": (2,), "naïve": (3,), "résumé": (4,), "2nd": (5,)}),
    ("the pager is held by the primary on-call pager",
     {"the": (1, 6), "pager": (2, 11), "is": (3,), "held": (4,), "by": (5,), "primary": (7,),
      "on-call": (8,), "on": (9,), "call": (10,)}),
    ("<b>Bold</b> &amp; <script>hidden()</script> shown", {"bold": (1,), "shown": (2,)}),
    ("http://example.com/x?y=1", {"example.com/x?y=1": (1,), "example.com": (2,), "/x?y=1": (3,)}),
    ("", {}),
    ("... --- !!!", {}),
])
def test_to_tsvector_examples(text, expected):
    assert to_tsvector(text) == expected


def test_lower_casing_is_per_code_point():
    # glibc's towlower: no final sigma, dotted capital I becomes plain i.
    assert to_tsvector("ΣΟΦΙΑΣ İSTANBUL Straße") == {"σοφιασ": (1,), "istanbul": (2,), "straße": (3,)}


def test_long_words_are_dropped_without_a_position():
    assert to_tsvector("a " + "x" * 2046 + " b") == {"a": (1,), "x" * 2046: (2,), "b": (3,)}
    assert to_tsvector("a " + "x" * 2047 + " b") == {"a": (1,), "b": (2,)}
    # The limit is in bytes: 1024 two-byte characters are too long.
    assert to_tsvector("a " + "é" * 1024 + " b") == {"a": (1,), "b": (2,)}
    # A lexeme that lower-casing makes longer than 2047 bytes is dropped but keeps its position.
    assert to_tsvector("a " + "Ⱥ" * 700 + " b") == {"a": (1,), "b": (3,)}
    assert str(websearch_to_tsquery('"a ' + "Ⱥ" * 700 + ' b"')) == "'a' <2> 'b'"
    assert str(websearch_to_tsquery("a " + "Ⱥ" * 700 + " b")) == "'a' & 'b'"


def test_position_limits():
    vector = to_tsvector("w " * 300 + "x " * 16100 + "y z y")
    # At most 255 positions per lexeme; positions stop at 16383, which later words share.
    assert vector["w"] == tuple(range(1, 256))
    assert vector["x"] == tuple(range(301, 556))
    assert vector["y"] == (16383,) and vector["z"] == (16383,)


@pytest.mark.parametrize("query, expected", [
    ("SKU-4711", "'sku' <-> '-4711'"),
    ("state-of-the-art", "'state-of-the-art' <-> 'state' <-> 'of' <-> 'the' <-> 'art'"),
    ('"primary on-call" pager', "'primary' <-> 'on-call' <-> 'on' <-> 'call' & 'pager'"),
    ("pager or rotation -incident", "'pager' | 'rotation' & !'incident'"),
    ("a or b c", "'a' | 'b' & 'c'"),
    ("-a or b", "!'a' | 'b'"),
    ("pager or", "'pager' & 'or'"),
    ("or pager", "'or' & 'pager'"),
    ("pager orange", "'pager' & 'orange'"),
    ("a:b", "'a' & 'b'"),
    ("(a) !b & c | d <-> e", "'a' & 'b' & 'c' & 'd' & 'e'"),
    ('-"a b" c', "!( 'a' <-> 'b' ) & 'c'"),
    ('a "..." b', "'a' & 'b'"),
    ("O'Reilly", "'o' <-> 'reilly'"),
    ("Café", "'café'"),
    ("", ""),
    ("... !!!", ""),
    ("-", ""),
])
def test_websearch_to_tsquery_examples(query, expected):
    assert str(websearch_to_tsquery(query)) == expected


def test_text_output_escapes_quotes_and_backslashes():
    # PostgreSQL prints the lexeme it's\x (from, e.g., a URL path) as 'it''s\\x'.
    assert str(TsQuery(Lexeme("it's\\x"))) == "'it''s\\\\x'"
    assert str(TsQuery(Phrase(Lexeme("a"), Phrase(Lexeme("b"), Lexeme("c")), 2))) == "'a' <2> ( 'b' <-> 'c' )"
    assert str(TsQuery(Not(Or(Lexeme("a"), Lexeme("b"))))) == "!( 'a' | 'b' )"


def test_query_errors():
    assert str(websearch_to_tsquery("-" * 32 + "a")) == "!" * 32 + "'a'"
    with pytest.raises(TsQueryError):
        websearch_to_tsquery("-" * 33 + "a")  # more than 32 pending operators
    with pytest.raises(TsQueryError):
        websearch_to_tsquery("Ⱥ" * 682 + "a")  # a 2047-byte lexeme: kept in a tsvector, not in a tsquery


def test_empty_query_matches_nothing():
    assert not matches(to_tsvector("anything at all"), websearch_to_tsquery("..."))


def test_matching():
    doc = to_tsvector("Order SKU-4711 shipped from WH-ROT-02")
    assert matches(doc, websearch_to_tsquery("sku-4711"))
    assert not matches(doc, websearch_to_tsquery('"4711 sku"'))
    assert matches(doc, websearch_to_tsquery("shipped -delayed"))
    assert not matches(doc, websearch_to_tsquery("-shipped"))
    assert matches(to_tsvector("nothing here"), websearch_to_tsquery("-shipped"))
    assert matches(doc, websearch_to_tsquery("delayed or wh-rot"))


def test_rank_of_the_doc_example():
    rank = ts_rank_cd(to_tsvector("the pager is held by the primary on-call pager"), websearch_to_tsquery("pager"))
    assert rank == float(np.float32(0.2))


@pytest.mark.parametrize("text, query, expected", [
    ("pager", "pager", np.float32(0.1)),
    ("pager rotation", "pager rotation", np.float32(0.1)),
    ("pager x rotation", "pager rotation", np.float32(0.05)),
    ("pager rotation pager", "pager rotation", np.float32(0.2)),
    ("pager rotation", '"rotation pager"', np.float32(0.0)),
])
def test_rank_values(text, query, expected):
    assert ts_rank_cd(to_tsvector(text), websearch_to_tsquery(query)) == float(expected)


_ALPHABET = list("aZe09.-_@:/~+&<>!?#;'\"\\=% \t\n") + [
    "é", "ß", "Σ", "日", "\u0301", "\u200b", "—", "😀", "\u00a0", "İ", "\u0903", "\u0f3e", "http://", "www.",
    ".com", "user@", "<a href='x'>", "</a>", "&amp;", "<script>", "</script>", "1.2.3", "-4711", "~/", ":8080", "w12", "x9y"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_ALPHABET), max_size=25).map("".join))
def test_fast_paths_agree_with_the_state_machine(text):
    expected = lexemes(text, fast=False)
    assert lexemes(text) == expected
    block, alone = RunCache(), RunCache()
    assert _read(block, *block.parts_of([text])) == [expected]
    assert [w for n in alone.part_numbers(text) for w in alone.parts[n]] == expected


_HYPHEN_DIGITS = ["SKU", "a", "Z", "-", "4711", "5", "-4711", "1b", "w12", "é", ".", ",", "_", "/", ":", "~", "+",
                  "&", "@", "<", "e", "x", " ", "\t", "www.", ".com", "1.2.3", "http://"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_HYPHEN_DIGITS), max_size=14).map("".join))
def test_a_word_then_a_hyphen_and_digits_reads_as_the_state_machine(text):
    """The fast path's ASCII word before `-digits` and its signed integer (`SKU-4711` is 'sku', '-4711') give the
    state machine's lexemes wherever what follows the digits would make them something else."""
    assert lexemes(text) == lexemes(text, fast=False)


def _indexed_vectors(index: LexicalIndex) -> list[dict[str, tuple[int, ...]]]:
    """Each row's tsvector as the index's postings hold it, segment by segment."""
    out: list[dict[str, tuple[int, ...]]] = [{} for _ in range(index.n_rows)]
    for base, segment in zip(index._bases.tolist(), index._segments):
        assert segment.vocab is index._vocab
        assert set(segment._lexemes.tolist()) <= set(index._vocab.values())  # no postings of a dropped lexeme
        for word, lex in index._vocab.items():
            first, last, entry = segment._span(lex)
            for group in range(first, last):
                count = int(segment._group_count[group])
                out[base + int(segment._group_row[group])][word] = tuple(segment._pos[entry:entry + count].tolist())
                entry += count
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_ALPHABET + ["w12", "SKU-4711", "pager", " ", " ", "\n"]),
                         max_size=40).map("".join), max_size=12))
def test_index_postings_are_the_reference_tsvectors(texts):
    """The index's build (runs parsed once, numpy expansion) holds, row for row, the state machine's tsvectors."""
    index = LexicalIndex(texts)
    assert _indexed_vectors(index) == [_vector(lexemes(text, fast=False)) for text in texts]


_WHITESPACE = ["\t", "\n", "\x0b", "\x0c", "\r", "  ", "\x1c", "\x85", "\u3000", "\u2028"]
_PIECES = _ALPHABET + _WHITESPACE + ["w12", "SKU-4711", "-5", "3.14", "v1.2.3", "https://a.b/c?d=1", "a-b-c", ""]


def _read(cache: RunCache, numbers: np.ndarray, ends: np.ndarray) -> list[list]:
    starts = np.concatenate([[0], ends[:-1]])
    return [[w for n in numbers[lo:hi] for w in cache.parts[n]] for lo, hi in zip(starts, ends)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join),
                          st.lists(st.sampled_from(["pager", None, "x"]), max_size=4).map(tuple)), max_size=12))
def test_a_block_of_rows_reads_each_as_the_state_machine(rows):
    """Runs cut by polars and numbered by Arrow, each distinct one parsed once, give every row the state
    machine's lexemes: whitespace of every kind, tags, URLs, hyphens, numbers, empty texts, stored rows."""
    cache = RunCache()
    numbers, ends = cache.parts_of(rows)
    assert len(ends) == len(rows)
    assert _read(cache, numbers, ends) == [lexemes(row, fast=False) if isinstance(row, str) else list(row)
                                           for row in rows]


def test_a_block_arrow_cannot_hold_is_read_text_by_text():
    rows = ["a\ud800b pager", "on-call <b>x</b>", ("kept",), "SKU-4711 w12"]
    cache = RunCache()
    assert _read(cache, *cache.parts_of(rows)) == [lexemes(rows[0], fast=False), lexemes(rows[1], fast=False),
                                                   ["kept"], lexemes(rows[3], fast=False)]


def test_index_postings_across_row_blocks_and_segments(monkeypatch):
    from rqsweep.engine.tsearch import index as lexical_index
    rnd = random.Random(7)
    texts = ["".join(rnd.choice(_ALPHABET + ["w12 ", "pager "]) for _ in range(rnd.randint(0, 30))) for _ in range(40)]
    monkeypatch.setattr(lexical_index, "_ROWS_PER_BLOCK", 3)
    monkeypatch.setattr(lexical_index, "_ROWS_PER_SEGMENT", 7)
    index = LexicalIndex(texts)
    assert len(index._segments) == 6
    assert _indexed_vectors(index) == [_vector(lexemes(text, fast=False)) for text in texts]


@pytest.mark.parametrize("rows_per_segment", [1 << 16, 1, 2])
def test_index_postings_keep_the_position_limits(monkeypatch, rows_per_segment):
    from rqsweep.engine.tsearch import index as lexical_index
    monkeypatch.setattr(lexical_index, "_ROWS_PER_SEGMENT", rows_per_segment)
    texts = ["w " * 300 + "x " * 16100 + "y z y", "y w", "w " * 16500 + "w"]
    assert _indexed_vectors(LexicalIndex(texts)) == [to_tsvector(text) for text in texts]


@pytest.mark.parametrize("texts", [
    ["w " * 255, "w w"], ["w " * 256, "w w"], ["a " * 16381 + "b b", "w"], ["a " * 16382 + "b b", "w"],
    ["a " + "Ⱥ" * 700 + " b a", "x"], ["w " * 255, "w " * 256, "a " * 16382 + "b b", "a " + "Ⱥ" * 700 + " b"],
])
def test_index_postings_at_the_position_limits_edges(texts):
    """Rows of 255 and 256 lexemes (the per-lexeme limit is applied only to segments with a row longer than 255),
    of 16383 and 16384 (positions are capped only in blocks with a row longer than 16383), and a dropped lexeme
    (lower-casing makes it too long: it keeps its position but has no entry)."""
    assert _indexed_vectors(LexicalIndex(texts)) == [to_tsvector(text) for text in texts]


_TIE_WORDS = ["a", "b", "c", "a-b", "x-y-z", "w12"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_TIE_WORDS), max_size=12).map(" ".join), min_size=1, max_size=30),
       st.integers(1, 9), st.lists(st.integers(0, 5), max_size=10), st.randoms(use_true_random=False))
def test_a_segmented_index_answers_as_one_segment(texts, rows_per_segment, portion_sizes, rnd):
    """Segments of any size give every query the rows and rank bits of one segment over all rows, on corpora
    whose rows repeat (exact ties in rank) and whose lexemes are shared, missing or alone in a segment; from
    texts, from stored parts and from portions of rows alike."""
    from rqsweep.engine.tsearch import index as lexical_index
    whole = LexicalIndex(texts)
    assert len(whole._segments) == 1
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lexical_index, "_ROWS_PER_SEGMENT", rows_per_segment)
        segmented = LexicalIndex(texts)
        cache = RunCache()
        stored = LexicalIndex.of_parts(cache.parts, *cache.parts_of(texts))
        # Rows added a portion of any size at a time (as they are read while embedded), parts growing between.
        cache = RunCache()
        builder, lo = LexicalIndexBuilder(cache.parts), 0
        for size in portion_sizes + [len(texts)]:
            builder.add(*cache.parts_of(texts[lo:lo + size]))
            lo += size
        portions = builder.finish()
    assert len(segmented._segments) == len(portions._segments) == -(-len(texts) // rows_per_segment)
    assert segmented._vocab == stored._vocab == portions._vocab == whole._vocab
    assert (_indexed_vectors(segmented) == _indexed_vectors(stored) == _indexed_vectors(portions)
            == _indexed_vectors(whole))
    for _ in range(20):
        query = " ".join(rnd.choice(_TIE_WORDS + ["or", "-a", "-b", '"a b"', '"b a-b"', "zz"])
                         for _ in range(rnd.randint(1, 4)))
        for index in (segmented, stored, portions):
            rows, ranks = index.search(query)
            expected_rows, expected_ranks = whole.search(query)
            assert rows.dtype == np.int64 and ranks.dtype == np.float32
            assert rows.tolist() == expected_rows.tolist(), query
            assert ranks.tobytes() == expected_ranks.tobytes(), query


def test_index_agrees_with_the_evaluator():
    rnd = random.Random(5)
    vocab = ["a", "b", "c", "d", "a-b", "x-y-z", "Café"]
    texts = [" ".join(rnd.choice(vocab) for _ in range(rnd.randint(0, 30))) for _ in range(200)]
    vectors = [to_tsvector(t) for t in texts]
    index = LexicalIndex(texts)
    for _ in range(300):
        parts = []
        for _ in range(rnd.randint(1, 5)):
            r = rnd.random()
            parts.append("or" if r < 0.15 else "-" + rnd.choice(vocab) if r < 0.3
                         else '"' + " ".join(rnd.sample(vocab, rnd.randint(1, 3))) + '"' if r < 0.45
                         else rnd.choice(vocab + ["zz"]))
        text = " ".join(parts)
        query = websearch_to_tsquery(text)
        rows, ranks = index.search(text)
        expected = [i for i, v in enumerate(vectors) if matches(v, query)]
        assert rows.tolist() == expected, text
        assert ranks.dtype == np.float32
        assert ranks.tolist() == [ts_rank_cd(vectors[i], query) for i in expected], text


def test_index_ranks_long_queries():
    words = [f"w{i}" for i in range(24)]
    rnd = random.Random(3)
    texts = [" ".join(rnd.choice(words) for _ in range(80)) for _ in range(40)]
    vectors = [to_tsvector(t) for t in texts]
    index = LexicalIndex(texts)
    for text in [" ".join(words[:20]), " or ".join(words[:20]), '"w1 w2" ' + " ".join(words[5:22])]:
        query = websearch_to_tsquery(text)
        rows, ranks = index.search(text)
        expected = [i for i, v in enumerate(vectors) if matches(v, query)]
        assert expected and rows.tolist() == expected
        assert ranks.tolist() == [ts_rank_cd(vectors[i], query) for i in expected]


def test_index_without_matches():
    index = LexicalIndex(["alpha beta", "gamma"])
    for text in ["", "...", "delta", "-" * 40 + "alpha"]:
        rows, ranks = index.search(text)
        assert rows.dtype == np.int64 and len(rows) == 0 and len(ranks) == 0
    rows, ranks = index.search("-alpha")
    assert rows.tolist() == [1] and ranks.tolist() == [0.0]
