"""Knob ranges that act: values a sweep takes from the data, and the warnings about a value that changes no rank or a
chosen setting at the edge of its range."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from rqsweep import cli, job
from rqsweep.dry_run import dry_run
from rqsweep.errors import InputError
from rqsweep.knobs import KNOBS, Knobs
from rqsweep.report.knob_ranges import KnobRanges, edge_warnings, fingerprints, inert_values, knob_ranges
from tests.minijob import MEMORIES, write_job

DATA_SWEEP = {"strategy": "grid", "knobs": {
    "rrf_k": {"values": [5, 60]},
    "min_similarity": {"include_off": True, "quantiles": [0.25, 0.75]},
    "recency_half_life_days": {"include_off": True, "age_quantiles": [0, 0.5, 1], "values": [5000]},
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
    ("recency_half_life_days", {"age_quantiles": [0.5], "low": 1, "high": 2, "step": 1},
     "sweep.knobs.recency_half_life_days", "give `age_quantiles` (and `values` to try as well) or a range, not both"),
    ("recency_half_life_days", {"age_quantiles": [0.5], "values": [-1]}, "sweep.knobs.recency_half_life_days.values[0]",
     "-1: must be a finite number >= 0"),
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
    assert "at most 30 settings, the baseline included" in said  # 2 x 3 x 5, the baseline among them
    assert ("data-derived values: min_similarity: off, quantiles 0.25, 0.75 of the vector channel's similarities "
            "(from the data, resolved when the run starts)") in said
    assert ("data-derived values: recency_half_life_days: off, quantiles 0, 0.5, 1 of the memories' ages in days "
            "(from the data, resolved when the run starts), and 5000") in said


def test_a_run_sweeps_the_quantiles_of_the_data_and_a_resume_sweeps_the_same(tmp_path):
    config = write_job(tmp_path, DATA_SWEEP)
    done = job.run(config, quiet=True)
    record = json.loads((done.run_dir / "run.json").read_text())
    ages = sorted(a for _, _, a in MEMORIES)
    assert record["data_values"]["recency_half_life_days"] == [ages[0], float(f"{np.median(ages):.2g}"), ages[-1]]
    floors = record["data_values"]["min_similarity"]
    assert len(floors) == 2 and floors == sorted(floors) and all(f == round(f, 3) for f in floors)
    swept = set(done.grid["setting_id"])
    assert {Knobs(5, floors[1], ages[-1]).id, Knobs(60, None, 0).id, Knobs(5, floors[0], 5000).id} <= swept
    assert len(swept) == 2 * 3 * 5

    # A resume sweeps what run.json recorded, not what the data says now.
    record["data_values"]["min_similarity"] = [0.5]
    (done.run_dir / "run.json").write_text(json.dumps(record))
    resumed = job.run(config, quiet=True, resume=done.run_dir)
    assert Knobs(5, 0.5, ages[-1]).id in set(resumed.grid["setting_id"])
    assert Knobs(5, floors[1], ages[-1]).id in set(resumed.grid["setting_id"])  # evaluated before, kept


def positions_of(settings: dict[Knobs, dict[str, list]]) -> pl.DataFrame:
    """queries.parquet's columns the fingerprints read: each setting's positions, query by query."""
    rows = [{"setting_id": k.id, **k.columns(), "query_id": q, "positions": p}
            for k, queries in settings.items() for q, p in queries.items()]
    return pl.DataFrame(rows, schema={"setting_id": pl.String, "rrf_k": pl.Int64, "min_similarity": pl.Float64,
                                      "recency_half_life_days": pl.Float64, "query_id": pl.String,
                                      "positions": pl.List(pl.Int64)})


def floors_grid(changed: set[tuple[int, float | None, str]] = frozenset()) -> dict[Knobs, dict[str, list]]:
    """rrf_k 1 or 2 (which moves q1) x floors off, 0.5, 0.8 (which move nothing, except in `changed`)."""
    return {Knobs(k, m, 0.0): {"q1": [k], "q2": [None, 3] if (k, m, "q2") in changed else [4, 3], "q3": None}
            for k in (1, 2) for m in (None, 0.5, 0.8)}


def test_a_floor_that_duplicates_another_in_every_combination_changes_no_rank():
    prints = fingerprints([positions_of(floors_grid())])
    assert inert_values(prints) == {"min_similarity": [None, 0.5, 0.8]}  # rrf_k moves q1: it acts
    assert prints.height - prints["fingerprint"].n_unique() == 4  # 6 settings, 2 distinct rankings
    ranges = KnobRanges(6, 4, inert_values(prints), [])
    assert ranges.warnings() == [
        "min_similarity off, 0.5, 0.8 changed no rank: with every combination of the other knobs, another "
        "min_similarity gave every query the same positions; sweep values where the data is (docs/sweeps.md)",
        "4 of 6 settings ranked every query exactly as another setting did"]


def test_a_value_that_moves_one_query_in_one_combination_changes_a_rank():
    prints = fingerprints([positions_of(floors_grid({(2, 0.8, "q2")}))])
    assert inert_values(prints) == {"min_similarity": [None, 0.5]}


def test_fingerprints_add_up_a_setting_split_over_row_groups():
    rows = positions_of(floors_grid({(2, 0.8, "q2")}))
    whole = fingerprints([rows]).sort(KNOBS)
    split = fingerprints([rows.slice(0, 7), rows.slice(7)]).sort(KNOBS)  # setting 3 spans both groups
    assert whole.equals(split)
    moved = fingerprints([rows.with_columns(pl.col("query_id").replace({"q1": "q2", "q2": "q1"}))]).sort(KNOBS)
    assert not moved["fingerprint"].equals(whole["fingerprint"])  # positions belong to their query


@pytest.mark.parametrize("chosen, words", [
    (Knobs(2, 0.8, 7.0), ["the chosen setting sits at the lowest rrf_k swept (2, of 2-100)",
                          "the chosen setting sits at the highest min_similarity swept (0.8, of 0.78-0.8)",
                          "the chosen setting sits at the lowest recency_half_life_days swept (7, of 7-730)"]),
    (Knobs(100, 0.78, 730.0), ["the chosen setting sits at the highest rrf_k swept (100, of 2-100): extend the "
                               "range above it to see whether the gain goes on",
                               "the chosen setting sits at the lowest min_similarity swept (0.78, of 0.78-0.8)",
                               "the chosen setting sits at the highest recency_half_life_days swept (730, of "
                               "7-730)"]),
    (Knobs(60, None, 0.0), []),  # off is no edge
    (Knobs(99, 0.79, 30.0), []),
])
def test_a_chosen_setting_at_the_lowest_or_highest_swept_value_is_at_the_edge(chosen, words):
    overall = pl.DataFrame([k.columns() for k in (
        Knobs(k, m, h) for k in (2, 60, 99, 100) for m in (None, 0.78, 0.79, 0.8) for h in (0.0, 7.0, 30.0, 730.0))])
    found = edge_warnings(overall, {"the chosen setting": chosen})
    assert len(found) == len(words) and all(f.startswith(w) for f, w in zip(found, words))


def test_no_edge_where_soat_takes_no_further_value():
    overall = pl.DataFrame([Knobs(k, m).columns() for k in (1, 5) for m in (0.0, 0.5, 1.0)])
    assert edge_warnings(overall, {"the chosen setting": Knobs(1, 0.0)}) == []
    assert edge_warnings(overall, {"the chosen setting": Knobs(5, 1.0)}) == [
        "the chosen setting sits at the highest rrf_k swept (5, of 1-5): extend the range above it to see whether "
        "the gain goes on"]


def test_a_run_warns_on_stdout_and_in_its_report_of_values_that_change_no_rank(tmp_path, capsys):
    # A half-life of a billion days decays no memory by a rank's worth: those values rank as the blend off does.
    sweep = {"strategy": "grid", "knobs": {"recency_half_life_days": {"values": [0, 1, 30, 365, 1e9, 2e9]}}}
    config = write_job(tmp_path, sweep, validation=False)
    assert cli.main([str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    warnings = ["Warning: recency_half_life_days 0 (off), 1e+09, 2e+09 changed no rank: with every combination of "
                "the other knobs, another recency_half_life_days gave every query the same positions; sweep values "
                "where the data is (docs/sweeps.md).",
                "Warning: 2 of 6 settings ranked every query exactly as another setting did."]
    assert [line for line in out if line.startswith("Warning:")] == warnings
    report = (next((tmp_path / "results" / "mini").iterdir()) / "report.md").read_text()
    assert all(w in report for w in warnings)


@pytest.fixture(scope="module")
def handbook_run(tmp_path_factory):
    """The handbook job as shipped (configs/handbook.yaml, the local model), run once for this module."""
    config = Path(__file__).resolve().parents[1] / "configs" / "handbook.yaml"
    return job.run(config, quiet=True, output_dir=tmp_path_factory.mktemp("handbook"))


def test_the_shipped_handbook_sweep_has_no_value_that_changes_no_rank(handbook_run):
    ranges = knob_ranges(handbook_run.run_dir, handbook_run.grid, handbook_run.best)
    assert ranges.compared and ranges.inert == {}
    record = json.loads((handbook_run.run_dir / "run.json").read_text())
    floors, half_lives = record["data_values"]["min_similarity"], record["data_values"]["recency_half_life_days"]
    assert len(floors) == 10 and len(half_lives) == 8
    assert ranges.settings == 15 * 11 * 12  # no two quantiles rounded alike; the baseline is in the grid
    assert "changed no rank" not in handbook_run.summary



def test_a_floor_quantile_below_zero_is_the_floor_zero(tmp_path):
    from types import SimpleNamespace

    from rqsweep.backends import BACKENDS
    from rqsweep.config import load_config
    from rqsweep.search.space import resolve

    sweep = load_config(write_job(tmp_path, sweep=DATA_SWEEP), BACKENDS).sweep
    data = SimpleNamespace(vector_similarities=lambda: np.array([-0.4, -0.2, 0.1, 0.9]),
                           memory_ages=lambda: np.array([1.0, 10.0, 100.0]))
    # A cosine can be negative (all-MiniLM's are); SOAT's min_similarity is in [0, 1]: quantile 0.25 is -0.25 -> 0.
    assert resolve(sweep, data)["min_similarity"] == [0.0, 0.3]
