"""Hostile input (issue 9): refused before any work, through the real command line, with file, key path and line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from rqsweep.cli import main
from tests.minijob import write_job


def cli(capsys, *args: object) -> tuple[int, str]:
    """Exit code and stderr of `rqsweep ARGS`."""
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def refused_before_any_work(capsys, config: Path, *words: str) -> str:
    """Both `--dry-run` and a real run exit 2 naming `words`, and the real run leaves no run folder."""
    out = config.parent / "out"
    for args in ([config, "--dry-run"], [config, "--quiet", "--output-dir", out]):
        code, err = cli(capsys, *args)
        assert code == 2, err
        for word in words:
            assert word in err, (word, err)
    assert not out.exists()
    return err


# Item 6: YAML aliases (a 1 kB "billion laughs" expands to gigabytes) and long echoed values.

def bomb(key: str) -> str:
    levels = ["  - &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"  - &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return "\n".join([f"{key}:", *levels]) + "\n"


def test_an_alias_bomb_in_the_config_is_refused(tmp_path, capsys):
    config = write_job(tmp_path)
    text = config.read_text()
    config.write_text(text + bomb("description"))
    first_alias = len(text.splitlines()) + 3
    refused_before_any_work(capsys, config, "job.yaml: description[1]", f"line {first_alias}", "alias")


def test_an_alias_in_a_golden_row_is_refused(tmp_path, capsys):
    config = write_job(tmp_path)
    golden = tmp_path / "golden.yaml"
    text = golden.read_text()
    golden.write_text(text + "- {id: x1, slice: document, query: &q vpn certificate, expected: doc-vpn}\n"
                             "- {id: x2, slice: document, query: *q, expected: doc-vpn}\n")
    refused_before_any_work(capsys, config, "golden.yaml: [11].query", f"line {len(text.splitlines()) + 2}",
                            "alias")


def test_long_values_are_shortened_in_messages(tmp_path, capsys):
    config = write_job(tmp_path, name="x" * 5000 + "!")
    err = refused_before_any_work(capsys, config, "job.yaml: name: 'xxxx", "... (5003 characters)")
    assert len(err) < 400

    config = write_job(tmp_path)
    rows = yaml.safe_load((tmp_path / "golden.yaml").read_text())
    rows[2]["expected"] = "doc-" + "y" * 3000
    (tmp_path / "golden.yaml").write_text(yaml.safe_dump(rows))
    err = refused_before_any_work(capsys, config, "golden.yaml: [2].expected[0]", "... (3006 characters)",
                                  "does not exist")
    assert len(err) < 400


# Item 7: a sweep's size is counted before anything is materialised, and capped.

@pytest.mark.parametrize("knobs, where, count", [  # the cheap ones first: before the cap, they ran for seconds
    ({"rrf_k": {"low": 1, "high": 1_200_000}}, "sweep.knobs.rrf_k", "1,200,000"),
    ({"rrf_k": {"low": 1, "high": 120}, "min_similarity": {"low": 0, "high": 1, "num": 101},
      "recency_half_life_days": {"low": 0, "high": 100, "step": 1}}, "sweep.knobs", "1,224,120"),
    ({"min_similarity": {"low": 0, "high": 1, "step": 1e-12}}, "sweep.knobs.min_similarity", "1,000,000,000,001"),
    ({"recency_half_life_days": {"low": 0, "high": 1, "num": 10 ** 12}}, "sweep.knobs.recency_half_life_days",
     "1,000,000,000,000"),
    ({"rrf_k": {"low": 1, "high": 10 ** 15}}, "sweep.knobs.rrf_k", "1,000,000,000,000,000"),
    ({"recency_half_life_days": {"low": 0, "high": 1e308, "step": 1e-10}}, "sweep.knobs.recency_half_life_days",
     "inf"),
])
def test_a_grid_above_the_cap_is_refused_with_its_count(tmp_path, capsys, knobs, where, count):
    config = write_job(tmp_path, sweep={"strategy": "grid", "knobs": knobs})
    refused_before_any_work(capsys, config, f"job.yaml: {where}: ", f"{count} settings", "cap of 1,000,000")


# Item 8: rrf_k NaN, infinite or beyond what SOAT (JavaScript) holds exactly; non-finite steps.

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("override, where, words", [
    ({"sweep": {"strategy": "grid", "knobs": {"rrf_k": {"values": [60, NAN]}}}}, "sweep.knobs.rrf_k.values[1]",
     "nan: must be an integer"),
    ({"sweep": {"strategy": "grid", "knobs": {"rrf_k": {"low": 1, "high": INF}}}}, "sweep.knobs.rrf_k.high",
     "inf: must be an integer"),
    ({"baseline": {"rrf_k": NAN}}, "baseline.rrf_k", "nan: must be an integer"),
    ({"baseline": {"rrf_k": -INF}}, "baseline.rrf_k", "-inf: must be an integer"),
    ({"sweep": {"strategy": "grid", "knobs": {"rrf_k": {"values": [60, 2 ** 53]}}}}, "sweep.knobs.rrf_k.values[1]",
     "9007199254740992: must be an integer >= 1 and <= 9007199254740991"),
    ({"baseline": {"rrf_k": 10 ** 20}}, "baseline.rrf_k",
     "100000000000000000000: must be an integer >= 1 and <= 9007199254740991"),
    ({"sweep": {"strategy": "grid", "knobs": {"rrf_k": {"low": 1, "high": 100, "step": INF}}}},
     "sweep.knobs.rrf_k.step", "inf: must be a finite number > 0"),
    ({"sweep": {"strategy": "optimize", "knobs": {"min_similarity": {"low": 0.1, "high": 0.5, "step": INF}},
                "optimize": {"n_trials": 2}}}, "sweep.knobs.min_similarity.step", "inf: must be a finite number > 0"),
    ({"sweep": {"strategy": "grid", "knobs": {"min_similarity": {"low": 0.1, "high": 0.5, "step": NAN}}}},
     "sweep.knobs.min_similarity.step", "nan: must be a finite number > 0"),
    ({"sweep": {"strategy": "grid", "knobs": {"min_similarity": {"low": 0.1, "high": 0.5, "num": INF}}}},
     "sweep.knobs.min_similarity.num", "inf: expected int"),
])
def test_non_finite_and_oversized_knob_values_are_refused_at_config_time(tmp_path, capsys, override, where, words):
    config = write_job(tmp_path, **override)
    refused_before_any_work(capsys, config, f"job.yaml: {where}: {words}")


# Item 9: duplicate YAML keys, and SOAT golden sets of an unknown version.

def test_a_duplicate_key_in_the_config_is_refused(tmp_path, capsys):
    config = write_job(tmp_path)
    text = config.read_text()
    config.write_text(text + "search: {limit: 10, limit: 3}\n")
    line = len(text.splitlines()) + 1
    refused_before_any_work(capsys, config, "job.yaml: search.limit: ", f"duplicate key (line {line}",
                            f"first at line {line})")


def test_duplicate_keys_in_golden_rows_and_sweep_files_are_refused(tmp_path, capsys):
    config = write_job(tmp_path)
    golden = tmp_path / "golden.yaml"
    text = golden.read_text()
    golden.write_text(text + "- {id: x1, slice: a,\n   slice: document, query: q, expected: doc-vpn}\n")
    n = len(text.splitlines())
    refused_before_any_work(capsys, config, "golden.yaml: [10].slice: ", f"duplicate key (line {n + 2}",
                            f"first at line {n + 1})")

    (tmp_path / "grid.yaml").write_text("strategy: grid\nknobs:\n  rrf_k: {values: [5, 60]}\n"
                                        "  rrf_k: {values: [1]}\n")
    config = write_job(tmp_path, sweep="grid.yaml")
    refused_before_any_work(capsys, config, "grid.yaml: knobs.rrf_k: ", "duplicate key (line 4", "first at line 3)")


# Issue 35, item 12: YAML reads `2026-02-30` as a date, and PyYAML's ValueError named no file.

def test_an_impossible_date_in_any_yaml_file_is_refused_naming_file_key_and_value(tmp_path, capsys):
    config = write_job(tmp_path)
    text = config.read_text()
    config.write_text(text + "description: 2026-02-30\n")
    refused_before_any_work(capsys, config, "job.yaml: description: '2026-02-30': not a valid date or time",
                            "day is out of range for month", f"line {len(text.splitlines()) + 1}")

    config = write_job(tmp_path)
    golden = tmp_path / "golden.yaml"
    golden.write_text(golden.read_text() + "- {id: x1, slice: document, query: 2025-12-32, expected: doc-vpn}\n")
    refused_before_any_work(capsys, config, "golden.yaml: [10].query: '2025-12-32': not a valid date")


def soat_golden(folder: Path, version: object) -> Path:
    """A SOAT-format golden.json (corpus inline) of the mini job's data."""
    from tests.minijob import DOCUMENTS, MEMORIES, QUERIES

    data = {"corpus": {"documents": [{"key": k, "path": p, "content": c} for k, p, c in DOCUMENTS],
                       "memories": [{"key": k, "content": c} for k, c, _ in MEMORIES]},
            "queries": [{"id": i, "query": q, "kind": s,
                         "expected": [{"source_type": "document" if e.startswith("doc") else "memory", "key": e}]}
                        for i, s, q, e in QUERIES]}
    if version is not None:
        data["version"] = version
    path = folder / "golden.json"
    path.write_text(json.dumps(data))
    return path


def test_soat_golden_sets_of_versions_1_to_4_run_and_others_are_refused(tmp_path, capsys):
    config = write_job(tmp_path, corpus=None, golden="golden.json")
    for version in (1, 2, 3, 4):
        soat_golden(tmp_path, version)
        code, err = cli(capsys, config, "--dry-run")
        assert code == 0, err
    soat_golden(tmp_path, 5)
    refused_before_any_work(capsys, config, "golden.json: version: 5: ", "supported: 1, 2, 3, 4")
    soat_golden(tmp_path, "1")
    refused_before_any_work(capsys, config, "golden.json: version: '1': ", "supported: 1, 2, 3, 4")
    soat_golden(tmp_path, None)
    refused_before_any_work(capsys, config, "golden.json: version: ", "supported: 1, 2, 3, 4")


# Item 13: outputs carry no absolute path (home folders included) and honour the umask.

def test_outputs_record_paths_relative_to_the_config_and_honour_the_umask(tmp_path, capsys, monkeypatch):
    home = tmp_path / "home" / "alice"
    monkeypatch.setenv("HOME", str(home))
    config = write_job(home / "job")
    previous = os.umask(0o027)
    try:
        code, err = cli(capsys, config, "--quiet", "--output-dir", home / "out")
    finally:
        os.umask(previous)
    assert code == 0, err
    (run_dir,) = (home / "out" / "mini").iterdir()
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {"run.json", "grid.parquet", "queries.parquet", "report.md", "report.html"} <= {p.name for p in files}
    for path in files:
        assert str(tmp_path).encode() not in path.read_bytes(), path
        assert path.stat().st_mode & 0o777 == 0o640, (path, oct(path.stat().st_mode))
    info = json.loads((run_dir / "run.json").read_text())
    assert info["golden_path"] == "golden.yaml"
    assert info["config_path"] == "../../../job/job.yaml"  # from the run folder: `rqsweep explain` reads it
    assert pq.read_schema(run_dir / "grid.parquet").metadata[b"rqsweep.golden"] == b"golden.yaml"
    assert "golden set golden.yaml" in (run_dir / "report.md").read_text()


# Item 14: YAML is read with libyaml's C parser where PyYAML has it (3x faster on large golden sets),
# the refusals above working with it; libyaml also caps nesting, where the pure-Python parser recursed.

@pytest.mark.skipif(not yaml.__with_libyaml__, reason="this PyYAML was built without libyaml")
def test_yaml_is_read_with_the_c_parser(tmp_path, capsys):
    config = write_job(tmp_path)
    golden = tmp_path / "golden.yaml"
    deep = "[" * 5000 + "]" * 5000
    golden.write_text(golden.read_text() + "- {id: x1, slice: s, query: q, expected: " + deep + "}\n")
    refused_before_any_work(capsys, config, "golden.yaml: not valid YAML", "exceeded maximum nesting depth")
    soat_golden(tmp_path, 1).write_text('{"version": 1, "queries": ' + "[" * 100_000 + "]" * 100_000 + "}")
    config = write_job(tmp_path, corpus=None, golden="golden.json")
    refused_before_any_work(capsys, config, "golden.json: not valid JSON: nested too deeply")


def test_reading_a_large_golden_set_is_announced(tmp_path, capsys, monkeypatch):
    from rqsweep import inputs

    monkeypatch.setattr(inputs, "LARGE_GOLDEN_BYTES", 100)
    config = write_job(tmp_path)
    code, err = cli(capsys, config, "--dry-run")
    assert code == 0, err
    assert "reading golden set golden.yaml (0 MB); JSON lines (.jsonl) read several times faster" in err
    assert "golden set: 10 queries read in " in err
