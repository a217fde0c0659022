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


NOT_LISTED = 1 << 40  # the position of an item not in a list: after every listed one


@numba.njit(cache=False)
def _fill(q, kept, cls, need, start, m, v_pos, l_pos, decayed, age_days, age_slot, key_start, member_start, members,
          rrf_k_values, factors, limit, memo, und):
    """memo[kept, k, code] for every needed (rrf_k, code) of class `cls` under one kept V prefix.

    Each target's items split as the fast path splits them (`_contest`, `_blend_decided`): ahead under every
    rrf_k and half-life, never ahead, or undecided; only the undecided are compared per rrf_k (and half-life).
    Class 0: no blend; 1: the blend with every factor 1 (it only reorders ties); 2: the blend, code 2 + h.
    """
    n_ks, n_codes = need.shape[1], need.shape[2]
    for g in range(key_start[q], key_start[q + 1]):
        for r in range(member_start[g], member_start[g + 1]):
            t = start + members[r]
            t_in_v = v_pos[t] > 0 and v_pos[t] <= kept
            if not (t_in_v or l_pos[t] > 0):
                continue  # absent: no slot
            vt = v_pos[t] if t_in_v else NOT_LISTED
            lt = l_pos[t] if l_pos[t] > 0 else NOT_LISTED
            it = v_pos[t] if t_in_v else m + 1 + l_pos[t]
            ahead, n_und = 0, 0
            for j in range(start, start + m):
                j_in_v = v_pos[j] > 0 and v_pos[j] <= kept
                if j == t or not (j_in_v or l_pos[j] > 0):
                    continue
                vj = v_pos[j] if j_in_v else NOT_LISTED
                lj = l_pos[j] if l_pos[j] > 0 else NOT_LISTED
                ij = v_pos[j] if j_in_v else m + 1 + l_pos[j]
                if cls == 0:
                    wins = ij < it
                else:
                    wins = decayed[j] < decayed[t] or (decayed[j] == decayed[t] and ij < it)
                at_least = vj <= vt and lj <= lt
                at_most = vj >= vt and lj >= lt
                if cls == 2:
                    same_age = age_days[j] == age_days[t]
                    loses = decayed[j] > decayed[t] or (decayed[j] == decayed[t] and ij > it)
                    if at_least and wins and (not age_days[j] > 0 or same_age):
                        ahead += 1
                    elif not (at_most and loses and (not age_days[t] > 0 or same_age)):
                        und[n_und] = j
                        n_und += 1
                elif at_least and wins:
                    ahead += 1
                elif not (at_most and not wins):
                    und[n_und] = j
                    n_und += 1
            for ki in range(n_ks):
                k = np.float64(rrf_k_values[ki])
                ft = (1.0 / (k + v_pos[t]) if t_in_v else 0.0) + (1.0 / (k + l_pos[t]) if l_pos[t] > 0 else 0.0)
                for code in range(n_codes):
                    if not need[kept, ki, code] or (code >= 2) != (cls == 2) or (cls < 2 and code != cls):
                        continue
                    st = ft * factors[code - 2, age_slot[t]] if code >= 2 and age_slot[t] >= 0 else ft
                    rank = ahead + 1
                    for u in range(n_und):
                        j = und[u]
                        j_in_v = v_pos[j] > 0 and v_pos[j] <= kept
                        fj = (1.0 / (k + v_pos[j]) if j_in_v else 0.0) + (1.0 / (k + l_pos[j]) if l_pos[j] > 0 else 0.0)
                        ij = v_pos[j] if j_in_v else m + 1 + l_pos[j]
                        before = fj > ft or (fj == ft and ij < it)
                        if cls == 0:
                            rank += before
                        else:
                            sj = fj * factors[code - 2, age_slot[j]] if code >= 2 and age_slot[j] >= 0 else fj
                            rank += sj > st or (sj == st and (decayed[j] < decayed[t] or (
                                decayed[j] == decayed[t] and before)))
                    cell = memo[kept, ki, code, g - key_start[q]]
                    if rank <= limit and (cell == 0 or rank < cell):
                        memo[kept, ki, code, g - key_start[q]] = rank


@numba.njit(cache=False)
def kernel(item_start, v_pos, l_pos, decayed, age_days, age_slot, sim_start, sims, key_start, member_start, members,
           aged, rrf_k, k_index, rrf_k_values, floor, floor_index, h_index, n_hs, blend, factors, limit, found,
           scores):
    n_settings, n_queries = len(rrf_k), len(item_start) - 1
    kept_of = np.empty(len(floor), np.int64)
    und = np.empty(v_pos.shape[0], np.int64)
    for q in range(n_queries):
        found[:, q, :] = 0
        start, m = item_start[q], item_start[q + 1] - item_start[q]
        n_keys = key_start[q + 1] - key_start[q]
        has_member = member_start[key_start[q + 1]] > member_start[key_start[q]]
        for f in range(len(floor)):
            kept = 0
            for i in range(sim_start[q], sim_start[q + 1]):
                if sims[i] >= floor[f]:
                    kept += 1
            kept_of[f] = kept
        # Which (kept prefix, rrf_k, code) some setting needs. Code 0: no blend; 1: the blend with every factor 1;
        # 2 + h: the blend under half-life h (a query with a decayed memory older than 0 days).
        n_codes = 2 + n_hs if aged[q] else 2
        n_prefixes = sim_start[q + 1] - sim_start[q] + 1
        need = np.zeros((n_prefixes, len(rrf_k_values), n_codes), np.bool_)
        memo = np.zeros((n_prefixes, len(rrf_k_values), n_codes, max(n_keys, 1)), np.int64)
        if has_member:
            for s in range(n_settings):
                code = 0 if not blend[s] else (2 + h_index[s] if aged[q] else 1)
                need[kept_of[floor_index[s]], k_index[s], code] = True
            for kept in range(n_prefixes):
                for cls in range(3):
                    wanted = False
                    for ki in range(len(rrf_k_values)):
                        for code in range(n_codes):
                            wanted |= need[kept, ki, code] and (code == cls if cls < 2 else code >= 2)
                    if wanted:
                        _fill(q, kept, cls, need, start, m, v_pos, l_pos, decayed, age_days, age_slot, key_start,
                              member_start, members, rrf_k_values, factors, limit, memo, und)
        for s in range(n_settings):
            within_5, within_10, best = 0, 0, 0
            if has_member:
                code = 0 if not blend[s] else (2 + h_index[s] if aged[q] else 1)
                cell = memo[kept_of[floor_index[s]], k_index[s], code]
                for g in range(n_keys):
                    p = cell[g]
                    found[s, q, g] = p
                    # recall@5, recall@10 and MRR, as rqsweep.metrics computes them from the positions.
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
    found = np.zeros((len(data["rrf_k"]), len(data["item_start"]) - 1, width), np.uint8)  # as the fast path
    scores = np.zeros(found.shape[:2] + (3,))
    names = ("item_start", "v_pos", "l_pos", "decayed", "age_days", "age_slot", "sim_start", "sims", "key_start",
             "member_start", "members", "aged", "rrf_k", "k_index", "rrf_k_values", "floor", "floor_index", "h_index",
             "n_hs", "blend", "factors")
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
