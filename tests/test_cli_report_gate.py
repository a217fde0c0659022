"""`rqsweep report`, `rqsweep gate` and the run command's report and gate, through `main` and its exit codes.

The sweep itself is replaced by a stand-in that "writes" a hand-built run folder: these tests are
about what the command line does around a run, not the engine.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rqsweep import dry_run, job
from rqsweep.cli import EXIT_GATE_FAILED, main
from rqsweep.errors import NoFeasibleSetting
from tests.runfolders import write_run

BASE, BEST = "k60_moff_h0.0", "k20_moff_h0.0"
GOOD = {"entity": (.8, .9, .7), "freshness": (.6, .8, .5), "overall": (.7, .85, .6)}
WORSE = {**GOOD, "freshness": (.6, .7, .5)}  # freshness recall@10 falls 0.1


def _run(path, slices, run_id="20260102T000000Z-bbbb"):
    return write_run(path, {BASE: GOOD, BEST: slices}, baseline=BASE, best=BEST, run_id=run_id)


@pytest.fixture()
def previous(tmp_path):
    return _run(tmp_path / "previous", GOOD, run_id="20260101T000000Z-aaaa")


@pytest.fixture()
def sweep_writes(monkeypatch, tmp_path):
    """Make `job.run` produce a given run folder (or end without a feasible setting); returns a setter."""

    def use(slices, feasible=True):
        run_dir = _run(tmp_path / "current", slices)

        def fake_run(_config, **_):
            if not feasible:
                raise NoFeasibleSetting("No feasible setting among 2 evaluated.", run_dir)
            return SimpleNamespace(run_dir=run_dir, summary="summary of the run")

        monkeypatch.setattr(job, "run", fake_run)
        return run_dir

    return use


def test_report_command_rebuilds_the_report(previous, capsys):
    assert main(["report", str(previous)]) == 0
    assert (previous / "report.html").exists()
    assert "Best feasible setting in sample: rrf_k=20" in (previous / "report.md").read_text()
    assert "report.html" in capsys.readouterr().out


def test_gate_command_exit_codes(tmp_path, previous, capsys):
    assert main(["gate", str(_run(tmp_path / "clean", GOOD)), str(previous)]) == 0
    assert "Gate passed" in capsys.readouterr().out
    assert main(["gate", str(_run(tmp_path / "worse", WORSE)), str(previous)]) == EXIT_GATE_FAILED == 5
    out = capsys.readouterr().out
    assert "Gate FAILED: freshness" in out and "recall@10 0.8000 -> 0.7000" in out
    assert main(["gate", str(_run(tmp_path / "worse2", WORSE)), str(previous), "--tolerance", "0.1"]) == 0


def test_invalid_folders_and_arguments_exit_2(tmp_path, previous, capsys):
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    assert main(["gate", str(previous), str(tmp_path / "nowhere")]) == 2
    assert "not a run folder" in capsys.readouterr().err
    for argv in (["gate", str(previous)], ["gate", str(previous), "--update-gate-file"],
                 ["gate", str(previous), str(previous), "--tolerance", "-1"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2


def test_gate_file_round_trip_through_the_command_line(tmp_path, previous, capsys):
    gate_file = tmp_path / "repo" / "rqsweep-gate.json"
    assert main(["gate", str(previous), "--gate-file", str(gate_file)]) == 2  # not created yet
    assert main(["gate", str(previous), "--gate-file", str(gate_file), "--update-gate-file"]) == 0
    assert gate_file.exists()
    worse = _run(tmp_path / "worse", WORSE)
    assert main(["gate", str(worse), "--gate-file", str(gate_file)]) == EXIT_GATE_FAILED
    capsys.readouterr()
    assert main(["gate", str(worse), "--gate-file", str(gate_file), "--update-gate-file"]) == 0
    assert "accepted changes" in capsys.readouterr().out
    assert main(["gate", str(worse), "--gate-file", str(gate_file)]) == 0


def test_run_names_the_report_then_gates(previous, sweep_writes, capsys):
    run_dir = sweep_writes(GOOD)  # the run writes its report (tests/test_run_completion.py)
    assert main(["config.yaml", "--compare", str(previous)]) == 0
    out = capsys.readouterr().out
    assert "summary of the run" in out and "Gate passed" in out
    assert f"Report: {run_dir / 'report.md'} and {run_dir / 'report.html'}" in out


def test_run_with_a_regression_exits_5(previous, sweep_writes, capsys):
    sweep_writes(WORSE)
    assert main(["config.yaml", "--compare", str(previous)]) == EXIT_GATE_FAILED
    assert "Gate FAILED: freshness" in capsys.readouterr().out


def test_run_refuses_a_missing_reference_before_searching(tmp_path, monkeypatch):
    monkeypatch.setattr(job, "run", lambda *_, **__: pytest.fail("the run should not start"))
    assert main(["config.yaml", "--compare", str(tmp_path / "nowhere")]) == 2
    assert main(["config.yaml", "--gate-file", str(tmp_path / "missing.json")]) == 2


def test_run_without_a_feasible_setting_still_names_the_report(tmp_path, sweep_writes, capsys):
    run_dir = sweep_writes(GOOD, feasible=False)
    gate_file = tmp_path / "gate.json"
    assert main(["config.yaml", "--gate-file", str(gate_file), "--update-gate-file"]) == 4
    assert not gate_file.exists()  # a run with nothing feasible never becomes the committed "before"
    out, err = capsys.readouterr()
    assert f"Report: {run_dir / 'report.md'}" in out and "No feasible setting" in err


def test_dry_run_makes_no_search(monkeypatch, capsys):
    monkeypatch.setattr(dry_run, "dry_run", lambda config, **_: f"would sweep {config}")
    monkeypatch.setattr(job, "run", lambda *_, **__: pytest.fail("a dry run must not search"))
    assert main(["config.yaml", "--dry-run"]) == 0
    assert capsys.readouterr().out.strip() == "would sweep config.yaml"


def test_a_dry_run_checks_the_gate_references_it_is_given(tmp_path, previous, monkeypatch, capsys):
    monkeypatch.setattr(dry_run, "dry_run", lambda config, **_: f"would sweep {config}")
    gate_file = tmp_path / "gate.json"
    assert main(["config.yaml", "--dry-run", "--compare", str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere'}: not a run folder" in capsys.readouterr().err
    assert main(["config.yaml", "--dry-run", "--gate-file", str(gate_file)]) == 2
    assert f"{gate_file}: no such gate file" in capsys.readouterr().err
    assert main(["config.yaml", "--dry-run", "--gate-file", str(gate_file), "--update-gate-file"]) == 0
    assert capsys.readouterr().out == "would sweep config.yaml\n"  # a gate file it will create need not exist
    assert main(["gate", str(previous), "--gate-file", str(gate_file), "--update-gate-file"]) == 0
    capsys.readouterr()
    assert main(["config.yaml", "--dry-run", "--compare", str(previous), "--gate-file", str(gate_file)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "gate against run 20260101T000000Z-aaaa: readable (rrf_k=20 min_similarity=off half_life=0d)",
        f"gate against gate file {gate_file}: readable (rrf_k=20 min_similarity=off half_life=0d)"]


def test_a_damaged_gate_file_exits_2_naming_the_slice_and_metric(tmp_path, previous, capsys):
    path = tmp_path / "gate.json"
    assert main(["gate", str(previous), "--gate-file", str(path), "--update-gate-file"]) == 0
    path.write_text(path.read_text().replace('"mrr": 0.5000', '"mrr": NaN'))
    capsys.readouterr()
    assert main(["gate", str(previous), "--gate-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: slices.freshness.mrr: nan: expected a number from 0 to 1" in err and "Traceback" not in err


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("report", "explain", "export", "sweeps", "gate", "serve", "worker", "collect"):
        assert f"rqsweep {command} " in out, command


OPTIMISE = {"strategy": "optimize", "knobs": {"rrf_k": {"values": [1, 5, 60]}},
            "optimize": {"sampler": "random", "n_trials": 2, "seed": 1}}


def test_a_storage_url_rqsweep_cannot_use_is_refused_before_any_work(tmp_path, capsys):
    from tests.minijob import write_job

    config = write_job(tmp_path / "job", OPTIMISE)
    url = "mysql://admin:s3cret-pw@db.example/studies"
    for args in (["--dry-run"], ["--output-dir", str(tmp_path / "out")]):
        assert main([str(config), *args, "--storage", url]) == 2
        err = capsys.readouterr().err
        assert "--storage: 'mysql://admin:***@db.example/studies': must be sqlite:///FILE or " in err
        assert "s3cret-pw" not in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # refused before a run folder was made
    assert main([str(config), "--dry-run", "--storage", f"sqlite:///{tmp_path / 'study.db'}"]) == 0
    assert "storage: sqlite:///" in capsys.readouterr().out
    (tmp_path / "bad.yaml").write_text(config.read_text().replace("seed: 1", "seed: 1\n    storage: mysql://h/db"))
    assert main([str(tmp_path / "bad.yaml"), "--dry-run"]) == 2
    assert "sweep.optimize.storage: 'mysql://h/db': must be sqlite:///FILE or " in capsys.readouterr().err


def test_the_packaging_names_the_extras_the_docs_use_and_a_missing_driver_is_named(tmp_path, monkeypatch, capsys):
    import importlib.util
    import tomllib
    from pathlib import Path

    from tests.minijob import write_job

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert any(d.startswith("psycopg[binary]") for d in extras["postgres"])  # --storage postgresql://
    assert any(d.startswith("duckdb") for d in extras["analytics"])  # the README's SQL over the Parquet files
    assert "rqsweep[postgres,analytics]" in extras["test"]

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "psycopg" else find_spec(name, *a))
    config = write_job(tmp_path / "job", OPTIMISE)
    assert main([str(config), "--dry-run", "--storage", "postgresql://rq@db.example/studies"]) == 2
    assert "--storage: 'postgresql://rq@db.example/studies': needs psycopg: pip install 'rqsweep[postgres]'" \
        in capsys.readouterr().err


def test_a_study_storage_that_cannot_be_opened_stops_the_run_before_it_and_leaves_no_folder(tmp_path, capsys):
    import socket

    from tests.minijob import write_job

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = write_job(tmp_path / "job", OPTIMISE)
    url = f"postgresql://rq:pw-never-shown@127.0.0.1:{port}/studies"
    assert main([str(config), "--output-dir", str(tmp_path / "out"), "--storage", url, "--quiet"]) == 3
    err = capsys.readouterr().err
    assert f"cannot open the study storage postgresql://rq:***@127.0.0.1:{port}/studies" in err
    assert "pw-never-shown" not in err and "Traceback" not in err
    assert not (tmp_path / "out" / "mini").exists()  # no failed run folder, nor its name's, left in results/


@pytest.mark.parametrize("command", ["report", "gate", "gate-previous", "export", "collect", "explain", "resume",
                                     "compare"])
def test_a_file_given_as_a_run_folder_exits_2_naming_it(tmp_path, previous, command, capsys):
    from tests.minijob import write_job

    file = tmp_path / "grid.parquet"
    file.write_text("not a folder")
    config = str(write_job(tmp_path / "job"))
    argv = {"report": ["report", str(file)], "gate": ["gate", str(file), str(previous)],
            "gate-previous": ["gate", str(previous), str(file)], "export": ["export", str(file)],
            "collect": ["collect", str(file)], "explain": ["explain", str(file), "q1"],
            "resume": [config, "--resume", str(file), "--quiet"], "compare": [config, "--compare", str(file)]}[command]
    assert main(argv) == 2
    assert f"rqsweep: {file}: not a run folder (a file)" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["gate", "run"])
def test_a_folder_given_as_the_gate_file_exits_2_naming_it(tmp_path, previous, command, capsys):
    argv = ["gate", str(previous)] if command == "gate" else ["config.yaml"]
    assert main([*argv, "--gate-file", str(previous)]) == 2
    assert f"rqsweep: {previous}: a folder, not a gate file" in capsys.readouterr().err
