"""Search strategies: which settings to evaluate next. A grid walks its list; Optuna proposes.

Both hand settings to `evaluate` (or `score`) in batches, since the fast path likes many settings at
once, and know nothing of backends; the optimiser keeps its study in a `StudyStorage`.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
import zlib
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import optuna

from rqsweep.config import SweepConfig
from rqsweep.knobs import Knobs
from rqsweep.space import coarse_grid, countable, suggest
from rqsweep.study import StudyStorage

Progress = Callable[[int], None]  # called with the number of settings just finished


def run_grid(settings: Sequence[Knobs], finished: set[str], evaluate: Callable[[list[Knobs]], object],
             progress: Progress, batch_size: int) -> None:
    """Evaluate every setting not already finished, in batches of `batch_size` (one checkpoint each)."""
    todo = [s for s in settings if s.id not in finished]
    progress(len(settings) - len(todo))
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        evaluate(batch)
        progress(len(batch))


def make_sampler(sweep: SweepConfig, seed: int | None) -> optuna.samplers.BaseSampler:
    if sweep.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    if sweep.sampler == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if sweep.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def batch_seed(seed: int | None, trials: int, worker: str = "") -> int | None:
    """The sampler's seed for `worker`'s batch after `trials` trials: a function of the study's history only, so
    that a resumed run proposes what the uninterrupted one would have."""
    if seed is None:
        return None
    entropy = [seed, trials] + ([zlib.crc32(worker.encode())] if worker else [])
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


Scored = tuple[float, list[tuple[str, float]]]  # objective value, (constraint key, value <= 0 when met)
WORKER = f"{socket.gethostname()}:{os.getpid()}"  # who holds a trial, in storage and optuna-dashboard
VIOLATION = "violation"  # the one constraint a trial carries: > 0 when the setting breaks any
STALL_PROPOSALS = 500  # proposals in a row of settings already evaluated before the search is deemed settled


@dataclass
class StudyIdentity:
    """What a study optimises and says about itself (its name, attributes) in storage and in optuna-dashboard."""

    study_name: str
    metric_name: str  # e.g. mrr[overall]
    attributes: dict[str, object]


def _remember(trial: optuna.trial.FrozenTrial, known: dict[str, Scored], counted: set[str]) -> None:
    sid = trial.user_attrs.get("setting_id")
    if sid is not None and trial.state == optuna.trial.TrialState.COMPLETE:
        known[sid] = (trial.value, list(trial.constraints.items()))
        if not trial.user_attrs.get("repeat"):
            counted.add(sid)


def _tell(study: optuna.Study, trial: optuna.Trial, knobs: Knobs, scored: Scored, repeat: bool,
          extra: dict[str, object]) -> None:
    value, constraints = scored
    # One constraint: the sum of the violated ones (or, when all are met, the smallest slack). TPE and NSGA-II
    # read only that sum and feasibility, so they decide as with one value per key, and a trial is not read
    # ~20 keys at every ask. The keys a setting breaks are in the run's grid (`violations`).
    values = [c for _, c in constraints]
    trial.set_constraint(VIOLATION, sum(c for c in values if c > 0) or max(values, default=0.0))
    # What the collector reads; the knob values are in the setting id, so a trial carries no more.
    for key, v in {"setting_id": knobs.id, "repeat": repeat, **extra}.items():
        trial.set_user_attr(key, v)
    study.tell(trial, value)


def run_optimize(sweep: SweepConfig, baseline: Knobs, score: Callable[[list[Knobs]], list[Scored]],
                 storage: StudyStorage, objective: StudyIdentity, progress: Progress,
                 log: Callable[[str], None], annotate: Callable[[Knobs], dict] | None = None, *,
                 coordinator: bool = True) -> optuna.Study:
    """Optimise the objective under constraints with Optuna until `sweep.n_trials` distinct settings are evaluated.

    A proposal equal to a setting already evaluated (the baseline included) costs no search and does not count:
    Optuna is told the known value, so the sampler learns all the same. The run ends early when a finite space
    is exhausted, when the sampler only repeats itself (`STALL_PROPOSALS`), or at `sweep.timeout`.

    Settings are asked `sweep.batch_size` at a time (the warm start's coarse grid all at once) and scored
    together: one fast-path batch or one HTTP wave. TPE's constant liar stands in for the pending ones.
    The storage is committed after each batch is told, so a stopped run keeps every told trial and nothing
    half-asked. `annotate` adds user attributes to a freshly evaluated setting's trial (what a collector needs).
    A worker (`coordinator=False`) joins a study its coordinator created.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        # Metric names are experimental; heartbeats are "supposed to be used with Study.optimize", and are here
        # kept by the storage around each batch instead.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", "Heartbeat of storage")
        return _optimise(sweep, baseline, score, storage, objective, progress, log, annotate, coordinator)


def _quiet(study: optuna.Study, trials: int, seconds: float) -> bool:
    """No trial was added to the study within `seconds`."""
    time.sleep(seconds)
    return len(study.get_trials(deepcopy=False)) == trials


def _optimise(sweep, baseline, score, storage, objective, progress, log, annotate, coordinator) -> optuna.Study:
    if coordinator:
        study = optuna.create_study(study_name=objective.study_name, storage=storage.optuna, direction="maximize",
                                    load_if_exists=True)
    else:
        study = optuna.load_study(study_name=objective.study_name, storage=storage.optuna)
    known: dict[str, Scored] = {baseline.id: score([baseline])[0]}
    counted: set[str] = set()
    trials = study.get_trials(deepcopy=False)
    if coordinator and not trials:
        study.set_metric_names([objective.metric_name])
        for key, value in objective.attributes.items():
            study.set_user_attr(key, value)
        if sweep.sampler in ("tpe", "gp"):
            for params in coarse_grid(sweep, min(sweep.warm_start, sweep.n_trials)):
                study.enqueue_trial(params)
        storage.commit()
    space = countable(sweep, baseline)
    deadline = None if sweep.timeout is None else time.monotonic() + sweep.timeout
    stalled = 0
    progress(0)
    while True:
        storage.fail_stale(study)
        trials = study.get_trials(deepcopy=False)
        before = len(counted)
        for trial in trials:
            _remember(trial, known, counted)
        progress(len(counted) - before)
        remaining = sweep.n_trials - len(counted)
        waiting = sum(t.state == optuna.trial.TrialState.WAITING for t in trials)
        if deadline is not None and time.monotonic() >= deadline:
            break
        if remaining <= 0 and not waiting:
            # Another worker's trial may yet fail and come back to be retried: wait for it, lose no trial. A
            # worker that read the study just before the budget was spent may still ask a trial: the
            # coordinator (whose grid gathers every trial) ends only once the study is quiet for a heartbeat.
            if not any(t.state == optuna.trial.TrialState.RUNNING for t in trials) and (
                    not (coordinator and storage.shared) or _quiet(study, len(trials), storage.heartbeat_seconds)):
                break
            time.sleep(storage.heartbeat_seconds)
            continue
        if len(counted) >= space:
            log(f"the search space is exhausted: all {space} settings evaluated")
            break
        if stalled >= STALL_PROPOSALS:
            log(f"stopped after {stalled} proposals in a row of settings already evaluated")
            break
        # Workers sharing a study must not all draw the same proposals from the same history.
        study.sampler = make_sampler(sweep, batch_seed(sweep.seed, len(trials), WORKER if storage.shared else ""))
        # Retried trials (waiting) are asked even past the budget: a setting a killed worker held is never lost.
        asked = [study.ask() for _ in range(min(remaining, max(sweep.batch_size, waiting)) if remaining > 0
                                            else waiting)]
        with storage.beating([t._trial_id for t in asked]):
            proposed = [suggest(t, sweep, baseline) for t in asked]
            for trial in asked:  # after the first heartbeat: a trial without a worker and without one is an orphan
                trial.set_user_attr("worker", WORKER)
            fresh = list({k.id: k for k in proposed if k.id not in known}.values())
            known.update(zip((k.id for k in fresh), score(fresh)))
        stalled = 0 if fresh else stalled + len(asked)
        first = {k.id for k in fresh}
        for trial, knobs in zip(asked, proposed):
            new = knobs.id in first
            first.discard(knobs.id)
            _tell(study, trial, knobs, known[knobs.id], not new, annotate(knobs) if new and annotate else {})
        storage.commit()
    return study
