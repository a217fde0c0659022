"""Sweeps on a Dask cluster: the same grid and query table as one process, through worker and scheduler loss."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Callable

import polars as pl
import pytest
import yaml

from rqsweep import job
from rqsweep.backends import BACKENDS
from rqsweep.config import WorkersConfig, load_config
from rqsweep.errors import InputError
from rqsweep.progress import Progress
from tests.minijob import write_job

ROOT = Path(__file__).resolve().parents[1]
DASK = Path(sys.executable).parent / "dask"
RUN_SPECIFIC = ("run_id", "config_sha256")  # the Dask run's config file differs: everything else must not
SMALL_SWEEP = {"strategy": "grid", "knobs": {
    "rrf_k": {"values": [5, 60]},
    "min_similarity": {"include_off": True, "low": 0.1, "high": 0.2, "step": 0.1},
    "recency_half_life_days": {"values": [0, 30]},
}}


def handbook_job(folder: Path, workers: object, embedder: dict | None = None) -> Path:
    """configs/handbook.yaml with a 12-setting sweep and SOAT's eval embedder (what the engine's exactness is
    proven on, and fast) or `embedder`, no cache, writing under `folder`."""
    config = yaml.safe_load((ROOT / "configs" / "handbook.yaml").read_text())
    config["backend"] = {**{k: v for k, v in config["backend"].items() if k != "cache_dir"},
                         "embedder": embedder or {"kind": "feature-hash", "dimensions": 1024}}
    config.update(corpus=str(ROOT / "configs" / "handbook" / "corpus.yaml"),
                  golden=str(ROOT / "configs" / "handbook" / "golden.yaml"),
                  sweep=SMALL_SWEEP, workers=workers, output_dir="results")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "handbook.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def tables(run_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    return tuple(pl.read_parquet(run_dir / f"{name}.parquet").drop(RUN_SPECIFIC, strict=False)
                 for name in ("grid", "queries"))


def assert_same_results(run_dir: Path, reference: Path) -> None:
    (grid, queries), (want_grid, want_queries) = tables(run_dir), tables(reference)
    assert grid.height > 0 and queries.height > 0
    assert grid.equals(want_grid)
    assert queries.equals(want_queries)


@pytest.fixture(scope="module")
def handbook_reference(tmp_path_factory):
    return job.run(handbook_job(tmp_path_factory.mktemp("serial"), 1), quiet=True).run_dir


def test_workers_accepts_the_integer_and_the_mapping(tmp_path):
    assert load_config(write_job(tmp_path / "a", workers=3), BACKENDS).workers == WorkersConfig("loky", 3)
    config = load_config(write_job(tmp_path / "b", workers={"backend": "dask", "n": 2,
                                                             "address": "tcp://10.1.2.3:8786"}), BACKENDS)
    assert config.workers == WorkersConfig("dask", 2, "tcp://10.1.2.3:8786")
    assert load_config(write_job(tmp_path / "c", workers={"backend": "dask"}), BACKENDS).workers == WorkersConfig("dask", 1)
    sharded = load_config(write_job(tmp_path / "d", workers={"backend": "dask", "n": 2, "corpus_shards": 4}), BACKENDS)
    assert sharded.workers == WorkersConfig("dask", 2, corpus_shards=4)


@pytest.mark.parametrize("workers, where, problem", [
    ({"backend": "spark"}, "workers.backend", "'spark': expected one of loky, dask"),
    ({"backend": "dask", "n": 0}, "workers.n", "0: must be >= 1"),
    ({"backend": "loky", "address": "tcp://h:8786"}, "workers.address", "is only used with `backend: dask`"),
    ({"backend": "dask", "address": "h:8786"}, "workers.address", "'h:8786': expected a scheduler address"),
    ({"backend": "dask", "nodes": 2}, "workers.nodes", "unknown key"),
    ([2], "workers", "expected int"),
    ({"backend": "dask", "corpus_shards": 0}, "workers.corpus_shards", "0: must be an integer >= 1"),
    ({"backend": "dask", "corpus_shards": "4"}, "workers.corpus_shards", "'4': expected int"),
    ({"backend": "loky", "corpus_shards": 2}, "workers.corpus_shards", "2: is only used with `backend: dask`"),
])
def test_bad_workers_name_file_key_and_value(tmp_path, workers, where, problem):
    path = write_job(tmp_path, workers=workers)
    with pytest.raises(InputError) as caught:
        load_config(path, BACKENDS)
    assert caught.value.file == str(path) and caught.value.where == where and problem in caught.value.problem


def test_a_local_dask_cluster_gives_the_single_process_results(tmp_path, handbook_reference, capfd):
    outcome = job.run(handbook_job(tmp_path, {"backend": "dask", "n": 2}), quiet=False)
    assert_same_results(outcome.run_dir, handbook_reference)
    log = capfd.readouterr().err
    assert "dask: 2 workers at tcp://127.0.0.1:" in log and "candidates: shard 8/8 on the cluster" in log


def test_a_model_s_vectors_made_after_the_lexical_channel_give_a_local_cluster_s_results(tmp_path):
    """Without a cache, one process makes the model's vectors once the postings are gone; the cluster's path
    makes them before it sends the index: both give the same tables."""
    local = {"kind": "local", "model": "multilingual-e5-small"}
    serial = job.run(handbook_job(tmp_path / "serial", 1, local), quiet=True).run_dir
    outcome = job.run(handbook_job(tmp_path / "dask", {"backend": "dask", "n": 2}, local), quiet=True)
    assert_same_results(outcome.run_dir, serial)


def test_corpus_shards_on_a_local_cluster_give_the_single_process_results(tmp_path, handbook_reference, capfd):
    config = handbook_job(tmp_path, {"backend": "dask", "n": 2, "corpus_shards": 3})
    outcome = job.run(config, quiet=False)
    assert_same_results(outcome.run_dir, handbook_reference)
    hits, want = (pl.read_parquet(d / "hits.parquet").drop(RUN_SPECIFIC, strict=False)
                  for d in (outcome.run_dir, handbook_reference))
    assert hits.height > 0 and hits.equals(want)
    assert "dask: 3 corpus shards indexed on the workers" in capfd.readouterr().err
    # Resumed, the run reads its candidates back from its folder: hits' similarities come from the shards again.
    (outcome.run_dir / "hits.parquet").unlink()
    resumed = job.run(config, resume=outcome.run_dir, quiet=True)
    again = pl.read_parquet(resumed.run_dir / "hits.parquet").drop(RUN_SPECIFIC, strict=False)
    assert again.equals(want)


def test_corpus_shards_keep_postgres_order_among_ties_across_shards(tmp_path):
    """Every document five times over, copies spread through the table: the vector and lexical channels tie
    across shards at every cut, and PostgreSQL's heap order, not insertion order, decides which copy ranks."""
    from tests.minijob import DOCUMENTS, MEMORIES

    def tied_job(folder: Path, workers: object) -> Path:
        path = write_job(folder, workers=workers, backend={
            "kind": "embedded", "embedder": {"kind": "feature-hash", "dimensions": 256},
            "chunking": {"strategy": "whole"}})
        documents = [{"key": k if copy == 0 else f"{k}-copy{copy}", "path": p, "content": c}
                     for copy in range(5) for k, p, c in DOCUMENTS]
        memories = [{"key": k if copy == 0 else f"{k}-copy{copy}", "content": c, "age_days": a, "store": "facts"}
                    for copy in range(3) for k, c, a in MEMORIES]
        (folder / "corpus.yaml").write_text(yaml.safe_dump({"documents": documents, "memories": memories}))
        return path

    serial = job.run(tied_job(tmp_path / "serial", 1), quiet=True).run_dir
    sharded = job.run(tied_job(tmp_path / "sharded", {"backend": "dask", "n": 2, "corpus_shards": 4}),
                      quiet=True).run_dir
    assert_same_results(sharded, serial)
    assert pl.read_parquet(serial / "queries.parquet")["tie_sensitive"].any()  # ties do decide positions here


def _sharded_with_cache(folder: Path, shards: int, cache: Path, **backend) -> Path:
    path = handbook_job(folder, {"backend": "dask", "n": 2, "corpus_shards": shards})
    config = yaml.safe_load(path.read_text())
    config["backend"].update(cache_dir=str(cache), **backend)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_corpus_shards_rerun_from_the_index_cache_builds_nothing(tmp_path, handbook_reference, capfd):
    """Each shard reads and fills the index cache on its worker's disk: a rerun, cut into other shards, builds
    0 rows, and both runs give the one-process grid and queries."""
    first = job.run(_sharded_with_cache(tmp_path / "first", 3, tmp_path / "cache"), quiet=False).run_dir
    filled = capfd.readouterr().err
    again = job.run(_sharded_with_cache(tmp_path / "again", 2, tmp_path / "cache"), quiet=False).run_dir
    rerun = capfd.readouterr().err
    built = re.search(r"\((\d+) reused from the index cache, (\d+) built\)", filled)
    assert built and built.group(1) == "0" and int(built.group(2)) > 0
    assert f"({built.group(2)} reused from the index cache, 0 built)" in rerun
    assert list((tmp_path / "cache" / "index").glob("*.sqlite3"))
    for run_dir in (first, again):
        assert_same_results(run_dir, handbook_reference)


def test_corpus_shards_keep_the_index_cache_to_the_configs_bound(tmp_path, handbook_reference):
    """`index_cache_mb` reaches the shards' caches: filled by 2 shards under a 2 kB bound, the cache holds at most
    2 kB of rows (under the default bound it would hold the whole handbook)."""
    run_dir = job.run(_sharded_with_cache(tmp_path / "run", 2, tmp_path / "cache", index_cache_mb=0.002),
                      quiet=True).run_dir
    assert_same_results(run_dir, handbook_reference)
    [cache_file] = (tmp_path / "cache" / "index").glob("*.sqlite3")
    with closing(sqlite3.connect(cache_file)) as conn:
        stored = conn.execute("SELECT total(size) FROM used").fetchone()[0]
    assert stored <= 2000


def test_corpus_shards_refuse_a_remote_embedder_with_exit_2(tmp_path):
    path = write_job(tmp_path, workers={"backend": "dask", "n": 1, "corpus_shards": 2}, backend={
        "kind": "embedded", "embedder": {"kind": "ollama", "model": "nomic-embed-text"}})
    with pytest.raises(InputError) as caught:
        job.run(path, quiet=True)
    assert caught.value.where == "workers.corpus_shards" and "feature-hash, local or onnx" in caught.value.problem


def test_corpus_shards_over_http_are_exit_2(tmp_path):
    path = write_job(tmp_path, workers={"backend": "dask", "n": 1, "corpus_shards": 2}, backend={
        "kind": "http", "base_url": "http://127.0.0.1:9", "mode": "direct"})
    with pytest.raises(InputError) as caught:
        job.run(path, quiet=True)
    assert caught.value.where == "workers.corpus_shards" and "embedded backend" in caught.value.problem


def test_a_synthetic_corpus_on_an_existing_cluster_gives_the_single_process_results(tmp_path):
    from distributed import LocalCluster

    serial = job.run(write_job(tmp_path / "serial"), quiet=True).run_dir
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        config = write_job(tmp_path / "dask", workers={"backend": "dask", "n": 3,
                                                       "address": cluster.scheduler_address})
        outcome = job.run(config, quiet=True)
    assert_same_results(outcome.run_dir, serial)


def test_a_worker_killed_mid_shard_changes_nothing(tmp_path, handbook_reference):
    _assert_killed_workers_change_nothing(tmp_path, handbook_reference, handbook_job, {},
                                          ["plan_queries"])  # a query shard's candidates


def test_a_worker_killed_mid_corpus_shard_changes_nothing_five_times_over(tmp_path, handbook_reference):
    """Five runs, each on a fresh cluster, lose a worker while a corpus shard is built or answers its first round:
    Dask builds the dead worker's shard index again elsewhere from its task, and the reports and results do not
    change."""
    _assert_killed_workers_change_nothing(tmp_path, handbook_reference, handbook_job, {"corpus_shards": 2},
                                          ["_build_shard", "first_reports"] * 2 + ["_build_shard"])


def _assert_killed_workers_change_nothing(tmp_path: Path, reference: Path, config_of: Callable[[Path, dict], Path],
                                          workers: dict, tasks: list[str]) -> None:
    """One run per task of `tasks`, each on a fresh 2-worker cluster, SIGKILLs a worker running that task; each
    run must end with `reference`'s grid and queries. A fresh cluster each time: whether a nanny brings its killed
    worker back, and how soon on a loaded machine, is Dask's business, not what is tested here (a shared cluster
    once waited 60 s in vain for the restart)."""
    from distributed import Client, LocalCluster

    for attempt, task in enumerate(tasks):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster) as monitor:
            monitor.wait_for_workers(2, timeout=120)
            runner, outcome = _run_aside(config_of(tmp_path / f"dask{attempt}", {
                "backend": "dask", "n": 2, "address": cluster.scheduler_address, **workers}))
            killed = _kill_a_worker_running(monitor, task, runner)
            runner.join(300)
        assert killed is not None, f"attempt {attempt}: no {task} task was seen running"
        assert "error" not in outcome, f"attempt {attempt}: {outcome.get('error')!r}"
        assert_same_results(outcome["done"].run_dir, reference)


def _run_aside(config: Path) -> tuple[threading.Thread, dict]:
    """The job running in a thread; its outcome lands in the dict as `done`, or `error`."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["done"] = job.run(config, quiet=True)
        except BaseException as exc:  # the caller's assertion shows it
            outcome["error"] = exc

    runner = threading.Thread(target=run)
    runner.start()
    return runner, outcome


def _kill_a_worker_running(monitor, task: str, runner: threading.Thread) -> int | None:
    """SIGKILLs the process of the first worker seen running a task whose key names `task`; its pid, or None when
    none was seen within 120 s or before the run ended."""
    pids = monitor.run(os.getpid)  # worker address -> its process id; no worker has died yet
    deadline = time.monotonic() + 120
    while runner.is_alive() and time.monotonic() < deadline:
        for address, keys in monitor.processing().items():
            if any(task in str(k) for k in keys):
                os.kill(pids[address], signal.SIGKILL)
                return pids[address]
        time.sleep(0.01)
    return None


KILL_SWEEP = {"strategy": "grid", "knobs": {"rrf_k": {"values": list(range(1, 41))},
                                           "min_similarity": {"include_off": True, "low": 0.1, "high": 0.3, "step": 0.1},
                                           "recency_half_life_days": {"values": [0, 30]}}}


def test_a_worker_killed_mid_batch_changes_nothing_five_times_over(tmp_path):
    """Each of 5 runs loses a worker while it scores a shard of a batch: Dask's lost dependencies (the batch sent to
    the dead worker, its shards' candidates) are sent and computed again, and the run ends with the local grid."""
    serial = job.run(_kill_job(tmp_path / "serial", 1), quiet=True).run_dir
    _assert_killed_workers_change_nothing(tmp_path, serial, _kill_job, {}, ["_score_shard"] * 5)


def _kill_job(folder: Path, workers: object) -> Path:
    """The handbook with KILL_SWEEP: 240 settings, a batch long enough to kill a worker in."""
    path = handbook_job(folder, workers)
    config = yaml.safe_load(path.read_text())
    config["sweep"] = KILL_SWEEP
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(port: int) -> tuple[subprocess.Popen, subprocess.Popen]:
    """A `dask scheduler` and a `dask worker` with 2 processes on loopback, as an operator would start them."""
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
    scheduler = subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                                 **quiet)
    workers = subprocess.Popen([DASK, "worker", f"tcp://127.0.0.1:{port}", "--host", "127.0.0.1", "--nworkers", "2",
                                "--nthreads", "1", "--no-dashboard"], **quiet)
    return scheduler, workers


def stop(process: subprocess.Popen) -> None:
    """Kill the process and what it started (its own session), and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(30)


# The checkpoint is shortened so that the kill lands between recorded batches; the rest is the real command.
RUN = ("import sys; from rqsweep.backends.embedded import EmbeddedBackend; from rqsweep.cli import main; "
       "EmbeddedBackend.checkpoint_every = 10; sys.exit(main(sys.argv[1:]))")


def test_a_lost_scheduler_exits_3_and_resume_completes(tmp_path):
    sweep = {"strategy": "grid", "knobs": {"rrf_k": {"values": list(range(1, 41))},
                                            "min_similarity": {"include_off": True, "low": 0.1, "high": 0.3,
                                                               "step": 0.1},
                                            "recency_half_life_days": {"values": [0, 1, 7, 30, 365]}}}
    serial = job.run(write_job(tmp_path / "serial", sweep), quiet=True).run_dir
    port = free_port()
    config = write_job(tmp_path / "dask", sweep, workers={"backend": "dask", "n": 2,
                                                          "address": f"tcp://127.0.0.1:{port}"})
    scheduler, workers = start_cluster(port)
    try:
        run = subprocess.Popen([sys.executable, "-c", RUN, str(config), "--quiet"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        parts = []
        deadline = time.monotonic() + 120
        while len(parts) < 2 and run.poll() is None and time.monotonic() < deadline:
            parts = list((tmp_path / "dask" / "results").glob("mini/*/state/part-*.parquet"))
            time.sleep(0.02)
        scheduler.kill()
        out, err = run.communicate(timeout=180)
    finally:
        stop(scheduler)
        stop(workers)
    assert run.returncode == 3, err
    assert "Dask: the cluster stopped answering" in err and "Traceback" not in err
    (run_dir,) = (tmp_path / "dask" / "results" / "mini").iterdir()
    recorded = len(list((run_dir / "state").glob("part-*.parquet")))
    assert recorded >= 2 and not (run_dir / "grid.parquet").exists()

    scheduler, workers = start_cluster(port)
    try:
        resumed = subprocess.run([sys.executable, "-c", RUN, str(config), "--quiet", "--resume", str(run_dir)],
                                 cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        stop(scheduler)
        stop(workers)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_results(run_dir, serial)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_moves_as_parts_of_a_batch_finish_and_the_batch_count_replaces_them():
    bar = Progress(100, "run", stream=Terminal())
    bar(50)
    bar.part(12.5)
    bar.part(12.5)
    assert bar.stream.getvalue().split("\r")[-1].startswith("run [##########") and " 75/100 " in bar.stream.getvalue()
    bar(50)
    assert bar.stream.getvalue().split("\r")[-1].split()[2] == "100/100"  # then the time, the rate


def test_a_dask_batch_advances_once_per_finished_shard(tmp_path):
    from rqsweep.backends.embedded import build_embedded_backend
    from rqsweep.inputs import load_inputs
    from rqsweep.search.space import grid

    inputs = load_inputs(handbook_job(tmp_path, {"backend": "dask", "n": 2}), lambda _: None)
    parts = []
    backend = build_embedded_backend(inputs.config, inputs.golden, inputs.corpus, workers=inputs.config.workers,
                                     log=lambda _: None, advance=parts.append)
    try:
        settings = grid(inputs.config.sweep, inputs.config.baseline)
        backend.evaluate(settings)
    finally:
        backend.close()
    assert len(parts) == 8  # 4 shards per worker
    assert sum(parts) == pytest.approx(len(settings))
