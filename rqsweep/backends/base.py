"""Where rankings come from. A backend turns knob settings into positions, and nothing more.

For each (setting, query) a backend reports where each expected key's first slot sits in the ranked
list SOAT returns (1-based; absent when not returned), or why the search failed. What those positions
are worth (recall, MRR, nDCG, ...) is `rqsweep.metrics`' business, not the backend's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from rqsweep.knobs import KNOBS, Knobs

# One row per (setting, query): what every backend returns and the run state keeps.
# `positions` holds one entry per expected key, in the golden set's order: null = not returned;
# the whole list is null when the search failed. `tie_sensitive` (storage order, a later search) and
# `numeric_sensitive` (the vectors' last bits) are null where a backend cannot tell.
KNOB_SCHEMA = dict(zip(KNOBS, (pl.Int64, pl.Float64, pl.Float64)))  # null min_similarity: no floor
OUTCOME_SCHEMA = {
    "setting_id": pl.String, **KNOB_SCHEMA, "query_id": pl.String, "positions": pl.List(pl.Int64), "error": pl.String,
    "tie_sensitive": pl.Boolean, "numeric_sensitive": pl.Boolean,
}
TIE_SENSITIVE = 1  # a backend's sensitivity flag: an expected key's position moves with storage order or later
NUMERIC_SENSITIVE = 2  # ... or once the vectors' last bits move its cosines by the embedder's precision
SENSITIVITY = {"tie_sensitive": TIE_SENSITIVE, "numeric_sensitive": NUMERIC_SENSITIVE}  # column -> flag


@dataclass(frozen=True)
class RankedHit:
    """One slot of a ranked list, with what explains its place."""

    position: int
    key: str  # document or memory key (the server's id when no key is known)
    source_type: str
    chunk: str | None  # chunk id of a document slot
    score: float | None  # SOAT's final score (after the blend); only its order is the contract
    vector: int | None  # signals: 1-based position in the merged vector list
    lexical: int | None  # signals: 1-based position in the merged lexical list
    similarity_score: float | None
    blend_factor: float | None  # the recency multiplier on the fused score (1 for documents or with the blend
    # off); None where the backend cannot know it (a server reports only the blended score)


class Backend(Protocol):
    """Evaluates the golden set under each setting.

    `evaluate` returns one row per (setting, query), settings-major in the order given, queries in the
    golden set's order, with the columns of `OUTCOME_SCHEMA`. `ranked` returns the ranked lists
    themselves for a few settings, to explain what a run chose.
    """

    name: str
    checkpoint_every: int  # settings per recorded batch: what a crash can cost at most
    profile: dict  # what produced the rankings (`EMBEDDED_PROFILE`, or `ServerProfile.record`)
    warnings: tuple[str, ...]  # what qualifies its numbers (memory ages a server cannot hold): run.json, the report

    def evaluate(self, settings: Sequence[Knobs]) -> pl.DataFrame: ...

    def ranked(self, knobs: Knobs, query_ids: Sequence[str] | None = None) -> dict[str, list[RankedHit] | str]:
        """Query id -> its ranked list under `knobs`, or the error of a failed search; every query by default."""
        ...

    def numeric_extremes(self, knobs: Knobs) -> tuple[pl.DataFrame, pl.DataFrame] | None:
        """One setting's rows with every numerically sensitive query at its best, then at its worst (the
        expected cosines moved by the embedder's precision); None where the numerics are exact or not seen."""
        ...

    def close(self) -> None: ...


def outcome_frame(settings: Sequence[Knobs], query_ids: Sequence[str], positions: np.ndarray,
                  n_expected: np.ndarray, errors: Sequence[str | None] | None = None,
                  sensitivity: np.ndarray | None = None) -> pl.DataFrame:
    """The rows of `OUTCOME_SCHEMA` from arrays.

    positions: (settings, queries, max keys) int, 0 = absent; entries past a query's `n_expected`
    are ignored. errors: settings-major, one per row, None for a search that answered.
    sensitivity: (settings, queries) flags (TIE_SENSITIVE | NUMERIC_SENSITIVE), or None when the backend cannot
    tell.
    """
    n_s, n_q = len(settings), len(query_ids)
    per_row = np.tile(np.asarray(n_expected, np.int64), n_s)
    valid = np.arange(positions.shape[2])[None, None, :] < np.asarray(n_expected)[None, :, None]
    flat = positions[np.broadcast_to(valid, positions.shape)].astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32)
    failed = None if errors is None else np.array([e is not None for e in errors], bool)
    lists = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, mask=flat == 0),
                                     mask=None if failed is None else pa.array(failed))
    per_setting = np.repeat(np.arange(n_s), n_q)
    return pl.DataFrame({
        "setting_id": pl.Series([s.id for s in settings], dtype=pl.String).gather(per_setting),
        **{name: pl.Series([s.columns()[name] for s in settings], dtype=OUTCOME_SCHEMA[name]).gather(per_setting)
           for name in KNOBS},
        "query_id": pl.Series(list(query_ids), dtype=pl.String).gather(np.tile(np.arange(n_q), n_s)),
        "positions": pl.from_arrow(lists),
        # An all-null column made as one (a list of a million Nones costs 24 MB more while it is converted).
        "error": (pl.repeat(None, n_s * n_q, dtype=pl.String, eager=True) if errors is None
                  else pl.Series(errors, dtype=pl.String)),
        **{name: (pl.repeat(None, n_s * n_q, dtype=pl.Boolean, eager=True) if sensitivity is None
                  else pl.Series((sensitivity.ravel() & flag) > 0, dtype=pl.Boolean))
           for name, flag in SENSITIVITY.items()},
    }, schema=OUTCOME_SCHEMA)


# A server profile, as run.json, the Parquet metadata (`rqsweep.server_profile`), gate files and the report keep it:
# backend, version (when the server states it), ranking (hybrid | pure cosine), knobs_accepted,
# knobs_refused {knob: the server's answer}, field_names {modern field or route: the server's}, include_flags, signals,
# mode (embedded | replay | direct), for HTTP the base_url, and the embedder: the embedded engine's identity, or a
# server's as its vector of a fixed text shows it (`probe._embedder`; absent when the server does not tell).
EMBEDDED_PROFILE = {"backend": "embedded", "version": None, "ranking": "hybrid", "knobs_accepted": list(KNOBS),
                    "knobs_refused": {}, "field_names": {}, "include_flags": True, "signals": True,
                    "mode": "embedded"}
# What two runs must share for their metrics to be comparable: not where the server is, what it calls its
# version, or whether replay or direct searches read it (replay is proven equal to direct).
_INCIDENTAL = ("base_url", "version", "mode")


def comparable_profile(profile: dict) -> dict:
    """The part of a profile that decides what a run's numbers mean: of a refused knob, that it was refused, not
    the server's words (which echo the request, so one server words them differently from run to run)."""
    kept = {k: v for k, v in profile.items() if k not in _INCIDENTAL}
    if isinstance(kept.get("knobs_refused"), dict):
        kept["knobs_refused"] = sorted(kept["knobs_refused"])
    return kept


def differing_keys(before: dict, now: dict) -> list[str]:
    """The keys whose comparable values differ; a key one of them does not record (a profile written before
    rqsweep kept it) is not a difference."""
    a, b = comparable_profile(before), comparable_profile(now)
    return [k for k in a if k in b and a[k] != b[k]]


def profile_differences(before: dict, now: dict) -> list[str]:
    """What differs between two profiles' comparable parts (`differing_keys`), one `key before -> now` each."""
    a, b = comparable_profile(before), comparable_profile(now)

    def shown(value: object) -> str:
        if isinstance(value, (list, dict)):
            return ", ".join(map(str, value)) or "none"
        return "unknown" if value is None else str(value)

    return [f"{k.replace('_', ' ')} {shown(a[k])} -> {shown(b[k])}" for k in differing_keys(before, now)]


def describe_profile(profile: dict) -> str:
    """The profile in one sentence, e.g. `SOAT 0.28.0 at http://host: pure cosine ranking; rrf_k and
    recency_half_life_days refused; older field names (...); results without signals; direct mode`."""
    refused = list(profile.get("knobs_refused") or {})
    parts = [f"{profile.get('ranking', 'unknown')} ranking",
             f"{' and '.join(refused)} refused" if refused else "every knob accepted"]
    if profile.get("backend") == "embedded":
        embedder = f", embedder {profile['embedder']}" if profile.get("embedder") else ""
        return f"Embedded engine (SOAT-exact){embedder}: " + "; ".join(parts)
    names = profile.get("field_names") or {}
    if names:
        parts.append("older names (" + ", ".join(f"{a} as {b}" for a, b in names.items()) + ")")
    if not profile.get("include_flags", True):
        parts.append("no include_documents / include_memories")
    parts.append("results with signals" if profile.get("signals") else "results without signals")
    if profile.get("embedder"):
        parts.append(f"embedder {profile['embedder']}")
    parts.append(f"{profile.get('mode')} mode")
    version = profile.get("version") or "(version not stated)"
    where = f" at {profile['base_url']}" if profile.get("base_url") else ""
    return f"SOAT {version}{where}: " + "; ".join(parts)
