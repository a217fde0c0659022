"""Does the decision hold across embedders: each embedder's best feasible setting, and the robust choice with its
per-slice cost under each. Built from a sweep over several embedders' combined grid (rqsweep/embedder_sweep.py)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from rqsweep.decide.constraints import Robust, SliceMeans, Verdicts, choose_robust
from rqsweep.golden import OVERALL
from rqsweep.metrics import get as metric
from rqsweep.report.render import Block, Heading, Paragraph, Table


@dataclass(frozen=True)
class EmbedderSweep:
    """The combined grid of a sweep over several embedders and what the run chose."""

    grid: pl.DataFrame  # every embedder's grid.parquet rows, with their `embedder` column
    baseline: str
    objective: tuple[str, str]  # (metric, slice)
    identities: dict[str, str]  # label -> what ranked (the embedder's identity)

    @property
    def labels(self) -> list[str]:
        return self.grid["embedder"].unique(maintain_order=True).to_list()

    def robust(self) -> Robust:
        runs = {}
        metric_name = self.objective[0]
        for label in self.labels:
            rows = self.grid.filter(pl.col("embedder") == label).sort("evaluation_order", maintain_order=True)
            settings = rows["setting_id"].unique(maintain_order=True).to_list()
            slices = [s for s in rows["slice"].unique(maintain_order=True).to_list() if s != OVERALL]
            means = SliceMeans.from_frame(rows, settings, slices, [metric_name])
            infeasible = ~rows.filter(pl.col("slice") == OVERALL)["feasible"].to_numpy()  # in `settings` order
            runs[label] = (means, Verdicts(["infeasible"], infeasible.reshape(-1, 1), None))
        return choose_robust(runs, self.baseline, self.objective)


def _row(grid: pl.DataFrame, label: str, setting: str, slice_: str, column: str) -> float | None:
    hit = grid.filter((pl.col("embedder") == label) & (pl.col("setting_id") == setting) & (pl.col("slice") == slice_))
    return hit[column][0] if hit.height else None


def blocks(sweep: EmbedderSweep, robust: Robust) -> list[Block]:
    """The report section; `robust` is `sweep.robust()` (the run computes it once)."""
    grid, (name, objective_slice) = sweep.grid, sweep.objective
    label = metric(name).label
    bests = grid.filter(pl.col("is_best") & (pl.col("slice") == objective_slice))
    best_of = dict(zip(bests["embedder"], bests["setting_id"]))
    overview = pl.DataFrame([{
        "embedder": e, "ranked by": sweep.identities.get(e, ""),
        f"baseline {label}": _row(grid, e, sweep.baseline, objective_slice, name),
        "best feasible": best_of.get(e, "none"),
        f"best {label}": _row(grid, e, best_of[e], objective_slice, name) if e in best_of else None,
        "robust choice feasible": None if robust.setting is None else _row(grid, e, robust.setting, OVERALL, "feasible"),
        f"robust {label}": None if robust.setting is None else _row(grid, e, robust.setting, objective_slice, name),
    } for e in sweep.labels])
    out: list[Block] = [Heading("Does the decision hold across embedders"), Paragraph(
        f"Each embedder ran the same sweep against its own baseline and constraints. The robust choice is feasible "
        f"under every embedder and maximises the worst embedder's {label}[{objective_slice}]."), Table(overview)]
    if robust.setting is None:
        return out + [Paragraph("No setting is feasible under every embedder: the decision depends on the embedder. "
                                "Tune for the one the deployment serves.")]
    agreeing = [e for e, s in best_of.items() if s == robust.setting]
    out.append(Paragraph(
        f"Robust choice: {robust.setting} (worst {label}[{objective_slice}] {robust.worst:.4f}; "
        f"{robust.feasible_everywhere} settings are feasible under every embedder). It is "
        + (f"the best under {', '.join(agreeing)}." if agreeing else "no embedder's own best.")))
    slices = grid["slice"].unique(maintain_order=True).to_list()
    for e in sweep.labels:
        cost = pl.DataFrame([{
            "slice": s, f"baseline {label}": _row(grid, e, sweep.baseline, s, name),
            f"own best {label}": _row(grid, e, best_of[e], s, name) if e in best_of else None,
            f"robust {label}": _row(grid, e, robust.setting, s, name),
        } for s in slices]).with_columns(
            (pl.col(f"robust {label}") - pl.col(f"own best {label}")).alias("Δ robust vs own best"))
        out += [Heading(f"Under {e}", 3), Table(cost)]
    return out
