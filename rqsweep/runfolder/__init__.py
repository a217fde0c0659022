"""A run folder, `results/<name>/<run id>/`, and its files (folder.py names them all, and the four that lower layers
write: the backends' start and seed, the optimiser's journal, an embedder sweep's runs).

    folder.py    its name, its lock, the names of its files
    record.py    run.json: the run's record and the schema of that contract (start, resume, mark, finish)
    state.py     the resumable state: per-query rows in Parquet parts under state/
    tables.py    grid.parquet, queries.parquet, hits.parquet, ranked.parquet, settings.parquet,
                 label_health.parquet, routing.json, and their metadata; tables read back whole, in parts
                 or lazily (label health, the union of an embedder sweep's runs)
    settings.py  settings.parquet's table: the grid turned wide, every slice's change from the baseline
    finished.py  a finished run read back (and refused when it is not finished)

The report's two files are written by `rqsweep.report`, from what `finished.read_run_folder` reads.
"""

from rqsweep.runfolder.finished import RunFolder, check_finished, read_run_folder
from rqsweep.runfolder.folder import (GRID, HITS, JUDGMENTS, LABEL_HEALTH, LOCK_FILE, QUERIES, RANKED, RUN_JSON,
                                      holding, new_run_folder)
from rqsweep.runfolder.record import RunRecord, mark, redact, run_folder_of
from rqsweep.runfolder.state import RunState

__all__ = ["GRID", "HITS", "JUDGMENTS", "LABEL_HEALTH", "LOCK_FILE", "QUERIES", "RANKED", "RUN_JSON", "RunFolder",
           "RunRecord", "RunState", "check_finished", "holding", "mark", "new_run_folder", "read_run_folder", "redact",
           "run_folder_of"]
