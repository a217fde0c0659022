"""SOAT's eval stand-in embedder: feature hashing, bit-exact to the JavaScript.

Section 4 of the SOAT contract (shared/docs/soat-knowledge-search.md).

The JavaScript works on UTF-16 strings, so this module does too: a *unit string* below is a Python str
holding one UTF-16 code unit per character (an astral character becomes its two surrogates), which makes
slicing, hashing and set membership behave exactly as on a JavaScript string.
"""

from __future__ import annotations

import re
import struct
import threading
from collections.abc import Iterator, Sequence

import numpy as np
import regex

from rqsweep.engine.embed.protocol import to_pgvector_float32
from rqsweep.engine.runs import Runs, ranges, split_runs

FNV_PRIME = 16777619
INDEX_SEED = 2166136261
SIGN_SEED = 1099511628
TOKEN_WEIGHT = 1.0
TRIGRAM_WEIGHT = 0.25

# SOAT matches `[\p{L}\p{N}][\p{L}\p{N}_.-]*` and then strips the trailing run of `._-`; matching only up
# to the run's last letter or digit yields the same tokens (the stripped characters cannot start a token)
# without a second pass. After lower-casing, ASCII text has no letters or digits beyond [a-z0-9].
_TOKEN = regex.compile(r"[\p{L}\p{N}](?:[\p{L}\p{N}_.-]*[\p{L}\p{N}])?")
_ASCII_TOKEN = re.compile(r"[a-z0-9](?:[a-z0-9_.-]*[a-z0-9])?")
_ROWS_PER_BLOCK = 512
_MIN_ROWS_PER_BLOCK = 16  # fewer rows, and the per-block numpy calls cost more than the table's cache misses
_SLOTS = 1 << 19  # (run or feature, row) slots per block of rows at most: 2 MB, about a core's L2 cache here

# Σ lower-cases to ς at the end of a word (Unicode's Final_Sigma context), decided on the original text.
# Characters both cased and case-ignorable (U+0345) are skipped over, as ICU and CPython do.
_FINAL_SIGMA = regex.compile(
    r"(?<=[\p{Cased}--\p{Case_Ignorable}]\p{Case_Ignorable}*)"
    r"Σ"
    r"(?!\p{Case_Ignorable}*[\p{Cased}--\p{Case_Ignorable}])",
    flags=regex.V1,
)
# Lower-case mappings added in Unicode 15-17, which Node's ICU knows and CPython 3.11 (Unicode 14) does not
# (the full list of differences over all code points, against Node 20 / ICU 78). On a newer CPython,
# str.lower() maps them already and these entries never match.
_NEWER_LOWERCASE = {
    0x1C89: 0x1C8A, 0xA7CB: 0x0264, 0xA7CC: 0xA7CD, 0xA7CE: 0xA7CF, 0xA7D2: 0xA7D3, 0xA7D4: 0xA7D5,
    0xA7DA: 0xA7DB, 0xA7DC: 0x019B,
    **{upper: upper + 0x20 for upper in range(0x10D50, 0x10D66)},  # Garay
    **{upper: upper + 0x1B for upper in range(0x16EA0, 0x16EB9)},  # Beria Erfe
}


def js_lower(text: str) -> str:
    """JavaScript's `String.prototype.toLowerCase` (Unicode 17, as Node's ICU).

    CPython's `str.lower` already applies the same full mappings ('İ' -> 'i̇') and the same Final_Sigma rule;
    it differs only through its older Unicode database: letters added since Unicode 14, which it neither
    lower-cases nor counts as cased next to a Σ.
    """
    return _lower_but_newest(text).translate(_NEWER_LOWERCASE)


def tokens(text: str) -> list[str]:
    """The tokens of `js_lower(text)`, in text order, trailing `._-` stripped (repeats kept).

    A token starts with a letter or digit, so stripping never leaves an empty token to drop.
    """
    return [token.translate(_NEWER_LOWERCASE) for token in _tokens_but_newest(text)]


def _lower_but_newest(text: str) -> str:
    """`js_lower` without `_NEWER_LOWERCASE`, which maps letters to letters, so it moves no token boundary."""
    if text.isascii():
        return text.lower()
    if "Σ" in text:
        text = _FINAL_SIGMA.sub("ς", text).replace("Σ", "σ")
    return text.lower()


def _tokens_but_newest(text: str) -> list[str]:
    # The embedder applies _NEWER_LOWERCASE once per distinct token: str.translate costs more than the
    # rest of the lower-casing on non-Latin-1 text.
    lowered = _lower_but_newest(text)
    return (_ASCII_TOKEN if lowered.isascii() else _TOKEN).findall(lowered)


def utf16_units(text: str) -> str:
    """`text` as a unit string: one character per UTF-16 code unit."""
    encoded = text.encode("utf-16-le", "surrogatepass")
    if len(encoded) == 2 * len(text):
        return text
    return "".join(map(chr, struct.unpack(f"<{len(encoded) // 2}H", encoded)))


def fnv1a32(text: str, seed: int = INDEX_SEED) -> int:
    """32-bit FNV-1a over the UTF-16 code units of `text`, from `seed`."""
    encoded = text.encode("utf-16-le", "surrogatepass")
    h = seed
    for unit in struct.unpack(f"<{len(encoded) // 2}H", encoded):
        h = ((h ^ unit) * FNV_PRIME) & 0xFFFFFFFF
    return h


def fnv1a32_many(texts: Sequence[str], seed: int = INDEX_SEED) -> np.ndarray:
    """`fnv1a32` of each of `texts` (uint64 holding 32 bits), all texts a code unit at a time in numpy."""
    encoded = [text.encode("utf-16-le", "surrogatepass") for text in texts]
    lengths = np.fromiter(map(len, encoded), np.int64, len(encoded)) // 2
    # Longest first, so the texts still going at unit j are a prefix.
    order = np.argsort(-lengths, kind="stable")
    lengths = lengths[order]
    units = np.frombuffer(b"".join(encoded[i] for i in order.tolist()), np.uint16).astype(np.uint64)
    at = np.cumsum(lengths) - lengths
    h = np.full(len(texts), seed, np.uint64)
    for j in range(int(lengths[0]) if len(lengths) else 0):
        going = int(np.searchsorted(-lengths, -j, side="left"))
        step = h[:going]
        step ^= units[at[:going] + j]
        step *= FNV_PRIME
        step &= 0xFFFFFFFF
    out = np.empty_like(h)
    out[order] = h
    return out


def token_features(token: str) -> list[tuple[str, float]]:
    """A token's features in the order the JavaScript adds them to its Set, with their weights.

    `"t:" + token` first, then `"g:" + window` for each 3-unit window of `"^" + token + "$"`, left to
    right. Windows count UTF-16 units, so they may split a surrogate pair. Repeats are kept here; the set
    of a whole text is formed by `FeatureHashEmbedder`.
    """
    padded = "^" + utf16_units(token) + "$"
    grams = [("g:" + padded[i:i + 3], TRIGRAM_WEIGHT) for i in range(len(padded) - 2)]
    return [("t:" + padded[1:-1], TOKEN_WEIGHT), *grams]


def _once(slots: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """The distinct values of `pairs`, each a slot of `slots`. Of the pairs writing one slot, only the one written
    last reads its own number back."""
    number = np.arange(len(pairs), dtype=slots.dtype)
    slots[pairs] = number
    return pairs[slots[pairs] == number]


class FeatureHashEmbedder:
    """SOAT's deterministic feature-hashing embedder at `dimensions` dimensions (SOAT's eval uses 1024).

    Reading of the JavaScript: the features of a text form a Set filled token by token in text order, each
    token adding its `t:` feature then its `g:` windows left to right (`token_features`); every member then
    adds `sign * weight` to its hashed index, and the vector is divided by its float64 L2 norm
    (`Math.sqrt` of the sum of squares); no features or a zero norm give e0.

    The insertion order cannot change the result: weights are 1 and 1/4, so every partial sum, and every
    partial sum of squares, is a multiple of 1/16 far below 2**53, exact in float64 whatever the order.
    That is what lets this class dedupe and scatter-add with numpy instead of replaying the Set in order.

    Hashes are computed once per distinct feature and features once per distinct token, so the caches
    grow with the vocabulary seen. Thread-safe.
    """

    def __init__(self, dimensions: int = 1024) -> None:
        if dimensions < 1:
            raise ValueError(f"dimensions must be >= 1, got {dimensions}")
        self.dimensions = dimensions
        self.identity = f"feature-hash/{dimensions}"
        self.queries = self
        self._feature_ids: dict[str, int] = {}
        self._token_ids: dict[str, bytes] = {}  # token -> its feature ids as packed int32
        self._index = np.zeros(1024, dtype=np.int64)
        self._signed_quarters = np.zeros(1024, dtype=np.float64)
        self._new_features: list[tuple[str, float]] = []  # numbered, not hashed yet
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FeatureHashEmbedder(dimensions={self.dimensions})"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts`; float64 arithmetic, float32 result as pgvector stores it."""
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        start = 0
        for counts, norms in self.quarter_blocks(texts):
            out[start:start + len(counts)] = quarters_to_vectors(counts, norms)
            start += len(counts)
        return out

    def quarter_blocks(self, texts: Sequence[str],
                       runs: Runs | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """`embed(texts)` as integers, a block of rows at a time, in order: each row's sums of signed weights
        counted in quarters (a weight is 1 or 1/4; int32) and its float64 L2 norm. `quarters_to_vectors` turns
        them into `embed`'s rows bit for bit; the counts are small, so a store can keep them in a byte each.
        `runs`: `split_runs(texts)` cut already (the index build shares its cut with the lexical index)."""
        # Tokens never span ASCII whitespace, nor does lower-casing's context (Final_Sigma looks only through
        # cased and case-ignorable characters): a text's tokens are those of its runs.
        runs = runs or split_runs(texts) or Runs(list(texts), np.arange(len(texts), dtype=np.int32),
                                         np.arange(1, len(texts) + 1, dtype=np.int64))
        with self._lock:
            packed = [self._packed(run) for run in runs.distinct]
            self._hash_new_features()
            lengths = np.fromiter(map(len, packed), np.int64, len(packed)) // 4
            features = np.frombuffer(b"".join(packed), dtype=np.int32)
            offsets = np.cumsum(lengths) - lengths
            n_features = max(len(self._feature_ids), 1)
            index, signed_quarters = self._index[:n_features], self._signed_quarters[:n_features]
        # (run or feature, row) slots of a block of rows: few enough to stay in cache (at 50,000 chunks of the
        # benchmarks' text, 2 MB of slots take 30% less time than 16 MB). A slot is value << shift | row within
        # the block (a power of two), so a mask and a shift give the row and the value back.
        span = max(n_features, len(runs.distinct), 1)
        shift = max(_MIN_ROWS_PER_BLOCK, min(_ROWS_PER_BLOCK, _SLOTS // span)).bit_length() - 1
        block = 1 << shift
        dtype = np.int32 if span << shift < 2**31 else np.int64
        slots = np.empty(span << shift, dtype)
        bounds = np.append(0, runs.ends)
        run_slots = runs.codes.astype(dtype) << shift
        run_slots |= np.repeat(np.arange(len(texts), dtype=dtype) & (block - 1), np.diff(bounds))
        feature_slots = features.astype(dtype) << shift
        for start in range(0, len(texts), block):
            stop = min(start + block, len(texts))
            pairs = _once(slots, run_slots[bounds[start]:bounds[stop]])
            codes = pairs >> shift
            per_run = lengths[codes]
            pairs = feature_slots[ranges(offsets[codes], per_run)] | np.repeat(pairs & (block - 1), per_run)
            pairs = _once(slots, pairs)
            ids = pairs >> shift
            yield self._counted(pairs & (block - 1), index[ids], signed_quarters[ids], stop - start)

    def _packed(self, text: str) -> bytes:
        """The feature ids of the distinct tokens of `text`, packed int32 (repeats across tokens kept)."""
        known = self._token_ids
        return b"".join([known.get(token) or self._register_token(token)
                         for token in dict.fromkeys(_tokens_but_newest(text))])

    def _counted(self, rows: np.ndarray, index: np.ndarray, signed_quarters: np.ndarray,
                 n_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Quarter counts and norms of `n_rows` rows from each row's distinct features: their index and signed
        weight in quarters."""
        dims = self.dimensions
        # float64 cast: bincount answers int64 when no text has a feature.
        counts = np.bincount(rows * dims + index, weights=signed_quarters,
                             minlength=n_rows * dims).astype(np.float64, copy=False)
        counts = counts.reshape(n_rows, dims)
        # The norm of the counts over 4 is the vector's, bit for bit: the sums of squares are exact (integers
        # far below 2**53) and scaling by a power of 4 commutes with sqrt's rounding.
        norms = np.sqrt(np.einsum("ij,ij->i", counts, counts)) * 0.25
        empty = norms == 0
        counts[empty, 0] = 4.0
        norms[empty] = 1.0
        # Every count is an integer (weights 1 and 1/4) of fewer than 2**29 features: exact in int32.
        return counts.astype(np.int32), norms

    def _register_token(self, token: str) -> bytes:
        features = token_features(token.translate(_NEWER_LOWERCASE))
        ids = struct.pack(f"{len(features)}i", *map(self._id_of_feature, features))
        self._token_ids[token] = ids
        return ids

    def _id_of_feature(self, feature: tuple[str, float]) -> int:
        """The feature's id, numbered on first sight; a new one is hashed by the next `_hash_new_features`."""
        feature_id = self._feature_ids.get(feature[0])
        if feature_id is None:
            feature_id = self._feature_ids[feature[0]] = len(self._feature_ids)
            self._new_features.append(feature)
        return feature_id

    def _hash_new_features(self) -> None:
        """The index and signed weight (in quarters) of every feature numbered since the last call, hashed
        together."""
        new, first = self._new_features, len(self._feature_ids) - len(self._new_features)
        if not new:
            return
        while len(self._feature_ids) > len(self._index):
            self._index = np.concatenate([self._index, np.zeros_like(self._index)])
            self._signed_quarters = np.concatenate([self._signed_quarters, np.zeros_like(self._signed_quarters)])
        names = [name for name, _ in new]
        quarters = np.fromiter((weight * 4 for _, weight in new), np.float64, len(new))
        self._index[first:first + len(new)] = fnv1a32_many(names, INDEX_SEED) % self.dimensions
        self._signed_quarters[first:first + len(new)] = np.where(fnv1a32_many(names, SIGN_SEED) % 2 == 0,
                                                                 quarters, -quarters)
        new.clear()


def quarters_to_vectors(counts: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """Feature-hash rows as pgvector stores them from `FeatureHashEmbedder.quarter_blocks`' counts and norms:
    `counts / 4` is the vector exactly, divided by its norm in float64, then rounded to float32."""
    return to_pgvector_float32(counts * 0.25 / norms[:, None])
