"""`rqsweep export RUN_DIR --setting best|baseline|ID --format trec`: one setting's ranked lists as a TREC run
file, and the golden set's qrels, for trec_eval, pytrec_eval, ir_measures, ranx or PyTerrier.

The run file keeps SOAT's slot positions, so a reference scorer given it and the qrels computes what the grid
holds: a document's first slot carries its key, a later slot of the same document carries `KEY#POSITION`, which
no qrel names (SOAT's hit is the first slot any chunk of the document holds, and later chunks still cost their
slots). Scores are `limit + 1 - position`, strictly decreasing, because trec_eval orders tied scores by doc id
where SOAT keeps the server's order. Keys holding whitespace or `%` are written percent-encoded (`%20`, `%25`),
in both files alike, since TREC's columns are separated by whitespace.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence


from rqsweep.errors import InputError
from rqsweep.files import write_text
from rqsweep.golden import GoldenSet
from rqsweep.report.explain import Recompute, stored_lists
from rqsweep.runfolder import RunFolder, read_run_folder

FORMATS = ("trec",)


def docno(key: str) -> str:
    return re.sub(r"[%\s]", lambda m: f"%{ord(m.group()):02X}", key)


def run_lines(query_id: str, keys: Sequence[str], tag: str) -> list[str]:
    """TREC run lines (`query-id Q0 doc-id rank score tag`) for one ranked list of slots' keys, best first."""
    seen: set[str] = set()
    lines = []
    for position, key in enumerate(keys, 1):
        name = docno(key) if key not in seen else f"{docno(key)}#{position}"
        seen.add(key)
        lines.append(f"{docno(query_id)} Q0 {name} {position} {len(keys) + 1 - position} {tag}")
    return lines


def qrels_lines(golden: GoldenSet) -> list[str]:
    """TREC qrels (`query-id 0 doc-id grade`) of every expected item."""
    return [f"{docno(q.id)} 0 {docno(e.key)} {e.grade}" for q in golden.queries for e in q.expected]


def setting_of(run: RunFolder, setting: str) -> str:
    """`best` (the chosen setting; the baseline when none is feasible), `baseline`, or a setting id of the grid."""
    if setting in ("best", "baseline"):
        return run.chosen if setting == "best" else run.baseline
    known = run.grid["setting_id"].unique(maintain_order=True).to_list()
    if setting not in known:
        raise InputError("--setting", "", f"{setting!r}: not a setting of this run (best, baseline, or an id such as "
                                          f"{', '.join(known[:3])})")
    return setting


def export(run_dir: Path, setting: str, output_dir: Path | None = None, fmt: str = "trec") -> tuple[Path, Path, int]:
    """Write `<setting>.run` and `qrels.txt` into `output_dir` (default the run folder); returns both paths and
    how many failed searches were left out of the run file."""
    if fmt not in FORMATS:
        raise InputError("--format", "", f"{fmt!r}: formats written: {', '.join(FORMATS)}")
    run = read_run_folder(run_dir)
    sid = setting_of(run, setting)
    recompute = Recompute(run)
    golden = recompute.inputs.golden
    lists = stored_lists(run, sid)
    if lists is None:
        lists = recompute.all_ranked(run.knobs(sid))
    tag = f"rqsweep-{sid}"
    lines, failed = [], 0
    for q in golden.queries:
        hits = lists.get(q.id, [])
        if isinstance(hits, str):
            failed += 1
            continue
        lines += run_lines(q.id, [h.key for h in hits], tag)
    out = Path(output_dir) if output_dir is not None else run.path
    run_file, qrels_file = out / f"{sid}.run", out / "qrels.txt"
    write_text(run_file, "".join(f"{line}\n" for line in lines))
    write_text(qrels_file, "".join(f"{line}\n" for line in qrels_lines(golden)))
    return run_file, qrels_file, failed
