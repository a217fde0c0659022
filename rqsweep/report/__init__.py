"""Reports people read: `report.md` and a self-contained `report.html` in a run folder, built from its Parquet files."""

from __future__ import annotations

from pathlib import Path

from rqsweep.report import document
from rqsweep.report.render import to_html, to_markdown
from rqsweep.files import write_text
from rqsweep.progress import Phase, silent_phase
from rqsweep.runfolder import read_run_folder

__all__ = ["write_report"]


def write_report(run_dir: Path, *, finished: bool = True, phase: Phase = silent_phase,
                 made: document.Made = document.Made()) -> tuple[Path, Path]:
    """Write `report.md` and `report.html` into `run_dir` from its grid.parquet and queries.parquet alone,
    showing its progress as `phase` (`Progress.phase`) does; `made`: what the run's job made already (the noise
    figures as it evaluated, `rqsweep.decide.noise.noise_of`; the knob ranges it printed).

    Returns (markdown path, html path). Raises InputError when `run_dir` is not a finished run folder
    (`finished=False`: the run writing its own report before it marks its folder complete).
    """
    run = read_run_folder(run_dir, finished=finished)
    blocks = document.build(run, phase(document.STEPS, f"{run.name} report", "parts"), made)
    md, page = run_dir / "report.md", run_dir / "report.html"
    write_text(md, to_markdown(blocks))
    write_text(page, to_html(blocks, f"rqsweep report: {run.name} {run.run_id}"))
    return md, page
