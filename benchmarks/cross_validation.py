"""Cross-validation benchmark: k-fold CV of the chosen setting over a finished run's per-query table.

    .venv/bin/python benchmarks/cross_validation.py              # runs the handbook sweep first (1,980 x 165)
    .venv/bin/python benchmarks/cross_validation.py RUN_DIR      # an existing run folder

Times `rqsweep.validation.cross_validate` alone (the per-query table already in memory; median of 7),
then the report's whole held-out step (reading queries.parquet included), and prints the figures.
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
from rqsweep.config import read_validation  # noqa: E402
from rqsweep.report.held_out import run_cross_validation  # noqa: E402
from rqsweep.report.tables import metric_label  # noqa: E402
from rqsweep.run_folder import read_run_folder  # noqa: E402
from rqsweep.validation import cross_validate, summary_lines  # noqa: E402


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
        run_dir = args.run_dir or job.run(ROOT / "configs" / "handbook.yaml", quiet=True,
                                          output_dir=Path(scratch)).run_dir
        run = read_run_folder(run_dir)
        order = run.overall()["setting_id"].to_list()
        rows = run.queries(order)
        settings = read_validation(run.config.get("validation"), run_dir)

        def validate():
            return cross_validate(rows, order, run.baseline, run.objective, run.constraints, run.slices[:-1],
                                  run.metrics, settings)

        cv = validate()
        print(f"{run_dir}: {len(order):,} settings x {rows['query_id'].n_unique()} queries, "
              f"{settings.folds} folds (seed {settings.seed})")
        print(f"cross_validate (table in memory), median of 7: {median_seconds(validate):.3f} s")
        print(f"report's held-out step (reads queries.parquet), median of 7: "
              f"{median_seconds(lambda: run_cross_validation(read_run_folder(run_dir))):.3f} s")
        print("\n".join(summary_lines(cv, metric_label(run.objective[0]))))


if __name__ == "__main__":
    main()
