"""Deterministic texts and queries that exercise PostgreSQL's `simple` full text search.

`texts()` and `queries()` are shared by the tsearch conformance tests and the lexical channel
tests; keep their names and keep them deterministic (every random choice comes from a seeded
`random.Random`). The texts mix hand-written cases for each token type of the default parser with
generated ones: short repetitive texts (so that many rows tie on ts_rank_cd), technical prose with
identifiers, long documents with several covers, a document past the 16383 position cap, and
random strings from an alphabet of parser-sensitive characters.
"""

from __future__ import annotations

import random

_HAND_TEXTS = [
    # Examples quoted in docs/soat-knowledge-search.md.
    "SKU-4711",
    "WH-ROT-02",
    "orion-r7",
    "TELEMETRY_LAG_HIGH",
    "user@example.com https://a.b/c/d.html /etc/x.conf v1.2.3 3.14 -5",
    "Café naïve-résumé 2nd",
    "the pager is held by the primary on-call pager",
    "state-of-the-art",
    # Identifiers.
    "Order SKU-4711 shipped from WH-ROT-02 to orion-r7; SKU-4711 again.",
    "Alert TELEMETRY_LAG_HIGH fired on node-17 (cluster eu-west-1).",
    "ticket INC-2024-0042, rollback to release-3.2.1 and build #8812",
    "ID a1b2c3d4 and uuid 123e4567-e89b-12d3-a456-426614174000",
    "x86_64 arm64 aarch64 i386 amd64 __init__ _private trailing_",
    "camelCase PascalCase snake_case kebab-case SCREAMING_SNAKE_CASE",
    # Emails, URLs, hosts, files.
    "mail ops-team@example.org or first.last+tag@sub.example.co.uk now",
    "see http://example.com/path/to/page?x=1&y=2#frag and https://www.example.org:8443/a/b",
    "ftp://files.example.net/pub/file.tar.gz, www.example.com and example.com:8080",
    "localhost 127.0.0.1 10.0.0.255:5432 db-01.internal db_02.internal",
    "/etc/x.conf ~/notes.txt ./run.sh ../up/one.py /var/log/syslog.1 C:\\dir\\file.txt C:/dir/file.txt",
    "path a/b/c and/or x/y, file.tar.gz archive.zip README.md .bashrc ..",
    "https://a.b/c/d.html http://x.com http://x.com/ http://x.com/it's",
    # Numbers.
    "versions v1.2.3 1.2.3 1.2.3.4 0.0.1 2.0 10.20.30.40.50",
    "floats 3.14 -5 1e10 .5 -0.5 +7 6.02e23 1E-9 -2.5e+3 5e 7.e3",
    "signed -42 +42 - 42 --42 ++1 3-4 5+6 7--8",
    "dates 2024-01-05 12:30:45 2024/01/05 05.01.2024 1,000,000 50% $19.99",
    "phones +1-555-0100 (555) 010-0199 555.010.0188",
    # Unicode.
    "Café naïve résumé Straße STRASSE Ελληνικά ΣΟΦΙΑ σοφία İstanbul ǅemal",
    "日本語のテキスト 中文 한국어 עברית العربية हिन्दी ไทย",
    "emoji 😀 rocket🚀launch ✓ done ★ star ™ ©",
    "naïve-résumé Jean-Luc Picard café-au-lait über-cool 2nd-3rd x-ray",
    "combining e\u0301te\u0301 and zero\u200bwidth and soft\u00adhyphen and nbsp\u00a0here",
    "Devanagari क्षत्रिय बाँध Tamil தமிழ் Tibetan ཀ༾ཁ",
    "digits ٣٤٥ ۱۲۳ १२३ mixed ab١٢cd",
    # Apostrophes and punctuation.
    "don't can't won't O'Reilly rock'n'roll it’s ‘quoted’ “double”",
    "!!! ??? ... --- ___ *** ;;; ::: ,,, ((( ))) [[[ ]]] {{{ }}}",
    "end. start,middle;semi:colon!bang?question (paren) [bracket] {brace}",
    "a.b.c a..b a...b .hidden trailing. -lead trail- _under_ ~tilde~",
    "quotes \"double\" 'single' `back` \\backslash\\ |pipe| &amp &",
    # HTML-ish.
    "<b>bold</b> <i>italic</i> <a href=\"http://x.com/\">link</a> text",
    "<p class='x'>para</p><br/><hr /> <!-- hidden comment --> visible",
    "<script>var secret = 1;</script> shown <style>.x{color:red}</style> also shown",
    "&amp; &lt;tag&gt; &#169; &#x1F600; &nbsp; &unknown; & alone &amp",
    "<?xml version=\"1.0\"?><root><item id=\"1\">value</item></root>",
    "<!DOCTYPE html><html><body>page body</body></html>",
    "a < b > c <3 <-> <- -> <=>",
    # Long words.
    "short " + "x" * 2046 + " tail",
    "short " + "y" * 2047 + " tail",
    "é" * 1023 + " middle " + "é" * 1024 + " end",
    "Supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis",
    # Lower-casing Ⱥ (2 bytes) gives ⱥ (3 bytes): past 2047 bytes the lexeme is dropped, its position kept.
    "held " + "Ⱥ" * 682 + " by " + "Ⱥ" * 700 + " the pager " + "Ⱥ" * 682 + "a",
    # Whitespace.
    "",
    "   ",
    "\t\ttabs\tand\nnew\nlines\r\nwindows\x0bvtab\x0cform",
    "word",
    "Word",
    "WORD",
]

_VOCAB = ["pager", "rotation", "primary", "on-call", "incident", "runbook", "deploy", "rollback",
          "latency", "alert", "telemetry", "cluster", "database", "backup", "restore", "replica",
          "failover", "queue", "worker", "cache", "the", "a", "is", "of", "and", "to", "by",
          "held", "orion", "warehouse", "SKU-4711", "WH-ROT-02", "orion-r7", "TELEMETRY_LAG_HIGH",
          "v1.2.3", "eu-west-1", "ops@example.com", "Café", "naïve"]

_JUNK = list("aZ09.-_@:/~+&<>!?#;'\"\\=% \t\n") + ["é", "ß", "Σ", "日", "\u0301", "\u200b", "—",
                                                  "😀", "\u00a0", "İ", "\u0903", "٣"]
_JUNK_PIECES = ["http://", "www.", ".com", "user@", "<a href='x'>", "</a>", "<!--", "-->",
                "&amp;", "&#123;", "<script>", "</script>", "1.2.3", "-4711", "..", "./", "~/",
                "e10", ":8080", "x-y-z", "a--b", "or"]


def _repetitive(rnd: random.Random) -> str:
    words = rnd.sample(_VOCAB[:20], 3)
    return " ".join(rnd.choice(words) for _ in range(rnd.randint(1, 6)))


def _sentence(rnd: random.Random) -> str:
    words = [rnd.choice(_VOCAB) for _ in range(rnd.randint(4, 14))]
    punct = rnd.choice([".", "!", "?", ";", ",", ""])
    return " ".join(words) + punct


def _long_document(rnd: random.Random, sentences: int) -> str:
    return " ".join(_sentence(rnd) for _ in range(sentences))


def _junk(rnd: random.Random) -> str:
    parts = []
    for _ in range(rnd.randint(1, 10)):
        if rnd.random() < 0.3:
            parts.append(rnd.choice(_JUNK_PIECES))
        else:
            parts.append("".join(rnd.choice(_JUNK) for _ in range(rnd.randint(1, 6))))
    return "".join(parts)


def texts() -> list[str]:
    """The conformance texts, in a fixed order (row i of the test table is texts()[i])."""
    rnd = random.Random(20240501)
    out = list(_HAND_TEXTS)
    out += [_repetitive(rnd) for _ in range(120)]
    out += [_sentence(rnd) for _ in range(80)]
    out += [_long_document(rnd, rnd.randint(40, 120)) for _ in range(8)]
    out += [_junk(rnd) for _ in range(100)]
    # Past the position cap (16383) and the per-lexeme position limit (255).
    out.append(" ".join(rnd.choice(["pager", "alpha", "beta", "gamma"]) for _ in range(17000)))
    out.append("pager " * 300 + "rotation")
    return out


_HAND_QUERIES = [
    "pager", "Pager", "PAGER", "primary pager", "\"primary on-call\"", "\"on-call pager\"",
    "on-call", "pager or rotation", "pager -rotation", "-pager", "-pager -rotation",
    "SKU-4711", "sku", "4711", "-4711", "WH-ROT-02", "wh-rot", "orion-r7", "r7",
    "TELEMETRY_LAG_HIGH", "telemetry lag", "state-of-the-art", "\"state of the art\"",
    "user@example.com", "example.com", "a.b/c/d.html", "/etc/x.conf", "v1.2.3", "1.2.3",
    "3.14", "-5", "1e10", "café", "CAFÉ", "naïve-résumé", "résumé", "straße", "ελληνικά",
    "σοφια", "σοφία", "istanbul", "日本語のテキスト", "😀", "don't", "o'reilly",
    "bold", "secret", "shown", "amp", "comment", "value", "nonexistentword", "zzz or yyy",
    "", "   ", "...", "!!!", "-", "\"\"", "or", "pager or", "or pager", "pager OR rotation",
    "pager or -rotation", "\"pager rotation\" or incident", "-\"pager rotation\"",
    "pager \"", "\"unterminated phrase", "pager:rotation", "pager & rotation | incident",
    "(pager rotation)", "pager <-> rotation", "!pager", "pager !rotation", "the", "a", "is the",
    "http://example.com/path/to/page?x=1&y=2#frag", "www.example.org:8443", "x86_64", "http://x.com/it's",
    "alpha beta", "\"alpha beta\"", "gamma -alpha", "pager pager", "\"pager pager\"",
    "eu-west-1", "ops@example.com", "incident or deploy or rollback", "-the",
    "worker queue cache", "\"the pager\" primary", "held by", "\"held by the\"",
    "x" * 2046, "short tail", "Supercalifragilisticexpialidocious",
    '"by ' + "Ⱥ" * 700 + ' the"', '"held ' + "Ⱥ" * 682 + ' by"', "Ⱥ" * 700 + " pager",
]


def queries() -> list[str]:
    """The conformance queries (websearch_to_tsquery syntax), in a fixed order."""
    rnd = random.Random(9001)
    out = list(_HAND_QUERIES)
    for _ in range(40):
        words = rnd.sample(_VOCAB, rnd.randint(1, 3))
        out.append(" ".join(words))
    for _ in range(20):
        a, b, c = rnd.sample(_VOCAB[:20], 3)
        out.append(rnd.choice([f"{a} or {b}", f"{a} -{b}", f'"{a} {b}"', f'"{a} {b}" {c}',
                               f"{a} or -{b}", f"-{a} {b} or {c}", f"{a.upper()} {b.title()}"]))
    for _ in range(15):
        out.append(_junk(rnd))
    return out
