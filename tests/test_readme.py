"""The README lands and links every docs page; the snippets it and the docs show run verbatim (the SQL and Python of
docs/run-folder.md against real finished runs, the README's "bring your own data" in an empty folder), so they stay
true."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest

from rqsweep import job
from tests.minijob import QUERIES, write_job

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RUN_FOLDER = ROOT / "docs" / "run-folder.md"  # "Reading the grid": the SQL and polars recipes
SNIPPETS = re.findall(r"```(sql|python)\n(.*?)```", RUN_FOLDER.read_text(), re.S)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A folder holding results/handbook/ with two finished runs, as a project folder would after two runs."""
    folder = tmp_path_factory.mktemp("project")
    config = write_job(folder / "configs", name="handbook", output_dir="../results")
    for hour in (1, 2):
        job.run(config, quiet=True, now=datetime(2026, 1, 1, hour, tzinfo=timezone.utc))
    return folder


def test_the_run_folder_page_has_sql_and_python_snippets():
    assert {lang for lang, _ in SNIPPETS} == {"sql", "python"}


@pytest.mark.parametrize("lang, code", SNIPPETS, ids=[f"{lang}-{i}" for i, (lang, _) in enumerate(SNIPPETS)])
def test_run_folder_snippet_runs_verbatim(project, monkeypatch, lang, code):
    monkeypatch.chdir(project)
    if lang == "python":
        exec(compile(code, str(RUN_FOLDER), "exec"), {})
        return
    result = duckdb.sql(code)
    rows = result.fetchall()
    assert rows
    if "worst_change" in result.columns:  # settings.parquet: the filter's rows, by gain
        changes = [row[result.columns.index("objective_change")] for row in rows]
        assert all(row[result.columns.index("worst_change")] >= -0.05 for row in rows)
        assert changes == sorted(changes, reverse=True)
    elif "run_id" in result.columns:  # grouped by run: one row each
        assert len(rows) == 2
    else:  # one run's best setting: one row per slice, overall included
        assert len(rows) == len({s for _, s, _, _ in QUERIES}) + 1


def test_the_bring_your_own_data_section_runs_verbatim(tmp_path):
    """A folder of pages and a CSV, zero glue: the section's shell block run as it stands in an empty folder."""
    import os
    import subprocess
    import sys

    section = README.read_text().split("## Bring your own data", 1)[1].split("\n## ", 1)[0]
    (script,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    # What the section says of it: six queries make no gain significant, so the verdict keeps the baseline; the
    # best feasible setting in sample is the half-life, which lifts the freshness query's MRR from 0.5 to 1.
    assert done.stdout.startswith("Verdict: keep the baseline rrf_k=60 min_similarity=off half_life=0d: ")
    assert "Best feasible setting, in sample:" in done.stdout
    (freshness,) = [line for line in done.stdout.splitlines() if line.startswith("freshness")]
    assert freshness.endswith("0.5000 -> 1.0000")
    run_dir = next((tmp_path / "results" / "byo").iterdir())
    # Its config names no embedder: the default, all-MiniLM-L6-v2 on onnxruntime, ranked (not SOAT's eval stand-in).
    assert json.loads((run_dir / "run.json").read_text())["server_profile"]["embedder"].startswith(
        "onnx/onnxruntime-")
    assert (run_dir / "qrels.txt").read_text().splitlines()[0] == "doc-1 0 it/vpn.md 1"
    assert len(list(run_dir.glob("*.run"))) == 1


def test_the_start_without_a_golden_set_page_runs_verbatim(tmp_path):
    """docs/start-without-a-golden-set.md: its shell blocks, in order, in an empty folder: the draft (the output it
    quotes), a person's edit, the run and the checks (the leak it plants flagged, the slice no setting moves named)."""
    import os
    import subprocess
    import sys

    page = (ROOT / "docs" / "start-without-a-golden-set.md").read_text()
    script = "".join(re.findall(r"```sh\n(.*?)```", page, re.S))
    (quoted,) = re.findall(r"```text\n(.*?)```", page, re.S)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(quoted)
    assert "Verdict: keep the baseline rrf_k=60 min_similarity=off half_life=0d: " in done.stdout
    leak = "| semantic | mine-003 | expenses under 500 EUR need no approval | expenses.md | a run of 7 of its 7 tokens"
    assert leak in re.sub(r" +\|", " |", re.sub(r"\| +", "| ", done.stdout))
    assert "No setting moves exact_token: " in done.stdout


def test_the_readme_is_a_landing_page_under_12_kb():
    assert len(README.read_bytes()) < 12_000


def test_the_readme_links_every_docs_page_and_every_link_resolves():
    """A newcomer reaches every page from the README, and no link of it leads nowhere."""
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    assert sorted({p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")} - set(targets)) == []
    assert [t for t in targets if not (ROOT / t).is_file()] == []


def test_the_readme_gives_the_two_fresh_machine_commands():
    quick_start = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", quick_start, re.S)
    assert blocks == ["make setup && .venv/bin/rqsweep configs/handbook.yaml\n", "make test\n"]
