"""An inverted index answering SOAT's lexical channel for one store: every matching row and its rank.

Postings are kept per lexeme, sorted by row then position, with PostgreSQL's tsvector limits
already applied (positions capped at 16383, at most 255 per lexeme and row).

A websearch query is a boolean combination of *atoms*: lexemes, and phrases whose operands are
lexemes. Matching is set algebra on the rows of each atom (a phrase's rows come from joining
positions). For ts_rank_cd, a window of a row's entries satisfies the query exactly when the
boolean function holds for the atoms with an occurrence inside the window, so the covers of
PostgreSQL's algorithm can be found for all rows at once from the atoms' occurrence spans and a
truth table of the query.
"""

from __future__ import annotations

from itertools import chain
from typing import Sequence

import numpy as np

from rqsweep.engine.runs import ranges
from rqsweep.engine.tsearch.parser import MAX_POSITION, MAX_POSITIONS, RunCache
from rqsweep.engine.tsearch.query import (
    And, Lexeme, Node, Not, Or, Phrase, TsQuery, TsQueryError, phrase_offsets, websearch_to_tsquery,
)
from rqsweep.engine.tsearch.rank import INV_WEIGHT, inverse_weight_sums, rank_entries

_POS_BITS = 20       # row << _POS_BITS | position: room for a position plus phrase offsets
_POS_KEY_BITS = 14   # a position (at most 16383) in a sort key
_ROW_KEY_BITS = 16   # a row within its segment in a sort key
_LEXEME_SHIFT = _POS_KEY_BITS + _ROW_KEY_BITS
_ROWS_PER_SEGMENT = 1 << _ROW_KEY_BITS  # rows indexed together, numbered within the segment (uint16)
_ROWS_PER_BLOCK = 8192  # rows whose entries are expanded at once during a segment's build
_MAX_ATOMS = 16      # truth tables have 2**atoms entries; longer queries are ranked row by row


class LexicalIndex:
    """``to_tsvector('simple', text)`` of each row, indexed; rows are numbered in the given order.

    A row given as a tuple is its lexemes already (`RunCache.lexemes`: a stored build).

    The rows are indexed in segments of `_ROWS_PER_SEGMENT`, each with its own postings, which a query reads in
    turn: the build never holds more than one segment's sort keys, and a posting's row fits in 2 bytes. Matching
    and ranking are per row, so the segments' answers, concatenated, are the whole index's.
    """

    def __init__(self, texts: Sequence[str | tuple[str | None, ...]]) -> None:
        cache = RunCache()
        builder = LexicalIndexBuilder(cache.parts)
        # A segment's texts at a time: cutting texts into runs holds every run of them as a string.
        for lo in range(0, len(texts), _ROWS_PER_SEGMENT):
            builder.add(*cache.parts_of(texts[lo:lo + _ROWS_PER_SEGMENT]))
        builder._fill(self)

    @classmethod
    def of_parts(cls, parts: list[tuple[str | None, ...]], numbers: np.ndarray, ends: np.ndarray) -> "LexicalIndex":
        """The index of rows read already: `RunCache.parts_of`'s part numbers and row ends, over `parts`. Not
        called by the job: the benchmarks build with it, and tests tie the segment-at-a-time build to it."""
        builder = LexicalIndexBuilder(parts)
        builder.add(numbers, ends)
        return builder.finish()

    def search(self, query_text: str) -> tuple[np.ndarray, np.ndarray]:
        """Rows matching ``websearch_to_tsquery('simple', query_text)`` (ascending) and their ts_rank_cd.

        Returns (rows as int64, ranks as float32). A query PostgreSQL rejects, or one without
        lexemes, matches no row.
        """
        try:
            query = websearch_to_tsquery(query_text)
        except TsQueryError:
            query = TsQuery(None)
        if query.root is None:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        words = sorted(w for w in query.lexemes() if w in self._vocab)
        found = [segment.search(query.root, words) for segment in self._segments]
        return (np.concatenate([np.zeros(0, np.int64)] + [rows + base for (rows, _), base in zip(found, self._bases)]),
                np.concatenate([np.zeros(0, np.float32)] + [ranks for _, ranks in found]))


class _Segment:
    """The postings of a run of rows, numbered from 0 within it: per lexeme present (`_lexemes`, ascending), its
    groups (one per row holding it: the row and how many positions) and their entries (positions), in row order.
    An entry's row is its group's, and a group's first entry is found from its lexeme's first and the counts
    before it, so a group costs 3 bytes and an entry 2."""

    vocab: dict[str, int]  # the whole index's lexeme numbers

    def __init__(self, n_rows: int, lexemes: np.ndarray, lex_groups: np.ndarray, lex_entries: np.ndarray,
                 group_row: np.ndarray, group_count: np.ndarray, pos: np.ndarray) -> None:
        self.n_rows = n_rows
        self._lexemes, self._lex_groups, self._lex_entries = lexemes, lex_groups, lex_entries
        self._group_row, self._group_count, self._pos = group_row, group_count, pos

    def search(self, root: Node, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """`LexicalIndex.search` within the segment, for a parsed query and its lexemes found in the index."""
        rows = self._rows(root).astype(np.int64)
        return rows, self._ranks(root, rows, words)

    # -- postings -------------------------------------------------------------------------------

    def _span(self, lex: int) -> tuple[int, int, int]:
        """The lexeme's groups (first, end) and its first entry; no groups when the segment lacks it."""
        at = int(np.searchsorted(self._lexemes, lex))
        if at == len(self._lexemes) or self._lexemes[at] != lex:
            return 0, 0, 0
        return int(self._lex_groups[at]), int(self._lex_groups[at + 1]), int(self._lex_entries[at])

    def _lexeme_rows(self, word: str) -> np.ndarray:
        lex = self.vocab.get(word)
        if lex is None:
            return np.zeros(0, np.int32)
        first, last, _ = self._span(lex)
        return self._group_row[first:last].astype(np.int32)

    def _groups(self, lex: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Group of the lexeme in each of `rows`, and which rows have one."""
        first, last, _ = self._span(lex)
        lex_rows = self._group_row[first:last]
        if not len(lex_rows):
            return np.zeros(len(rows), np.int64), np.zeros(len(rows), bool)
        at = np.minimum(np.searchsorted(lex_rows, rows), len(lex_rows) - 1)
        return first + at, lex_rows[at] == rows

    def _entries(self, lex: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Indices of the lexeme's entries in `rows` (ascending), row by row, and each one's row."""
        first, last, first_entry = self._span(lex)
        groups, present = self._groups(lex, rows)
        groups = groups[present]
        counts = self._group_count[first:last].astype(np.int64)
        starts = first_entry + np.cumsum(counts) - counts
        sizes = counts[groups - first]
        return ranges(starts[groups - first], sizes), np.repeat(rows[present].astype(np.int64), sizes)

    # -- matching -------------------------------------------------------------------------------

    def _rows(self, node: Node) -> np.ndarray:
        """The rows matching `node`, ascending."""
        if isinstance(node, Lexeme):
            return self._lexeme_rows(node.value)
        if isinstance(node, Not):
            return np.setdiff1d(np.arange(self.n_rows, dtype=np.int32), self._rows(node.arg), assume_unique=True)
        if isinstance(node, And):
            return np.intersect1d(self._rows(node.left), self._rows(node.right), assume_unique=True)
        if isinstance(node, Or):
            return np.union1d(self._rows(node.left), self._rows(node.right))
        # websearch_to_tsquery only builds phrases of lexemes.
        words = [w for w, _ in phrase_offsets(node)[0]]
        if any(w not in self.vocab for w in words):
            return np.zeros(0, np.int32)
        candidates = self._lexeme_rows(words[0])
        for word in words[1:]:
            candidates = np.intersect1d(candidates, self._lexeme_rows(word), assume_unique=True)
        return np.unique(self._phrase_ends(node, candidates)[0] >> _POS_BITS).astype(np.int32)

    def _phrase_ends(self, node: Node, rows: np.ndarray) -> tuple[np.ndarray, int]:
        """Keys (row << 20 | position) where the phrase ends within `rows`, and its width.

        Matches end at positions of the phrase's last lexeme, so PostgreSQL's 14-bit wrap-around
        of match positions cannot occur.
        """
        if isinstance(node, Lexeme):
            entries, entry_rows = self._entries(self.vocab[node.value], rows)
            return (entry_rows << _POS_BITS) | self._pos[entries], 0
        left, lwidth = self._phrase_ends(node.left, rows)
        right, rwidth = self._phrase_ends(node.right, rows)
        ends = right[np.isin(right, left + (node.distance + rwidth), assume_unique=True)]
        return ends, node.distance + lwidth + rwidth

    # -- ranking --------------------------------------------------------------------------------

    def _ranks(self, root: Node, rows: np.ndarray, words: list[str]) -> np.ndarray:
        """ts_rank_cd of each matching row; `words`: the query's lexemes found in the index, sorted."""
        ranks = np.zeros(len(rows), np.float32)
        if not len(rows) or not words:
            return ranks
        atoms = _atoms(root)
        if len(atoms) > _MAX_ATOMS:
            return self._ranks_one_by_one(root, rows, words)
        truth = _truth_table(root, atoms)
        alone = {a.value for a, bit in atoms.items() if isinstance(a, Lexeme) and truth[1 << bit]}
        counts = np.zeros(len(rows), np.int64)
        covered_alone = np.ones(len(rows), bool)
        for word in words:
            groups, present = self._groups(self.vocab[word], rows)
            found = np.zeros(len(rows), np.int64)
            found[present] = self._group_count[groups[present]]  # a segment may hold no group at all
            counts += found
            if word not in alone:
                covered_alone &= found == 0
        # Where every entry is a cover of its own, the rank depends on the number of entries only.
        ranks[covered_alone] = _single_entry_ranks(counts[covered_alone])
        todo = ~covered_alone
        if todo.any():
            ranks[todo] = self._cover_ranks(rows[todo], words, atoms, truth)
        return ranks

    def _cover_ranks(self, rows: np.ndarray, words: list[str], atoms: dict[Node, int],
                     truth: np.ndarray) -> np.ndarray:
        """ts_rank_cd by PostgreSQL's cover search, all rows advancing one cover per step.

        From a start entry s, the window s..i holds an atom iff one of its occurrences starting at
        or after s ends by i; the cover ends at the first such i where the truth table holds. It
        begins at the last j for which j..end still holds, and the next search starts at j + 1.
        """
        key = self._row_entries(rows, words)
        erow, epos, eword = key >> 34, (key >> 20) & 0x3FFF, key & 0xFFFFF
        number = {w: i for i, w in enumerate(words)}
        spans = [(bit, *_occurrences(atom, key, epos, eword, number)) for atom, bit in atoms.items()]
        stop_all = np.searchsorted(erow, rows, side="right")
        start = np.searchsorted(erow, rows, side="left")
        total = np.zeros(len(rows))
        inv_sums = np.array(inverse_weight_sums(int(np.max(stop_all - start)) + 1))
        live = np.arange(len(rows))
        while len(live):
            s, stop = start[live], stop_all[live]
            # Forward: where each atom's first occurrence from s ends (or never).
            first_end = []
            for bit, lo, hi in spans:
                k = np.searchsorted(lo, s)
                end_at = hi[np.minimum(k, len(hi) - 1)] if len(hi) else np.zeros(len(s), np.int64)
                first_end.append((bit, np.where((k < len(lo)) & (end_at < stop), end_at, -1)))
            end = np.full(len(live), -1, np.int64)
            # The window always holds its first entry: no cover once s is past the row's last entry.
            for candidate in [np.where(s < stop, s, -1)] + [f for _, f in first_end]:
                present = np.zeros(len(live), np.int64)
                for bit, f in first_end:
                    present |= np.where((f >= 0) & (f <= candidate), 1 << bit, 0)
                better = (candidate >= 0) & truth[present] & ((end < 0) | (candidate < end))
                end = np.where(better, candidate, end)
            found = end >= 0
            live, s, end = live[found], s[found], end[found]
            if not len(live):
                break
            # Backward: where each atom's last occurrence inside s..end starts.
            last_start = []
            for bit, lo, hi in spans:
                k = np.searchsorted(hi, end, side="right") - 1
                begin_at = lo[np.maximum(k, 0)] if len(lo) else np.zeros(len(s), np.int64)
                last_start.append((bit, np.where((k >= 0) & (begin_at >= s), begin_at, -1)))
            begin = np.full(len(live), -1, np.int64)
            for candidate in [end] + [g for _, g in last_start]:
                present = np.zeros(len(live), np.int64)
                for bit, g in last_start:
                    present |= np.where(g >= candidate, 1 << bit, 0)
                better = (candidate >= s) & truth[present] & (candidate > begin)
                begin = np.where(better, candidate, begin)
            size = end - begin + 1
            noise = (epos[end].astype(np.int64) - epos[begin]) - (end - begin)
            noise = np.where(noise < 0, (end - begin) // 2, noise)
            total[live] += (size / inv_sums[size]) / (1 + noise)
            start[live] = begin + 1
        return total.astype(np.float32)

    def _ranks_one_by_one(self, root: Node, rows: np.ndarray, words: list[str]) -> np.ndarray:
        """ts_rank_cd row by row with the reference algorithm (for queries with very many terms)."""
        key = self._row_entries(rows, words)
        erow = key >> 34
        entries = list(zip(((key >> 20) & 0x3FFF).tolist(), (words[w] for w in (key & 0xFFFFF).tolist())))
        bounds = zip(np.searchsorted(erow, rows).tolist(), np.searchsorted(erow, rows, side="right").tolist())
        return np.array([rank_entries(root, entries[lo:hi]) for lo, hi in bounds], np.float32)

    def _row_entries(self, rows: np.ndarray, words: list[str]) -> np.ndarray:
        """Entries of `words` in `rows` as keys (row << 34 | position << 20 | lexeme number), ascending:
        row by row in tsvector order."""
        parts = []
        for number, word in enumerate(words):
            entries, entry_rows = self._entries(self.vocab[word], rows)
            parts.append((entry_rows << 34) | (self._pos[entries].astype(np.int64) << 20) | number)
        # Entries of one position are ordered by lexeme (code point order), as in a tsvector.
        return np.sort(np.concatenate(parts))


class _Vocabulary(dict):
    """Lexeme -> its number, numbered on first sight. A lexeme too long to keep (None) still takes a position:
    it is -1, dropped from the postings."""

    def __init__(self) -> None:
        super().__init__({None: -1})

    def __missing__(self, word: str) -> int:
        number = self[word] = len(self) - 1
        return number


def _atoms(root: Node) -> dict[Node, int]:
    """Lexemes outside phrases and whole phrases, numbered."""
    out: dict[Node, int] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, (Lexeme, Phrase)):
            out.setdefault(node, len(out))
        elif isinstance(node, Not):
            stack.append(node.arg)
        else:
            stack.extend((node.right, node.left))
    return out


def _truth_table(root: Node, atoms: dict[Node, int]) -> np.ndarray:
    """truth[mask]: whether the query holds when exactly the atoms in `mask` occur."""
    masks = np.arange(1 << len(atoms), dtype=np.int64)

    def holds(node: Node) -> np.ndarray:
        if isinstance(node, (Lexeme, Phrase)):
            return (masks >> atoms[node] & 1).astype(bool)
        if isinstance(node, Not):
            return ~holds(node.arg)
        if isinstance(node, And):
            return holds(node.left) & holds(node.right)
        return holds(node.left) | holds(node.right)
    return holds(root)


def _occurrences(atom: Node, key: np.ndarray, epos: np.ndarray, eword: np.ndarray,
                 number: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """First and last entry index of each occurrence of an atom, in entry order.

    `key` is (row << 34 | position << 20 | lexeme number) per entry, ascending. Occurrences of a
    phrase end at its last lexeme; since every part sits at a fixed offset before the end, both
    returned arrays ascend.
    """
    if isinstance(atom, Lexeme):
        at = np.flatnonzero(eword == number.get(atom.value, -1))
        return at, at
    shape = [(number.get(w, -1), off) for w, off in phrase_offsets(atom)[0]]
    if any(n < 0 for n, _ in shape):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    last = next(n for n, off in shape if off == 0)
    ends = np.flatnonzero(eword == last)
    lo, hi, ok = ends.copy(), ends.copy(), np.ones(len(ends), bool)
    for n, off in shape:
        target = key[ends] - (off << 20) + (n - last)
        at = np.minimum(np.searchsorted(key, target), len(key) - 1)
        ok &= (key[at] == target) & (epos[ends].astype(np.int64) - off >= 1)
        lo, hi = np.minimum(lo, at), np.maximum(hi, at)
    return lo[ok], hi[ok]


class LexicalIndexBuilder:
    """A `LexicalIndex` built from its rows read in order, any number at a time (`add`), over parts
    (`RunCache.parts`, which may grow between additions): a segment is built as soon as its rows are in, so only
    the rows of one segment are held read. Lexemes are numbered in the order the rows first show them, however
    the parts were made, so a build from stored lexemes numbers them as one from the texts; each part is encoded
    as lexeme numbers when a row first uses it (a part no row uses, a run of a text read whole, is never
    encoded)."""

    def __init__(self, parts: list[tuple[str | None, ...]]) -> None:
        self._parts = parts
        self._vocab = _Vocabulary()
        self._first = np.zeros(0, np.int64)  # each encoded part's first lexeme in `_flat`
        self._size = np.zeros(0, np.int64)  # its number of lexemes; -1: not encoded yet
        self._flat = np.zeros(1024, np.int64)  # the encoded parts' lexemes, each lexeme number << 30 (-1: dropped)
        self._dropped = False  # whether a part encoded holds a dropped lexeme
        self._filled = 0
        self._segments: list[_Segment] = []
        self._waiting: list[tuple[np.ndarray, np.ndarray]] = []  # rows added, not in a segment yet
        self._n_waiting = 0

    def add(self, numbers: np.ndarray, ends: np.ndarray) -> None:
        """The next rows: `RunCache.parts_of`'s part numbers and row ends."""
        self._waiting.append((numbers, ends))
        self._n_waiting += len(ends)
        while self._n_waiting >= _ROWS_PER_SEGMENT:
            self._segments.append(self._segment(*self._take(_ROWS_PER_SEGMENT)))

    def finish(self) -> LexicalIndex:
        """The index of every row added."""
        return self._fill(LexicalIndex.__new__(LexicalIndex))

    def _fill(self, index: LexicalIndex) -> LexicalIndex:
        if self._n_waiting:
            self._segments.append(self._segment(*self._take(self._n_waiting)))
        del self._vocab[None]
        index._vocab = dict(self._vocab)
        index._segments = self._segments
        for segment in index._segments:
            segment.vocab = index._vocab
        index._bases = np.cumsum([0] + [s.n_rows for s in index._segments])
        index.n_rows = int(index._bases[-1])
        return index

    def _take(self, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The first `n_rows` waiting rows, joined; the rest stay waiting."""
        numbers, ends, taken = [], [], 0
        while taken < n_rows:
            block_numbers, block_ends = self._waiting.pop(0)
            if taken + len(block_ends) > n_rows:
                cut = n_rows - taken
                self._waiting.insert(0, (block_numbers[block_ends[cut - 1]:], block_ends[cut:] - block_ends[cut - 1]))
                block_numbers, block_ends = block_numbers[:block_ends[cut - 1]], block_ends[:cut]
            ends.append(block_ends + sum(map(len, numbers)) if numbers else block_ends)
            numbers.append(block_numbers)
            taken += len(block_ends)
        self._n_waiting -= n_rows
        return (numbers[0], ends[0]) if len(numbers) == 1 else (np.concatenate(numbers), np.concatenate(ends))

    def _segment(self, numbers: np.ndarray, ends: np.ndarray) -> "_Segment":
        """The segment of rows whose parts are `numbers`, row r's ending at `ends[r]`: positions count from 1
        within the row, are capped at 16383, and a lexeme keeps its first MAX_POSITIONS of a row."""
        self._encode(numbers)
        key, longest = self._sorted_keys(numbers, ends)
        if longest > MAX_POSITIONS:  # no lexeme of a shorter row can repeat a position or pass its limit
            key = _capped(key)
        # Fresh arrays this large cost about as much in page faults as the passes that fill them: each is made once,
        # in its final type.
        pos = key.astype(np.int16)
        pos &= MAX_POSITION  # the cast kept the low 16 bits
        key >>= _POS_KEY_BITS
        starts = _run_starts(key)
        group = key[starts]
        del key
        group_count = np.empty(len(starts), np.uint8)  # at most MAX_POSITIONS (255)
        np.subtract(starts[1:], starts[:-1], out=group_count[:-1], casting="unsafe")
        group_count[-1:] = len(pos) - starts[-1:]
        group_row = group.astype(np.uint16)  # the low 16 bits: the row
        group >>= _ROW_KEY_BITS
        first_groups = _run_starts(group)
        return _Segment(len(ends), group[first_groups].astype(np.int32), np.append(first_groups, len(group)),
                        starts[first_groups], group_row, group_count, pos)

    def _encode(self, numbers: np.ndarray) -> None:
        grown = len(self._parts) - len(self._size)
        self._first = np.append(self._first, np.zeros(grown, np.int64))
        self._size = np.append(self._size, np.full(grown, -1, np.int64))
        fresh = np.flatnonzero((self._size < 0)[numbers])  # a byte per run, not the int64 sizes
        if not len(fresh):
            return
        # Each fresh part's first row position, by np.minimum.at: np.unique(return_index=True) sorts them all,
        # 0.8 s of a 50,000-chunk build's 2.6 s.
        first_seen = np.full(len(self._parts), len(numbers), np.int64)
        np.minimum.at(first_seen, numbers[fresh], fresh)
        parts = np.flatnonzero(first_seen < len(numbers))
        parts = parts[np.argsort(first_seen[parts])]
        words = [self._parts[part] for part in parts.tolist()]
        sizes = np.fromiter(map(len, words), np.int64, len(words))
        lexemes = np.fromiter(map(self._vocab.__getitem__, chain.from_iterable(words)), np.int64, int(sizes.sum()))
        if self._filled + len(lexemes) > len(self._flat):
            self._flat = np.resize(self._flat, 2 * (self._filled + len(lexemes)))
        # Shifted into place in a key; a dropped lexeme (-1) makes its key negative.
        self._flat[self._filled:self._filled + len(lexemes)] = lexemes << _LEXEME_SHIFT
        self._dropped |= bool(len(lexemes)) and int(lexemes.min()) < 0
        self._first[parts] = self._filled + np.cumsum(sizes) - sizes
        self._size[parts] = sizes
        self._filled += len(lexemes)

    def _sorted_keys(self, numbers: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, int]:
        """Every kept entry of the segment as (lexeme << 30 | row << 14 | position), ascending, positions capped
        at 16383 (repeats included); and the most lexemes a row has (dropped ones included)."""
        n_lexemes = len(self._vocab) - 1
        if max(n_lexemes, 1).bit_length() + _LEXEME_SHIFT > 63:
            raise ValueError(f"too many lexemes for one lexical index: {n_lexemes}")
        key = np.empty(int(self._size[numbers].sum()), np.int64)
        filled, run_ends, longest = 0, np.append(0, ends), 0
        # A block of rows at a time, so the temporaries stay a small part of the keys.
        for lo in range(0, len(ends), _ROWS_PER_BLOCK):
            hi = min(lo + _ROWS_PER_BLOCK, len(ends))
            runs = numbers[run_ends[lo]:run_ends[hi]]
            per_run = self._size[runs]
            bounds = np.append(0, np.cumsum(per_run))[run_ends[lo:hi + 1] - run_ends[lo]]
            counts = np.diff(bounds)
            longest = max(longest, int(counts.max()))
            rows = np.arange(lo, hi, dtype=np.int64) << _POS_KEY_BITS
            # Row << 14 | position: the entry's index within the block, plus its row's key less the row's first index.
            block = np.repeat(rows - bounds[:-1] + 1, counts)
            block += np.arange(len(block), dtype=np.int64)
            if longest > MAX_POSITION:
                np.minimum(block, np.repeat(rows | MAX_POSITION, counts), out=block)
            block += self._flat[ranges(self._first[runs], per_run)]
            if self._dropped:
                block = block[block >= 0]
            key[filled:filled + len(block)] = block
            filled += len(block)
        key = key[:filled]
        key.sort()
        return key, longest


def _run_starts(values: np.ndarray) -> np.ndarray:
    """Where each run of equal values begins."""
    changes = np.empty(len(values), bool)
    changes[:1] = True
    np.not_equal(values[1:], values[:-1], out=changes[1:])
    return np.flatnonzero(changes)


def _capped(key: np.ndarray) -> np.ndarray:
    """Sorted entry keys (`_sorted_keys`) as a tsvector holds them: a position repeats only where positions are
    capped at 16383 and is kept once, and a lexeme keeps its first MAX_POSITIONS positions in a row (an entry is
    past them exactly when the entry MAX_POSITIONS before it is of the same lexeme and row)."""
    keep = np.ones(len(key), bool)
    keep[1:] = key[1:] != key[:-1]
    keep[MAX_POSITIONS:] &= key[MAX_POSITIONS:] >> _POS_KEY_BITS != key[:-MAX_POSITIONS] >> _POS_KEY_BITS
    return key if keep.all() else key[keep]


def _single_entry_ranks(counts: np.ndarray) -> np.ndarray:
    """ts_rank_cd of a row whose `count` entries are each a cover: PostgreSQL's running sum."""
    if not len(counts):
        return np.zeros(0, np.float32)
    sums, total, step = [0.0], 0.0, 1.0 / INV_WEIGHT
    for _ in range(int(counts.max())):
        total += step
        sums.append(total)
    return np.array(sums).astype(np.float32)[counts]

