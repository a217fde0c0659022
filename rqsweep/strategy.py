"""Search strategies: which settings to evaluate next. A grid walks its list; Optuna proposes.

Both hand settings to `evaluate` in batches (the fast path likes many settings at once) and know
nothing of backends or storage.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

import optuna

from rqsweep.config import SweepConfig
from rqsweep.knobs import Knobs
from rqsweep.space import suggest

OPTUNA_BATCH = 8  # trials asked before they are told: TPE's constant liar covers the pending ones

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


def make_sampler(sweep: SweepConfig) -> optuna.samplers.BaseSampler:
    if sweep.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=sweep.seed, multivariate=True, constant_liar=True)
    if sweep.sampler == "gp":
        return optuna.samplers.GPSampler(seed=sweep.seed)
    if sweep.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=sweep.seed)
    return optuna.samplers.RandomSampler(seed=sweep.seed)


Scored = tuple[float, list[tuple[str, float]]]  # objective value, (constraint key, value <= 0 when met)


def run_optimize(sweep: SweepConfig, baseline: Knobs, score: Callable[[list[Knobs]], list[Scored]],
                 journal: Path, progress: Progress) -> optuna.Study:
    """Optimise the objective under constraints with Optuna, resumable from its journal file.

    Trials left running by a killed run are marked failed and asked again; trials already complete
    count towards `n_trials`.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    study = optuna.create_study(study_name="rqsweep", storage=storage, direction="maximize",
                                sampler=make_sampler(sweep), load_if_exists=True)
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
    done = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
    progress(done)
    deadline = None if sweep.timeout is None else time.monotonic() + sweep.timeout
    while done < sweep.n_trials and (deadline is None or time.monotonic() < deadline):
        trials = [study.ask() for _ in range(min(OPTUNA_BATCH, sweep.n_trials - done))]
        settings = [suggest(t, sweep, baseline) for t in trials]
        for trial, (value, constraints) in zip(trials, score(settings)):
            for key, c in constraints:
                trial.set_constraint(key, c)
            study.tell(trial, value)
        done += len(trials)
        progress(len(trials))
    return study

