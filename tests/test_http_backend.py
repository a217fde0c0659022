"""The HTTP backend against `rqsweep serve` over loopback: same grid as the embedded backend, both modes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from rqsweep import cli, job
from tests.http_support import EMBEDDED, PASSWORD, WIDE_SWEEP, comparable, http_backend, serving, write_config, \
    write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("http-corpus")
    write_corpus(folder)
    return folder


@pytest.fixture(autouse=True)
def password(monkeypatch):
    monkeypatch.setenv("SOAT_PASSWORD", PASSWORD)


def _run(config: Path, out: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The grid, the per-query positions and the stored ranked lists of a run, without run-specific columns."""
    outcome = job.run(config, quiet=True, output_dir=out)
    queries = pl.read_parquet(outcome.run_dir / "queries.parquet").drop("run_id", "embedder", "tie_sensitive",
                                                                                     "numeric_sensitive")
    hits = pl.read_parquet(outcome.run_dir / "hits.parquet").select("setting_id", "query_id", "position", "key")
    return comparable(outcome.grid).drop("golden_sha256"), queries, hits


@pytest.mark.parametrize("mode, sweep, extra", [("direct", None, {}), ("replay", None, {}),
                                                ("replay", WIDE_SWEEP, {"replay_limit": 30})])
def test_http_grid_equals_the_embedded_grid(corpus, tmp_path, mode, sweep, extra):
    embedded = write_config(corpus, f"embedded-{mode}", EMBEDDED, sweep)
    with serving(embedded) as server:
        http = write_config(corpus, f"http-{mode}", http_backend(server.url, mode=mode, verify=2) | extra, sweep)
        got, got_queries, got_hits = _run(http, tmp_path)
    want, want_queries, want_hits = _run(embedded, tmp_path)
    assert got["setting_id"].n_unique() == want["setting_id"].n_unique() >= 8
    assert got.equals(want)
    assert got["errors"].sum() == 0
    # Every expected item's position, per (setting, query), is the same whichever backend produced it.
    assert got_queries.equals(want_queries)
    assert got_queries["positions"].list.len().sum() >= got_queries.height
    # So are the ranked lists kept for the baseline and the chosen setting.
    assert got_hits.equals(want_hits) and got_hits.height > 0


def test_replay_searches_few_times_per_query_and_records_the_seed(corpus, tmp_path, capsys):
    embedded = write_config(corpus, "embedded-count", EMBEDDED, WIDE_SWEEP)
    with serving(embedded) as server:
        # At replay_limit 30 the memories' lists hide behind document chunks in most combined answers.
        http = write_config(corpus, "http-count", http_backend(server.url, mode="replay", replay_limit=30),
                            WIDE_SWEEP)
        outcome = job.run(http, quiet=False, output_dir=tmp_path)
        searches = server.searches
    log = capsys.readouterr().err
    queries = outcome.grid.filter(pl.col("slice") == "overall")["queries"][0]
    settings = outcome.grid["setting_id"].n_unique()
    replayed, single_store, rescued, fallback = map(int, re.search(
        r"replay: (\d+) of \d+ queries .* and (\d+) single-store searches, which proved (\d+); (\d+) searched", log
    ).groups())
    # The probe (before seeding: it finds nothing), one per seeded item (8 documents, 12 memories: the seed's
    # check that the vector channel finds each), one search after seeding to see the results' fields, one per
    # query, the single-store ones, direct searches for what is still unproven, and the ranked lists
    # hits.parquet keeps: one search per query for the baseline and for the chosen setting.
    ranked = queries * len({outcome.baseline, outcome.best or outcome.baseline})
    assert searches == 2 + 8 + 12 + queries + single_store + fallback * settings + ranked
    # Without single-store searches, the `rescued` queries would be searched directly for every setting too.
    assert rescued >= 10 and replayed == queries and fallback == 0
    seed = (outcome.run_dir / "seed.json").read_text()
    assert '"doc-oncall-rotation"' in seed and '"project_id": "proj_' in seed
    assert "seed: 8 documents, 3 memory stores, 12 memories (0 not created)" in log
    assert f"http-count replay searches: {queries}/{queries} queries" in log  # the fetch shows its progress


def test_serve_and_seeding_with_the_local_embedder_give_the_embedded_grid(corpus, tmp_path):
    # The server embeds what the seeding sends with the same local model: both runs rank alike.
    local = EMBEDDED | {"embedder": {"kind": "local", "model": "multilingual-e5-small"}}
    embedded = write_config(corpus, "embedded-local", local)
    with serving(embedded) as server:
        http = write_config(corpus, "http-local", http_backend(server.url, mode="direct"))
        got, got_queries, got_hits = _run(http, tmp_path)
    want, want_queries, want_hits = _run(embedded, tmp_path)
    assert got.equals(want) and got["errors"].sum() == 0
    assert got_queries.equals(want_queries) and got_hits.equals(want_hits)


def test_the_gate_tells_two_deployments_apart_by_their_embedder(corpus, tmp_path, capsys):
    """SOAT names no model: the profile records what its embeddings route makes of a fixed text."""
    run_dirs = []
    for name, embedder in (("wide", {}), ("narrow", {"embedder": {"kind": "feature-hash", "dimensions": 512}})):
        with serving(write_config(corpus, f"serve-{name}", EMBEDDED | embedder)) as server:
            config = write_config(corpus, f"http-{name}", http_backend(server.url))
            run_dirs.append(job.run(config, quiet=True, output_dir=tmp_path).run_dir)
    wide, narrow = (json.loads((d / "run.json").read_text())["server_profile"]["embedder"] for d in run_dirs)
    assert re.fullmatch(r"1024 dims, [0-9a-f]{12}", wide) and re.fullmatch(r"512 dims, [0-9a-f]{12}", narrow)
    capsys.readouterr()
    assert cli.main(["gate", str(run_dirs[0]), str(run_dirs[1]), "--tolerance", "1"]) == 6  # not comparable
    err = capsys.readouterr().err
    assert f"(embedder {narrow} -> {wide})" in err  # the reference, then the run
