"""Evaluating a tsquery against lexeme positions (PostgreSQL 18's TS_execute, tsvector_op.c).

Above phrase operators the evaluation is boolean. At and below a phrase operator it works on
positions: each subexpression yields the positions where its match ends, its width, and whether
those positions are where it does *not* match ("negate", from NOT), then operators merge them.
"""

from __future__ import annotations

from typing import Callable, Sequence

from rqsweep.engine.tsearch.query import And, Lexeme, Node, Not, Or, Phrase

Positions = Callable[[str], "Sequence[int] | None"]
"""Sorted, distinct positions of a lexeme in the document, or None when it is absent."""

_POS_MASK = 0x3FFF   # positions are stored in 14 bits
_L_ONLY, _R_ONLY, _BOTH = 1, 2, 4
_FAR = 1 << 62


def execute(node: Node, positions: Positions) -> bool:
    """Whether the document described by `positions` matches the query below `node`."""
    if isinstance(node, Lexeme):
        return positions(node.value) is not None
    if isinstance(node, Not):
        return not execute(node.arg, positions)
    if isinstance(node, And):
        return execute(node.left, positions) and execute(node.right, positions)
    if isinstance(node, Or):
        return execute(node.left, positions) or execute(node.right, positions)
    return _phrase(node, positions, None)


class _Match:
    """Match data of a subexpression under a phrase operator (PostgreSQL's ExecPhraseData)."""

    __slots__ = ("pos", "negate", "width")

    def __init__(self) -> None:
        self.pos: Sequence[int] = ()
        self.negate = False
        self.width = 0


def _phrase(node: Node, positions: Positions, data: _Match | None) -> bool:
    if isinstance(node, Lexeme):
        found = positions(node.value)
        if found is None:
            return False
        if data is not None:
            data.pos = found
        return True
    if isinstance(node, Not):
        assert data is not None
        if not _phrase(node.arg, positions, data):
            data.negate = True          # matches nowhere -> matches everywhere
            return True
        if data.pos:
            data.negate = not data.negate
            return True
        data.negate = False             # matched everywhere -> matches nowhere
        return False
    left, right = _Match(), _Match()
    if isinstance(node, Or):
        assert data is not None
        lmatch = _phrase(node.left, positions, left)
        rmatch = _phrase(node.right, positions, right)
        if not lmatch and not rmatch:
            return False
        if not lmatch:
            left.width = 0
        if not rmatch:
            right.width = 0
        width = max(left.width, right.width)
        loff, roff = width - left.width, width - right.width
        data.width = width
        if left.negate and right.negate:
            _output(data, left, right, _BOTH, loff, roff)
        elif left.negate:
            _output(data, left, right, _L_ONLY, loff, roff)
        elif right.negate:
            _output(data, left, right, _R_ONLY, loff, roff)
        else:
            return _output(data, left, right, _BOTH | _L_ONLY | _R_ONLY, loff, roff)
        data.negate = True
        return True
    # Phrase, or AND below a phrase.
    if not _phrase(node.left, positions, left) or not _phrase(node.right, positions, right):
        return False
    if isinstance(node, Phrase):
        loff, roff = node.distance + right.width, 0
        width = node.distance + left.width + right.width
    else:
        width = max(left.width, right.width)
        loff, roff = width - left.width, width - right.width
    if data is not None:
        data.width = width
    if left.negate and right.negate:
        _output(data, left, right, _BOTH | _L_ONLY | _R_ONLY, loff, roff)
        if data is not None:
            data.negate = True
        return True
    if left.negate:
        return _output(data, left, right, _R_ONLY, loff, roff)
    if right.negate:
        return _output(data, left, right, _L_ONLY, loff, roff)
    return _output(data, left, right, _BOTH, loff, roff)


def _output(data: _Match | None, left: _Match, right: _Match, emit: int, loff: int, roff: int) -> bool:
    """Merge two position lists (offset by loff/roff) keeping those `emit` asks for."""
    lpos, rpos = left.pos, right.pos
    nl, nr = len(lpos), len(rpos)
    li = ri = 0
    out: list[int] = []
    while li < nl or ri < nr:
        if li < nl:
            lp = (lpos[li] & _POS_MASK) + loff
        elif emit & _R_ONLY:
            lp = _FAR
        else:
            break
        if ri < nr:
            rp = (rpos[ri] & _POS_MASK) + roff
        elif emit & _L_ONLY:
            rp = _FAR
        else:
            break
        if lp < rp:
            found = lp if emit & _L_ONLY else 0
            li += 1
        elif lp == rp:
            found = rp if emit & _BOTH else 0
            li += 1
            ri += 1
        else:
            found = rp if emit & _R_ONLY else 0
            ri += 1
        if found > 0:
            if data is None:
                return True
            # Stored in a 14-bit field: a match end past the last position wraps around.
            out.append(found & _POS_MASK)
    if data is not None and out:
        data.pos = out
        return True
    return False
