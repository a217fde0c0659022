"""Optimise benchmark: the best feasible objective against the number of distinct settings evaluated.

    .venv/bin/python benchmarks/optimise.py                 # the handbook, seeds 1-3, 300 settings
    .venv/bin/python benchmarks/optimise.py --seeds 5 --budget 300

For each config (configs/handbook-stand-in.yaml, the handbook under the eval stand-in embedder;
configs/soat-golden.yaml when SOAT's golden set is present) the config's grid
(sweeps/handbook-grid.yaml) is the reference. Its space is searched four ways: the grid in its
order, random proposals, TPE, and TPE warm-started from a coarse grid; and the shipped optimise sweep
(sweeps/optimize-tpe.yaml, its own continuous space) runs as shipped but for its seed and budget.
Each method runs through the real job (`rqsweep.sweep.Sweep` on the embedded backend), so the curve counts
what a run counts: distinct settings, repeats free.

Cost: the CPU seconds of each search (the run's end, which scores every part and writes Parquet, left
out), and for the shipped sweep Optuna's floor: the same sampler, storage and trial attributes with a
no-op objective (the run's own values looked up, so the floor proposes exactly what the run did).
Writes benchmarks/optimise.json (every curve) and benchmarks/optimise.png, and prints the tables for
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rqsweep.backends import BACKENDS, build_backend  # noqa: E402
from rqsweep.config import _sweep, load_config  # noqa: E402
from rqsweep.golden import OVERALL  # noqa: E402
from rqsweep.inputs import load_inputs  # noqa: E402
from rqsweep.sweep import Sweep  # noqa: E402
from rqsweep.progress import Progress  # noqa: E402
from rqsweep.search.strategy import StudyIdentity, run_optimize  # noqa: E402
from rqsweep.search.study import StudyStorage  # noqa: E402

METHODS = {"random": ("random", 0), "tpe": ("tpe", 0), "tpe + warm start": ("tpe", 32)}
SHIPPED = "optimize-tpe"


def curve(grid: pl.DataFrame, objective: str, budget: int) -> list[float]:
    """Best feasible objective after each distinct setting (the baseline is setting 0), up to `budget`."""
    rows = grid.filter(pl.col("slice") == OVERALL).sort("evaluation_order")
    values = np.where(rows["feasible"].to_numpy(), rows[objective].to_numpy(), -np.inf)[: budget + 1]
    best = np.maximum.accumulate(values)
    return [float(v) for v in np.pad(best, (0, budget + 1 - len(best)), mode="edge")]


def run(sweep_inputs, backend, folder: Path) -> tuple[pl.DataFrame, Sweep, float]:
    """The run's grid, its `Sweep`, and the CPU seconds of its search."""
    sweep = Sweep(sweep_inputs, backend, folder, folder.name, Progress(0, "bench", quiet=True))
    started = time.process_time()
    sweep.run()
    cpu = time.process_time() - started
    return sweep.finish({}).grid, sweep, cpu


def with_sweep(inputs, **changes):
    sweep = dataclasses.replace(inputs.config.sweep, **changes)
    return dataclasses.replace(inputs, config=dataclasses.replace(inputs.config, sweep=sweep))


def trials_of(searched: Sweep) -> list:
    storage = StudyStorage(None, searched.state.folder).optuna
    return storage.get_all_trials(storage.get_all_studies()[0]._study_id)


def floor(searched: Sweep, folder: Path) -> tuple[float, int]:
    """Optuna's floor for a finished search: the same sweep, sampler, storage and attributes, each value looked up
    instead of evaluated. Returns its CPU seconds and its trial count."""
    config = searched.config
    values = {t.user_attrs["setting_id"]: (t.value, list(t.constraints.items())) for t in trials_of(searched)}
    values[searched.baseline_id] = searched.score([config.baseline])[0]
    identity = StudyIdentity("floor", "objective", {})
    started = time.process_time()
    found = run_optimize(config.sweep, config.baseline, lambda settings: [values[s.id] for s in settings],
                         StudyStorage(None, folder), identity, lambda _: None, lambda _: None)
    return time.process_time() - started, len(found.trials)


def bench(config: Path, seeds: int, budget: int) -> dict:
    inputs = load_inputs(config)
    objective = inputs.config.objective.metric
    backend = build_backend(inputs.config, inputs.golden, inputs.corpus, workers=1, log=lambda _: None,
                            run_dir=Path(tempfile.mkdtemp()))
    out: dict = {"config": str(config.relative_to(ROOT)), "budget": budget, "curves": {}, "cost": {}}
    with tempfile.TemporaryDirectory() as tmp:
        grid, _, cpu = run(inputs, backend, Path(tmp) / "grid")
        out["grid_settings"] = grid["setting_id"].n_unique()
        out["grid_best"] = curve(grid, objective, out["grid_settings"])[-1]
        out["curves"]["grid order"] = [curve(grid, objective, budget)]
        out["cost"]["grid"] = {"cpu": [cpu], "settings": [out["grid_settings"]], "trials": [out["grid_settings"]]}
        shipped = _sweep(SHIPPED, config)
        methods = {m: {"sampler": sampler, "warm_start": warm, "strategy": "optimize"}
                   for m, (sampler, warm) in METHODS.items()}
        methods[f"{SHIPPED} (shipped)"] = {f.name: getattr(shipped, f.name) for f in dataclasses.fields(shipped)
                                            if f.name not in ("n_trials", "seed")}
        for method, changes in methods.items():
            out["curves"][method] = []
            cost = out["cost"][method] = {"cpu": [], "settings": [], "trials": [], "floor_cpu": [], "floor_trials": []}
            for seed in range(1, seeds + 1):
                folder = Path(tmp) / f"{method}-{seed}".replace(" ", "")
                found, searched, cpu = run(with_sweep(inputs, n_trials=budget, seed=seed, **changes), backend, folder)
                out["curves"][method].append(curve(found, objective, budget))
                trials = len(trials_of(searched))
                cost["cpu"].append(cpu)
                cost["settings"].append(found["setting_id"].n_unique() - 1)
                cost["trials"].append(trials)
                if method.endswith("(shipped)"):
                    floor_cpu, floor_trials = floor(searched, folder / "floor")
                    cost["floor_cpu"].append(floor_cpu)
                    cost["floor_trials"].append(floor_trials)
                print(f"{config.stem} {method} seed {seed}: {out['curves'][method][-1][-1]:.4f}, {trials} trials, "
                      f"{cpu:.1f} CPU s", file=sys.stderr)
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
    shipped = f"{SHIPPED} (shipped)"
    cost = result["cost"][shipped]
    lines += ["", f"{shipped}, seed by seed:", "", f"| seed | best feasible at {result['budget']} | settings to reach "
              "the grid's best | trials (repeats) | search CPU s | Optuna's floor CPU s |",
              "| --- | --- | --- | --- | --- | --- |"]
    for seed, (c, trials, cpu, floor_cpu, floor_trials, settings) in enumerate(zip(
            result["curves"][shipped], cost["trials"], cost["cpu"], cost["floor_cpu"], cost["floor_trials"],
            cost["settings"]), 1):
        reach = settings_to_reach(c, target)
        lines.append(f"| {seed} | {c[-1]:.4f} | {'-' if reach is None else reach} | {trials} ({trials - settings}) "
                     f"| {cpu:.1f} | {floor_cpu:.1f} ({floor_trials} trials) |")
    lines += ["", "| search | distinct settings | CPU s (median) | distinct settings per CPU-second |",
              "| --- | --- | --- | --- |"]
    rows = [("the grid", result["cost"]["grid"]["settings"], result["cost"]["grid"]["cpu"]),
            *((method, c["settings"], c["cpu"]) for method, c in result["cost"].items() if method != "grid"),
            (f"Optuna's floor for {shipped}", cost["settings"], cost["floor_cpu"])]
    for name, settings, cpu in rows:
        lines.append(f"| {name} | {int(np.median(settings))} | {np.median(cpu):.2f} | "
                     f"{np.median(np.array(settings) / np.array(cpu)):.1f} |")
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
        high = max(result["grid_best"], *(max(c) for curves in result["curves"].values() for c in curves))
        ax.set_ylim(low - 0.01, high + 0.01)
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
    if (soat.parent / load_config(soat, BACKENDS).golden).exists():
        configs.append(soat)
    else:
        print("SOAT's golden set is absent: configs/soat-golden.yaml skipped", file=sys.stderr)
    results = [bench(c, args.seeds, args.budget) for c in configs]
    (ROOT / "benchmarks" / "optimise.json").write_text(json.dumps(results))
    plot(results, ROOT / "benchmarks" / "optimise.png")
    print("\n\n".join(table(r) for r in results))


if __name__ == "__main__":
    main()
