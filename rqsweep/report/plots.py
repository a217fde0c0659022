"""The report's plots as PNG bytes (matplotlib's Agg renderer through `Figure`: no display, no global state)."""

from __future__ import annotations

import io

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FixedLocator

from rqsweep.golden import OVERALL
from rqsweep.knobs import KNOBS
from rqsweep.report.tables import knob_label
from rqsweep.run_folder import RunFolder

_DPI = 100
_FLOOR_OFF_AT = -0.05  # where "no floor" sits on a min_similarity axis
_MIN_FILL = 0.5  # share of rrf_k x half-life cells a heatmap needs filled to be worth drawing


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=_DPI, bbox_inches="tight")
    return buffer.getvalue()


def mrr_heatmap(run: RunFolder) -> bytes | None:
    """Overall MRR over rrf_k x half-life at the chosen min_similarity.

    None when the run has no such grid: fewer than two values of either knob, or fewer than half the
    cells filled (an optimiser samples points, it does not fill a grid).
    """
    chosen = run.knobs(run.chosen)
    cells = run.overall().filter(pl.col("min_similarity").eq_missing(chosen.min_similarity))
    ks = sorted(cells["rrf_k"].unique().to_list())
    hs = sorted(cells["recency_half_life_days"].unique().to_list())
    if len(ks) < 2 or len(hs) < 2 or cells.height < _MIN_FILL * len(ks) * len(hs):
        return None
    mrr = np.full((len(ks), len(hs)), np.nan)
    for r in cells.iter_rows(named=True):
        mrr[ks.index(r["rrf_k"]), hs.index(r["recency_half_life_days"])] = r["mrr"] if r["mrr"] is not None else np.nan
    fig = Figure(figsize=(min(2 + 0.75 * len(hs), 13), min(1.5 + 0.42 * len(ks), 11)))
    ax = fig.add_subplot()
    image = ax.imshow(mrr, cmap="viridis", aspect="auto", origin="lower")
    fig.colorbar(image, ax=ax, label="overall MRR")
    ax.set_xticks(range(len(hs)), [knob_label("recency_half_life_days", h) for h in hs], rotation=45)
    ax.set_yticks(range(len(ks)), [str(k) for k in ks])
    ax.set_xlabel("recency_half_life_days")
    ax.set_ylabel("rrf_k")
    if mrr.size <= 400:  # numbers stay legible up to about a 20 x 20 grid
        midpoint = np.nanmean([np.nanmin(mrr), np.nanmax(mrr)])
        for (i, j), v in np.ndenumerate(mrr):
            if not np.isnan(v):
                ax.text(j, i, f"{v:.3f}", ha="center", va="center", fontsize=7,
                        color="black" if v > midpoint else "white")
    i, j = ks.index(chosen.rrf_k), hs.index(chosen.recency_half_life_days)
    ax.add_patch(_box(j, i))
    ax.set_title(f"Overall MRR at min_similarity {knob_label('min_similarity', chosen.min_similarity)} "
                 f"(boxed: {'best' if run.best else 'baseline'})")
    return _png(fig)


def _box(x: float, y: float) -> Rectangle:
    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2)


def slice_mrr_by_knob(run: RunFolder, knob_tables: dict[str, pl.DataFrame]) -> bytes:
    """Per knob, each slice's MRR (and overall's, dashed) against the knob's values, other knobs at the chosen."""
    chosen = run.knobs(run.chosen)
    fig = Figure(figsize=(5 * len(knob_tables), 4))
    axes = fig.subplots(1, len(knob_tables), squeeze=False)[0]
    for ax, (knob, table) in zip(axes, knob_tables.items()):
        x = range(table.height)
        for s in run.slices:
            column = "overall MRR" if s == OVERALL else f"{s} MRR"
            ax.plot(x, table[column].to_list(), marker="o", label=s,
                    linestyle="--" if s == OVERALL else "-", color="black" if s == OVERALL else None)
        labels = table[knob].to_list()
        ax.xaxis.set_major_locator(FixedLocator(list(x)))
        ax.set_xticklabels(labels, rotation=45 if table.height > 6 else 0)
        ax.axvline(labels.index(knob_label(knob, getattr(chosen, knob))), color="red", alpha=0.3, linewidth=6)
        ax.set_xlabel(knob)
        ax.set_ylabel("MRR")
        ax.set_ylim(0, 1.02)
    axes[-1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), title="slice")
    fig.suptitle("MRR per slice against each knob, the others at the chosen setting (red band)")
    return _png(fig)


def _set_scale(ax: Axes, knob: str, horizontal: bool) -> None:
    """A scale that keeps a knob's usual values apart: log rrf_k, symlog half-life (0 = off at the origin)."""
    set_scale = ax.set_xscale if horizontal else ax.set_yscale
    if knob == "rrf_k":
        set_scale("log")
    elif knob == "recency_half_life_days":
        set_scale("symlog", linthresh=1)
    else:
        axis = ax.xaxis if horizontal else ax.yaxis
        ticks = np.linspace(0, 1, 6)
        axis.set_major_locator(FixedLocator([_FLOOR_OFF_AT, *ticks]))
        axis.set_ticklabels(["off", *(f"{t:g}" for t in ticks)])


def _positions(values: list) -> np.ndarray:
    # Only min_similarity has a None (no floor); it sits left of 0 on its axis.
    return np.array([_FLOOR_OFF_AT if v is None else v for v in values], dtype=float)


def feasibility_map(run: RunFolder) -> bytes:
    """Which settings are feasible, projected on knob pairs: colour = feasible share over the hidden knob."""
    pairs = [("rrf_k", "recency_half_life_days"), ("rrf_k", "min_similarity")]
    fig = Figure(figsize=(12, 4.5))
    axes = fig.subplots(1, len(pairs))
    overall = run.overall()
    chosen = run.knobs(run.chosen)
    for ax, (xk, yk) in zip(axes, pairs):
        _set_scale(ax, xk, horizontal=True)
        _set_scale(ax, yk, horizontal=False)
        share = overall.group_by(xk, yk).agg(pl.col("feasible").mean().alias("share"))
        points = ax.scatter(_positions(share[xk].to_list()), _positions(share[yk].to_list()),
                            c=share["share"].to_list(), cmap="RdYlGn", vmin=0, vmax=1, s=60,
                            edgecolors="grey", linewidths=0.5)
        ax.scatter(_positions([getattr(chosen, xk)]), _positions([getattr(chosen, yk)]),
                   marker="*", s=250, color="blue")
        ax.set_xlabel(xk)
        ax.set_ylabel(yk)
        hidden = next(k for k in KNOBS if k not in (xk, yk))
        ax.set_title(f"share feasible over {hidden}")
    fig.colorbar(points, ax=axes, label="feasible share")
    fig.suptitle(f"Feasible settings (blue star: the {'best' if run.best else 'baseline'})")
    return _png(fig)


def optimisation_history(run: RunFolder) -> bytes:
    """The objective per trial in evaluation order: feasible, infeasible, and the best feasible so far."""
    metric, slice_ = run.objective
    trials = run.grid.filter(pl.col("slice") == slice_).sort("evaluation_order")
    order = trials["evaluation_order"].to_numpy()
    value = trials[metric].fill_null(np.nan).to_numpy()
    feasible = trials["feasible"].to_numpy()
    running = np.fmax.accumulate(np.where(feasible, value, np.nan))
    fig = Figure(figsize=(10, 4))
    ax = fig.add_subplot()
    ax.scatter(order[feasible], value[feasible], s=18, label="feasible")
    ax.scatter(order[~feasible], value[~feasible], s=18, marker="x", color="grey", label="infeasible")
    ax.step(order, running, where="post", color="red", label="best feasible so far")
    ax.set_xlabel("trial (evaluation order)")
    ax.set_ylabel(f"{metric} [{slice_}]")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title("Optimisation history")
    return _png(fig)
