"""The protocol of a study shared by machines (`rqsweep worker`): each setting's per-query outcome rides on its
Optuna trial, so the coordinator records what any worker evaluated without searching again."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

import optuna
import polars as pl

from rqsweep.backends.base import OUTCOME_SCHEMA, SENSITIVITY
from rqsweep.errors import InputError
from rqsweep.knobs import Knobs
from rqsweep.search.strategy import TOLD
from rqsweep.search.study import StudyStorage

# How long a worker waits for its study to appear (the coordinator creates it after building its index: about
# 40 s for a large corpus), and how often it looks.
STUDY_WAIT_SECONDS = 300.0
STUDY_POLL_SECONDS = 1.0


def outcome_attrs(rows: pl.DataFrame, query_ids: Sequence[str]) -> dict:
    """A setting's per-query rows, compactly, as trial attributes: `positions` in the golden set's query order
    (null = failed search), with `errors` and the sensitivity flags only where they say something."""
    by_query = {r["query_id"]: r for r in rows.iter_rows(named=True)}
    ordered = [by_query[q] for q in query_ids]
    out: dict = {"positions": [r["positions"] for r in ordered]}
    if any(r["error"] for r in ordered):
        out["errors"] = [r["error"] for r in ordered]
    for flag in SENSITIVITY:
        if any(r[flag] is not None for r in ordered):
            out[flag] = [r[flag] for r in ordered]
    return out


def gathered(study: optuna.Study, finished: set[str], query_ids: Sequence[str]) -> Iterator[pl.DataFrame]:
    """The per-query rows (the backend contract's) of every setting a trial carries that is not in `finished`,
    a setting at a time; a setting several trials carry comes once."""
    seen = set(finished)
    n = len(query_ids)
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        if trial.state not in TOLD or attrs.get("repeat") or "positions" not in attrs:
            continue
        if attrs["setting_id"] in seen:
            continue
        knobs = Knobs.from_id(attrs["setting_id"])
        seen.add(knobs.id)
        yield pl.DataFrame({
            "setting_id": [knobs.id] * n, **{k: [v] * n for k, v in knobs.columns().items()},
            "query_id": list(query_ids), "positions": attrs["positions"],
            "error": attrs.get("errors", [None] * n), **{flag: attrs.get(flag, [None] * n) for flag in SENSITIVITY},
        }, schema=OUTCOME_SCHEMA)


def joined_study(storage: StudyStorage, study: str, inputs_sha256: str, config_path: Path, *,
                 wait_seconds: float = STUDY_WAIT_SECONDS, log: Callable[[str], None] = lambda _: None) -> dict:
    """The attributes of the study a worker joins; InputError when there is no such study or its inputs are not
    the worker's (a worker must evaluate what its coordinator does).

    A worker may start before its coordinator has created the study (the coordinator builds its index first):
    it waits up to `wait_seconds` for the study to appear, saying so once."""
    deadline, waiting = time.monotonic() + wait_seconds, False
    while True:
        try:
            attrs = optuna.load_study(study_name=study, storage=storage.optuna).user_attrs
            if "inputs_sha256" in attrs:  # the coordinator sets its attributes just after creating the study
                break
        except KeyError:
            pass
        if time.monotonic() >= deadline:
            raise InputError("--study", "", f"{study!r}: no such study in {storage.describe()} after waiting "
                                            f"{wait_seconds:g} s")
        if not waiting:
            waiting = True
            log(f"waiting up to {wait_seconds:g} s for study {study!r} to appear in {storage.describe()} "
                "(its coordinator creates it once its index is built)")
        time.sleep(min(STUDY_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
    if attrs.get("inputs_sha256") != inputs_sha256:
        raise InputError(config_path, "", f"differs from the inputs of study {study!r} (config, sweep, corpus or "
                         "golden set): a worker must evaluate what its coordinator does")
    return attrs
