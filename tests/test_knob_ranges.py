"""Knob ranges that act: values a sweep takes from the data, and the warnings about a value that changes no rank or a
chosen setting at the edge of its range."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from rqsweep import job
from rqsweep.dry_run import dry_run
from rqsweep.errors import InputError
from rqsweep.knobs import Knobs
from tests.minijob import MEMORIES, write_job

DATA_SWEEP = {"strategy": "grid", "knobs": {
    "rrf_k": {"values": [5, 60]},
    "min_similarity": {"include_off": True, "quantiles": [0.25, 0.75]},
    "recency_half_life_days": {"include_off": True, "age_quantiles": [0, 0.5, 1]},
}}


@pytest.mark.parametrize("knob, spec, where, words", [
    ("min_similarity", {"quantiles": [0.5, 1.5]}, "sweep.knobs.min_similarity.quantiles[1]",
     "1.5: a quantile must be a number in [0, 1]"),
    ("min_similarity", {"quantiles": [-0.1]}, "sweep.knobs.min_similarity.quantiles[0]", "-0.1: a quantile must be"),
    ("min_similarity", {"quantiles": ["half"]}, "sweep.knobs.min_similarity.quantiles[0]", "'half': a quantile"),
    ("min_similarity", {"quantiles": []}, "sweep.knobs.min_similarity.quantiles", "non-empty list"),
    ("min_similarity", {"age_quantiles": [0.5]}, "sweep.knobs.min_similarity.age_quantiles",
     "min_similarity cannot take age_quantiles; use quantiles"),
    ("rrf_k", {"quantiles": [0.5]}, "sweep.knobs.rrf_k.quantiles", "rrf_k cannot take quantiles"),
    ("recency_half_life_days", {"age_quantiles": [0.5], "values": [1]}, "sweep.knobs.recency_half_life_days",
     "not several"),
])
def test_a_bad_quantile_names_file_field_and_value(tmp_path, knob, spec, where, words):
    with pytest.raises(InputError) as err:
        job.load_inputs(write_job(tmp_path, {"strategy": "grid", "knobs": {knob: spec}}))
    assert err.value.file.endswith("job.yaml") and err.value.where == where and words in err.value.problem


def test_a_bad_quantile_in_a_sweep_file_names_that_file(tmp_path):
    (tmp_path / "sweeps").mkdir(parents=True)
    (tmp_path / "sweeps" / "floors.yaml").write_text("knobs:\n  min_similarity: {quantiles: [0.5, 2]}\n")
    with pytest.raises(InputError) as err:
        job.load_inputs(write_job(tmp_path, "floors"))
    assert err.value.file.endswith("floors.yaml") and err.value.where == "knobs.min_similarity.quantiles[1]"
    assert "2: a quantile must be a number in [0, 1]" in err.value.problem


def test_values_from_the_data_are_refused_where_they_cannot_be_had(tmp_path):
    optimise = {"strategy": "optimize", "optimize": {"n_trials": 4}, "knobs": {"min_similarity": {"quantiles": [0.5]}}}
    with pytest.raises(InputError) as err:
        job.load_inputs(write_job(tmp_path / "opt", optimise))
    assert err.value.where == "sweep.knobs.min_similarity" and "for a grid" in err.value.problem
    with pytest.raises(InputError) as err:
        job.load_inputs(write_job(tmp_path / "http", DATA_SWEEP,
                                  backend={"kind": "http", "base_url": "http://127.0.0.1:9"}))
    assert err.value.file.endswith("job.yaml") and err.value.where == "sweep.knobs.min_similarity.quantiles"
    assert "[0.25, 0.75]: values from the data need the embedded backend" in err.value.problem


def test_dry_run_says_which_values_come_from_the_data(tmp_path):
    said = dry_run(write_job(tmp_path, DATA_SWEEP))
    assert "at most 25 settings" in said  # 2 x 3 x 4, and the baseline
    assert ("data-derived values: min_similarity: off, quantiles 0.25, 0.75 of the vector channel's similarities "
            "(from the data, resolved when the run starts)") in said
    assert "data-derived values: recency_half_life_days: off, quantiles 0, 0.5, 1 of the memories' ages" in said


def test_a_run_sweeps_the_quantiles_of_the_data_and_a_resume_sweeps_the_same(tmp_path):
    config = write_job(tmp_path, DATA_SWEEP)
    done = job.run(config, quiet=True)
    record = json.loads((done.run_dir / "run.json").read_text())
    ages = sorted(a for _, _, a in MEMORIES)
    assert record["data_values"]["recency_half_life_days"] == [ages[0], float(f"{np.median(ages):.2g}"), ages[-1]]
    floors = record["data_values"]["min_similarity"]
    assert len(floors) == 2 and floors == sorted(floors) and all(f == round(f, 3) for f in floors)
    swept = set(done.grid["setting_id"])
    assert {Knobs(5, floors[1], ages[-1]).id, Knobs(60, None, 0).id} <= swept and len(swept) == 2 * 3 * 4

    # A resume sweeps what run.json recorded, not what the data says now.
    record["data_values"]["min_similarity"] = [0.5]
    (done.run_dir / "run.json").write_text(json.dumps(record))
    resumed = job.run(config, quiet=True, resume=done.run_dir)
    assert Knobs(5, 0.5, ages[-1]).id in set(resumed.grid["setting_id"])
    assert Knobs(5, floors[1], ages[-1]).id in set(resumed.grid["setting_id"])  # evaluated before, kept
