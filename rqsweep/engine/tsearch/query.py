"""tsquery values, `websearch_to_tsquery('simple', ...)` and PostgreSQL's text output of a tsquery.

Follows PostgreSQL 18 (tsquery.c, tsvector_parser.c in web mode, to_tsany.c, tsquery_cleanup.c):
operands are split off the query text, each operand is parsed by the default parser, several
lexemes from one operand become a phrase, operators are stacked by priority, and placeholders for
operands without lexemes are removed at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from rqsweep.engine.tsearch.chars import ASCII_SPACES, is_alnum
from rqsweep.engine.tsearch.parser import MAX_LEXEME_BYTES, MAX_POSITION, lexemes


class TsQueryError(ValueError):
    """PostgreSQL would raise an error for this query text (SOAT then gets no lexical candidates)."""


@dataclass(frozen=True, slots=True)
class Lexeme:
    value: str


@dataclass(frozen=True, slots=True)
class Not:
    arg: "Node"


@dataclass(frozen=True, slots=True)
class And:
    left: "Node"
    right: "Node"


@dataclass(frozen=True, slots=True)
class Or:
    left: "Node"
    right: "Node"


@dataclass(frozen=True, slots=True)
class Phrase:
    left: "Node"
    right: "Node"
    distance: int = 1


Node = Union[Lexeme, Not, And, Or, Phrase]

_PRIORITY = {Not: 4, Phrase: 3, And: 2, Or: 1}


@dataclass(frozen=True, slots=True)
class TsQuery:
    """A parsed tsquery; `root` is None for the empty query, which matches nothing."""

    root: Node | None

    @property
    def empty(self) -> bool:
        return self.root is None

    def lexemes(self) -> frozenset[str]:
        """Every lexeme the query mentions (under NOT too)."""
        out: set[str] = set()
        stack = [self.root] if self.root is not None else []
        while stack:
            node = stack.pop()
            if isinstance(node, Lexeme):
                out.add(node.value)
            elif isinstance(node, Not):
                stack.append(node.arg)
            else:
                stack.extend((node.left, node.right))
        return frozenset(out)

    def __str__(self) -> str:
        """PostgreSQL's text output, e.g. ``'sku' <-> '-4711' & 'foo'`` ('' when empty)."""
        return "" if self.root is None else _infix(self.root, -1, False)


def phrase_offsets(node: Node) -> tuple[list[tuple[str, int]], int]:
    """For a phrase of lexemes: each lexeme with its distance before the phrase's last position,
    and the phrase's width (the sum of its distances)."""
    if isinstance(node, Lexeme):
        return [(node.value, 0)], 0
    left, lwidth = phrase_offsets(node.left)
    right, rwidth = phrase_offsets(node.right)
    shift = node.distance + rwidth
    return [(w, off + shift) for w, off in left] + right, node.distance + lwidth + rwidth


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''").replace("\\", "\\\\") + "'"


def _infix(node: Node, parent: int, right_of_phrase: bool) -> str:
    if isinstance(node, Lexeme):
        return _quote(node.value)
    priority = _PRIORITY[type(node)]
    if isinstance(node, Not):
        # NOT has the highest priority, so it is never wrapped itself.
        return "!" + _infix(node.arg, priority, False)
    right = _infix(node.right, priority, isinstance(node, Phrase))
    left = _infix(node.left, priority, False)
    if isinstance(node, Phrase):
        op = " <-> " if node.distance == 1 else f" <{node.distance}> "
    else:
        op = " & " if isinstance(node, And) else " | "
    text = left + op + right
    if priority < parent or (isinstance(node, Phrase) and right_of_phrase):
        return "( " + text + " )"
    return text


# -- websearch_to_tsquery ------------------------------------------------------------------------

_OPERATOR_CHARS = frozenset("!&|()<")
_STACK_DEPTH = 32          # PostgreSQL's operator stack; one more pending operator is an error
_MAX_OPERANDS_BYTES = (1 << 20) - 1
_NOT, _AND, _OR, _PHRASE = "not", "and", "or", "phrase"
_OP_PRIORITY = {_NOT: 4, _PHRASE: 3, _AND: 2, _OR: 1}
_STOP = "stop"             # placeholder for an operand without lexemes


class _WebParser:
    """One websearch_to_tsquery call: tokens in, operands and operators in postfix order out."""

    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0
        self.waiting_first = True     # no operand read yet
        self.waiting_operand = True   # else waiting for an operator
        self.out: list[tuple] = []    # postfix: ("val", lexeme) / (_STOP,) / (op, distance)
        self.operand_bytes = 0

    def parse(self) -> list[tuple]:
        stack: list[tuple[str, int]] = []
        while (token := self._next()) is not None:
            kind, value = token
            if kind == "val":
                self._push_operand(value)
            else:
                self._unstack(stack, value)
                if len(stack) == _STACK_DEPTH:
                    raise TsQueryError("tsquery stack too small")
                stack.append((value, 0))
        self._unstack(stack, _OR)
        return self.out

    def _unstack(self, stack: list[tuple[str, int]], op: str) -> None:
        """Emit the stacked operators that bind at least as tightly as `op` (NOT is right-associative)."""
        priority = _OP_PRIORITY[op]
        while stack:
            top = _OP_PRIORITY[stack[-1][0]]
            if (op != _NOT and priority > top) or (op == _NOT and priority >= top):
                break
            self.out.append(stack.pop())

    def _next(self) -> tuple[str, str] | None:
        text, n = self.text, len(self.text)
        while True:
            ch = text[self.i] if self.i < n else ""
            if self.waiting_operand:
                if ch == "-":
                    self.i += 1
                    self._operand_wait()
                    return "op", _NOT
                if ch == '"':
                    start = self.i + 1
                    end = text.find('"', start)
                    end = n if end < 0 else end
                    self.i = min(end + 1, n)
                    self.waiting_operand = self.waiting_first = False
                    return "val", text[start:end]
                if ch in _OPERATOR_CHARS:
                    self.i += 1
                    self._operand_wait()
                    continue
                if ch not in ASCII_SPACES:
                    word = self._word()
                    if word is not None:
                        self.waiting_operand = self.waiting_first = False
                        return "val", word
                    if not self.waiting_first:
                        # A dangling operator still gets an operand: a placeholder.
                        self.out.append((_STOP,))
                    return None
            else:
                if self.i >= n:
                    return None
                if self._or_operator():
                    self._operand_wait()
                    return "op", _OR
                if ch in _OPERATOR_CHARS:
                    self.i += 1
                    continue
                if ch not in ASCII_SPACES:
                    self._operand_wait()
                    return "op", _AND
            self.i += 1

    def _operand_wait(self) -> None:
        self.waiting_operand, self.waiting_first = True, False

    def _word(self) -> str | None:
        """An unquoted operand: up to whitespace, an operator character, a quote or a colon."""
        text, start, n = self.text, self.i, len(self.text)
        if start >= n:
            return None
        end = start + 1
        while end < n:
            ch = text[end]
            if ch in ASCII_SPACES or ch in _OPERATOR_CHARS or ch == '"' or ch == ":":
                break
            end += 1
        self.i = end
        return text[start:end]

    def _or_operator(self) -> bool:
        """A bare "or" (any case) that is not part of a word and has something after it."""
        text, i, n = self.text, self.i, len(self.text)
        if i + 1 >= n or text[i] not in "oO" or text[i + 1] not in "rR":
            return False
        j = i + 2
        if j >= n or text[j] in "-_" or is_alnum(text[j]):
            return False
        while True:
            j += 1
            if j >= n:
                return False
            if text[j] not in ASCII_SPACES:
                break
        self.i = i + 2
        return True

    def _push_operand(self, operand: str) -> None:
        """An operand's lexemes: one value, or the phrase of all of them (to_tsany.c pushval_morph)."""
        # Lexemes sharing a (capped) position are ANDed; positions are chained by phrases.
        groups: list[tuple[int, list[str]]] = []
        for index, word in enumerate(lexemes(operand)):
            if word is None:
                continue
            pos = min(index + 1, MAX_POSITION)
            if groups and groups[-1][0] == pos:
                groups[-1][1].append(word)
            else:
                groups.append((pos, [word]))
        if not groups:
            self.out.append((_STOP,))
            return
        last, chained = 0, 0
        for pos, words in groups:
            # A position without a lexeme inside the operand becomes a placeholder in the chain.
            while last and last + 1 < pos:
                self.out.append((_STOP,))
                if chained:
                    self.out.append((_PHRASE, 1))
                chained += 1
                last += 1
            last = pos
            for k, word in enumerate(words):
                self._push_value(word)
                if k:
                    self.out.append((_AND, 0))
            if chained:
                self.out.append((_PHRASE, 1))
            chained += 1

    def _push_value(self, word: str) -> None:
        size = len(word.encode("utf-8"))
        if size >= MAX_LEXEME_BYTES:
            raise TsQueryError("word is too long in tsquery")
        if self.operand_bytes >= _MAX_OPERANDS_BYTES:
            raise TsQueryError("value is too big in tsquery")
        self.operand_bytes += size + 1
        self.out.append(("val", word))


def _tree(postfix: list[tuple]) -> Node | object:
    stack: list = []
    for item in postfix:
        kind = item[0]
        if kind == "val":
            stack.append(Lexeme(item[1]))
        elif kind == _STOP:
            stack.append(_STOP)
        elif kind == _NOT:
            stack.append(Not(stack.pop()))
        else:
            right, left = stack.pop(), stack.pop()
            stack.append(And(left, right) if kind == _AND else Or(left, right) if kind == _OR
                         else Phrase(left, right, item[1]))
    (root,) = stack
    return root


def _drop_stops(node) -> tuple[Node | None, int, int]:
    """Remove placeholders; (node, ladd, radd) carry phrase distances of removed parts upwards."""
    if isinstance(node, Lexeme):
        return node, 0, 0
    if node is _STOP:
        return None, 0, 0
    if isinstance(node, Not):
        arg, ladd, radd = _drop_stops(node.arg)
        return (None if arg is None else Not(arg)), ladd, radd
    left, lladd, lradd = _drop_stops(node.left)
    right, rladd, rradd = _drop_stops(node.right)
    is_phrase = isinstance(node, Phrase)
    distance = node.distance if is_phrase else 0
    if left is None and right is None:
        add = lladd + distance + rladd if is_phrase else max(lladd, rladd)
        return None, add, add
    if left is None:
        return right, (lladd + distance + rladd if is_phrase else rladd), rradd
    if right is None:
        return left, lladd, (lradd + distance + rradd if is_phrase else lradd)
    if is_phrase:
        return Phrase(left, right, distance + lradd + rladd), lladd, rradd
    return type(node)(left, right), 0, 0


def websearch_to_tsquery(text: str) -> TsQuery:
    """PostgreSQL 18's ``websearch_to_tsquery('simple', text)``.

    Words are ANDed, ``"..."`` is a phrase, a bare ``or`` is OR, a leading ``-`` is NOT, and a word
    the parser splits into several lexemes becomes a phrase of them. Text without lexemes gives the
    empty query. Raises `TsQueryError` where PostgreSQL raises an error.
    """
    postfix = _WebParser(text).parse()
    if not postfix:
        return TsQuery(None)
    root = _tree(postfix)
    if any(item[0] == _STOP for item in postfix):
        root = _drop_stops(root)[0]
    return TsQuery(root)
