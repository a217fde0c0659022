"""The report's plots as matplotlib figures (the Agg renderer through `Figure`: no display, no global state).

A plot must not tempt anyone towards a setting the constraints reject: infeasible settings are never
coloured as candidates (hatched cells, grey bands, grey crosses), and each title says what is drawn.
"""

from __future__ import annotations

import io

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import PathPatch, Rectangle
from matplotlib.path import Path
from matplotlib.ticker import FixedLocator, FuncFormatter

from rqsweep.golden import OVERALL
from rqsweep.knobs import HALF_LIFE, KNOBS, MIN_SIMILARITY, RRF_K
from rqsweep.report.tables import knob_label, metric_label
from rqsweep.runfolder import RunFolder

_DPI = 100
_FLOOR_OFF_AT = -0.05  # where "no floor" sits on a min_similarity axis
_MIN_FILL = 0.5  # share of rrf_k x half-life cells a heatmap needs filled to be worth drawing
TICK_LABELS = 14  # most labels on one categorical axis: more overlap and cannot be read
INFEASIBLE_CELL = "no feasible setting"  # the label of a heatmap's hatched cells


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=_DPI, bbox_inches="tight")
    return buffer.getvalue()


def objective_label(run: RunFolder) -> str:
    """The objective as the report says it, e.g. `overall MRR`."""
    metric, slice_ = run.objective
    return f"{slice_} {metric_label(metric)}"


def best_feasible_heatmap(run: RunFolder) -> Figure | None:
    """Per (rrf_k, half-life) cell, the best feasible objective over the min_similarity values evaluated there.

    A cell where every evaluated setting is infeasible is hatched grey, never coloured: its objective may be
    the highest of all, bought with a collapsed slice. Each coloured cell names the floor that gives its
    value; the best setting is boxed. None when no setting is feasible, or the run has no such grid (fewer
    than two values of either knob, or under half the cells evaluated, as when an optimiser samples).
    """
    if run.best is None:
        return None
    metric, slice_ = run.objective
    rows = run.grid.filter(pl.col("slice") == slice_)
    ks = sorted(rows[RRF_K].unique().to_list())
    hs = sorted(rows[HALF_LIFE].unique().to_list())
    cells = rows.select(RRF_K, HALF_LIFE).unique()
    if len(ks) < 2 or len(hs) < 2 or cells.height < _MIN_FILL * len(ks) * len(hs):
        return None
    best = (rows.filter(pl.col("feasible") & pl.col(metric).is_not_null())
            .sort([metric, "evaluation_order"], descending=[True, False])
            .group_by(RRF_K, HALF_LIFE, maintain_order=True).first())
    k_at, h_at = {k: i for i, k in enumerate(ks)}, {h: j for j, h in enumerate(hs)}
    values = np.full((len(ks), len(hs)), np.nan)
    floors: dict[tuple[int, int], float | None] = {}
    for k, h, value, floor in best.select(RRF_K, HALF_LIFE, metric, MIN_SIMILARITY).rows():
        values[k_at[k], h_at[h]], floors[(k_at[k], h_at[h])] = value, floor
    evaluated = np.zeros(values.shape, dtype=bool)
    evaluated[[k_at[k] for k in cells[RRF_K]], [h_at[h] for h in cells[HALF_LIFE]]] = True
    label = objective_label(run)
    fig = Figure(figsize=(min(2.5 + 0.75 * len(hs), 13), min(2 + 0.5 * len(ks), 12)))
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", aspect="auto", origin="lower")
    fig.colorbar(image, ax=ax, label=f"best feasible {label}")
    # Not `add_patch`: its data limits walk the path segment by segment, and the image has set them already.
    ax.add_artist(_hatched(*np.nonzero(evaluated & np.isnan(values))))
    chosen = run.knobs(run.best)
    x_at = labelled(len(hs), h_at[chosen.recency_half_life_days])
    y_at = labelled(len(ks), k_at[chosen.rrf_k])
    ax.set_xticks(x_at, [knob_label(HALF_LIFE, hs[j]) for j in x_at], rotation=45)
    ax.set_yticks(y_at, [str(ks[i]) for i in y_at])
    ax.set_xlabel(HALF_LIFE)
    ax.set_ylabel(RRF_K)
    if values.size <= 400:  # numbers stay legible up to about a 20 x 20 grid
        midpoint = np.nanmean([np.nanmin(values), np.nanmax(values)])
        for (i, j), floor in floors.items():
            v = values[i, j]
            ax.text(j, i, f"{v:.3f}\n@{knob_label(MIN_SIMILARITY, floor)}", ha="center", va="center",
                    fontsize=6.5, linespacing=1.1, color="black" if v > midpoint else "white")
    ax.add_patch(_box(h_at[chosen.recency_half_life_days], k_at[chosen.rrf_k]))
    ax.set_title(f"Best feasible {label} per (rrf_k, half-life) over min_similarity; hatched: {INFEASIBLE_CELL}\n"
                 f"in each cell: that {label} @ the min_similarity giving it; red box: the best setting",
                 fontsize=10)
    return fig


def _hatched(rows: np.ndarray, columns: np.ndarray) -> PathPatch:
    """The cells at (`rows`, `columns`), hatched grey, as one path: Agg then fills the hatch once, where a collection
    of cells fills it cell by cell (2,247 cells of a 50 x 50 grid: 1.0 s of the heatmap's 1.1) and leaves faint
    seams between them."""
    corners = np.array([(-0.5, -0.5), (0.5, -0.5), (0.5, 0.5), (-0.5, 0.5), (-0.5, -0.5)])
    vertices = (np.stack([columns, rows], axis=1)[:, None, :] + corners).reshape(-1, 2)
    codes = np.tile([Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY], len(rows))
    return PathPatch(Path(vertices, codes), facecolor="0.88", edgecolor="0.6", hatch="///", linewidth=0,
                     label=INFEASIBLE_CELL)


def labelled(n: int, marked: int) -> list[int]:
    """The positions, of `n`, an axis labels: every one up to TICK_LABELS, else that many evenly spread, always
    with the first, the last and the `marked` one (the setting the plot marks)."""
    if n <= TICK_LABELS:
        return list(range(n))
    return sorted({*np.linspace(0, n - 1, TICK_LABELS - 1).round().astype(int).tolist(), marked})


def _box(x: float, y: float) -> Rectangle:
    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2)


def slice_mrr_by_knob(run: RunFolder, knob_tables: dict[str, pl.DataFrame]) -> Figure:
    """Per knob, each slice's MRR (and overall's, dashed) against the knob's values, the other knobs at the
    chosen setting; values where that setting is infeasible are banded grey."""
    chosen = run.knobs(run.chosen)
    fig = Figure(figsize=(5 * len(knob_tables), 4.3), layout="constrained")
    axes = fig.subplots(1, len(knob_tables), squeeze=False)[0]
    for ax, (knob, table) in zip(axes, knob_tables.items()):
        x = range(table.height)
        for position, feasible in zip(x, table["feasible"].to_list()):
            if not feasible:
                ax.axvspan(position - 0.5, position + 0.5, color="0.85", linewidth=0, label="infeasible")
        for s in run.slices:
            column = "overall MRR" if s == OVERALL else f"{s} MRR"
            ax.plot(x, table[column].to_list(), marker="o", label=s,
                    linestyle="--" if s == OVERALL else "-", color="black" if s == OVERALL else None)
        labels = table[knob].to_list()
        marked = labels.index(knob_label(knob, getattr(chosen, knob)))
        at = labelled(len(labels), marked)
        ax.xaxis.set_major_locator(FixedLocator(at))
        ax.set_xticklabels([labels[i] for i in at], rotation=45 if len(at) > 6 else 0)
        ax.axvline(marked, color="red", alpha=0.3, linewidth=6)
        ax.set_xlabel(knob)
        ax.set_ylabel("MRR")
        ax.set_ylim(0, 1.02)
        others = ", ".join(f"{k} {knob_label(k, getattr(chosen, k))}" for k in KNOBS if k != knob)
        ax.set_title(f"{knob}, at {others}", fontsize=9)
    handles, names = [], []
    for ax in axes:  # one legend entry per name, the grey band included when any panel has one
        for handle, name in zip(*ax.get_legend_handles_labels()):
            if name not in names:
                handles.append(handle)
                names.append(name)
    axes[-1].legend(handles, names, loc="center left", bbox_to_anchor=(1.02, 0.5), title="slice")
    fig.suptitle(f"MRR per slice against one knob, the other two at the "
                 f"{'best' if run.best else 'baseline'} setting (red band); grey band: infeasible")
    return fig


def _set_scale(ax: Axes, knob: str, horizontal: bool) -> None:
    """A scale that keeps a knob's usual values apart: log rrf_k, symlog half-life (0 = off at the origin)."""
    set_scale = ax.set_xscale if horizontal else ax.set_yscale
    axis = ax.xaxis if horizontal else ax.yaxis
    if knob == RRF_K:
        set_scale("log")
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    elif knob == HALF_LIFE:
        set_scale("symlog", linthresh=1)
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    else:
        ticks = np.linspace(0, 1, 6)
        axis.set_major_locator(FixedLocator([_FLOOR_OFF_AT, *ticks]))
        axis.set_ticklabels(["off", *(f"{t:g}" for t in ticks)])


def _positions(values: list) -> np.ndarray:
    # Only min_similarity has a None (no floor); it sits left of 0 on its axis.
    return np.array([_FLOOR_OFF_AT if v is None else v for v in values], dtype=float)


def feasibility_map(run: RunFolder) -> Figure:
    """Which settings are feasible, projected on knob pairs: colour = feasible share over the hidden knob."""
    pairs = [(RRF_K, HALF_LIFE), (RRF_K, MIN_SIMILARITY)]
    fig = Figure(figsize=(12, 4.8), layout="constrained")
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
        ax.set_title(f"colour: share of the {hidden} values\nfeasible at each point", fontsize=9)
    fig.colorbar(points, ax=axes, label="share feasible")
    fig.suptitle(f"Where the feasible settings are (blue star: the {'best' if run.best else 'baseline'})")
    return fig


def objective_by_knob(run: RunFolder) -> Figure:
    """For scattered samples (an optimiser's trials): the objective of every setting against each knob,
    feasible as dots, infeasible as grey crosses, the best starred."""
    metric, slice_ = run.objective
    trials = run.grid.filter(pl.col("slice") == slice_)
    feasible = trials["feasible"].to_numpy()
    value = trials[metric].fill_null(np.nan).to_numpy()
    best = trials["setting_id"].to_numpy() == run.best
    label = objective_label(run)
    fig = Figure(figsize=(15, 4.3), layout="constrained")
    axes = fig.subplots(1, len(KNOBS), sharey=True)
    for ax, knob in zip(axes, KNOBS):
        x = _positions(trials[knob].to_list())
        _set_scale(ax, knob, horizontal=True)
        ax.scatter(x[feasible], value[feasible], s=22, color="tab:blue", label="feasible")
        ax.scatter(x[~feasible], value[~feasible], s=22, marker="x", color="0.6", label="infeasible")
        ax.scatter(x[best], value[best], marker="*", s=250, color="red", label="best")
        ax.set_xlabel(knob)
        ax.set_title(f"{label} against {knob}", fontsize=9)
    axes[0].set_ylabel(label)
    axes[-1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(f"{label} of every sampled setting against each knob (grey crosses: infeasible)")
    return fig


def optimisation_history(run: RunFolder) -> Figure:
    """The objective per trial in evaluation order: feasible, infeasible, and the best feasible so far."""
    metric, slice_ = run.objective
    trials = run.grid.filter(pl.col("slice") == slice_).sort("evaluation_order")
    order = trials["evaluation_order"].to_numpy()
    value = trials[metric].fill_null(np.nan).to_numpy()
    feasible = trials["feasible"].to_numpy()
    running = np.fmax.accumulate(np.where(feasible, value, np.nan))
    fig = Figure(figsize=(10, 4))
    ax = fig.add_subplot()
    ax.scatter(order[feasible], value[feasible], s=18, color="tab:blue", label="feasible")
    ax.scatter(order[~feasible], value[~feasible], s=18, marker="x", color="0.6", label="infeasible")
    ax.step(order, running, where="post", color="red", label="best feasible so far")
    ax.set_xlabel("trial (evaluation order)")
    ax.set_ylabel(objective_label(run))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title(f"{objective_label(run)} per trial, in the order the optimiser tried them")
    return fig
