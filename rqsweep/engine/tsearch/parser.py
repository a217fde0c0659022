"""PostgreSQL 18's default text search parser ("default", wparser_def.c) and the `simple` configuration.

The parser is a table-driven state machine with a stack of saved positions: a state either moves on,
pushes a position to try a longer reading (a host, a file path, a hyphenated word...), pops back to
it when the attempt fails, or reports a token ("bingo"). `_Machine` runs the same tables, in our own
notation, rule for rule. Most text is plain words and blanks, so `tokens` first tries a regular
expression that recognises only readings proven identical to the machine's (a word followed by a
character that no longer reading can start with) and hands everything else to the machine.
"""

from __future__ import annotations

import re
from itertools import chain
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from rqsweep.engine.runs import Runs, split_runs
from rqsweep.engine.tsearch.chars import (
    ALPHA_NA, ALPHA_RANGES, ASCII_SPACES, CLASS, DIGIT, LETTER, OTHER, SPACES, SPECIAL_NA, SPECIAL_RANGES,
    lower, regex_class,
)

# Token types, numbered as PostgreSQL's ts_token_type('default').
(ASCIIWORD, WORD, NUMWORD, EMAIL, URL, HOST, SFLOAT, VERSION, HWORD_NUMPART, HWORD_PART,
 HWORD_ASCIIPART, BLANK, TAG, PROTOCOL, NUMHWORD, ASCIIHWORD, HWORD, URL_PATH, FILE, FLOAT, INT,
 UINT, ENTITY) = range(1, 24)

# The `simple` configuration sends every type but these to the `simple` dictionary.
UNMAPPED = frozenset({BLANK, TAG, PROTOCOL, ENTITY})

MAX_TOKEN_BYTES = 2047   # a token this long or longer is skipped without taking a position
MAX_LEXEME_BYTES = 2047  # a longer lexeme (lower-casing can grow it) is dropped but keeps its position
MAX_POSITION = 16383     # later words all share this position
MAX_POSITIONS = 255      # positions kept per lexeme of a tsvector; later ones are not recorded


# Parser states, in PostgreSQL's order (the numbers only matter for readability of the table).
(BASE, NUM_WORD, ASCII_WORD, IN_WORD, UNSIGNED_INT, SIGNED_INT_FIRST, SIGNED_INT, IN_SPACE,
 UDECIMAL_FIRST, UDECIMAL, DECIMAL_FIRST, DECIMAL, VER_VERSION, SVER_VERSION, VERSION_FIRST,
 IN_VERSION, MANTISSA_FIRST, MANTISSA_SIGN, MANTISSA, ENTITY_FIRST, IN_ENTITY, ENTITY_NUM_FIRST,
 ENTITY_NUM, ENTITY_HEX_FIRST, ENTITY_HEX, ENTITY_END, TAG_FIRST, XML_BEGIN, TAG_CLOSE_FIRST,
 TAG_NAME, TAG_BEGIN_END, IN_TAG, TAG_ESCAPE_K, TAG_ESCAPE_KK, TAG_BACKSLASHED, TAG_END,
 COMMENT_FIRST, COMMENT_LAST, IN_COMMENT, CLOSE_COMMENT_FIRST, CLOSE_COMMENT_LAST, COMMENT_END,
 HOST_FIRST_DOMAIN, HOST_DOMAIN_SECOND, HOST_DOMAIN, PORT_FIRST, IN_PORT, HOST_FIRST_AN, IN_HOST,
 IN_EMAIL, FILE_FIRST, FILE_TWIDDLE, PATH_FIRST, PATH_FIRST_FIRST, PATH_SECOND, IN_FILE,
 FILE_NEXT, URL_PATH_FIRST, URL_PATH_START, IN_URL_PATH, IN_FURL, PROTOCOL_FIRST,
 PROTOCOL_SECOND, PROTOCOL_END, HYPHEN_ASCII_WORD_FIRST, HYPHEN_ASCII_WORD, HYPHEN_WORD_FIRST,
 HYPHEN_WORD, HYPHEN_NUM_WORD_FIRST, HYPHEN_NUM_WORD, HYPHEN_DIGIT_LOOKAHEAD, PARSE_HYPHEN,
 PARSE_HYPHEN_HYPHEN, HYPHEN_WORD_PART, HYPHEN_ASCII_WORD_PART, HYPHEN_NUM_WORD_PART,
 HYPHEN_UNSIGNED_INT) = range(77)
KEEP = -1  # "tostate" that leaves the state unchanged

# Character tests.
(T_ANY, T_EOF, T_EQ, T_ASCLET, T_ALPHA, T_DIGIT, T_ALNUM, T_NOTALNUM, T_SPACE, T_XDIGIT,
 T_SPECIAL, T_IGNORE, T_STOPHOST, T_HOST, T_URLPATH, T_URLCHAR) = range(16)

# Actions (bit flags) and the special handlers run before them.
NEXT, BINGO, POP, PUSH, RERUN, CLEAR, MERGE, CLRALL = 0, 1, 2, 4, 8, 16, 32, 64
S_NONE, S_TAGS, S_FURL, S_HYPHEN, S_VERVERSION = range(5)


END = 5  # class code of the position past the last character
_CLASS_TESTS = {T_ASCLET: {LETTER}, T_ALPHA: {LETTER, ALPHA_NA}, T_DIGIT: {DIGIT},
                T_ALNUM: {LETTER, DIGIT, ALPHA_NA}, T_NOTALNUM: {OTHER, SPECIAL_NA, END},
                T_SPECIAL: {SPECIAL_NA}}


class Rule(NamedTuple):
    """One line of a state's table: the first rule whose test passes decides the action."""

    test: int
    char: str
    flags: int
    to: int
    type: int = 0
    special: int = S_NONE
    classes: frozenset = frozenset()   # for tests on the character class


def _r(test: int, flags: int = NEXT, to: int = KEEP, type_: int = 0, special: int = S_NONE) -> Rule:
    return Rule(test, "", flags, to, type_, special, frozenset(_CLASS_TESTS.get(test, ())))


def _eq(char: str, flags: int = NEXT, to: int = KEEP, type_: int = 0, special: int = S_NONE) -> Rule:
    return Rule(T_EQ, char, flags, to, type_, special)


_POP_AT_EOF = _r(T_EOF, POP)
_POP = _r(T_ANY, POP)

TABLE: dict[int, tuple[Rule, ...]] = {
    BASE: (_r(T_EOF), _eq("<", PUSH, TAG_FIRST), _r(T_IGNORE, NEXT, IN_SPACE),
           _r(T_ASCLET, NEXT, ASCII_WORD), _r(T_ALPHA, NEXT, IN_WORD),
           _r(T_DIGIT, NEXT, UNSIGNED_INT), _eq("-", PUSH, SIGNED_INT_FIRST),
           _eq("+", PUSH, SIGNED_INT_FIRST), _eq("&", PUSH, ENTITY_FIRST), _eq("~", PUSH, FILE_TWIDDLE),
           _eq("/", PUSH, FILE_FIRST), _eq(".", PUSH, PATH_FIRST_FIRST), _r(T_ANY, NEXT, IN_SPACE)),
    NUM_WORD: (_r(T_EOF, BINGO, BASE, NUMWORD), _r(T_ALNUM, NEXT, NUM_WORD),
               _r(T_SPECIAL, NEXT, NUM_WORD), _eq("@", PUSH, IN_EMAIL), _eq("/", PUSH, FILE_FIRST),
               _eq(".", PUSH, FILE_NEXT), _eq("-", PUSH, HYPHEN_NUM_WORD_FIRST),
               _r(T_ANY, BINGO, BASE, NUMWORD)),
    ASCII_WORD: (_r(T_EOF, BINGO, BASE, ASCIIWORD), _r(T_ASCLET), _eq(".", PUSH, HOST_FIRST_DOMAIN),
                 _eq(".", PUSH, FILE_NEXT), _eq("-", PUSH, HOST_FIRST_AN),
                 _eq("-", PUSH, HYPHEN_ASCII_WORD_FIRST), _eq("_", PUSH, HOST_FIRST_AN),
                 _eq("@", PUSH, IN_EMAIL), _eq(":", PUSH, PROTOCOL_FIRST), _eq("/", PUSH, FILE_FIRST),
                 _r(T_DIGIT, PUSH, IN_HOST), _r(T_DIGIT, NEXT, NUM_WORD), _r(T_ALPHA, NEXT, IN_WORD),
                 _r(T_SPECIAL, NEXT, IN_WORD), _r(T_ANY, BINGO, BASE, ASCIIWORD)),
    IN_WORD: (_r(T_EOF, BINGO, BASE, WORD), _r(T_ALPHA), _r(T_SPECIAL), _r(T_DIGIT, NEXT, NUM_WORD),
              _eq("-", PUSH, HYPHEN_WORD_FIRST), _r(T_ANY, BINGO, BASE, WORD)),
    UNSIGNED_INT: (_r(T_EOF, BINGO, BASE, UINT), _r(T_DIGIT), _eq(".", PUSH, HOST_FIRST_DOMAIN),
                   _eq(".", PUSH, UDECIMAL_FIRST), _eq("e", PUSH, MANTISSA_FIRST),
                   _eq("E", PUSH, MANTISSA_FIRST), _eq("-", PUSH, HOST_FIRST_AN),
                   _eq("_", PUSH, HOST_FIRST_AN), _eq("@", PUSH, IN_EMAIL), _r(T_ASCLET, PUSH, IN_HOST),
                   _r(T_ALPHA, NEXT, NUM_WORD), _r(T_SPECIAL, NEXT, NUM_WORD),
                   _eq("/", PUSH, FILE_FIRST), _r(T_ANY, BINGO, BASE, UINT)),
    SIGNED_INT_FIRST: (_POP_AT_EOF, _r(T_DIGIT, NEXT | CLEAR, SIGNED_INT), _POP),
    SIGNED_INT: (_r(T_EOF, BINGO, BASE, INT), _r(T_DIGIT), _eq(".", PUSH, DECIMAL_FIRST),
                 _eq("e", PUSH, MANTISSA_FIRST), _eq("E", PUSH, MANTISSA_FIRST),
                 _r(T_ANY, BINGO, BASE, INT)),
    IN_SPACE: (_r(T_EOF, BINGO, BASE, BLANK), _eq("<", BINGO, BASE, BLANK), _r(T_IGNORE),
               _eq("-", BINGO, BASE, BLANK), _eq("+", BINGO, BASE, BLANK), _eq("&", BINGO, BASE, BLANK),
               _eq("/", BINGO, BASE, BLANK), _r(T_NOTALNUM, NEXT, IN_SPACE),
               _r(T_ANY, BINGO, BASE, BLANK)),
    UDECIMAL_FIRST: (_POP_AT_EOF, _r(T_DIGIT, CLEAR, UDECIMAL), _POP),
    UDECIMAL: (_r(T_EOF, BINGO, BASE, FLOAT), _r(T_DIGIT, NEXT, UDECIMAL),
               _eq(".", PUSH, VERSION_FIRST), _eq("e", PUSH, MANTISSA_FIRST),
               _eq("E", PUSH, MANTISSA_FIRST), _r(T_ANY, BINGO, BASE, FLOAT)),
    DECIMAL_FIRST: (_POP_AT_EOF, _r(T_DIGIT, CLEAR, DECIMAL), _POP),
    DECIMAL: (_r(T_EOF, BINGO, BASE, FLOAT), _r(T_DIGIT, NEXT, DECIMAL), _eq(".", PUSH, VER_VERSION),
              _eq("e", PUSH, MANTISSA_FIRST), _eq("E", PUSH, MANTISSA_FIRST),
              _r(T_ANY, BINGO, BASE, FLOAT)),
    VER_VERSION: (_POP_AT_EOF, _r(T_DIGIT, RERUN, SVER_VERSION, 0, S_VERVERSION), _POP),
    SVER_VERSION: (_POP_AT_EOF, _r(T_DIGIT, BINGO | CLRALL, UNSIGNED_INT, BLANK), _r(T_ANY)),
    VERSION_FIRST: (_POP_AT_EOF, _r(T_DIGIT, CLEAR, IN_VERSION), _POP),
    IN_VERSION: (_r(T_EOF, BINGO, BASE, VERSION), _r(T_DIGIT, NEXT, IN_VERSION),
                 _eq(".", PUSH, VERSION_FIRST), _r(T_ANY, BINGO, BASE, VERSION)),
    MANTISSA_FIRST: (_POP_AT_EOF, _r(T_DIGIT, CLEAR, MANTISSA), _eq("+", NEXT, MANTISSA_SIGN),
                     _eq("-", NEXT, MANTISSA_SIGN), _POP),
    MANTISSA_SIGN: (_POP_AT_EOF, _r(T_DIGIT, CLEAR, MANTISSA), _POP),
    MANTISSA: (_r(T_EOF, BINGO, BASE, SFLOAT), _r(T_DIGIT, NEXT, MANTISSA),
               _r(T_ANY, BINGO, BASE, SFLOAT)),
    ENTITY_FIRST: (_POP_AT_EOF, _eq("#", NEXT, ENTITY_NUM_FIRST), _r(T_ASCLET, NEXT, IN_ENTITY),
                   _eq(":", NEXT, IN_ENTITY), _eq("_", NEXT, IN_ENTITY), _POP),
    IN_ENTITY: (_POP_AT_EOF, _r(T_ALNUM, NEXT, IN_ENTITY), _eq(":", NEXT, IN_ENTITY),
                _eq("_", NEXT, IN_ENTITY), _eq(".", NEXT, IN_ENTITY), _eq("-", NEXT, IN_ENTITY),
                _eq(";", NEXT, ENTITY_END), _POP),
    ENTITY_NUM_FIRST: (_POP_AT_EOF, _eq("x", NEXT, ENTITY_HEX_FIRST), _eq("X", NEXT, ENTITY_HEX_FIRST),
                       _r(T_DIGIT, NEXT, ENTITY_NUM), _POP),
    ENTITY_HEX_FIRST: (_POP_AT_EOF, _r(T_XDIGIT, NEXT, ENTITY_HEX), _POP),
    ENTITY_NUM: (_POP_AT_EOF, _r(T_DIGIT, NEXT, ENTITY_NUM), _eq(";", NEXT, ENTITY_END), _POP),
    ENTITY_HEX: (_POP_AT_EOF, _r(T_XDIGIT, NEXT, ENTITY_HEX), _eq(";", NEXT, ENTITY_END), _POP),
    ENTITY_END: (_r(T_ANY, BINGO | CLEAR, BASE, ENTITY),),
    TAG_FIRST: (_POP_AT_EOF, _eq("/", PUSH, TAG_CLOSE_FIRST), _eq("!", PUSH, COMMENT_FIRST),
                _eq("?", PUSH, XML_BEGIN), _r(T_ASCLET, PUSH, TAG_NAME), _eq(":", PUSH, TAG_NAME),
                _eq("_", PUSH, TAG_NAME), _POP),
    XML_BEGIN: (_POP_AT_EOF, _eq("x", NEXT, IN_TAG), _POP),
    TAG_CLOSE_FIRST: (_POP_AT_EOF, _r(T_ASCLET, NEXT, TAG_NAME), _POP),
    TAG_NAME: (_POP_AT_EOF, _eq("/", NEXT, TAG_BEGIN_END), _eq(">", NEXT, TAG_END, 0, S_TAGS),
               _r(T_SPACE, NEXT, IN_TAG, 0, S_TAGS), _r(T_ALNUM), _eq(":"), _eq("_"), _eq("."),
               _eq("-"), _POP),
    TAG_BEGIN_END: (_POP_AT_EOF, _eq(">", NEXT, TAG_END), _POP),
    IN_TAG: (_POP_AT_EOF, _eq(">", NEXT, TAG_END, 0, S_TAGS), _eq("'", NEXT, TAG_ESCAPE_K),
             _eq('"', NEXT, TAG_ESCAPE_KK), _r(T_ASCLET), _r(T_DIGIT), _eq("="), _eq("-"), _eq("_"),
             _eq("#"), _eq("/"), _eq(":"), _eq("."), _eq("&"), _eq("?"), _eq("%"), _eq("~"),
             _r(T_SPACE, NEXT, KEEP, 0, S_TAGS), _POP),
    TAG_ESCAPE_K: (_POP_AT_EOF, _eq("\\", PUSH, TAG_BACKSLASHED), _eq("'", NEXT, IN_TAG),
                   _r(T_ANY, NEXT, TAG_ESCAPE_K)),
    TAG_ESCAPE_KK: (_POP_AT_EOF, _eq("\\", PUSH, TAG_BACKSLASHED), _eq('"', NEXT, IN_TAG),
                    _r(T_ANY, NEXT, TAG_ESCAPE_KK)),
    TAG_BACKSLASHED: (_POP_AT_EOF, _r(T_ANY, MERGE)),
    TAG_END: (_r(T_ANY, BINGO | CLRALL, BASE, TAG),),
    COMMENT_FIRST: (_POP_AT_EOF, _eq("-", NEXT, COMMENT_LAST), _eq("D", NEXT, IN_TAG),
                    _eq("d", NEXT, IN_TAG), _POP),
    COMMENT_LAST: (_POP_AT_EOF, _eq("-", NEXT, IN_COMMENT), _POP),
    IN_COMMENT: (_POP_AT_EOF, _eq("-", NEXT, CLOSE_COMMENT_FIRST), _r(T_ANY)),
    CLOSE_COMMENT_FIRST: (_POP_AT_EOF, _eq("-", NEXT, CLOSE_COMMENT_LAST), _r(T_ANY, NEXT, IN_COMMENT)),
    CLOSE_COMMENT_LAST: (_POP_AT_EOF, _eq("-"), _eq(">", NEXT, COMMENT_END), _r(T_ANY, NEXT, IN_COMMENT)),
    COMMENT_END: (_r(T_ANY, BINGO | CLRALL, BASE, TAG),),
    HOST_FIRST_DOMAIN: (_POP_AT_EOF, _r(T_ASCLET, NEXT, HOST_DOMAIN_SECOND), _r(T_DIGIT, NEXT, IN_HOST),
                        _POP),
    HOST_DOMAIN_SECOND: (_POP_AT_EOF, _r(T_ASCLET, NEXT, HOST_DOMAIN), _r(T_DIGIT, PUSH, IN_HOST),
                         _eq("-", PUSH, HOST_FIRST_AN), _eq("_", PUSH, HOST_FIRST_AN),
                         _eq(".", PUSH, HOST_FIRST_DOMAIN), _eq("@", PUSH, IN_EMAIL), _POP),
    HOST_DOMAIN: (_r(T_EOF, BINGO | CLRALL, BASE, HOST), _r(T_ASCLET, NEXT, HOST_DOMAIN),
                  _r(T_DIGIT, PUSH, IN_HOST), _eq(":", PUSH, PORT_FIRST), _eq("-", PUSH, HOST_FIRST_AN),
                  _eq("_", PUSH, HOST_FIRST_AN), _eq(".", PUSH, HOST_FIRST_DOMAIN),
                  _eq("@", PUSH, IN_EMAIL), _r(T_DIGIT, POP),
                  _r(T_STOPHOST, BINGO | CLRALL, URL_PATH_START, HOST), _eq("/", PUSH, IN_FURL),
                  _r(T_ANY, BINGO | CLRALL, BASE, HOST)),
    PORT_FIRST: (_POP_AT_EOF, _r(T_DIGIT, NEXT, IN_PORT), _POP),
    IN_PORT: (_r(T_EOF, BINGO | CLRALL, BASE, HOST), _r(T_DIGIT, NEXT, IN_PORT),
              _r(T_STOPHOST, BINGO | CLRALL, URL_PATH_START, HOST), _eq("/", PUSH, IN_FURL),
              _r(T_ANY, BINGO | CLRALL, BASE, HOST)),
    HOST_FIRST_AN: (_POP_AT_EOF, _r(T_DIGIT, NEXT, IN_HOST), _r(T_ASCLET, NEXT, IN_HOST), _POP),
    IN_HOST: (_POP_AT_EOF, _r(T_DIGIT, NEXT, IN_HOST), _r(T_ASCLET, NEXT, IN_HOST),
              _eq("@", PUSH, IN_EMAIL), _eq(".", PUSH, HOST_FIRST_DOMAIN), _eq("-", PUSH, HOST_FIRST_AN),
              _eq("_", PUSH, HOST_FIRST_AN), _POP),
    IN_EMAIL: (_r(T_STOPHOST, POP), _r(T_HOST, BINGO | CLRALL, BASE, EMAIL), _POP),
    FILE_FIRST: (_POP_AT_EOF, _r(T_ASCLET, NEXT, IN_FILE), _r(T_DIGIT, NEXT, IN_FILE),
                 _eq(".", NEXT, PATH_FIRST), _eq("_", NEXT, IN_FILE), _eq("~", PUSH, FILE_TWIDDLE), _POP),
    FILE_TWIDDLE: (_POP_AT_EOF, _r(T_ASCLET, NEXT, IN_FILE), _r(T_DIGIT, NEXT, IN_FILE),
                   _eq("_", NEXT, IN_FILE), _eq("/", NEXT, FILE_FIRST), _POP),
    PATH_FIRST: (_POP_AT_EOF, _r(T_ASCLET, NEXT, IN_FILE), _r(T_DIGIT, NEXT, IN_FILE),
                 _eq("_", NEXT, IN_FILE), _eq(".", NEXT, PATH_SECOND), _eq("/", NEXT, FILE_FIRST), _POP),
    PATH_FIRST_FIRST: (_POP_AT_EOF, _eq(".", NEXT, PATH_SECOND), _eq("/", NEXT, FILE_FIRST), _POP),
    PATH_SECOND: (_r(T_EOF, BINGO | CLEAR, BASE, FILE), _eq("/", NEXT | PUSH, FILE_FIRST),
                  _eq("/", BINGO | CLEAR, BASE, FILE), _r(T_SPACE, BINGO | CLEAR, BASE, FILE), _POP),
    IN_FILE: (_r(T_EOF, BINGO, BASE, FILE), _r(T_ASCLET, NEXT, IN_FILE), _r(T_DIGIT, NEXT, IN_FILE),
              _eq(".", PUSH, FILE_NEXT), _eq("_", NEXT, IN_FILE), _eq("-", NEXT, IN_FILE),
              _eq("/", PUSH, FILE_FIRST), _r(T_ANY, BINGO, BASE, FILE)),
    FILE_NEXT: (_POP_AT_EOF, _r(T_ASCLET, CLEAR, IN_FILE), _r(T_DIGIT, CLEAR, IN_FILE),
                _eq("_", CLEAR, IN_FILE), _POP),
    URL_PATH_FIRST: (_POP_AT_EOF, _r(T_URLCHAR, NEXT, IN_URL_PATH), _POP),
    URL_PATH_START: (_r(T_ANY, NEXT, IN_URL_PATH),),
    IN_URL_PATH: (_r(T_EOF, BINGO, BASE, URL_PATH), _r(T_URLCHAR, NEXT, IN_URL_PATH),
                  _r(T_ANY, BINGO, BASE, URL_PATH)),
    IN_FURL: (_POP_AT_EOF, _r(T_URLPATH, BINGO | CLRALL, BASE, URL, S_FURL), _POP),
    PROTOCOL_FIRST: (_POP_AT_EOF, _eq("/", NEXT, PROTOCOL_SECOND), _POP),
    PROTOCOL_SECOND: (_POP_AT_EOF, _eq("/", NEXT, PROTOCOL_END), _POP),
    PROTOCOL_END: (_r(T_ANY, BINGO | CLRALL, BASE, PROTOCOL),),
    HYPHEN_ASCII_WORD_FIRST: (_POP_AT_EOF, _r(T_ASCLET, NEXT, HYPHEN_ASCII_WORD),
                              _r(T_ALPHA, NEXT, HYPHEN_WORD), _r(T_DIGIT, NEXT, HYPHEN_DIGIT_LOOKAHEAD),
                              _POP),
    HYPHEN_ASCII_WORD: (_r(T_EOF, BINGO | CLRALL, PARSE_HYPHEN, ASCIIHWORD, S_HYPHEN),
                        _r(T_ASCLET, NEXT, HYPHEN_ASCII_WORD), _r(T_ALPHA, NEXT, HYPHEN_WORD),
                        _r(T_SPECIAL, NEXT, HYPHEN_WORD), _r(T_DIGIT, NEXT, HYPHEN_NUM_WORD),
                        _eq("-", PUSH, HYPHEN_ASCII_WORD_FIRST),
                        _r(T_ANY, BINGO | CLRALL, PARSE_HYPHEN, ASCIIHWORD, S_HYPHEN)),
    HYPHEN_WORD_FIRST: (_POP_AT_EOF, _r(T_ALPHA, NEXT, HYPHEN_WORD),
                        _r(T_DIGIT, NEXT, HYPHEN_DIGIT_LOOKAHEAD), _POP),
    HYPHEN_WORD: (_r(T_EOF, BINGO | CLRALL, PARSE_HYPHEN, HWORD, S_HYPHEN), _r(T_ALPHA, NEXT, HYPHEN_WORD),
                  _r(T_SPECIAL, NEXT, HYPHEN_WORD), _r(T_DIGIT, NEXT, HYPHEN_NUM_WORD),
                  _eq("-", PUSH, HYPHEN_WORD_FIRST), _r(T_ANY, BINGO | CLRALL, PARSE_HYPHEN, HWORD, S_HYPHEN)),
    HYPHEN_NUM_WORD_FIRST: (_POP_AT_EOF, _r(T_ALPHA, NEXT, HYPHEN_NUM_WORD),
                            _r(T_DIGIT, NEXT, HYPHEN_DIGIT_LOOKAHEAD), _POP),
    HYPHEN_NUM_WORD: (_r(T_EOF, BINGO | CLRALL, PARSE_HYPHEN, NUMHWORD, S_HYPHEN),
                      _r(T_ALNUM, NEXT, HYPHEN_NUM_WORD), _r(T_SPECIAL, NEXT, HYPHEN_NUM_WORD),
                      _eq("-", PUSH, HYPHEN_NUM_WORD_FIRST),
                      _r(T_ANY, BINGO | CLRALL, PARSE_HYPHEN, NUMHWORD, S_HYPHEN)),
    HYPHEN_DIGIT_LOOKAHEAD: (_POP_AT_EOF, _r(T_DIGIT, NEXT, HYPHEN_DIGIT_LOOKAHEAD),
                             _r(T_ALPHA, NEXT, HYPHEN_NUM_WORD), _r(T_SPECIAL, NEXT, HYPHEN_NUM_WORD),
                             _POP),
    PARSE_HYPHEN: (_r(T_EOF, RERUN, BASE), _r(T_ASCLET, NEXT, HYPHEN_ASCII_WORD_PART),
                   _r(T_ALPHA, NEXT, HYPHEN_WORD_PART), _r(T_DIGIT, PUSH, HYPHEN_UNSIGNED_INT),
                   _eq("-", PUSH, PARSE_HYPHEN_HYPHEN), _r(T_ANY, RERUN, BASE)),
    PARSE_HYPHEN_HYPHEN: (_POP_AT_EOF, _r(T_ALNUM, BINGO | CLEAR, PARSE_HYPHEN, BLANK),
                          _r(T_SPECIAL, BINGO | CLEAR, PARSE_HYPHEN, BLANK), _POP),
    HYPHEN_WORD_PART: (_r(T_EOF, BINGO, BASE, HWORD_PART), _r(T_ALPHA, NEXT, HYPHEN_WORD_PART),
                       _r(T_SPECIAL, NEXT, HYPHEN_WORD_PART), _r(T_DIGIT, NEXT, HYPHEN_NUM_WORD_PART),
                       _r(T_ANY, BINGO, PARSE_HYPHEN, HWORD_PART)),
    HYPHEN_ASCII_WORD_PART: (_r(T_EOF, BINGO, BASE, HWORD_ASCIIPART),
                             _r(T_ASCLET, NEXT, HYPHEN_ASCII_WORD_PART),
                             _r(T_ALPHA, NEXT, HYPHEN_WORD_PART), _r(T_SPECIAL, NEXT, HYPHEN_WORD_PART),
                             _r(T_DIGIT, NEXT, HYPHEN_NUM_WORD_PART),
                             _r(T_ANY, BINGO, PARSE_HYPHEN, HWORD_ASCIIPART)),
    HYPHEN_NUM_WORD_PART: (_r(T_EOF, BINGO, BASE, HWORD_NUMPART), _r(T_ALNUM, NEXT, HYPHEN_NUM_WORD_PART),
                           _r(T_SPECIAL, NEXT, HYPHEN_NUM_WORD_PART),
                           _r(T_ANY, BINGO, PARSE_HYPHEN, HWORD_NUMPART)),
    HYPHEN_UNSIGNED_INT: (_POP_AT_EOF, _r(T_DIGIT), _r(T_ALPHA, CLEAR, HYPHEN_NUM_WORD_PART),
                          _r(T_SPECIAL, CLEAR, HYPHEN_NUM_WORD_PART), _POP),
}

_URL_FORBIDDEN = frozenset('"<>\\^`{|}')


class _Frame:
    """One saved parser position (PostgreSQL's TParserPosition)."""

    __slots__ = ("pos", "charlen", "lentok", "state", "prev", "pushed")

    def __init__(self, pos: int, state: int, prev: "_Frame | None" = None) -> None:
        self.pos, self.charlen, self.lentok, self.state = pos, 0, 0, state
        self.prev, self.pushed = prev, -1

    def copy(self) -> "_Frame":
        frame = _Frame(self.pos, self.state, self)
        frame.charlen, frame.lentok = self.charlen, self.lentok
        return frame


class _Machine:
    """The state machine over `text[start:]` (PostgreSQL's TParser and TParserGet)."""

    def __init__(self, text: str, start: int = 0, state: int = BASE) -> None:
        self.text, self.n = text, len(text)
        self.top = _Frame(start, state)
        self.ignore = False     # inside <script> or <style>
        self.wanthost = False   # a URL was just reported: report its host next
        self.type = 0
        self.token = ""

    def _test(self, rule: Rule, frame: _Frame) -> bool:
        """Tests other than end of text, equality and character classes (done inline)."""
        test = rule.test
        if test == T_IGNORE:
            return self.ignore
        if test == T_STOPHOST:
            if self.wanthost:
                self.wanthost = False
                return True
            return False
        if test == T_HOST:
            return self._sub_token(frame, BASE, HOST)
        if test == T_URLPATH:
            return self._sub_token(frame, URL_PATH_FIRST, URL_PATH)
        if frame.pos == self.n:
            return False
        ch = self.text[frame.pos]
        if test == T_SPACE:
            return ch in SPACES
        if test == T_XDIGIT:
            return ch in "0123456789abcdefABCDEF"
        if test == T_URLCHAR:
            return "!" <= ch <= "~" and ch not in _URL_FORBIDDEN
        raise AssertionError(f"unknown character test {test}")

    def _sub_token(self, frame: _Frame, state: int, want: int) -> bool:
        """Whether a fresh parser started here reads one token of type `want`; if so, take it."""
        sub = _Machine(self.text, frame.pos)
        if state == BASE:
            sub.wanthost = True
        else:
            sub.top = _Frame(frame.pos, state, sub.top)
        if sub.next_token() and sub.type == want:
            length = len(sub.token)
            frame.pos += length
            frame.lentok += length
            frame.charlen = sub.top.charlen
            return True
        return False

    def _run_special(self, special: int, frame: _Frame, start: int) -> None:
        if special == S_TAGS:
            name = self.text[start:start + frame.lentok]
            if name.isascii():
                name = name.lower()
                if name in ("</script", "</style"):
                    self.ignore = False
                elif name in ("<script", "<style"):
                    self.ignore = True
        elif special == S_FURL:
            self.wanthost = True
            frame.pos -= frame.lentok
        elif special == S_HYPHEN:
            frame.pos -= frame.lentok
        elif special == S_VERVERSION:
            frame.pos -= frame.lentok
            frame.lentok = 0

    def next_token(self) -> bool:
        """Read the next token into `type` and `token`; False at the end of the text."""
        frame = self.top
        text, n = self.text, self.n
        if frame.pos >= n:
            return False
        start = frame.pos
        frame.pushed = -1
        rule = None
        while self.top.pos <= n:
            frame = self.top
            frame.charlen = 0 if frame.pos == n else 1
            rules = TABLE[frame.state]
            if frame.pushed >= 0:
                index = frame.pushed + 1
                frame.pushed = -1
            else:
                index = 0
            pos = frame.pos
            if pos < n:
                ch = text[pos]
                cls = CLASS[ord(ch)]
            else:
                ch, cls = "", END
            while True:
                rule = rules[index]
                test = rule.test
                if test == T_ANY:
                    break
                if test == T_EQ:
                    if ch == rule.char:
                        break
                elif test == T_EOF:
                    if pos == n:
                        break
                elif rule.classes:
                    if cls in rule.classes:
                        break
                elif self._test(rule, frame):
                    break
                index += 1
            flags = rule.flags
            if rule.special:
                self._run_special(rule.special, frame, start)
            if flags & BINGO:
                self.token = self.text[start:start + frame.lentok]
                frame.lentok = 0
                self.type = rule.type
            if flags & POP:
                self.top = frame.prev
            elif flags & PUSH:
                frame.pushed = index
                self.top = frame.copy()
            elif flags & CLEAR:
                frame.prev = frame.prev.prev
            elif flags & CLRALL:
                frame.prev = None
            elif flags & MERGE:
                below = frame.prev
                below.pos, below.charlen, below.lentok = frame.pos, frame.charlen, frame.lentok
                self.top = below
            if rule.to != KEEP:
                self.top.state = rule.to
            if flags & BINGO or (self.top.pos >= n and not flags & RERUN):
                break
            if flags & (RERUN | POP):
                continue
            top = self.top
            if top.charlen:
                top.pos += 1
                top.lentok += 1
        return rule is not None and bool(rule.flags & BINGO)


# ---------------------------------------------------------------------------------------------
# Fast path. Each alternative below is a reading the machine makes through plain moves and a
# final bingo, followed by a character after which the machine tries nothing longer. The
# lookaheads list those characters; anything else goes to the machine. The one exception, n (letters
# then a digit: a numword), first pushes a host reading, which the same characters make pop back.
# A hyphen then only digits ends no hyphenated word (a part needs a letter): the word before it is an ASCII
# word and the hyphen starts a signed integer (i), as in `SKU-4711`.

_ALPHA = regex_class(ALPHA_RANGES)
_SPECIAL = regex_class(SPECIAL_RANGES)
_ALNUM = "A-Za-z0-9" + _ALPHA
# A character that ends an ASCII word, number or hyphenated ASCII word on its own.
_END_SIMPLE = "\\x00-\\x2c\\x3b-\\x3f\\x5b-\\x5e\\x60\\x7b-\\x7f" + "\\x80-\\U0010ffff"
_NOT_END = "A-Za-z0-9" + _ALPHA + _SPECIAL
_TERM = (f"(?:(?![{_NOT_END}])[{_END_SIMPLE}]|\\.(?![A-Za-z0-9_])|:(?!/)|-(?![{_ALNUM}])"
         f"|_(?![A-Za-z0-9])|/(?![A-Za-z0-9._~])|\\Z)")
_TERM_WORD = f"(?:(?![{_NOT_END}\\-])[\\x00-\\U0010ffff]|-(?![{_ALNUM}])|\\Z)"
_BLANK = (f"(?:[^{_ALNUM}<\\-+&~/.]|\\.(?![./])|~(?![A-Za-z0-9_/])|[-+](?![0-9])|&(?![#A-Za-z:_])"
          f"|/(?![A-Za-z0-9._~])|<(?![/!?A-Za-z:_]))[^{_ALNUM}<\\-+&/]*+")
_FAST = re.compile(
    f"(?:{_BLANK})*+(?:"
    f"(?P<h>[A-Za-z]++(?:-[A-Za-z]++)++)(?={_TERM})"
    f"|(?P<a>[A-Za-z]++)(?={_TERM}|-[0-9]++{_TERM})"
    f"|(?P<n>[A-Za-z]++[0-9][A-Za-z0-9]*+)(?={_TERM})"
    f"|(?P<w>(?:[A-Za-z]++[{_ALPHA}{_SPECIAL}]|[{_ALPHA}])[A-Za-z{_ALPHA}{_SPECIAL}]*+)(?={_TERM_WORD})"
    f"|(?P<u>[0-9]++)(?={_TERM})"
    f"|(?P<i>-[0-9]++)(?={_TERM}))?",
    re.DOTALL)
# What a blank run continuing from the previous whitespace swallows at the start of a word.
_BLANK_TAIL = re.compile(f"[^{_ALNUM}\\-+&/<]*+")


def tokens(text: str, fast: bool = True) -> Iterator[tuple[int, str]]:
    """(type, token text) for every token of `text`, blanks and tags included.

    With `fast=False` every token comes from the state machine (tests compare both ways).
    """
    return _scan(_Machine(text), fast)


def _scan(machine: _Machine, fast: bool = True) -> Iterator[tuple[int, str]]:
    text, n = machine.text, machine.n
    while True:
        top = machine.top
        if fast and top.state == BASE and not machine.ignore and not machine.wanthost:
            if top.pos >= n:
                return
            m = _FAST.match(text, top.pos)
            kind = m.lastgroup
            top.pos = m.end()
            if kind == "h":
                compound = m.group("h")
                yield ASCIIHWORD, compound
                for part in compound.split("-"):
                    yield HWORD_ASCIIPART, part
                continue
            if kind is not None:
                yield {"a": ASCIIWORD, "n": NUMWORD, "w": WORD, "u": UINT, "i": INT}[kind], m.group(kind)
                continue
        if not machine.next_token():
            return
        yield machine.type, machine.token


def _too_long(token: str) -> bool:
    return len(token) * 4 >= MAX_TOKEN_BYTES and len(token.encode("utf-8")) >= MAX_TOKEN_BYTES


def _words(scan: Iterator[tuple[int, str]]) -> list[str | None]:
    return _lexemes([tok for kind, tok in scan if kind not in UNMAPPED and not _too_long(tok)])


def _lexemes(tokens: list[str]) -> list[str | None]:
    """The `simple` dictionary's lexemes of tokens; None where a lexeme is too long to keep."""
    if not tokens:
        return []
    words: list[str | None] = lower("\0".join(tokens)).split("\0")
    if max(map(len, words)) * 4 > MAX_LEXEME_BYTES:
        words = [None if len(w.encode("utf-8")) > MAX_LEXEME_BYTES else w for w in words]
    return words


def lexemes(text: str, fast: bool = True) -> list[str | None]:
    """The lexemes of `text` under the `simple` configuration, in position order (position = index + 1).

    None stands for a lexeme dropped for its length (over 2047 bytes) that still takes a position.
    """
    return _words(tokens(text, fast))


_SPLIT_SPACE = re.compile("[\\t\\n\\v\\f\\r ]+")
_OTHER_SPACE = re.compile("[\\x1c-\\x1f\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]")


class _Unclean(Exception):
    """A run leaves the parser in a mode that carries over to the next run."""


class RunCache:
    """Lexemes per whitespace-separated run, for texts without '<'.

    At ASCII whitespace the parser always stands between tokens (only tags and blanks span it), and
    the blank that swallows the whitespace goes on through the next run's leading punctuation: a run
    after whitespace yields the same lexemes wherever it occurs, so each distinct run is parsed once.

    A text is read as a list of *part* numbers: `parts[i]` holds the lexemes of part i, a distinct run,
    or the whole of a text the runs cannot read (one with '<', or a run that leaves the parser in a
    mode that carries over). Numbers let an index expand its texts with numpy.
    """

    def __init__(self) -> None:
        self.parts: list[tuple[str | None, ...]] = []
        self._runs = _Runs(self, anywhere=True)
        self._first_runs = _Runs(self, anywhere=False)  # a text's first run, when no whitespace precedes it

    def part_numbers(self, text: str) -> list[int]:
        """The parts whose lexemes, in order, are `lexemes(text)`: one text alone, as `parts_of` reads texts
        Arrow cannot hold."""
        if "<" in text:
            return [self.add(lexemes(text))]
        if _OTHER_SPACE.search(text) is None:
            # str.split() then splits at ASCII whitespace only (no \x1c-\x1f, no Unicode spaces).
            runs = text.split()
            first = runs.pop(0) if runs and text[0] not in ASCII_SPACES else ""
        else:
            runs = _SPLIT_SPACE.split(text)
            first = runs.pop(0)
        out = [self._first_runs[first]] if first else []
        out.extend(map(self._runs.__getitem__, runs))
        return [self.add(lexemes(text))] if _UNCLEAN in out else out

    def parts_of(self, rows: Sequence[str | tuple[str | None, ...]],
                 runs: Runs | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`part_numbers` of every row, concatenated (int32), and where each row's end (int64), for a block of
        rows at once: the texts are cut into runs by `split_runs`, each distinct run parsed once. A row given
        as a tuple is its lexemes already: one part. `runs`: `split_runs(rows)` cut already (the rows all
        texts), so that another reader of the block shares the cut."""
        if not rows:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        whole = np.fromiter((not isinstance(row, str) or "<" in row for row in rows), bool, len(rows))
        if runs is None:
            plain = [row for row, w in zip(rows, whole) if not w] if whole.any() else rows
            if not plain:
                return np.fromiter(map(self._whole, rows), np.int32, len(rows)), np.arange(1, len(rows) + 1)
            runs = split_runs(plain)
            cut = ~whole  # the rows `runs` holds
        else:
            cut = np.ones(len(rows), bool)
        if runs is None:  # texts Arrow cannot hold: one at a time
            numbers = [self.part_numbers(row) if isinstance(row, str) else [self.add(row)] for row in rows]
            return (np.fromiter(chain.from_iterable(numbers), np.int32),
                    np.cumsum(np.fromiter(map(len, numbers), np.int64, len(rows))))
        distinct = np.fromiter(map(self._runs.__getitem__, runs.distinct), np.int32, len(runs.distinct))
        numbers = distinct[runs.codes]
        starts = runs.starts
        firsts = np.unique(runs.codes[starts])
        first_parts = np.empty(len(runs.distinct), np.int32)
        first_parts[firsts] = [self._first_runs[runs.distinct[code]] for code in firsts]
        numbers[starts] = first_parts[runs.codes[starts]]
        # The rows of `runs` read whole instead: a run left the parser unclean, or the text has a tag.
        redo = whole[cut]
        if (distinct == _UNCLEAN).any() or (first_parts[firsts] == _UNCLEAN).any():
            redo = redo | np.logical_or.reduceat(numbers == _UNCLEAN, starts)
        if not redo.any() and cut.all():
            return numbers, runs.ends
        counts = np.diff(runs.ends, prepend=0)
        whole[np.flatnonzero(cut)[redo]] = True
        per_row = np.ones(len(rows), np.int64)
        per_row[~whole] = counts[~redo]
        ends = np.cumsum(per_row)
        out = np.empty(ends[-1], np.int32)
        out[~np.repeat(whole, per_row)] = numbers[np.repeat(~redo, counts)]
        out[ends[whole] - 1] = [self._whole(rows[i]) for i in np.flatnonzero(whole)]
        return out, ends

    def add(self, words: Sequence[str | None]) -> int:
        """A new part of these lexemes: its number."""
        self.parts.append(tuple(words))
        return len(self.parts) - 1

    def _whole(self, row: str | tuple[str | None, ...]) -> int:
        return self.add(lexemes(row) if isinstance(row, str) else row)


_UNCLEAN = -1  # the part number of a run that raises _Unclean


class _Runs(dict):
    """The part number of a run (following whitespace when `anywhere`), parsed on first use; `_UNCLEAN` for a
    run whose text must be parsed whole."""

    def __init__(self, cache: RunCache, anywhere: bool) -> None:
        super().__init__()
        self._cache = cache
        self._anywhere = anywhere

    def __missing__(self, run: str) -> int:
        try:
            found = self._cache.add(_run_lexemes(run, self._anywhere))
        except _Unclean:
            found = _UNCLEAN
        self[run] = found
        return found


def _run_lexemes(run: str, anywhere: bool = True) -> list[str | None]:
    """Lexemes of one run. `anywhere`: the run follows whitespace, which a blank is swallowing.

    Raises `_Unclean` if the run leaves the parser in a mode that carries over to the next run (a
    URL whose host is still to be reported).
    """
    if anywhere:
        run = run[_BLANK_TAIL.match(run).end():]
    # A space stands for the whitespace that ends the run in the text.
    text, n = run + " ", len(run)
    words: list[str] = []
    pos = 0
    while pos < n:
        m = _FAST.match(text, pos)
        kind = m.lastgroup
        if kind is None:
            if m.end() >= n:
                break
            machine = _Machine(text)
            words = _words(_scan(machine))
            if machine.wanthost:
                raise _Unclean(run)
            return words
        token = m.group(kind)
        for word in [token, *token.split("-")] if kind == "h" else [token]:
            if not _too_long(word):
                words.append(word)
        pos = m.end()
    return _lexemes(words)
