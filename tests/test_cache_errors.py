"""The on-disk caches (vectors, built index rows) when their file or disk fails: a damaged file is set aside and
rebuilt; a full or read-only disk leaves the file as it is and the run goes on without the cache; each with one
warning naming the file, never a traceback, never a wait. A `cache_dir` naming a file is an input error."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rqsweep import cli
from rqsweep.engine.embed import CachedEmbedder, FeatureHashEmbedder
from tests.minijob import write_job

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [f"the pager rotation, note {i}" for i in range(60)]


@pytest.mark.parametrize("damage", ["not a database", "truncated"])
def test_a_damaged_vector_cache_is_set_aside_and_rebuilt_with_a_warning(tmp_path, damage):
    inner = FeatureHashEmbedder(64)
    path = CachedEmbedder(inner, tmp_path).path
    CachedEmbedder(inner, tmp_path).embed(TEXTS)
    data = path.read_bytes()
    path.write_bytes(b"not a database, " * 500 if damage == "not a database" else data[:len(data) // 2])
    warnings: list[str] = []
    cache = CachedEmbedder(inner, tmp_path, warnings.append)
    assert cache.embed(TEXTS).tobytes() == inner.embed(TEXTS).tobytes()
    assert len(warnings) == 1 and f"embedding cache {path} is damaged" in warnings[0]
    assert path.with_name(path.name + ".damaged").read_bytes()[:16] == (data if damage == "truncated"
                                                                        else b"not a database, ")[:16]
    rerun = CachedEmbedder(inner, tmp_path, warnings.append)
    rerun.embed(TEXTS)
    assert (len(warnings), rerun.hits, rerun.misses) == (1, len(TEXTS), 0)


def test_a_run_over_a_damaged_vector_cache_warns_and_gives_the_same_results(tmp_path):
    config = write_job(tmp_path, backend={"kind": "embedded", "cache_dir": "cache",
                                          "embedder": {"kind": "feature-hash", "dimensions": 256}})
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "rqsweep", str(config)], capture_output=True,
                              text=True, cwd=tmp_path, timeout=600)
        runs.append(done)
        (vectors,) = (tmp_path / "cache").glob("*.sqlite3")
        vectors.write_bytes(b"not a database, " * 500)
    assert [r.returncode for r in runs] == [runs[0].returncode] * 2 and runs[0].returncode in (0, 4), runs[1].stderr
    assert "Traceback" not in runs[1].stderr
    assert f"warning: embedding cache {vectors} is damaged" in runs[1].stderr


def test_a_cache_dir_naming_a_file_is_an_input_error_naming_it(tmp_path, capsys):
    (tmp_path / "cache").write_text("a file, not a folder")
    config = write_job(tmp_path, backend={"kind": "embedded", "cache_dir": "cache/vectors"})
    assert cli.main([str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{config}: backend.cache_dir: '{tmp_path / 'cache' / 'vectors'}': {tmp_path / 'cache'} is a file" in err
    assert "Traceback" not in err


# Run in a mount namespace of its own, over a 1 MB tmpfs at argv[1]: the cache is filled, then the disk fills up or
# turns read-only, and the cache is used again with more to store; then the disk is given back and the cache used a
# third time. Any wait (the 60 s retry of a busy file) fails the run.
_ON_A_SMALL_DISK = """
import json, os, subprocess, sys, time
from pathlib import Path
from rqsweep.engine.embed import CachedEmbedder, FeatureHashEmbedder
from rqsweep.engine.index_cache import IndexCache
from tests.test_index_cache import CHUNKING, assert_same_index, build, corpus
from tests.test_cache_errors import TEXTS

disk, cache, failure = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
folder, warnings = disk / "cache", []

def use(n):  # how many texts or rows came from the cache and how many were made, checking that the run got what it
    # would without the cache
    if cache == "vectors":
        inner = FeatureHashEmbedder(64)
        embedder = CachedEmbedder(inner, folder, warnings.append)
        assert embedder.embed(TEXTS[:n]).tobytes() == inner.embed(TEXTS[:n]).tobytes()
        return embedder.hits, embedder.misses
    index = build(corpus(n), IndexCache(folder, "feature-hash/64", CHUNKING, warnings.append))
    assert_same_index(index, build(corpus(n), None))
    return index.rows_reused, index.rows_built

first = use(20)
if failure == "full":
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError:
        os.close(fd)
else:
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)

def no_wait(seconds):
    raise AssertionError(f"the cache waits {seconds} s")

sleep, time.sleep = time.sleep, no_wait
use(40)
time.sleep = sleep
said = list(warnings)
if failure == "full":
    os.remove(disk / "filler")
else:
    subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
after = use(20)
print(json.dumps({"first": first, "warnings": said, "after": after, "warnings_after": warnings[len(said):],
                  "files": sorted(p.name for p in folder.rglob("*"))}))
"""


def _unshare_mounts() -> bool:
    unshare = shutil.which("unshare")
    return unshare is not None and subprocess.run([unshare, "-rm", "sh", "-c", 'mount -t tmpfs tmpfs "$0"', "/tmp"],
                                                  capture_output=True).returncode == 0


@pytest.mark.skipif(not _unshare_mounts(), reason="needs `unshare -rm` to mount a small tmpfs")
@pytest.mark.parametrize("failure", ["full", "read-only"])
@pytest.mark.parametrize("cache", ["vectors", "index"])
def test_a_full_or_read_only_disk_keeps_the_cache_file_and_the_run_goes_on_without_it(tmp_path, cache, failure):
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=1m tmpfs "$0" && exec "$@"',
                           str(disk), sys.executable, "-c", _ON_A_SMALL_DISK, str(disk), cache, failure],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    (warning,) = seen["warnings"]
    what, path = ("embedding cache", disk / "cache") if cache == "vectors" else ("index cache", disk / "cache/index")
    assert warning.startswith(f"{what} {path}/") and "cannot be used" in warning and "damaged" not in warning
    assert f"its disk is {failure}" in warning
    assert not [name for name in seen["files"] if name.endswith(".damaged")]
    # The file was kept whole: once the disk is back, what the first use stored is found again.
    assert seen["after"][0] == seen["first"][1] > 0 and seen["warnings_after"] == []
