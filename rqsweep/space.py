"""Search spaces: grids enumerated here (not by Optuna's GridSampler), and Optuna suggestions."""

from __future__ import annotations

import itertools

import numpy as np
import optuna

from rqsweep.config import KnobSpec, SweepConfig
from rqsweep.knobs import KNOBS, Knobs


def _off_value(knob: str) -> float | None:
    return None if knob == "min_similarity" else 0.0


def knob_values(knob: str, spec: KnobSpec) -> list:
    """The values a grid tries for one knob, in order, without repeats."""
    if spec.values is not None:
        return list(spec.values)
    low, high = spec.low, spec.high
    if spec.step is not None:
        values = [low + i * spec.step for i in range(spec.range_points())]
    elif spec.num is not None:
        values = list(np.geomspace(low, high, spec.num) if spec.log else np.linspace(low, high, spec.num))
    else:  # config allows a bare range for rrf_k only: every integer in it
        values = list(range(int(low), int(high) + 1))
    values = [int(round(v)) if knob == "rrf_k" else round(float(v), 12) for v in values]
    if spec.off:
        values.insert(0, _off_value(knob))
    return list(dict.fromkeys(values))


def grid(sweep: SweepConfig, baseline: Knobs) -> list[Knobs]:
    """Every combination of the swept knobs; knobs not swept stay at the baseline's value."""
    axes = [knob_values(k, sweep.knobs[k]) if k in sweep.knobs else [getattr(baseline, k)] for k in KNOBS]
    return [Knobs(*combo) for combo in itertools.product(*axes)]


def suggest(trial: optuna.Trial, sweep: SweepConfig, baseline: Knobs) -> Knobs:
    """Draw one setting from the sweep's space through Optuna's distributions."""
    values = {}
    for knob in KNOBS:
        spec = sweep.knobs.get(knob)
        if spec is None:
            values[knob] = getattr(baseline, knob)
        elif spec.values is not None:
            values[knob] = trial.suggest_categorical(knob, list(spec.values))
        elif spec.off and trial.suggest_categorical(f"{knob}_off", [False, True]):
            values[knob] = _off_value(knob)
        elif knob == "rrf_k":
            step = 1 if spec.step is None or spec.log else int(spec.step)
            values[knob] = trial.suggest_int(knob, int(spec.low), int(spec.high), step=step, log=spec.log)
        else:
            step = None if spec.log else spec.step
            values[knob] = trial.suggest_float(knob, spec.low, spec.high, step=step, log=spec.log)
    return Knobs(**values)
