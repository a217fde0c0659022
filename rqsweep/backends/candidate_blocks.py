"""The golden queries' extracted candidates, kept in the run folder block by block as the start extracts them.

Extraction is the embedded backend's start-up work, and most of it on a large golden set (20,000 queries: several
CPU-minutes, benchmarks/golden_loading.py --start). Each block of queries is written as soon as it is extracted
(`prepare/candidates-<first query>.npz`), so a start that is interrupted keeps its run folder, and `--resume RUN_DIR`
(and any later resume of the run) reads the blocks back instead of extracting them again. Candidates depend only on
the run's inputs (corpus, embedder, golden set, search settings), which `--resume` requires unchanged, and on
the embedder's weights (a model upgraded since), which each block records. A block that cannot be read back
whole, or that another embedder's vectors made, is extracted again.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from rqsweep.engine.channels import Candidate, Candidates
from rqsweep.engine.pgsort import TIE_ORDERS, TieOrder
from rqsweep.files import write_arrays

FOLDER = "prepare"
_SOURCES = ("document", "memory")
_CHANNELS = ("vector", "lexical")

Extracted = list[dict[TieOrder, Candidates]]  # per query, both tie orders' candidates (Index.candidates_many)


class CandidateBlocks:
    """The blocks of a run folder (`run_dir` None: none are kept, as for a worker's or a test's backend), made with
    the embedder `embedder` names (`protocol.described`)."""

    def __init__(self, run_dir: Path | None, embedder: str = ""):
        self.folder = None if run_dir is None else run_dir / FOLDER
        self.embedder = embedder

    def _path(self, start: int) -> Path:
        return self.folder / f"candidates-{start:09d}.npz"

    def load(self, start: int, n_queries: int) -> Extracted | None:
        """The block of `n_queries` queries from `start`, if it was kept and reads back whole."""
        if self.folder is None or not self._path(start).is_file():
            return None
        try:
            with np.load(self._path(start)) as kept:
                counts, sources, rows, scores, embedder = (kept[k] for k in ("counts", "sources", "rows", "scores",
                                                                             "embedder"))
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            return None
        if str(embedder) != self.embedder or counts.shape != (n_queries, len(TIE_ORDERS), len(_CHANNELS)) or int(counts.sum()) != len(rows) or \
                not len(sources) == len(rows) == len(scores):
            return None
        candidates = [Candidate(_SOURCES[s], int(r), float(v)) for s, r, v in zip(sources, rows, scores)]
        ends = np.cumsum(counts.ravel()).tolist()
        lists = [tuple(candidates[a:b]) for a, b in zip([0, *ends[:-1]], ends)]
        at = iter(lists)
        return [{order: Candidates(*(next(at) for _ in _CHANNELS)) for order in TIE_ORDERS} for _ in range(n_queries)]

    def save(self, start: int, extracted: Extracted) -> None:
        if self.folder is None:
            return
        lists = [getattr(by_order[order], channel) for by_order in extracted for order in TIE_ORDERS
                 for channel in _CHANNELS]
        flat = [c for found in lists for c in found]
        write_arrays(self._path(start), {
            "counts": np.array([len(found) for found in lists], np.int32).reshape(
                len(extracted), len(TIE_ORDERS), len(_CHANNELS)),
            "sources": np.array([_SOURCES.index(c.source_type) for c in flat], np.int8),
            "rows": np.array([c.row for c in flat], np.int64),
            "scores": np.array([c.score for c in flat], np.float64), "embedder": np.array(self.embedder)})
