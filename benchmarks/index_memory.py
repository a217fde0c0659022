"""Where an index build's memory goes: RSS during `Index.build`, by phase, against the vectors' own size.

    nice .venv/bin/python benchmarks/index_memory.py                         # 100,000 chunks, this checkout
    git archive main | tar -x -C /tmp/main-src                               # another revision's sources...
    nice .venv/bin/python benchmarks/index_memory.py --source /tmp/main-src  # ...measured the same way
    nice .venv/bin/python benchmarks/index_memory.py --cache-dir /tmp/c      # twice: filling the index cache, then from it

benchmarks/engine.py's synthetic 150-word chunks, one chunk per document (`whole`), feature hash at 1,024
dimensions. A thread samples the process's RSS every 10 ms; each phase (embedding, the lexical index, pgvector's
norms; the ones the revision has) reports its peak over the RSS before the build, and the last line what the
built index holds; "x vectors" is against the float32 vectors, however the store keeps them. With `--cache-dir`, the
build reads and fills the index cache there (a fresh folder: the build that fills it; run again: the rerun from it).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path


def rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the source tree whose rqsweep is measured (default: this checkout)")
    parser.add_argument("--cache-dir", type=Path, help="build with the index cache in this folder")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(args.source))
    import rqsweep.engine.index as index_module
    from engine import synthetic_corpus
    from rqsweep.config import Chunking
    from rqsweep.engine.embed import FeatureHashEmbedder
    from rqsweep.engine.index_cache import IndexCache

    corpus, _ = synthetic_corpus(args.chunks, 0, n_queries=1)
    cache = IndexCache(args.cache_dir, "feature-hash/1024", Chunking("whole")) if args.cache_dir else None
    phase, peaks, done = ["other"], {}, threading.Event()

    def labelled(original, label):
        def timed(*a, **k):
            phase[0] = label
            try:
                return original(*a, **k)
            finally:
                phase[0] = "other"
        if isinstance(original, type):  # LexicalIndex: built from texts, or from texts read while embedding
            timed.of_parts = labelled(original.of_parts, label)
        return timed

    # Since the build reads the texts for the lexical index while it embeds them (`_read_and_embed`), that reading
    # counts in the embedding phase, and so does the lexical index's build once it is fed a portion at a time.
    for name, label in (("_embed_stored", "embedding"), ("_embed_column_major", "embedding"),
                        ("_read_and_embed", "embedding"), ("LexicalIndex", "lexical index"),
                        ("squared_norms", "norms")):
        if hasattr(index_module, name):
            setattr(index_module, name, labelled(getattr(index_module, name), label))
    base = rss()

    def sample() -> None:
        while not done.is_set():
            peaks[phase[0]] = max(peaks.get(phase[0], 0), rss() - base)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        index = index_module.Index.build(corpus, FeatureHashEmbedder(1024), Chunking("whole"), cache=cache)
    finally:
        done.set()
        sampler.join()
    # The float32 rows pgvector holds, whatever the store keeps (the feature hash's quarter counts are smaller).
    vectors = sum(len(store.ids) * store.vectors.shape[1] * 4 for store in index.stores.values())
    stored = sum(store.vectors.nbytes for store in index.stores.values())
    reused = f", {index.rows_reused:,} rows from the index cache" if cache else ""
    print(f"{args.source}: {args.chunks:,} chunks{reused}, float32 vectors {vectors / 1e6:.0f} MB (stored in "
          f"{stored / 1e6:.0f} MB), RSS before the build {base / 1e6:.0f} MB")
    print("| phase | peak RSS over the start | x vectors |")
    print("| --- | --- | --- |")
    for name, peak in peaks.items():
        print(f"| {name} | +{peak / 1e6:.0f} MB | {peak / vectors:.2f}x |")
    print(f"| the whole build's peak | +{max(peaks.values()) / 1e6:.0f} MB | {max(peaks.values()) / vectors:.2f}x |")
    print(f"| the built index | +{(rss() - base) / 1e6:.0f} MB | {(rss() - base) / vectors:.2f}x |")


if __name__ == "__main__":
    main()
