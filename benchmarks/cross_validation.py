"""Cross-validation benchmark: k-fold CV of the chosen setting over a finished run's per-query table.

    .venv/bin/python benchmarks/cross_validation.py              # runs the handbook sweep first (1,980 x 165)
    .venv/bin/python benchmarks/cross_validation.py RUN_DIR      # an existing run folder

Times the held-out estimate as a run's end makes it (median of 7): the fold sums gathered a chunk of whole
settings at a time (each row group of queries.parquet, already in memory), then `cross_validate` (each
fold's choice, and the held-out scores of the few settings chosen). The report reads the result from
grid.parquet's metadata and computes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rqsweep import job  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from rqsweep.config import read_validation  # noqa: E402
from rqsweep.report.tables import metric_label  # noqa: E402
from rqsweep.runfolder import read_run_folder  # noqa: E402
from rqsweep.decide.cross_validation import FoldSums, cross_validate, summary_lines  # noqa: E402


def median_seconds(action, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", nargs="?", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = args.run_dir or job.run(ROOT / "configs" / "handbook-stand-in.yaml", quiet=True,
                                          output_dir=Path(scratch)).run_dir
        run = read_run_folder(run_dir)
        table = pq.ParquetFile(run_dir / "queries.parquet")
        chunks = [pl.from_arrow(table.read_row_group(g)) for g in range(table.num_row_groups)]
        rows = pl.concat(chunks)
        golden = rows.select("query_id", "slice").unique("query_id")
        settings = read_validation(run.config.get("validation"), run_dir)

        def validate():
            sums = FoldSums(golden, run.slices[:-1], run.metrics, settings, rows["setting_id"].n_unique())
            for chunk in chunks:
                sums.add(chunk)
            return cross_validate(sums, lambda ids: rows.filter(pl.col("setting_id").is_in(ids)), run.baseline,
                                  run.objective, run.constraints)

        cv = validate()
        print(f"{run_dir}: {rows['setting_id'].n_unique():,} settings x {golden.height} queries, "
              f"{settings.folds} folds (seed {settings.seed}), {len(chunks)} row group(s)")
        print(f"fold sums + cross_validate, median of 7: {median_seconds(validate):.3f} s")
        print("\n".join(summary_lines(cv, metric_label(run.objective[0]))))


if __name__ == "__main__":
    main()
