"""run.json, the contract with the nightly job: its keys are `RunRecord`'s fields, written as the run goes."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from datetime import datetime, timezone

import pytest
import yaml

from rqsweep import job
from rqsweep.cli import main
from rqsweep.errors import InputError
from rqsweep.inputs import load_inputs
from rqsweep.runfolder import RUN_JSON, RunRecord, mark
from tests.minijob import write_job

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def _written(when: str) -> list[str]:
    return [f.name for f in fields(RunRecord) if f.metadata["when"] == when]


@pytest.fixture()
def inputs(tmp_path):
    return load_inputs(write_job(tmp_path / "job"))


def test_a_starting_run_writes_the_start_keys_in_order_and_the_given_ones_only_when_set(inputs, tmp_path):
    run_dir = tmp_path / "out" / "mini" / "r1"
    run_dir.mkdir(parents=True)
    record = RunRecord.begin(inputs, "r1", run_dir, NOW)
    record.write(run_dir)
    data = json.loads((run_dir / RUN_JSON).read_text())
    assert list(data) == _written("start")
    assert data["status"] == "running" and data["started_at"] == NOW.isoformat()
    assert data["config_path"] == "../../../job/job.yaml"  # relative to the run folder: no home folder named
    assert data["inputs_sha256"] == inputs.sha256 and data["corpus_sha256"] == inputs.corpus.sha256
    assert RunRecord.read(run_dir) == record


def test_resume_keeps_the_first_start_adds_resumed_at_and_refuses_other_inputs(inputs, tmp_path):
    started = RunRecord.begin(inputs, "r1", tmp_path, NOW)
    later = datetime(2026, 1, 3, tzinfo=timezone.utc)
    resumed = started.resume(inputs, tmp_path, later)
    assert (resumed.run_id, resumed.started_at, resumed.resumed_at) == ("r1", NOW.isoformat(), later.isoformat())
    assert list(resumed.as_json()) == [*_written("start"), "resumed_at"]
    with pytest.raises(InputError, match="inputs_sha256.*changed since this run started") as caught:
        replace(started, inputs_sha256="0" * 64).resume(inputs, tmp_path, later)
    assert str(tmp_path / RUN_JSON) in str(caught.value)


def test_resume_refuses_a_run_another_embedder_made(tmp_path):
    """A run started when a config without `embedder:` meant the feature hash, resumed now that it means the
    local model: its config's bytes are the same, its embedder is not."""
    path = write_job(tmp_path / "job")
    config = yaml.safe_load(path.read_text())
    del config["backend"]
    path.write_text(yaml.safe_dump(config))
    inputs = load_inputs(path)
    started = replace(RunRecord.begin(inputs, "r1", tmp_path, NOW), embedder="feature-hash-1024")
    with pytest.raises(InputError) as caught:
        started.resume(inputs, tmp_path, NOW)
    assert caught.value.where == "embedder" and str(tmp_path / RUN_JSON) in str(caught.value)
    assert "'feature-hash-1024'" in str(caught.value) and "'all-MiniLM-L6-v2'" in str(caught.value)


def test_a_finished_run_json_holds_every_field_of_the_record_in_order(tmp_path):
    config = write_job(tmp_path, sweep={"strategy": "grid", "knobs": {"rrf_k": {"values": [5, 60]}}})
    outcome = job.run(config, quiet=True, output_dir=tmp_path / "out")
    data = json.loads((outcome.run_dir / RUN_JSON).read_text())
    # no storage, not resumed; the verdict written as soon as it is made
    assert list(data) == [*_written("start"), *_written("finish"), "decision"]
    assert data["status"] == "complete" and data["settings"] == 2
    assert RunRecord.read(outcome.run_dir).complete


def test_mark_changes_an_unfinished_status_and_leaves_a_complete_one(inputs, tmp_path):
    RunRecord.begin(inputs, "r1", tmp_path, NOW).write(tmp_path)
    assert mark(tmp_path, "interrupted")
    assert RunRecord.read(tmp_path).status == "interrupted"
    RunRecord.begin(inputs, "r1", tmp_path, NOW).finish(settings=1).write(tmp_path)
    assert mark(tmp_path, "failed")
    assert RunRecord.read(tmp_path).status == "complete"
    assert not mark(tmp_path / "gone", "failed")  # a folder a run removed has nothing to mark


def test_an_older_run_json_reads_its_missing_keys_as_none_and_a_damaged_one_is_refused(tmp_path):
    (tmp_path / RUN_JSON).write_text(json.dumps({"run_id": "r0", "status": "complete", "from_the_future": 1}))
    old = RunRecord.read(tmp_path)
    assert (old.run_id, old.complete, old.corpus_sha256, old.config_path) == ("r0", True, None, None)
    for text, problem in (("{", "not valid JSON"), ("[1]", "expected a JSON object, got list")):
        (tmp_path / RUN_JSON).write_text(text)
        with pytest.raises(InputError, match=problem) as caught:
            RunRecord.read(tmp_path)
        assert str(tmp_path / RUN_JSON) in str(caught.value)
    with pytest.raises(InputError, match=r"not a run folder \(no such folder\)"):
        RunRecord.read(tmp_path / "elsewhere")


def test_the_run_ids_hash_is_of_every_input_the_corpus_included(inputs, tmp_path):
    from rqsweep.runfolder import run_folder_of

    corpus = tmp_path / "job" / "corpus.yaml"
    corpus.write_text(corpus.read_text().replace("nightly", "weekly"))
    edited = load_inputs(tmp_path / "job" / "job.yaml")
    assert (edited.config.sha256, edited.golden.sha256) == (inputs.config.sha256, inputs.golden.sha256)
    ids = [run_folder_of(i, None, tmp_path / "out", NOW)[1].run_id for i in (inputs, inputs, edited)]
    assert ids[0].endswith(f"-{inputs.sha256[:8]}") and ids[1] == f"{ids[0]}-2"  # equal inputs share a suffix
    assert ids[2] == f"20260102T030405Z-{edited.sha256[:8]}"


def test_resume_refuses_a_run_whose_golden_set_was_edited(tmp_path, capsys):
    config = write_job(tmp_path, sweep={"strategy": "grid", "knobs": {"rrf_k": {"values": [5, 60]}}})
    run_dir = job.run(config, quiet=True, output_dir=tmp_path / "out").run_dir
    golden = tmp_path / "golden.yaml"
    golden.write_text(golden.read_text().replace("standing desk", "standing desks"))
    capsys.readouterr()
    assert main([str(config), "--resume", str(run_dir), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{run_dir / RUN_JSON}: inputs_sha256" in err and "changed since this run started" in err, err
