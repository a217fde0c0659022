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
from datetime import datetime
from typing import Callable, Sequence

import numpy as np
import optuna

from rqsweep.config import SweepConfig
from rqsweep.knobs import Knobs
from rqsweep.search.space import coarse_grid, countable, suggest
from rqsweep.search.study import GRACE_SECONDS, MAX_RETRIES, StudyStorage

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
CONSTRAINTS = "constraints"  # the system attribute of a trial's constraints, its one value > 0 when it breaks any
TOLD = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)  # an evaluated setting's trial: feasible, not
STALL_PROPOSALS = 500  # proposals in a row of settings already evaluated before the search is deemed settled
BUDGET = "n_trials"  # the study attribute that holds the coordinator's budget, which its workers spend
DECLINED = "over_budget"  # the user attribute of a trial asked past the budget and failed unevaluated


@dataclass
class StudyIdentity:
    """What a study optimises and says about itself (its name, attributes) in storage and in optuna-dashboard."""

    study_name: str
    metric_name: str  # e.g. mrr[overall]
    attributes: dict[str, object]


def _remember(trial: optuna.trial.FrozenTrial, known: dict[str, Scored], counted: set[str]) -> None:
    sid = trial.user_attrs.get("setting_id")
    if sid is not None and trial.state in TOLD:
        known[sid] = (trial.value, list(trial.constraints.items()))
        if not trial.user_attrs.get("repeat"):
            counted.add(sid)


def _claims(trials: Sequence[optuna.trial.FrozenTrial], baseline_id: str) -> list[tuple[int, int, str | None]]:
    """The trials that hold, or may yet hold, one of the budget's distinct settings, in the order they claimed it:
    (order, trial number, setting id or None while not known).

    A trial asked again after its worker died (a retry) takes its original's place, and a failed trial whose retry
    is not yet asked keeps it for `GRACE_SECONDS` (the worker that failed it asks it again at once, unless it died
    in between); repeats, declined trials, the baseline and trials failed for good hold none."""
    retried = {history[-1] for t in trials if (history := t.system_attrs.get("retry_history"))}
    now = datetime.now()
    out = []
    for t in trials:
        attrs = t.user_attrs
        if attrs.get("repeat") or attrs.get(DECLINED) or attrs.get("setting_id") == baseline_id:
            continue
        if t.state == optuna.trial.TrialState.FAIL and (
                t.number in retried or len(t.system_attrs.get("retry_history", ())) >= MAX_RETRIES
                or t.datetime_complete is None or (now - t.datetime_complete).total_seconds() >= GRACE_SECONDS):
            continue
        out.append((t.system_attrs.get("failed_trial", t.number), t.number, attrs.get("setting_id")))
    return sorted(out)


def _within(claims: list[tuple[int, int, str | None]], budget: int) -> tuple[set[int], int]:
    """The trials (numbers) whose setting fits in the budget, counting distinct settings in claim order (a setting
    not yet known counts as a new one), and how many distinct settings the claims hold."""
    seen: set[str] = set()
    allowed, used = set(), 0
    for _, number, sid in claims:
        if sid is None or sid not in seen:
            used += 1
            if sid is not None:
                seen.add(sid)
            if used > budget:
                continue
        allowed.add(number)
    return allowed, used


def _failed_under(storage: StudyStorage, trial: optuna.Trial, log: Callable[[str], None]) -> bool:
    """Whether `trial`, which this worker could not tell, was finished by another (which fails a trial whose
    heartbeat it finds stale, and asks it again); says so."""
    if not storage.optuna.get_trial(trial._trial_id).state.is_finished():
        return False
    log(f"trial {trial.number} was failed under this worker (its heartbeat was missed): the study asks its setting "
        "again; carrying on")
    return True


def _tell(study: optuna.Study, trial: optuna.Trial, knobs: Knobs, scored: Scored, repeat: bool,
          extra: dict[str, object]) -> None:
    """Tell a trial in the state that makes optuna-dashboard (0.21) show the truth: its "Best Trial" is the
    storage's best COMPLETE trial and its History draws COMPLETE trials (PRUNED ones on request). So a feasible
    setting's trial is COMPLETE, an infeasible one's PRUNED, its value reported as its one intermediate value (which
    Optuna makes its value; TPE ranks an infeasible trial by its violation alone, whatever its state).

    A repeat (a setting already scored, so no search) is told the same way, with its known value: told FAIL, it
    taught TPE nothing, so on a space of 1,980 settings TPE proposed the same settings again and again (up to
    5,520 trials for 300 distinct settings, and 2 of 5 seeds stalled short of the grid's best). The dashboard
    draws it, marked by its user attribute `repeat`."""
    # What the collector reads; the knob values are in the setting id, so a trial carries no more.
    for key, v in {"repeat": repeat, **extra}.items():
        trial.set_user_attr(key, v)
    value, constraints = scored
    # One constraint: the sum of the violated ones (or, when all are met, the smallest slack). TPE and NSGA-II
    # read only that sum and feasibility, so they decide as with one value per key, and a trial is not read
    # ~20 keys at every ask. The keys a setting breaks are in the run's grid (`violations`). Written in the list
    # form that Optuna reads as well as `set_constraint`'s, since it is the only one optuna-dashboard reads.
    values = [c for _, c in constraints]
    violation = sum(c for c in values if c > 0) or max(values, default=0.0)
    trial.storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS, [violation])
    if violation > 0:
        trial.report(value, 0)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    else:
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
    if coordinator:  # each start: a resumed coordinator's --n-trials is what its workers spend
        study.set_user_attr(BUDGET, sweep.n_trials)
        storage.commit()
    space = countable(sweep, baseline)
    deadline = None if sweep.timeout is None else time.monotonic() + sweep.timeout
    stalled = 0
    progress(0)
    while True:
        storage.fail_stale(study)
        budget = sweep.n_trials if coordinator else int(study.user_attrs.get(BUDGET, sweep.n_trials))
        trials = study.get_trials(deepcopy=False)
        before = len(counted)
        for trial in trials:
            _remember(trial, known, counted)
        progress(len(counted) - before)
        # Settings held by trials still running (anyone's) count against the budget, so that workers never
        # evaluate more distinct settings than it, however their asks interleave.
        claims = _claims(trials, baseline.id)
        free = budget - _within(claims, budget)[1]
        waiting = sum(t.state == optuna.trial.TrialState.WAITING for t in trials)
        if deadline is not None and time.monotonic() >= deadline:
            break
        if free <= 0 and not waiting:
            # A trial running may yet fail and come back to be retried, and one just failed is about to: wait for
            # them, lose no trial.
            failed = {t.number for t in trials if t.state == optuna.trial.TrialState.FAIL}
            if not any(t.state == optuna.trial.TrialState.RUNNING for t in trials) and \
                    not any(number in failed for _, number, _ in claims):
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
        # Waiting trials (retries, the warm start) are asked first and hold their places in the budget.
        asked = [study.ask() for _ in range(min(max(sweep.batch_size, waiting), max(free, 0) + waiting))]
        with storage.beating([t._trial_id for t in asked]):
            proposed = [suggest(t, sweep, baseline) for t in asked]
            for trial, knobs in zip(asked, proposed):
                # After the first heartbeat: a trial without a worker and without one is an orphan.
                trial.set_user_attr("worker", WORKER)
                trial.set_user_attr("setting_id", knobs.id)
            # Asks that raced another worker's past the budget are declined, unevaluated, unless already known.
            allowed = _within(_claims(study.get_trials(deepcopy=False), baseline.id), budget)[0] \
                if storage.shared else {t.number for t in asked}
            fresh = list({k.id: k for t, k in zip(asked, proposed)
                          if k.id not in known and t.number in allowed}.values())
            known.update(zip((k.id for k in fresh), score(fresh)))
        stalled = 0 if fresh else stalled + len(asked)
        first, lost = {k.id for k in fresh}, []
        for trial, knobs in zip(asked, proposed):
            new = knobs.id in first
            first.discard(knobs.id)
            try:
                if knobs.id in known:
                    _tell(study, trial, knobs, known[knobs.id], not new, annotate(knobs) if new and annotate else {})
                else:
                    trial.set_user_attr(DECLINED, budget)
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
            except (optuna.exceptions.UpdateFinishedTrialError, ValueError):
                if not _failed_under(storage, trial, log):
                    raise
                if new:
                    lost.append(knobs.id)
        for sid in lost:  # told as new when it is asked again: its positions must reach the study
            known.pop(sid)
        storage.commit()
    return study
