"""`--dry-run`: a run's inputs validated, and what the run would do said, without any search."""

from __future__ import annotations

import math
from pathlib import Path

from rqsweep.backends import BACKENDS
from rqsweep.inputs import load_inputs, with_study
from rqsweep.progress import Progress
from rqsweep.scrub import redact_url
from rqsweep.search.space import describe, grid


def dry_run(config_path: Path, *, n_trials: int | None = None, storage: str | None = None) -> str:
    """Validate the config and golden set (and the command line's `--n-trials` and `--storage`) and say what a
    run would do, without making any search."""
    inputs = with_study(load_inputs(config_path, Progress(0, "dry run").log), n_trials, storage)
    config, golden = inputs.config, inputs.golden
    sweep = config.sweep
    if sweep.data_knobs():  # their values are known once the run has its candidates: count at most one per quantile
        known = grid(sweep, config.baseline, {k: [] for k in sweep.data_knobs()})  # the values known already
        n = math.prod(spec.size() for spec in sweep.knobs.values()) + (config.baseline not in known)
    elif sweep.strategy == "grid":
        settings = grid(sweep, config.baseline)
        n = len(settings) + (config.baseline not in settings)
    else:
        n = sweep.n_trials + 1
    corpus = inputs.corpus
    embedders = getattr(config.backend, "embedders", ())
    lines = [
        f"config {config.path} ({config.name}): valid",
        f"golden set {golden.path} ({golden.layout}): {len(golden.queries)} queries in {len(golden.slices)} slices "
        f"({', '.join(golden.slices)})",
        f"corpus: {len(corpus.documents)} documents, {len(corpus.memories)} memories",
        f"metrics: {', '.join(inputs.metrics)}",
        *([f"embedders: {', '.join(f'{label} ({e.kind}' + (f' {e.model})' if e.model else ')') for label, e in embedders)}"
           + (" (one run each)" if len(embedders) > 1 else "")] if embedders else []),
        f"strategy {sweep.strategy} ({sweep.source}): at most {n} settings, the baseline included",
        *(f"data-derived values: {line}" for line in describe(sweep)),
        *([f"storage: {redact_url(sweep.storage) if sweep.storage else 'a journal file in the run folder'}"]
          if sweep.strategy == "optimize" else []),
        f"inputs sha256: {inputs.sha256} (config, sweep, corpus and golden set: run.json's inputs_sha256)",
        f"run folders: {config.output_dir / config.name}",
        f"(setting x query) evaluations: {n * len(golden.queries) * max(1, len(embedders))}; {BACKENDS[config.backend.kind].searches}",
    ]
    if embedders:  # each embedder's phase, after the line naming them
        at = next(i for i, line in enumerate(lines) if line.startswith("embedders: ")) + 1
        lines[at:at] = _estimates(config, corpus, [q.query for q in golden.queries])
    if config.ranked == "all":
        lines.append(f"ranked: all: at most {n * len(golden.queries)} more searches after the sweep, for ranked.parquet")
    lines += [f"warning: {w}" for w in golden.warnings]
    return "\n".join(lines)



def _estimates(config, corpus, queries: list[str]) -> list[str]:
    """Each embedder's embedding phase, measured on a sample (a provider's untimed: a dry run calls no provider)."""
    from rqsweep.backends.embed_estimate import embedding_processes, estimate
    from rqsweep.backends.embedded import EMBEDDERS, MODEL_KINDS

    embedders = config.backend.embedders
    lines = []
    for label, e in embedders:
        spread = e.kind in MODEL_KINDS or config.workers.corpus_shards  # what a run embeds over its workers
        made = estimate(config.backend.only(label), corpus, queries, EMBEDDERS[e.kind](e, lambda _: None),
                        embedding_processes(config.workers) if spread else 1, timed=e.kind not in ("openai", "ollama"))
        lines.append(made.line() if len(embedders) == 1 else f"{label}: {made.line()}")
    return lines
