"""Conformance of the `simple` full text search port with a real PostgreSQL 18.

The cluster runs with the C.UTF-8 locale (libc provider). SOAT's images use en_US.UTF-8: PostgreSQL
asks glibc for character classes and lower-casing in both, and glibc >= 2.35 classifies Unicode
identically in C.UTF-8 and en_US.UTF-8, so the same outputs are expected there.

Each check runs one batched statement over a table of the conformance texts.
"""

from __future__ import annotations

import random

import numpy as np
import psycopg
import pytest

from rqsweep.engine.tsearch import LexicalIndex, TsQueryError, matches, to_tsvector, ts_rank_cd, websearch_to_tsquery
from rqsweep.engine.tsearch.chars import ALPHA_NA, CLASS, SPACES, SPECIAL_NA, lower
from tests.conformance_corpus import queries, texts


@pytest.fixture(scope="module")
def db(pg_dsn):
    """A connection with table `corpus(id, t, v)` holding the conformance texts and their tsvectors."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE corpus (id int PRIMARY KEY, t text NOT NULL, v tsvector)")
        with conn.cursor().copy("COPY corpus (id, t) FROM STDIN") as copy:
            for i, text in enumerate(texts()):
                copy.write_row((i, text))
        conn.execute("UPDATE corpus SET v = to_tsvector('simple', t)")
        yield conn


@pytest.fixture(scope="module")
def pg_results(db):
    """(query number, row, rank as float8) for every matching pair, in one statement."""
    rows = db.execute(
        "SELECT u.n - 1, c.id, ts_rank_cd(c.v, u.q)::float8"
        " FROM corpus c, (SELECT websearch_to_tsquery('simple', s) AS q, n"
        "                 FROM unnest(%s::text[]) WITH ORDINALITY AS a(s, n)) u"
        " WHERE c.v @@ u.q",
        (queries(),)).fetchall()
    out: dict[int, dict[int, float]] = {i: {} for i in range(len(queries()))}
    for n, row, rank in rows:
        out[n][row] = rank
    return out


def _vectors(db, sql: str, params=None) -> dict[int, dict[str, tuple[int, ...]]]:
    out: dict[int, dict[str, tuple[int, ...]]] = {}
    for i, lexeme, positions in db.execute(sql, params).fetchall():
        out.setdefault(i, {})[lexeme] = tuple(positions)
    return out


def test_tsvector(db):
    expected = _vectors(db, "SELECT id, lexeme, positions FROM corpus, unnest(v)")
    corpus = texts()
    assert len(corpus) >= 300
    mismatches = [i for i, text in enumerate(corpus) if to_tsvector(text) != expected.get(i, {})]
    assert not mismatches, [corpus[i][:80] for i in mismatches[:5]]


def test_tsquery_text(db):
    found = db.execute("SELECT websearch_to_tsquery('simple', s)::text FROM unnest(%s::text[]) AS a(s)",
                       (queries(),)).fetchall()
    assert len(queries()) >= 150
    for query, (expected,) in zip(queries(), found):
        assert str(websearch_to_tsquery(query)) == expected, query


def test_match_and_rank(pg_results):
    vectors = [to_tsvector(t) for t in texts()]
    pairs = 0
    for n, text in enumerate(queries()):
        query = websearch_to_tsquery(text)
        mine = {i for i, v in enumerate(vectors) if matches(v, query)}
        assert mine == set(pg_results[n]), text
        for i in mine:
            assert np.float32(ts_rank_cd(vectors[i], query)) == np.float32(pg_results[n][i]), (text, i)
        pairs += len(mine)
    # The corpus is meant to produce many matches, and many equal ranks.
    assert pairs > 3000
    ranks = [r for found in pg_results.values() for r in found.values()]
    assert len(ranks) - len(set(ranks)) > 2000


def test_index_against_postgres(pg_results):
    index = LexicalIndex(texts())
    for n, text in enumerate(queries()):
        rows, ranks = index.search(text)
        expected = sorted(pg_results[n])
        assert rows.tolist() == expected, text
        assert ranks.tolist() == [float(np.float32(pg_results[n][i])) for i in expected], text


def test_index_against_brute_force():
    vectors = [to_tsvector(t) for t in texts()]
    index = LexicalIndex(texts())
    for text in queries():
        query = websearch_to_tsquery(text)
        rows, ranks = index.search(text)
        expected = [i for i, v in enumerate(vectors) if matches(v, query)]
        assert rows.tolist() == expected, text
        assert ranks.tolist() == [ts_rank_cd(vectors[i], query) for i in expected], text


_JUNK = list("aZe09.-_@:/~+&<>!?#;'\"\\=% \t\n") + [
    "é", "ß", "Σ", "日", "\u0301", "\u200b", "—", "😀", "\u00a0", "İ", "\u0903", "\u0f3e", "٣", "http://",
    "https://", "www.", ".com", "user@", "<a href='x'>", "</a>", "<!--", "-->", "&amp;", "&#123;", "&#x1F;",
    "<script>", "</script>", "<style>", "</style>", "1.2.3", "-4711", "v2", "..", "./", "~/", "e10", "e-3",
    ":8080", "<?xml", "<br/>", "x-y-z", "a--b", " or ", '"', "-"]


def _junk(rnd: random.Random, pieces: int) -> str:
    return "".join(rnd.choice(_JUNK) for _ in range(rnd.randint(0, pieces)))


def test_fuzzed_texts(db):
    rnd = random.Random(77)
    corpus = [_junk(rnd, 30) for _ in range(3000)]
    expected = _vectors(db, "SELECT n, lexeme, positions FROM unnest(%s::text[]) WITH ORDINALITY AS a(t, n),"
                            " unnest(to_tsvector('simple', t))", (corpus,))
    mismatches = [t for n, t in enumerate(corpus, 1) if to_tsvector(t) != expected.get(n, {})]
    assert not mismatches, mismatches[:5]


def test_fuzzed_queries(db):
    rnd = random.Random(78)
    found = []
    for _ in range(1500):
        text = _junk(rnd, 12)
        try:
            expected = db.execute("SELECT websearch_to_tsquery('simple', %s)::text", (text,)).fetchone()[0]
        except psycopg.Error:
            expected = None
        found.append((text, expected))
    for text, expected in found:
        try:
            mine = str(websearch_to_tsquery(text))
        except TsQueryError:
            mine = None
        assert mine == expected, text


@pytest.mark.parametrize("text", ["-" * 33 + "a", "a " + "-" * 32 + "b", "Ⱥ" * 682 + "a"])
def test_query_errors(db, text):
    with pytest.raises(psycopg.Error):
        db.execute("SELECT websearch_to_tsquery('simple', %s)", (text,))
    with pytest.raises(TsQueryError):
        websearch_to_tsquery(text)


def test_character_classes(db):
    """Every non-ASCII code point: does it continue a word ('a' X 'b' is one token), and does it
    start one (X 'b' starts with a word, not a blank)? Alpha does both, word-continuing marks only
    the first, everything else neither."""
    found = db.execute(
        "SELECT cp, (SELECT tokid FROM ts_parse('default', chr(cp) || 'b') LIMIT 1) = 2"
        " FROM generate_series(128, 1114111) AS cp"
        " WHERE (cp < 55296 OR cp > 57343)"
        "   AND (SELECT count(*) FROM ts_parse('default', 'a' || chr(cp) || 'b')) = 1").fetchall()
    expected = {cp: ALPHA_NA if starts else SPECIAL_NA for cp, starts in found}
    mine = {cp: CLASS[cp] for cp in range(128, 0x110000) if CLASS[cp] in (ALPHA_NA, SPECIAL_NA)}
    assert mine == expected


def test_spaces(db):
    """Non-ASCII spaces: '..' followed by one is a file path, followed by anything else it is not."""
    found = {cp for (cp,) in db.execute(
        "SELECT cp FROM generate_series(128, 65535) AS cp WHERE (cp < 55296 OR cp > 57343)"
        "  AND (SELECT tokid FROM ts_parse('default', '..' || chr(cp)) LIMIT 1) = 19").fetchall()}
    assert found == {ord(c) for c in SPACES if ord(c) >= 128}


def test_lower_casing(db):
    found = dict(db.execute(
        "SELECT cp, lower(chr(cp)) FROM generate_series(1, 1114111) AS cp"
        " WHERE (cp < 55296 OR cp > 57343) AND lower(chr(cp)) <> chr(cp)").fetchall())
    mine = {cp: lower(chr(cp)) for cp in range(1, 0x110000) if not 0xD800 <= cp <= 0xDFFF and lower(chr(cp)) != chr(cp)}
    assert mine == found
