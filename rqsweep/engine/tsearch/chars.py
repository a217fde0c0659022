"""Character classes and lower-casing exactly as PostgreSQL's default parser sees them (libc locale)."""

from __future__ import annotations

from rqsweep.engine.tsearch._unicode_data import ALPHA, SPECIAL

OTHER, LETTER, DIGIT, ALPHA_NA, SPECIAL_NA = range(5)
"""Class codes: ASCII letter, ASCII digit, non-ASCII alpha, non-ASCII word-continuing mark."""

# glibc's iswspace: only tags and one path state ask, the query parser uses ASCII isspace.
SPACES = frozenset("\t\n\v\f\r \u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2008\u2009\u200a"
                   "\u2028\u2029\u205f\u3000")
ASCII_SPACES = frozenset("\t\n\v\f\r ")


def _ranges(data: str) -> list[tuple[int, int]]:
    out = []
    for item in data.split():
        first, _, last = item.partition("-")
        out.append((int(first, 16), int(last or first, 16)))
    return out


ALPHA_RANGES = _ranges(ALPHA)
SPECIAL_RANGES = _ranges(SPECIAL)


def _class_table() -> bytearray:
    table = bytearray(0x110000)
    table[ord("A"):ord("Z") + 1] = bytes([LETTER]) * 26
    table[ord("a"):ord("z") + 1] = bytes([LETTER]) * 26
    table[ord("0"):ord("9") + 1] = bytes([DIGIT]) * 10
    for code, ranges in ((ALPHA_NA, ALPHA_RANGES), (SPECIAL_NA, SPECIAL_RANGES)):
        for first, last in ranges:
            table[first:last + 1] = bytes([code]) * (last - first + 1)
    return table


CLASS = _class_table()


def regex_class(ranges: list[tuple[int, int]]) -> str:
    """The body of a regex character class (without brackets) for code point ranges."""
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)


def is_alnum(ch: str) -> bool:
    """glibc's iswalnum (ASCII letters and digits, non-ASCII alpha)."""
    return CLASS[ord(ch)] in (LETTER, DIGIT, ALPHA_NA)


# towlower maps one code point to one; Python's lower() differs only for U+0130 (full mapping
# "i̇") and for capital sigma at the end of a word (final sigma), so both are mapped first.
_SIMPLE_LOWER = str.maketrans({"\u0130": "i", "\u03a3": "\u03c3"})


def lower(text: str) -> str:
    """Lower-case one code point at a time, as glibc's towlower does (PostgreSQL's str_tolower)."""
    return text.translate(_SIMPLE_LOWER).lower()
