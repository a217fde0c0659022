"""The decision holds across C libraries: the local model under glibc's erff and under a correctly rounded one (what
newer C libraries ship), preloaded from a one-line library built here, gives the handbook the same verdict,
routing table and gate verdict, each machine's vectors in their own cache, and says the two ran on different math.
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
# The README quotes a run on this C library's math (Debian 12's glibc 2.36): there, its block is the run's own lines.
QUOTED_ON = "glibc-2.36-libm:79a3334d68dc"


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


def test_the_handbook_decides_the_same_under_both_erffs_and_its_gate_passes_across_them(preload, tmp_path):
    cache = tmp_path / "cache"
    config = tmp_path / "handbook.yaml"
    text = (ROOT / "configs" / "handbook.yaml").read_text()
    config.write_text(text.replace("corpus: handbook/", f"corpus: {ROOT}/configs/handbook/")
                      .replace("golden: handbook/", f"golden: {ROOT}/configs/handbook/")
                      .replace("cache_dir: ../.cache/embeddings", f"cache_dir: {cache}"))
    gate_file = tmp_path / "gate.json"

    def run(out: str, env: dict[str, str] | None, *gate: str) -> tuple[list[str], dict, str, Path]:
        done = subprocess.run([sys.executable, "-m", "rqsweep", str(config), "--quiet", "--output-dir",
                               str(tmp_path / out), "--gate-file", str(gate_file), *gate],
                              env=env, capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (run_dir,) = (tmp_path / out / "handbook").iterdir()
        return done.stdout.splitlines(), json.loads((run_dir / "run.json").read_text()), done.stdout, run_dir

    libc_lines, libc, _, libc_dir = run("libc", None, "--update-gate-file")
    swapped_lines, swapped, said, _ = run("swapped", preload)
    assert libc["server_profile"]["numerics"] != swapped["server_profile"]["numerics"]
    assert libc["server_profile"]["embedder"] == swapped["server_profile"]["embedder"]
    # The verdict and the routing table applied are the same; their figures may differ in the last places.
    for key in ("setting_id", "changed"):
        assert libc["decision"][key] == swapped["decision"][key]
    assert libc["decision"]["routes"] == swapped["decision"]["routes"]
    assert libc_lines[0].split(":")[0] == swapped_lines[0].split(":")[0]
    assert libc_lines[1].split(". Gain")[0] == swapped_lines[1].split(". Gain")[0]
    # The README's quoted block is this run's first lines: to the letter on the math it was quoted on, with the
    # figures of the last decimal places masked on any other (the swapped erff's verdict and routing lines too).
    block = quoted()
    if libc["server_profile"]["numerics"] == QUOTED_ON:
        assert libc_lines[: len(block)] == block
    assert [masked(line) for line in libc_lines[: len(block)]] == [masked(line) for line in block]
    assert [masked(line) for line in swapped_lines[:2]] == [masked(line) for line in block[:2]]
    # The gate written on one machine's math passes the other's, and says why it judged within the ranges.
    assert "ran the same model on different math" in said and "Gate passed" in said
    # The report counts the numerically sensitive cells of the whole sweep, as queries.parquet holds them.
    flagged = pl.scan_parquet(libc_dir / "queries.parquet").select(
        pl.col("numeric_sensitive").sum().alias("n"), pl.len().alias("all")).collect().row(0)
    assert f"{flagged[0]:,} of {flagged[1]:,} (setting, query) cells are numerically sensitive" in (
        libc_dir / "report.md").read_text() and flagged[0] > 0
    # The report's queries needed for semantic's MRR max_drop, recomputed from queries.parquet: the spread of the
    # per-query differences from the baseline over the settings that move the slice, then the paired t-test's
    # power equation solved for n.
    assert _queries_needed_row(libc_dir, "semantic", "max_drop of MRR") == _queries_needed_from_parquet(
        libc_dir, "semantic", libc["baseline"]["setting_id"], 0.10)
    # Each machine's vectors have their own cache files: one shared cache never mixes them.
    assert len(list(cache.glob("*.sqlite3"))) == 2


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
