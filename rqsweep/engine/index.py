"""The embedded engine's public surface: build an index from a corpus, search it as SOAT does."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import polars as pl

from rqsweep.config import Chunking
from rqsweep.corpus import Corpus, chunk_contents, chunk_id, memory_updated_at
from rqsweep.corpus.texts import sequence_equal
from rqsweep.engine.batch import QueryPlan, plan_query
from rqsweep.engine.channels import Candidate, Candidates, lexical_channels, merge_shards, vector_channels
from rqsweep.engine.cosine import cosine_distance, squared_norms
from rqsweep.engine.embed import Embedder, texts_per_step
from rqsweep.engine.fusion import fuse
from rqsweep.engine.heap import release_freed
from rqsweep.engine.index_cache import CachedRows, IndexCache, StoredParts
from rqsweep.engine.pgsort import TIE_ORDERS, TieOrder
from rqsweep.engine.quarter_vectors import QuarterVectors
from rqsweep.engine.recency import recency_factor
from rqsweep.engine.runs import split_runs
from rqsweep.engine.tsearch import LexicalIndex
from rqsweep.engine.tsearch.index import LexicalIndexBuilder
from rqsweep.engine.tsearch.parser import RunCache
from rqsweep.knobs import Knobs
from rqsweep.scope import Scope

DEFAULT_LIMIT, MAX_LIMIT = 10, 100
_EMBED_PORTION = 8_192  # texts a model embeds at a time: their float32 rows are held at once (12.6 MB at 384-d)
_CUT_PORTION = 65_536  # texts cut into runs at a time for the feature hash, which holds no such rows
_KEYS_AT_ONCE = 65_536  # keys encoded to bytes at a time for the catalog's sorted keys
# The progress of making an index's vectors: given the rows to make, it returns what is told of each portion made.
VectorsProgress = Callable[[int], Callable[[int], None]]


def no_progress(total: int) -> Callable[[int], None]:
    return lambda _: None


def clamp_limit(limit: object) -> int:
    """SOAT's `limit`: floored, capped at 100; missing, non-numeric or < 1 gives 10."""
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit):
        return DEFAULT_LIMIT
    n = math.floor(limit)
    return DEFAULT_LIMIT if n < 1 else min(n, MAX_LIMIT)


class _ColumnMajor:
    """The float32 vectors of `n_rows` rows, put in any order, column-major: a sparse query vector (the feature
    hash's) is estimated from its own columns only. Filled in place, so no second copy of them all is held."""

    def __init__(self, n_rows: int) -> None:
        self.n_rows, self.array = n_rows, None

    def put(self, rows: slice | np.ndarray, vectors: np.ndarray, divisors: None = None) -> None:
        if self.array is None:
            self.array = np.empty((self.n_rows, vectors.shape[1]), np.float32, order="F")
        self.array[rows] = vectors

    def subset(self, rows: slice | np.ndarray) -> np.ndarray:
        """The vectors of `rows`."""
        return np.zeros((0, 0), np.float32) if self.array is None else self.array[rows]

    def finish(self) -> np.ndarray:
        return np.zeros((0, 1), np.float32, order="F") if self.array is None else self.array


def _read_and_embed(embedder: Embedder, texts: Sequence[str], cached: CachedRows | None = None,
                    made: Callable[[int], None] | None = lambda _: None
                    ) -> tuple[np.ndarray | QuarterVectors | None, LexicalIndex]:
    """The vectors of `texts` as a store keeps them, and their lexical index, a portion of texts at a time: each
    portion read for the lexical index goes into its builder, so no more than a segment's rows are held read. An
    embedder that gives its vectors as quarter counts (the feature hash) keeps them in a quarter of float32's
    memory and reads the runs the lexical index reads, each portion cut once for both; any other embedder's
    vectors are column-major (`_embedded`). `made(n)` is told of each portion's n rows as their vectors are made or
    read back; with `made` None (a model's vectors left for later, no cache), the lexical index alone is built, and
    the vectors are None.

    With `cached` (the rows in groups keyed in an index cache), a portion ends at a group's end: its groups found
    in the cache are read back, and only the others' texts are read, built as above and stored."""
    quarters = hasattr(embedder, "quarter_blocks")
    parsed = RunCache()
    lexical = LexicalIndexBuilder(parsed.parts)
    stored = StoredParts(parsed)
    vectors = QuarterVectors.empty(len(texts), embedder.dimensions) if quarters else _ColumnMajor(len(texts))
    ends = cached.ends if cached else np.arange(1, len(texts) + 1)
    for lo_group, hi_group in _portions(ends, _CUT_PORTION if quarters else _EMBED_PORTION):
        lo, hi = int(ends[lo_group - 1]) if lo_group else 0, int(ends[hi_group - 1])
        found, old, found_groups = (_read_back(cached, range(lo_group, hi_group), stored, vectors,
                                               embedder.dimensions if quarters else None, lo, hi)
                                    if cached else (np.zeros(hi - lo, bool), [], []))
        fresh = np.flatnonzero(~found) + lo
        portion = _texts_of(texts, fresh)
        runs = split_runs(portion) if portion else None
        numbers, row_ends = parsed.parts_of(portion, runs)
        # The lexical builder first: a segment's build (the build's peak) then runs before the new rows' vectors
        # take their memory, as in a build without the cache.
        if not len(fresh):  # every row read back: the blocks go in as they are
            for block in old:
                lexical.add(*block)
        else:
            lexical.add(*(_merged(found, old, numbers, row_ends) if old else (numbers, row_ends)))
        del old
        if quarters and portion:
            at = 0
            for counts, divisors in embedder.quarter_blocks(portion, runs):
                vectors.put(_rows(fresh[at:at + len(counts)]), counts, divisors)
                at += len(counts)
        embedded = 0
        if not quarters and portion and made is not None:
            vectors.put(_rows(fresh), _in_steps(embedder, portion, made))
            embedded = len(portion)
        del portion, runs
        if cached:
            new_groups = np.setdiff1d(np.arange(lo_group, hi_group), np.concatenate([[0], *found_groups])[1:])
            cached.store(new_groups, vectors.subset(_rows(fresh)), numbers, row_ends, stored)
        if made is not None:
            made(hi - lo - embedded)
    return vectors if quarters else None if made is None else vectors.finish(), lexical.finish()


def _embedded(embedder: Embedder, texts: Sequence[str], made: Callable[[int], None]) -> np.ndarray:
    """A model's vectors of `texts`, column-major, `_EMBED_PORTION` texts read and embedded at a time, `made(n)`
    told of each."""
    vectors = _ColumnMajor(len(texts))
    for lo in range(0, len(texts), _EMBED_PORTION):
        hi = min(lo + _EMBED_PORTION, len(texts))
        vectors.put(slice(lo, hi), _in_steps(embedder, texts[lo:hi], made))
    return vectors.finish()


def _in_steps(embedder: Embedder, texts: Sequence[str], made: Callable[[int], None]) -> np.ndarray:
    """The vectors of `texts`, embedded `texts_per_step(embedder)` at a time (a model in this process: its progress
    moves as it goes) or all at once (a provider's batches spread over its calls), `made(n)` told of each step."""
    step = texts_per_step(embedder) or len(texts)
    if step >= len(texts):
        out = embedder.embed(texts)
        made(len(texts))
        return out
    parts = []
    for lo in range(0, len(texts), step):
        parts.append(embedder.embed(texts[lo:lo + step]))
        made(len(parts[-1]))
    return np.concatenate(parts)


def _read_back(cached: CachedRows, groups: range, stored: StoredParts, vectors: QuarterVectors | _ColumnMajor,
               dimensions: int | None, lo: int, hi: int) -> tuple[np.ndarray, list, list[np.ndarray]]:
    """The rows of `groups` (rows lo..hi) found in the index cache, put into `vectors`: which rows of lo..hi they
    are, their part numbers and row ends (in blocks), and which groups they are (in blocks)."""
    found, old, found_groups = np.zeros(hi - lo, bool), [], []
    for rows_of, block, divisors, numbers, row_ends in cached.read(groups, stored, dimensions):
        at = cached.rows_of(rows_of)
        found[at - lo] = True
        vectors.put(_rows(at), block, divisors)
        old.append((numbers, row_ends))
        found_groups.append(rows_of)
        del block
    return found, old, found_groups


def _portions(ends: np.ndarray, size: int) -> Iterator[tuple[int, int]]:
    """Consecutive ranges of groups (`ends`: where each group's rows end) of about `size` rows, at least one group
    each."""
    lo = 0
    while lo < len(ends):
        hi = max(lo + 1, int(np.searchsorted(ends, (int(ends[lo - 1]) if lo else 0) + size, "right")))
        yield lo, hi
        lo = hi


def _rows(rows: np.ndarray) -> slice | np.ndarray:
    """Ascending distinct row numbers, as a slice when they run on without a gap (cheaper to write through)."""
    return slice(int(rows[0]), int(rows[-1]) + 1) if len(rows) and rows[-1] - rows[0] == len(rows) - 1 else rows


def _texts_of(texts: Sequence[str], rows: np.ndarray) -> list[str]:
    """The texts of ascending `rows`, one read per run of consecutive rows."""
    if not len(rows):
        return []
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    return [text for stretch in np.split(rows, breaks) for text in texts[int(stretch[0]):int(stretch[-1]) + 1]] \
        if len(breaks) else texts[int(rows[0]):int(rows[-1]) + 1]


def _merged(found: np.ndarray, old: list[tuple[np.ndarray, np.ndarray]], numbers: np.ndarray,
            row_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The part numbers and row ends of a portion's rows, in order, from its rows read back (`found`; `old`: their
    numbers and row ends, in blocks) and its new rows (`numbers`, `row_ends`)."""
    per_row = np.empty(len(found), np.int64)
    per_row[found] = np.concatenate([np.diff(ends, prepend=0) for _, ends in old])
    per_row[~found] = np.diff(row_ends, prepend=0)
    from_old = np.repeat(found, per_row)
    merged = np.empty(len(from_old), np.int32)
    merged[from_old] = np.concatenate([n for n, _ in old])
    merged[~from_old] = numbers
    return merged, np.cumsum(per_row)


def tags_contain(row_tags: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    """JSONB containment `row_tags @> wanted` for flat string maps."""
    return all(row_tags.get(k) == v for k, v in wanted.items())


class ChunkIds(Sequence):
    """The ids of a table's chunks (`chunk_id`), each made when read: a million held as strings take 60 MB."""

    def __init__(self, document_keys: Sequence[str], counts: np.ndarray):
        self._keys = document_keys
        self._starts = np.cumsum(counts) - counts  # each document's first chunk
        self._n = int(counts.sum())

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, row):
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(self._n))]
        if not -self._n <= row < self._n:
            raise IndexError(row)
        row %= self._n
        # The last document starting at or before the row: documents without chunks start where the next one does.
        d = int(np.searchsorted(self._starts, row, "right")) - 1
        return chunk_id(self._keys[d], row - int(self._starts[d]))

    __eq__ = sequence_equal
    __hash__ = None


@dataclass
class Rows:
    """One table's rows in physical (insertion) order: what identifies them, without vectors or postings."""

    source_type: str
    ids: Sequence[str]  # chunk ids (`ChunkIds`) or memory keys: the identity RRF fuses on
    keys: list[str]  # the document key of a chunk, or the memory key
    contents: Sequence[str]  # a `Texts` file as built: read back a portion at a time, or a row for a result
    tags: list[Mapping[str, str]]
    paths: list[str]  # document path, or the memory's store name
    updated_at_ms: np.ndarray


def table_rows(corpus: Corpus, chunking: Chunking, now: datetime) -> tuple[Rows, Rows, np.ndarray]:
    """The corpus's chunks (`chunk_contents`) and memories as SOAT's two tables hold them, memory ages counted
    back from `now`; and how many chunks each document has."""
    now_ms = round(now.timestamp() * 1000)
    counts, contents = chunk_contents(corpus.documents, chunking)
    columns = corpus.documents.columns
    if (counts == 1).all():  # one chunk a document (`whole` chunking, or short documents): the documents' columns
        keys, tags, paths = columns["key"], columns["tags"], columns["path"]
    else:
        per_chunk = np.repeat(np.arange(len(counts)), counts).tolist()
        keys, tags, paths = ([column[d] for d in per_chunk] for column in (columns["key"], columns["tags"],
                                                                          columns["path"]))
    documents = Rows("document", ChunkIds(columns["key"], counts), keys, contents, tags, paths,
                     np.full(len(contents), now_ms, np.int64))
    memories = corpus.memories.columns
    ages_ms = np.array([round(memory_updated_at(age, now).timestamp() * 1000) for age in memories["age_days"]],
                       np.int64)
    return (documents, Rows("memory", memories["key"], memories["key"], corpus.memories.contents, memories["tags"],
                            memories["store"], ages_ms), counts)


@dataclass
class Store(Rows):
    """One table's rows, embedded and lexically indexed."""

    vectors: np.ndarray | QuarterVectors | None = field(kw_only=True)  # None until `Index.embed_vectors`
    lexical: LexicalIndex | None = field(kw_only=True)  # None once the lexical candidates are extracted (`drop_postings`)
    norms: np.ndarray | None = field(default=None, kw_only=True, repr=False)  # computed when not given
    _scopes: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.norms is None and self.vectors is not None:
            self.norms = squared_norms(self.vectors)

    def in_scope(self, scope: Scope) -> tuple[np.ndarray, np.ndarray | None]:
        """The rows visible under `scope` (ascending) and their mask, None when every row is visible.

        Cached per scope: every query of a run asks again.
        """
        key = scope.key()
        if key not in self._scopes:
            keep = self._select(scope)
            self._scopes[key] = (np.flatnonzero(keep), None if keep.all() else keep)
        return self._scopes[key]

    def _select(self, scope: Scope) -> np.ndarray:
        include = scope.include_documents if self.source_type == "document" else scope.include_memories
        keep = np.full(len(self.ids), include, dtype=bool)
        for i in range(len(self.ids)):
            if keep[i] and scope.tags:
                keep[i] = tags_contain(self.tags[i], scope.tags)
            if keep[i] and self.source_type == "memory" and scope.memory_stores is not None:
                keep[i] = self.paths[i] in scope.memory_stores
            if keep[i] and self.source_type == "document":
                if scope.document_keys is not None:
                    keep[i] = self.keys[i] in scope.document_keys
                if keep[i] and scope.document_paths is not None:
                    keep[i] = any(self.paths[i].startswith(p) for p in scope.document_paths)
        return keep


@dataclass(frozen=True)
class SearchResult:
    """A SOAT-shaped search result (the fields rqsweep reads)."""

    source_type: str
    key: str  # document key or memory key
    chunk_id: str | None
    content: str
    score: float
    similarity_score: float
    signals: dict[str, int]
    updated_at: datetime
    recency_factor: float  # what the blend multiplied the fused score by (1 for documents and with the blend off)


def _byte_keys(*keys: Sequence[str]) -> pl.Series:
    """Keys (of one list, then the next) as Arrow binary, UTF-8 with lone surrogates kept (a JSON key may hold one):
    equal keys, equal bytes. Encoded `_KEYS_AT_ONCE` at a time: a million keys as bytes objects take 50 MB."""
    return pl.concat([pl.Series([key.encode("utf-8", "surrogatepass") for key in some[lo:lo + _KEYS_AT_ONCE]],
                                dtype=pl.Binary)
                      for some in keys for lo in range(0, len(some), _KEYS_AT_ONCE)]
                     or [pl.Series([], dtype=pl.Binary)], rechunk=False)


def sorted_keys(documents: Rows, memories: Rows) -> tuple[pl.Series, np.ndarray]:
    """Every row's key (documents' rows, then memories'), sorted as bytes, and the row each sorted one is: a few
    bytes per row, where a dict of sets took about 400 (0.4 GB at a million chunks)."""
    keys = _byte_keys(documents.keys, memories.keys)
    order = keys.arg_sort()
    return keys.gather(order), order.to_numpy()


class Catalog:
    """SOAT's two tables row by row, and what ranked lists need of them: keys, ids, contents and ages (an
    `Index` without the vectors and postings, as a coordinator of corpus shards holds it). `keys`: the rows'
    `sorted_keys`, made here when not given."""

    def __init__(self, documents: Rows, memories: Rows, embedder: Embedder, now: datetime,
                 tie_order: TieOrder = "postgres", keys: tuple[pl.Series, np.ndarray] | None = None):
        self.stores = {"document": documents, "memory": memories}
        self.embedder = embedder
        self.now = now
        self.tie_order = tie_order
        self._sorted_keys, self._key_order = keys or sorted_keys(documents, memories)

    def memory_age_days(self, now: datetime | None = None) -> np.ndarray:
        """Each memory's age at `now` (default: the build clock), in days, from millisecond timestamps."""
        now_ms = round((now or self.now).timestamp() * 1000)
        return (now_ms - self.stores["memory"].updated_at_ms) / 86_400_000

    def embed_queries(self, queries: Sequence[str]) -> np.ndarray:
        return self.embedder.queries.embed(list(queries))

    def expected_rows(self, keys: Sequence[str]) -> list[set[tuple[str, int]]]:
        """Per expected key, the (source_type, row) pairs that count as a hit: every chunk of a document."""
        wanted = _byte_keys(keys)
        n_documents = len(self.stores["document"].keys)
        bounds = zip(self._sorted_keys.search_sorted(wanted, "left").to_list(),
                     self._sorted_keys.search_sorted(wanted, "right").to_list())
        return [{("document", row) if row < n_documents else ("memory", row - n_documents)
                 for row in self._key_order[lo:hi].tolist()} for lo, hi in bounds]

    def results(self, candidates: Candidates, query_vector: np.ndarray, knobs: Knobs, limit: int,
                now: datetime | None = None) -> list[SearchResult]:
        """A query's ranked results from its candidates (`candidates`), for one setting: what `search` returns.
        Lexical-only results get their similarity from `self.distances`, which a subclass provides."""
        ages = self.memory_age_days(now)
        fused = fuse(candidates, knobs, limit, ages)
        # A vector candidate's score is its cosine already; only lexical-only results need one computed.
        similarity = {(c.source_type, c.row): c.score for c in candidates.vector}
        for source_type in self.stores:
            rows = np.array([f.row for f in fused if f.source_type == source_type
                             and (source_type, f.row) not in similarity], dtype=np.int64)
            if len(rows):
                similarity.update(((source_type, int(r)), 1.0 - float(d))
                                  for r, d in zip(rows, self.distances(source_type, rows, query_vector)))
        results = []
        for f in fused:
            store = self.stores[f.source_type]
            signals = {name: p for name, p in (("vector", f.vector_position), ("lexical", f.lexical_position))
                       if p is not None}
            results.append(SearchResult(
                f.source_type, store.keys[f.row], store.ids[f.row] if f.source_type == "document" else None,
                store.contents[f.row], f.score, similarity[(f.source_type, f.row)], signals,
                datetime.fromtimestamp(store.updated_at_ms[f.row] / 1000, timezone.utc),
                recency_factor(float(ages[f.row]), knobs.recency_half_life_days) if f.source_type == "memory" else 1.0,
            ))
        return results


class Index(Catalog):
    """SOAT's two stores, embedded and indexed, searchable for any knob setting."""

    stores: dict[str, Store]

    def __init__(self, documents: Store, memories: Store, embedder: Embedder, now: datetime,
                 tie_order: TieOrder = "postgres", keys: tuple[pl.Series, np.ndarray] | None = None):
        super().__init__(documents, memories, embedder, now, tie_order, keys)
        self.rows_built = sum(len(store.ids) for store in self.stores.values())
        self.rows_reused = 0
        self._vectors_progress = no_progress  # of the vectors a build left for later

    @classmethod
    def build(cls, corpus: Corpus, embedder: Embedder, chunking: Chunking = Chunking(),
              now: datetime | None = None, tie_order: TieOrder = "postgres",
              cache: IndexCache | None = None, vectors_later: bool = False,
              progress: VectorsProgress = no_progress) -> "Index":
        """Chunk, embed and index a corpus. `now` is the clock reading memory ages count back from.

        With `cache`, documents and memories built before (same content, chunking and embedder) are not
        embedded or parsed again; `rows_built` and `rows_reused` count the rows (chunks and memories) of each.
        With `vectors_later`, a model's vectors are left to `embed_vectors`, so that the lexical channel can run
        and its postings go before the vectors take their memory (the feature hash's and the cache's come with the
        lexical index's reading, and are made here). `progress` hears of the rows whose vectors are made (or read
        from the cache), here or in `embed_vectors`.
        """
        now = now or datetime.now(timezone.utc)
        documents, memories, counts = table_rows(corpus, chunking, now)
        # Sorted before the vectors are held: polars keeps the sort's scratch in its own heap, for its later work.
        catalog_keys = sorted_keys(documents, memories)
        cached = [None, None] if cache is None else [
            CachedRows(cache, [cache.document_key(text) for text in corpus.documents.contents], counts),
            CachedRows(cache, [cache.memory_key(text) for text in memories.contents],
                       np.ones(len(memories.ids), np.int64))]
        vectors, lexical = [], []
        total = len(documents.ids) + len(memories.ids)
        later = vectors_later and cache is None and not hasattr(embedder, "quarter_blocks")
        made = None if later else progress(total)
        for rows, c in zip((documents, memories), cached):
            stored, read = _read_and_embed(embedder, rows.contents, c, made)
            vectors.append(stored)
            lexical.append(read)
            release_freed()  # what the store's build let go, before the next one's and the norms
        del stored, read
        reused = sum(c.reused for c in cached if c)
        norms = [c.norms if c else None for c in cached]
        index = cls(Store(**vars(documents), vectors=vectors[0], lexical=lexical[0], norms=norms[0]),
                    Store(**vars(memories), vectors=vectors[1], lexical=lexical[1], norms=norms[1]),
                    embedder, now, tie_order, catalog_keys)
        index.rows_built, index.rows_reused = total - reused, reused
        if later:
            index._vectors_progress = progress
        release_freed()  # the build's temporaries: the extraction and the evaluation allocate less than they held
        return index

    def embed_vectors(self) -> None:
        """Embed the vectors the build left for later (`vectors_later`), told to the build's `progress`; nothing when
        it left none."""
        pending = [store for store in self.stores.values() if store.vectors is None]
        made = self._vectors_progress(sum(len(store.ids) for store in pending)) if pending else None
        self._vectors_progress = no_progress  # a command's progress holds its stream: the index is sent to workers
        for store in pending:
            store.vectors = _embedded(self.embedder, store.contents, made)
            store.norms = squared_norms(store.vectors)

    def without_postings(self) -> "Index":
        """A copy of this index without its lexical postings (`drop_postings`); this index is unchanged, and the
        copy shares everything else with it."""
        bare = copy.copy(self)
        bare.stores = {source_type: copy.copy(store) for source_type, store in self.stores.items()}
        bare.drop_postings()
        return bare

    def drop_postings(self) -> None:
        """Let the lexical postings go (about 0.5 GB at a million chunks) and hand their pages back, once every
        query's lexical candidates are extracted: `results`, and `candidates_many` given those candidates, read
        rows, ages and vectors only. The index cannot search after."""
        for store in self.stores.values():
            store.lexical = None
        release_freed()

    def candidates(self, query: str, limit: int = DEFAULT_LIMIT, scope: Scope = Scope(),
                   tie_order: TieOrder | None = None, query_vector: np.ndarray | None = None) -> Candidates:
        """The merged vector and lexical candidate lists of one query (independent of the knobs)."""
        if query_vector is None:
            query_vector = self.embed_queries([query])[0]
        return self.candidates_many([query], query_vector[None, :], limit, scope)[0][tie_order or self.tie_order]

    def lexical_candidates(self, queries: Sequence[str], limit: int = DEFAULT_LIMIT,
                           scope: Scope = Scope()) -> list[dict[TieOrder, tuple[Candidate, ...]]]:
        """Every query's lexical candidates (documents' and memories' merged) in both tie orders: what
        `candidates_many` takes as `lexical`, extracted first so that the postings can go before the vector
        channel runs."""
        limit = clamp_limit(limit)
        documents, memories = ([lexical_channels(source_type, store.lexical, store.in_scope(scope)[1], query, limit)
                                for query in queries] for source_type, store in self.stores.items())
        return [{order: merge_shards(d[order], m[order]) for order in TIE_ORDERS} for d, m in zip(documents, memories)]

    def candidates_many(self, queries: Sequence[str], query_vectors: np.ndarray, limit: int = DEFAULT_LIMIT,
                        scope: Scope = Scope(), lexical: Sequence[dict[TieOrder, tuple[Candidate, ...]]] | None = None
                        ) -> list[dict[TieOrder, Candidates]]:
        """`candidates` of every query in both tie orders: the vector channel scores the queries together, and
        the orders share one extraction (their lists differ only where exact ties decide). `lexical`: the
        queries' `lexical_candidates` when extracted already (the postings may be gone then)."""
        limit = clamp_limit(limit)
        if lexical is None:
            lexical = self.lexical_candidates(queries, limit, scope)
        documents, memories = (vector_channels(source_type, store.vectors, store.norms, store.in_scope(scope)[0],
                                               query_vectors, limit) for source_type, store in self.stores.items())
        return [{order: Candidates(merge_shards(dv[order], mv[order]), lex[order]) for order in TIE_ORDERS}
                for dv, mv, lex in zip(documents, memories, lexical)]

    def search(self, query: str, knobs: Knobs = Knobs(), limit: object = DEFAULT_LIMIT, scope: Scope = Scope(),
               tie_order: TieOrder | None = None, now: datetime | None = None) -> list[SearchResult]:
        """Rank the corpus for one query and setting, exactly as SOAT's knowledge search does."""
        limit = clamp_limit(limit)
        query_vector = self.embed_queries([query])[0]
        candidates = self.candidates(query, limit, scope, tie_order, query_vector)
        return self.results(candidates, query_vector, knobs, limit, now)

    def distances(self, source_type: str, rows: np.ndarray, query_vector: np.ndarray) -> np.ndarray:
        """pgvector's `embedding <=> query` of some rows of a store."""
        store = self.stores[source_type]
        return cosine_distance(store.vectors[rows], query_vector, norms=store.norms[rows])

    def plan(self, query: str, expected_keys: Sequence[str], limit: int = DEFAULT_LIMIT, scope: Scope = Scope(),
             tie_order: TieOrder | None = None, query_vector: np.ndarray | None = None,
             now: datetime | None = None) -> QueryPlan:
        """A query's candidates prepared for the fast path (`batch.expected_positions`)."""
        candidates = self.candidates(query, limit, scope, tie_order, query_vector)
        return plan_query(candidates, self.expected_rows(expected_keys), self.memory_age_days(now))
