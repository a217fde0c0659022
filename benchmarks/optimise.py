"""Optimise benchmark: the best feasible objective against the number of distinct settings evaluated.

    .venv/bin/python benchmarks/optimise.py                 # the handbook, seeds 1-3, 300 settings
    .venv/bin/python benchmarks/optimise.py --seeds 5 --budget 300

For each config (configs/handbook-stand-in.yaml, the handbook under the eval stand-in embedder;
configs/soat-golden.yaml when SOAT's golden set is present) the space is the config's grid
(rqsweep/sweeps/handbook-grid.yaml) searched four ways: the grid in its order, random proposals, TPE, and
TPE warm-started from a coarse grid. Each method runs through the real job
(`rqsweep.job.Sweep` on the embedded backend), so the curve counts what a run counts: distinct
settings, repeats free. Writes benchmarks/optimise.json (every curve) and benchmarks/optimise.png, and
prints the table for benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rqsweep.backends import build_backend  # noqa: E402
from rqsweep.golden import OVERALL  # noqa: E402
from rqsweep.inputs import load_inputs  # noqa: E402
from rqsweep.job import Sweep  # noqa: E402
from rqsweep.progress import Progress  # noqa: E402

METHODS = {"random": ("random", 0), "tpe": ("tpe", 0), "tpe + warm start": ("tpe", 32)}


def curve(grid: pl.DataFrame, objective: str, budget: int) -> list[float]:
    """Best feasible objective after each distinct setting (the baseline is setting 0), up to `budget`."""
    rows = grid.filter(pl.col("slice") == OVERALL).sort("evaluation_order")
    values = np.where(rows["feasible"].to_numpy(), rows[objective].to_numpy(), -np.inf)[: budget + 1]
    best = np.maximum.accumulate(values)
    return [float(v) for v in np.pad(best, (0, budget + 1 - len(best)), mode="edge")]


def run(sweep_inputs, backend, folder: Path) -> pl.DataFrame:
    sweep = Sweep(sweep_inputs, backend, folder, folder.name, Progress(0, "bench", quiet=True))
    sweep.run()
    return sweep.finish().grid


def bench(config: Path, seeds: int, budget: int) -> dict:
    inputs = load_inputs(config)
    objective = inputs.config.objective.metric
    backend = build_backend(inputs.config, inputs.golden, inputs.corpus, workers=1, log=lambda _: None,
                            run_dir=Path(tempfile.mkdtemp()))
    out: dict = {"config": str(config.relative_to(ROOT)), "budget": budget, "curves": {}}
    with tempfile.TemporaryDirectory() as tmp:
        grid = run(inputs, backend, Path(tmp) / "grid")
        out["grid_settings"] = grid["setting_id"].n_unique()
        out["grid_best"] = curve(grid, objective, out["grid_settings"])[-1]
        out["curves"]["grid order"] = [curve(grid, objective, budget)]
        for method, (sampler, warm) in METHODS.items():
            out["curves"][method] = []
            for seed in range(1, seeds + 1):
                sweep = dataclasses.replace(inputs.config.sweep, strategy="optimize", sampler=sampler,
                                            n_trials=budget, seed=seed, warm_start=warm)
                trial_inputs = dataclasses.replace(inputs, config=dataclasses.replace(inputs.config, sweep=sweep))
                found = run(trial_inputs, backend, Path(tmp) / f"{method}-{seed}".replace(" ", ""))
                out["curves"][method].append(curve(found, objective, budget))
                print(f"{config.stem} {method} seed {seed}: {out['curves'][method][-1][-1]:.4f}", file=sys.stderr)
    backend.close()
    return out


def settings_to_reach(best: list[float], target: float) -> int | None:
    return next((n for n, v in enumerate(best) if v >= target - 1e-12), None)


def table(result: dict) -> str:
    target = result["grid_best"]
    lines = [f"{result['config']}: the grid's {result['grid_settings']} settings find {target:.4f}",
             "", "| method | best feasible at 50 / 100 / 300 settings (mean over seeds) | runs reaching the grid's "
             f"best within {result['budget']} | settings to reach it (median) |", "| --- | --- | --- | --- |"]
    for method, curves in result["curves"].items():
        at = [np.mean([c[min(n, len(c) - 1)] for c in curves]) for n in (50, 100, result["budget"])]
        reach = [settings_to_reach(c, target) for c in curves]
        hits = [r for r in reach if r is not None]
        median = f"{int(np.median(hits))}" if hits else "-"
        lines.append(f"| {method} | {' / '.join(f'{v:.4f}' for v in at)} | {len(hits)} of {len(curves)} | {median} |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5 * len(results), 4.2))
    for ax, result in zip(fig.subplots(1, len(results), squeeze=False)[0], results):
        for method, curves in result["curves"].items():
            arr = np.array(curves)
            x = np.arange(arr.shape[1])
            line, = ax.plot(x, arr.mean(axis=0), label=method)
            ax.fill_between(x, arr.min(axis=0), arr.max(axis=0), color=line.get_color(), alpha=0.15)
        ax.axhline(result["grid_best"], color="black", linestyle=":", label=f"dense grid best ({result['grid_best']:.4f})")
        low = min(min(c[1:]) for curves in result["curves"].values() for c in curves if np.isfinite(min(c[1:])))
        ax.set_ylim(low - 0.01, result["grid_best"] + 0.01)
        ax.set_xlabel("distinct settings evaluated")
        ax.set_ylabel("best feasible objective (mean, min-max band over seeds)")
        ax.set_title(result["config"])
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--budget", type=int, default=300)
    args = p.parse_args()
    configs = [ROOT / "configs" / "handbook-stand-in.yaml"]
    soat = ROOT / "configs" / "soat-golden.yaml"
    if (soat.parent / load_inputs.__globals__["load_config"](soat).golden).exists():
        configs.append(soat)
    else:
        print("SOAT's golden set is absent: configs/soat-golden.yaml skipped", file=sys.stderr)
    results = [bench(c, args.seeds, args.budget) for c in configs]
    (ROOT / "benchmarks" / "optimise.json").write_text(json.dumps(results))
    plot(results, ROOT / "benchmarks" / "optimise.png")
    print("\n\n".join(table(r) for r in results))


if __name__ == "__main__":
    main()
