"""A small job on disk (corpus, golden set, sweep, config) for end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import yaml

DOCUMENTS = [
    ("doc-vpn", "/it/vpn.md", "VPN access: connect to vpn.example.net with the corporate client. "
                               "Error VPN-4012 means your certificate expired; renew it in the portal."),
    ("doc-oncall", "/ops/oncall.md", "The on-call engineer carries the pager for one week. Handover is on "
                                     "Monday at 10:00. Escalate SEV-1 incidents to the incident commander."),
    ("doc-backup", "/ops/backup.md", "Backups run nightly at 02:00 UTC. Restores are tested monthly. "
                                     "The backup bucket is s3://backups-example. " * 3),
    ("doc-expenses", "/people/expenses.md", "Expenses under 500 EUR need no approval. Standing desks are "
                                           "reimbursed once every three years."),
    ("doc-laptop", "/it/laptops.md", "Laptops are refreshed every three years. Request a new laptop via "
                                     "the IT portal; the pager app must be reinstalled."),
]
MEMORIES = [
    ("mem-pager-old", "The on-call pager number is +1 555 0100.", 400.0),
    ("mem-pager-new", "The on-call pager number is now +1 555 0199.", 3.0),
    ("mem-vpn-host", "The VPN gateway moved to vpn2.example.net.", 10.0),
    ("mem-cfo", "The CFO approves expenses above 5000 EUR.", 700.0),
]
QUERIES = [
    ("d1", "document", "vpn certificate expired", "doc-vpn"),
    ("d2", "document", "when is the on-call handover", "doc-oncall"),
    ("d3", "document", "backups", "doc-backup"),
    ("d4", "document", "standing desk", "doc-expenses"),
    ("t1", "exact_token", "VPN-4012", "doc-vpn"),
    ("t2", "exact_token", "SEV-1", "doc-oncall"),
    ("f1", "freshness", "pager number", "mem-pager-new"),
    ("f2", "freshness", "vpn gateway", "mem-vpn-host"),
    ("e1", "entity", "CFO", "mem-cfo"),
    ("e2", "entity", "who approves big expenses", "mem-cfo"),
]

# Entity questions the recency blend leaves alone (their answers are documents): with them, the blend's lift of
# freshness costs entity a fifth of its MRR rather than most of it, so bounds of 0.1 and 0.2 choose differently.
STEADY_ENTITY_QUERIES = [
    ("e3", "entity", "standing desks", "doc-expenses"),
    ("e4", "entity", "laptop refresh", "doc-laptop"),
    ("e5", "entity", "backup bucket", "doc-backup"),
    ("e6", "entity", "incident commander", "doc-oncall"),
    ("e7", "entity", "corporate client", "doc-vpn"),
    ("e8", "entity", "IT portal laptop", "doc-laptop"),
    ("e9", "entity", "restores tested monthly", "doc-backup"),
    ("e10", "entity", "pager app", "doc-laptop"),
]


def write_job(folder: Path, sweep: dict | str | None = None, *, extra_queries=(), **overrides) -> Path:
    """Write corpus.yaml, golden.yaml and job.yaml under `folder`; returns the config path."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus = {
        "documents": [{"key": k, "path": p, "content": c} for k, p, c in DOCUMENTS],
        "memories": [{"key": k, "content": c, "age_days": a, "store": "facts"} for k, c, a in MEMORIES],
    }
    (folder / "corpus.yaml").write_text(yaml.safe_dump(corpus, sort_keys=False))
    golden = [{"id": i, "slice": s, "query": q, "expected": e} for i, s, q, e in [*QUERIES, *extra_queries]]
    (folder / "golden.yaml").write_text(yaml.safe_dump(golden, sort_keys=False))
    config = {
        "name": "mini",
        "corpus": "corpus.yaml",
        "golden": "golden.yaml",
        "backend": {"kind": "embedded", "embedder": {"kind": "feature-hash", "dimensions": 256},
                    "chunking": {"strategy": "size", "chunk_size": 120, "chunk_overlap": 20}},
        "sweep": sweep or {"strategy": "grid", "knobs": {
            "rrf_k": {"values": [1, 5, 60]},
            "min_similarity": {"include_off": True, "low": 0.1, "high": 0.3, "step": 0.1},
            "recency_half_life_days": {"values": [0, 1, 30, 365]},
        }},
        "constraints": [{"metric": "recall_at_10", "slice": "*", "max_drop": 0.25}],
        "workers": 1,
        "output_dir": "results",
    }
    config.update(overrides)
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_study(run_dir: Path):
    """The Optuna study of an optimise run, read from its run folder's journal as optuna-dashboard would."""
    import json

    import optuna

    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(
        str(run_dir / "state" / "optuna.journal")))
    info = json.loads((run_dir / "run.json").read_text())
    return optuna.load_study(study_name=f"{info['name']}/{info['run_id']}", storage=storage)
