"""The compiled kernel's side of benchmarks/kernel.py: run in a venv with numba (ranx's, benchmarks/.ranx-env/).

    python benchmarks/kernel_side.py PLANS.npz --min-seconds 0.5 --timings 3 [--out OUT.npz]

Imports numpy, numba and timing.py only, never rqsweep. PLANS.npz holds the plans and settings flattened by
kernel.py. The kernel computes what the fast path does (`stack_plans`, `stacked_positions`, then recall@5,
recall@10 and MRR per (setting, query)), with the same arithmetic and the same de-duplication: per query,
each distinct (kept V prefix, rrf_k, blend) is ranked once, the blend once per half-life where the query has
a decayed memory older than 0 days. Prints one JSON line: the compile (the first call in this process, with
numba's cache off, so always a compile) and the warm passes, CPU seconds of this one-thread process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import timed_passes  # noqa: E402


@numba.njit(cache=False)
def _rank(t, fused, score, insertion, decayed, present, start, m, blend):
    """1-based position of item t among the query's items [start, start + m), 0 when absent."""
    if not present[t]:
        return 0
    ahead = 0
    for j in range(start, start + m):
        if j == t or not present[j]:
            continue
        before = fused[j] > fused[t] or (fused[j] == fused[t] and insertion[j] < insertion[t])
        if blend:
            if score[j] > score[t] or (score[j] == score[t] and (decayed[j] < decayed[t] or (
                    decayed[j] == decayed[t] and before))):
                ahead += 1
        elif before:
            ahead += 1
    return ahead + 1


@numba.njit(cache=False)
def kernel(item_start, v_pos, l_pos, decayed, age_slot, sim_start, sims, key_start, member_start, members,
           aged, rrf_k, k_index, n_ks, floor, floor_index, n_floors, h_index, n_hs, blend, factors, limit,
           found, scores):
    n_settings, n_queries = len(rrf_k), len(item_start) - 1
    n_items = v_pos.shape[0]
    fused = np.empty(n_items)
    score = np.empty(n_items)
    insertion = np.empty(n_items, np.int64)
    present = np.empty(n_items, np.bool_)
    kept_of = np.empty(n_floors, np.int64)
    for q in range(n_queries):
        found[:, q, :] = 0
        start, m = item_start[q], item_start[q + 1] - item_start[q]
        n_keys = key_start[q + 1] - key_start[q]
        has_member = member_start[key_start[q + 1]] > member_start[key_start[q]]
        for f in range(n_floors):
            kept = 0
            for i in range(sim_start[q], sim_start[q + 1]):
                if sims[i] >= floor[f]:
                    kept += 1
            kept_of[f] = kept
        # Per (prefix, rrf_k, blend code): the key positions, computed on first use. Code 0: no blend; 1: the blend
        # with every factor 1 (it only reorders ties); 2 + h: the blend under half-life h.
        n_codes = 2 + n_hs if aged[q] else 2
        memo = np.full((sim_start[q + 1] - sim_start[q] + 1, n_ks, n_codes, max(n_keys, 1)), -1, np.int64)
        for s in range(n_settings):
            if has_member:
                kept = kept_of[floor_index[s]]
                code = 0 if not blend[s] else (2 + h_index[s] if aged[q] else 1)
                cell = memo[kept, k_index[s], code]
                if cell[0] < 0:
                    k = np.float64(rrf_k[s])
                    for i in range(start, start + m):
                        in_v = v_pos[i] > 0 and v_pos[i] <= kept
                        present[i] = in_v or l_pos[i] > 0
                        v_term = 1.0 / (k + v_pos[i]) if in_v else 0.0
                        l_term = 1.0 / (k + l_pos[i]) if l_pos[i] > 0 else 0.0
                        fused[i] = v_term + l_term
                        insertion[i] = v_pos[i] if in_v else m + 1 + l_pos[i]
                        score[i] = fused[i] * factors[h_index[s], age_slot[i]] if code >= 2 and age_slot[i] >= 0 \
                            else fused[i]
                    for g in range(n_keys):
                        first = 0
                        for r in range(member_start[key_start[q] + g], member_start[key_start[q] + g + 1]):
                            rank = _rank(start + members[r], fused, score, insertion, decayed, present, start, m,
                                         code >= 1)
                            if 0 < rank <= limit and (first == 0 or rank < first):
                                first = rank
                        cell[g] = first
                for g in range(n_keys):
                    found[s, q, g] = cell[g]
            # recall@5, recall@10 and MRR, as rqsweep.metrics computes them from the positions.
            within_5, within_10, best = 0, 0, 0
            for g in range(n_keys):
                p = found[s, q, g]
                if p > 0:
                    within_5 += p <= 5
                    within_10 += p <= 10
                    best = p if best == 0 or p < best else best
            n = max(n_keys, 1)
            scores[s, q, 0] = within_5 / n
            scores[s, q, 1] = within_10 / n
            scores[s, q, 2] = 1.0 / best if best > 0 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plans", type=Path)
    ap.add_argument("--min-seconds", type=float, default=0.5)
    ap.add_argument("--timings", type=int, default=3)
    ap.add_argument("--out", type=Path, help="write the first pass's positions and metrics here")
    args = ap.parse_args()
    data = dict(np.load(args.plans))
    limit = int(data.pop("limit"))
    width = int(data.pop("width"))
    found = np.zeros((len(data["rrf_k"]), len(data["item_start"]) - 1, width), np.int64)
    scores = np.zeros(found.shape[:2] + (3,))
    names = ("item_start", "v_pos", "l_pos", "decayed", "age_slot", "sim_start", "sims", "key_start", "member_start",
             "members", "aged", "rrf_k", "k_index", "n_ks", "floor", "floor_index", "n_floors", "h_index", "n_hs",
             "blend", "factors")
    inputs = [data[n] if data[n].ndim else data[n].item() for n in names]

    def one_pass() -> None:
        kernel(*inputs, limit, found, scores)

    out = timed_passes(one_pass, args.min_seconds, args.timings, clock=time.process_time)
    if args.out:
        np.savez(args.out, positions=found, metrics=scores)
    out["numba"] = numba.__version__
    print(json.dumps(out))


if __name__ == "__main__":
    main()
