"""Bad input gets a clear error naming the file, the key path and the value; golden sets are validated."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rqsweep import job
from rqsweep.backends import BACKENDS
from rqsweep.config import load_config
from rqsweep.errors import InputError
from rqsweep.golden import load_golden
from rqsweep.corpus import load_corpus
from rqsweep.search.space import grid, knob_values
from rqsweep.knobs import Knobs
from tests.minijob import write_job
from tests.soat_golden import SOAT_GOLDEN, SOAT_GOLDEN_CONFIG, needs_soat_golden


def error_of(config: Path) -> InputError:
    with pytest.raises(InputError) as err:
        job.load_inputs(config)
    return err.value


@pytest.mark.parametrize("override, where, words", [
    ({"workers": "two"}, "workers", "'two': expected int"),
    ({"surprise": 1}, "surprise", "unknown key"),
    ({"baseline": {"rrf_k": 0}}, "baseline.rrf_k", "0: must be an integer >= 1"),
    ({"baseline": {"min_similarity": 1.5}}, "baseline.min_similarity", "1.5: must be a number in [0, 1]"),
    ({"baseline": {"recency_half_life_days": -2}}, "baseline.recency_half_life_days", "-2: must be a finite number"),
    ({"search": {"limit": 500}}, "search.limit", "500: SOAT caps limit"),
    ({"objective": {"metric": "ndcg"}}, "objective.metric", "'ndcg': no such metric (known: mrr, r_precision, "),
    ({"metrics": ["mrr", "ndcg_at_0"]}, "metrics[1]", "'ndcg_at_0': no such metric"),
    ({"metrics": "mrr"}, "metrics", "'mrr': expected list"),
    ({"constraints": [{"metric": "mrr", "slice": "*"}]}, "constraints[0]", "exactly one of"),
    ({"constraints": [{"metric": "mrr", "slice": "nope", "min": 0.1}]}, "constraints[0].slice", "'nope': no such slice"),
    ({"objective": {"metric": "mrr", "slice": "nope"}}, "objective.slice",
     "'nope': no such slice in golden.yaml (slices: document, entity, exact_token, freshness, or overall)"),
    ({"sweep": {"strategy": "grid", "knobs": {"rrf_k": {"values": [60, -1]}}}}, "sweep.knobs.rrf_k.values[1]",
     "-1: must be an integer >= 1"),
    ({"sweep": {"strategy": "grid", "knobs": {"min_similarity": {"low": 0.1, "high": 0.5}}}},
     "sweep.knobs.min_similarity", "needs `step` or `num`"),
    ({"sweep": {"strategy": "grid", "knobs": {"rrf_k": {"low": 50, "high": 10}}}}, "sweep.knobs.rrf_k", "low <= high"),
    ({"sweep": "no-such-sweep"}, "sweep", "no sweeps/no-such-sweep.yaml"),
    ({"backend": {"kind": "embedded", "embedder": {"kind": "openai"}}}, "backend.embedder.model", "is required"),
    ({"backend": {"kind": "embedded", "index_cache_mb": 0}}, "backend.index_cache_mb",
     "0.0: expected a number of megabytes above 0"),
    ({"backend": {"kind": "embedded", "index_cache_mb": "lots"}}, "backend.index_cache_mb", "'lots': expected float"),
])
def test_config_errors_name_file_key_and_value(tmp_path, override, where, words):
    err = error_of(write_job(tmp_path, **override))
    assert err.file.endswith("job.yaml")
    assert err.where == where
    assert words in err.problem


def test_secret_values_are_never_echoed(tmp_path):
    err = error_of(write_job(tmp_path, backend={
        "kind": "embedded", "embedder": {"kind": "openai", "model": "m", "base_url": "https://user:hunter2@h.example"}}))
    assert err.where == "backend.embedder.base_url" and "hunter2" not in str(err)
    from rqsweep.config import Section

    leak = Section({"password": 12345678}, tmp_path / "x.yaml", "backend").fail("password", 12345678, "expected str")
    assert "12345678" not in str(leak) and "backend.password" in str(leak)


def test_undecodable_and_infinite_inputs_are_input_errors(tmp_path):
    config = write_job(tmp_path)
    (tmp_path / "golden.yaml").write_bytes(b"- {id: a, slice: s, query: \xff\xfe, expected: doc-vpn}\n")
    assert "not UTF-8" in error_of(config).problem
    write_job(tmp_path)
    text = (tmp_path / "corpus.yaml").read_text().replace("age_days: 400.0", "age_days: .inf")
    (tmp_path / "corpus.yaml").write_text(text)
    err = error_of(config)
    assert err.where == "memories[0].age_days" and "finite" in err.problem
    (tmp_path / "corpus.yaml").write_bytes(b"documents: []\nmemories: [{key: m, content: \xff}]\n")
    assert "not UTF-8" in error_of(config).problem


def test_yaml_syntax_error_names_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(InputError, match="broken.yaml: not valid YAML"):
        load_config(path, BACKENDS)


def test_expected_key_missing_from_the_corpus(tmp_path):
    config = write_job(tmp_path)
    rows = yaml.safe_load((tmp_path / "golden.yaml").read_text())
    rows[3]["expected"] = "doc-nowhere"
    (tmp_path / "golden.yaml").write_text(yaml.safe_dump(rows))
    err = error_of(config)
    assert err.file.endswith("golden.yaml") and err.where == "[3].expected[0]"
    assert "'doc-nowhere'" in err.problem and "does not exist" in err.problem


def test_duplicate_ids_are_errors_and_duplicate_queries_warnings(tmp_path):
    write_job(tmp_path)
    corpus = load_corpus(tmp_path / "corpus.yaml")
    rows = yaml.safe_load((tmp_path / "golden.yaml").read_text())
    (tmp_path / "dup.yaml").write_text(yaml.safe_dump(rows + [dict(rows[0])]))
    with pytest.raises(InputError, match=r"\[10\]\.id: duplicate query id 'd1'"):
        load_golden(tmp_path / "dup.yaml", corpus)
    twin = dict(rows[0], id="d1-again")
    (tmp_path / "twin.yaml").write_text(yaml.safe_dump(rows + [twin]))
    assert load_golden(tmp_path / "twin.yaml", corpus).warnings == (
        "query text 'vpn certificate expired' appears more than once",)


def test_jsonl_golden_sets_and_key_lists(tmp_path):
    write_job(tmp_path)
    corpus = load_corpus(tmp_path / "corpus.yaml")
    lines = [{"slice": "s", "query": "pager", "expected": ["mem-pager-new", "mem-pager-old"]},
             {"slice": "t", "query": "vpn", "expected": "doc-vpn"}]
    (tmp_path / "g.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    golden = load_golden(tmp_path / "g.jsonl", corpus)
    assert [q.id for q in golden.queries] == ["q0001", "q0002"]
    assert [e.key for e in golden.queries[0].expected] == ["mem-pager-new", "mem-pager-old"]
    assert {e.source_type for e in golden.queries[0].expected} == {"memory"}
    (tmp_path / "bad.jsonl").write_text('{"slice": "s"\n')
    with pytest.raises(InputError, match="bad.jsonl: line 1: not valid JSON"):
        load_golden(tmp_path / "bad.jsonl", corpus)
    (tmp_path / "reserved.jsonl").write_text(json.dumps({"slice": "overall", "query": "q", "expected": "doc-vpn"}))
    with pytest.raises(InputError, match="reserved"):
        load_golden(tmp_path / "reserved.jsonl", corpus)


@needs_soat_golden
def test_soat_golden_json_is_read_with_its_corpus():
    golden = load_golden(SOAT_GOLDEN)
    data = json.loads(SOAT_GOLDEN.read_text())
    assert len(golden.queries) == len(data["queries"])
    assert len(golden.corpus.documents) == len(data["corpus"]["documents"])
    assert len(golden.corpus.memories) == len(data["corpus"]["memories"])
    assert set(golden.slices) == {q["kind"] for q in data["queries"]}
    first = data["queries"][0]
    assert golden.queries[0].expected[0].key == first["expected"][0]["key"]
    assert golden.queries[0].expected[0].source_type == first["expected"][0]["source_type"]


@needs_soat_golden
def test_soat_golden_with_a_wrong_source_type_is_rejected(tmp_path):
    data = json.loads(SOAT_GOLDEN.read_text())
    data["queries"][2]["expected"][0]["source_type"] = "memory"
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"queries\[2\]\.expected\[0\].*is a document, not a memory"):
        load_golden(path)


@needs_soat_golden
def test_the_soat_golden_config_runs(tmp_path):
    config = SOAT_GOLDEN_CONFIG
    outcome = job.run(config, quiet=True, output_dir=tmp_path)
    inputs = job.load_inputs(config)
    data_values = json.loads((outcome.run_dir / "run.json").read_text())["data_values"]  # its floors and half-lives
    assert outcome.grid["setting_id"].n_unique() == len(grid(inputs.config.sweep, inputs.config.baseline, data_values))
    assert set(outcome.grid["slice"].unique()) == {"exact_token", "exact_name", "entity", "semantic", "overall"}


def test_grid_values_and_setting_ids():
    from rqsweep.config import KnobSpec

    assert knob_values("rrf_k", KnobSpec(low=1, high=100, num=5, log=True)) == [1, 3, 10, 32, 100]
    assert knob_values("min_similarity", KnobSpec(low=0.1, high=0.3, step=0.1, off=True)) == [None, 0.1, 0.2, 0.3]
    assert knob_values("recency_half_life_days", KnobSpec(values=(0.0, 7.0))) == [0.0, 7.0]
    for knobs in (Knobs(), Knobs(5, 0.35, 7.5), Knobs(200, 0.0, 0.0)):
        assert Knobs.from_id(knobs.id) == knobs
    # One id per setting: -0.0 and 0.0, 60 and 60.0 are the same knob values; "no floor" is always `moff`.
    assert Knobs(60.0, -0.0, -0.0).id == Knobs(60, 0.0, 0.0).id == "k60_m0.0_h0.0"
    assert Knobs(min_similarity=None).id == "k60_moff_h0.0" != Knobs(min_similarity=0.0).id
    with pytest.raises(ValueError, match="not a setting id"):
        Knobs.from_id("k60_m0.1")


def test_include_off_with_values_adds_the_off_value_to_the_list(tmp_path):
    sweep = {"strategy": "grid", "knobs": {"min_similarity": {"values": [0.2, 0.4], "include_off": True},
                                           "recency_half_life_days": {"values": [0, 7], "include_off": True}}}
    config = load_config(write_job(tmp_path, sweep=sweep), BACKENDS)
    assert config.sweep.knobs["min_similarity"].values == (None, 0.2, 0.4)
    assert config.sweep.knobs["recency_half_life_days"].values == (0.0, 7.0)  # off already listed: once
    assert len(grid(config.sweep, config.baseline)) == 6
    err = error_of(write_job(tmp_path, sweep={"strategy": "grid", "knobs": {
        "rrf_k": {"values": [5, 60], "include_off": True}}}))
    assert err.where == "sweep.knobs.rrf_k.include_off" and "rrf_k cannot be switched off" in err.problem


def test_the_handbook_config_and_data_are_valid():
    root = Path(__file__).resolve().parents[1]
    inputs = job.load_inputs(root / "configs" / "handbook.yaml")
    golden = inputs.golden
    assert len(golden.queries) >= 60 and len(golden.slices) >= 5
    corpus = load_corpus(inputs.config.corpus)
    assert len(corpus.documents) >= 30 and len(corpus.memories) >= 15
    assert math.prod(spec.size() for spec in inputs.config.sweep.knobs.values()) >= 1000


@pytest.mark.skipif(__import__("importlib.util").util.find_spec("torch") is not None,
                    reason="torch is installed here, so the gp sampler is available")
def test_gp_sampler_without_torch_is_a_clear_config_error(tmp_path):
    sweep = {"strategy": "optimize", "knobs": {"rrf_k": {"low": 1, "high": 10}},
             "optimize": {"sampler": "gp", "n_trials": 5}}
    err = error_of(write_job(tmp_path, sweep=sweep))
    assert err.where == "sweep.optimize.sampler" and "needs torch" in err.problem


def test_shipped_sweeps_resolve_from_any_folder_and_a_sweeps_folder_beside_the_config_wins(tmp_path, capsys):
    from rqsweep.cli import main
    from rqsweep.config import SHIPPED_SWEEPS
    from tests.minijob import write_job

    config = write_job(tmp_path / "team-repo", sweep="rrf-k-only")
    assert load_config(config, BACKENDS).sweep.knobs["rrf_k"].high == 200  # the shipped file, outside this repository
    assert main(["sweeps"]) == 0
    listed = capsys.readouterr().out
    assert {line.split()[0] for line in listed.splitlines()} == {p.stem for p in SHIPPED_SWEEPS.glob("*.yaml")}
    assert "rrf-k-only     rrf_k alone, 1..200.  (shipped)" in listed
    (tmp_path / "team-repo" / "sweeps").mkdir()
    (tmp_path / "team-repo" / "sweeps" / "rrf-k-only.yaml").write_text(
        "description: ours\nstrategy: grid\nknobs:\n  rrf_k: {values: [1, 60]}\n")
    assert load_config(config, BACKENDS).sweep.knobs["rrf_k"].values == (1, 60)
    assert main(["sweeps", str(config)]) == 0
    assert f"rrf-k-only     ours  ({tmp_path / 'team-repo' / 'sweeps' / 'rrf-k-only.yaml'})" in capsys.readouterr().out


ROOT = Path(__file__).resolve().parents[1]


def test_the_top_level_sweeps_are_the_shipped_ones_in_a_checkout_and_in_a_built_wheel(tmp_path):
    import tomllib
    import zipfile

    from rqsweep.config import SHIPPED_SWEEPS

    top_level = sorted(p.name for p in (ROOT / "sweeps").glob("*.yaml"))
    assert SHIPPED_SWEEPS == ROOT / "sweeps" and top_level  # an editable install reads the checkout's sweeps/
    # pyproject lists the packages (so that sweeps/ maps into the wheel): none may be left out.
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "rqsweep").rglob("__init__.py")}
    assert set(listed) == folders | {"rqsweep.sweeps"}
    source = tmp_path / "source"  # a copy: building writes build/ and egg-info beside the sources
    for part in ("rqsweep", "sweeps"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(tmp_path), str(source)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("rqsweep-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted(n.split("/")[-1] for n in names if n.startswith("rqsweep/sweeps/")) == top_level
    assert {".".join(n.split("/")[:-1]) for n in names if n.endswith("/__init__.py")} == folders
    assert "rqsweep/engine/embed/data/bert-base-uncased-vocab.txt" in names  # the onnx embedder's tokenizer
