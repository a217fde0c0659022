"""The nightly gate: does a run's chosen setting still do as well, slice by slice, as before?

Checks, on the chosen setting (the best feasible one; the baseline when none is feasible):
- structure: every slice has its metrics, and no slice's recall@10 or MRR is zero;
- direction, against a previous run and/or a gate file: no slice's recall@10 or MRR fell by more
  than the tolerance. Values are rounded to 4 decimals before comparing, as SOAT's own gate does,
  so float noise never fails a run. Absolute values are never pinned: only falls count.

Two runs are compared only when the same kind of ranking produced them: their backends, embedders and
server profiles (`backends.base.comparable_profile`) must agree, unless the caller allows a different
one. A change of golden set or corpus is stated above the table: the numbers may have moved with it.

A gate file is the committed form of "before": a small JSON of the chosen setting's per-slice
metrics, one slice per line, so that the diff of a ranking change reads as a before / after table,
with the server profile and the corpus hash of the run it was written from. A value that is not a
metric (null, not finite, outside [0, 1]), a metric the file format does not hold, an unknown format marker or
a key given twice makes the file invalid, never a pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from rqsweep import metrics
from rqsweep.backends.base import describe_profile, differing_keys, profile_differences
from rqsweep.errors import InputError, NotComparable, shown
from rqsweep.files import write_text
from rqsweep.gate.significant import METHOD, MIN_PAIRS, paired_rows
from rqsweep.golden import OVERALL
from rqsweep.report.noise import run_noise, tolerance_warnings
from rqsweep.runfolder import GRID, RunFolder, read_run_folder

GATED_METRICS = {m: metrics.get(m).label for m in metrics.GATED}
FILE_METRICS = ("queries", *metrics.DEFAULT_METRICS)
DECIMALS = 4
GATE_FILE_FORMAT = 1
RANGES = "numeric_range"
FORMAT_KEY = "rqsweep_gate_file"  # the format marker a gate file starts with; absent in a file written by hand


@dataclass(frozen=True)
class Snapshot:
    """The per-slice metrics of one chosen setting, from a run folder or a gate file."""

    source: str  # what it is, for the reader: "run <id>" or "gate file <path>"
    file: Path  # what an error about it names: the run's grid.parquet, or the gate file
    setting: str  # the setting's label
    golden_sha256: str
    slices: dict[str, dict[str, float | None]]  # slice -> metric -> value
    profile: dict | None  # the server profile that ranked (`backends.base`); None when not recorded
    corpus_sha256: str | None  # `Corpus.sha256`; None when not recorded
    # slice -> metric -> [low, high]: the values with every numerically sensitive query at its worst and its best
    # (`verdict.numeric_range`); None when not recorded (exact numerics, a server, an older run)
    ranges: dict[str, dict[str, list[float]]] | None = None


@dataclass(frozen=True)
class GateResult:
    """The verdict: `passed`, the slices that failed, one sentence per problem, and the text to print."""

    passed: bool
    failing_slices: tuple[str, ...]
    problems: tuple[str, ...]
    text: str


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, DECIMALS)


def _snapshot(run: RunFolder) -> Snapshot:
    """The verdict's setting (the chosen one in a run written before rqsweep kept a verdict)."""
    rows = run.slice_rows(run.decided)
    note = "" if run.best else " (no feasible setting: the baseline)"
    decision = run.record.decision if isinstance(run.record.decision, dict) else {}
    return Snapshot(f"run {run.run_id}", run.path / GRID, run.label(run.decided) + note,
                    rows[OVERALL]["golden_sha256"],
                    {s: {m: rows.get(s, {}).get(m) for m in FILE_METRICS} for s in run.slices},
                    run.server_profile, run.corpus_sha256, decision.get("numeric_range"))


def run_snapshot(run_dir: Path) -> Snapshot:
    """The chosen setting of a finished run, read from its grid.parquet."""
    return _snapshot(read_run_folder(run_dir))


class _JsonObject(dict):
    """A JSON object as read, with the keys it held more than once (`json` keeps the last one, silently)."""

    repeated: tuple[str, ...] = ()


def _json_object(pairs: list[tuple[str, object]]) -> _JsonObject:
    read = _JsonObject(pairs)
    if len(read) < len(pairs):
        seen: set[str] = set()
        read.repeated = tuple(k for k, _ in pairs if k in seen or seen.add(k))
    return read


def _repeated_key(value: object, where: str = "") -> str | None:
    """The path of the first key some object of `value` holds twice, or None."""
    if isinstance(value, _JsonObject):
        if value.repeated:
            return f"{where}.{value.repeated[0]}".lstrip(".")
        inner = ((f"{where}.{k}".lstrip("."), v) for k, v in value.items())
    elif isinstance(value, list):
        inner = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    return next((found for at, v in inner if (found := _repeated_key(v, at)) is not None), None)


def _checked_slice(path: Path, name: str, values: object) -> dict:
    if not isinstance(values, dict):
        raise InputError(path, f"slices.{name}", f"{shown(values)}: expected {{metric: value}}")
    for m, value in values.items():
        if m not in FILE_METRICS:
            raise InputError(path, f"slices.{name}.{m}", f"unknown metric: a gate file holds {', '.join(FILE_METRICS)}")
        if m == "queries":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(path, f"slices.{name}.{m}", f"{shown(value)}: expected a count of queries")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            # NaN fails the range test too: a gate file's values are metrics of a feasible setting, never missing.
            raise InputError(path, f"slices.{name}.{m}", f"{shown(value)}: expected a number from 0 to 1")
    for m in GATED_METRICS:
        if m not in values:
            raise InputError(path, f"slices.{name}.{m}", "missing: the gate compares it")
    return values


def read_gate_file(path: Path) -> Snapshot:
    """A gate file written by `write_gate_file`; raises InputError naming what is wrong."""
    try:
        data = json.loads(path.read_text(), object_pairs_hook=_json_object)
    except FileNotFoundError:
        raise InputError(path, "", "no such gate file: create it with --update-gate-file") from None
    except IsADirectoryError:
        raise InputError(path, "", "a folder, not a gate file: give the JSON file --update-gate-file writes (a run "
                         "folder to compare with goes as PREVIOUS_RUN_DIR, or --compare)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, "", f"not valid JSON: {exc}") from None
    if (repeated := _repeated_key(data)) is not None:
        raise InputError(path, repeated, "given twice: JSON keeps only the last, silently; keep the one you mean")
    marker = data.get(FORMAT_KEY) if isinstance(data, dict) else None
    if marker is not None and (isinstance(marker, bool) or marker != GATE_FILE_FORMAT):
        raise InputError(path, FORMAT_KEY, f"{shown(marker)}: an unknown gate file format (this rqsweep reads "
                         f"{GATE_FILE_FORMAT}): use the rqsweep that wrote it, or rewrite it with --update-gate-file")
    slices = data.get("slices") if isinstance(data, dict) else None
    if not isinstance(slices, dict) or not slices:
        raise InputError(path, "slices", "missing: expected {slice: {metric: value}}")
    for key, kind in (("setting", str), ("golden_sha256", str), ("corpus_sha256", str), ("server_profile", dict)):
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise InputError(path, key, f"{shown(data[key])}: expected {'a string' if kind is str else 'an object'}")
    return Snapshot(f"gate file {path}", path, str(data.get("setting", "?")), data.get("golden_sha256") or "",
                    {name: _checked_slice(path, name, values) for name, values in slices.items()},
                    data.get("server_profile"), data.get("corpus_sha256"), _checked_ranges(path, data.get(RANGES)))


def _checked_ranges(path: Path, ranges: object) -> dict | None:
    if ranges is None:
        return None
    if not isinstance(ranges, dict):
        raise InputError(path, RANGES, f"{shown(ranges)}: expected {{slice: {{metric: [low, high]}}}}")
    for name, by_metric in ranges.items():
        for m, pair in (by_metric.items() if isinstance(by_metric, dict) else [("", by_metric)]):
            numbers = isinstance(pair, list) and len(pair) == 2 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in pair)
            if m not in GATED_METRICS or not numbers or pair[0] > pair[1]:
                raise InputError(path, f"{RANGES}.{name}.{m}".rstrip("."), f"{shown(pair)}: expected a gated metric "
                                 f"({', '.join(GATED_METRICS)}) and its [low, high], each from 0 to 1")
    return ranges


def _structure(now: Snapshot, expected: set[str]) -> list[tuple[str, str]]:
    problems = []
    for s in sorted(expected - now.slices.keys()):
        problems.append((s, f"{s}: no metric in this run (the slice is gone)"))
    for s, values in now.slices.items():
        missing = [label for m, label in GATED_METRICS.items() if values.get(m) is None]
        zero = [label for m, label in GATED_METRICS.items() if _rounded(values.get(m)) == 0]
        if missing:
            problems.append((s, f"{s}: no {' or '.join(missing)} (every search of the slice failed)"))
        if zero:
            problems.append((s, f"{s}: {' and '.join(zero)} at zero"))
    return problems


def _cell(column: str, value: object) -> str:
    """A value as the gate compares it: numbers at DECIMALS places (differences signed), none as `–`."""
    if value is None:
        return "–"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:+.{DECIMALS}f}" if column.endswith("Δ") else f"{value:.{DECIMALS}f}"
    return str(value)


def _table(rows: list[dict[str, object]]) -> str:
    """Rows as a Markdown table padded to aligned columns (numbers right), so that it reads in a CI log too."""
    columns = list(rows[0])
    cells = [[_cell(c, row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[j]) for r in cells)]) for j, c in enumerate(columns)]
    right = [c not in ("slice", "check") for c in columns]

    def line(values: list[str]) -> str:
        return "| " + " | ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)) + " |"

    rule = "| " + " | ".join("-" * (w - 1) + ":" if r else "-" * w for w, r in zip(widths, right)) + " |"
    return "\n".join([line(columns), rule, *map(line, cells)])


def _compare(before: Snapshot, now: Snapshot, tolerance: float,
             within_ranges: bool = False) -> tuple[str, list[tuple[str, str]]]:
    """The before / after table of one reference, and the slices that fell by more than the tolerance; with
    `within_ranges` (two platforms' numerics), by more than it even with every numerically sensitive query at
    its worst before and at its best now."""

    def bound(snapshot: Snapshot, s: str, m: str, end: int) -> float | None:
        ranges = (snapshot.ranges or {}).get(s, {}).get(m) if within_ranges else None
        return _rounded(ranges[end] if ranges else (snapshot.slices.get(s) or {}).get(m))

    rows, problems = [], []
    for s in sorted(before.slices.keys() | now.slices.keys(), key=lambda s: (s == OVERALL, s)):
        row: dict[str, object] = {"slice": s}
        fell = []
        for m, label in GATED_METRICS.items():
            a = _rounded((before.slices.get(s) or {}).get(m))
            b = _rounded((now.slices.get(s) or {}).get(m))
            delta = None if a is None or b is None else round(b - a, DECIMALS)
            row |= {f"{label} before": a, f"{label} after": b, f"{label} Δ": delta}
            low, high = bound(before, s, m, 0), bound(now, s, m, 1)
            if low is not None and high is not None and round(low - high, DECIMALS) > tolerance:
                fell.append(f"{label} {a:.4f} -> {b:.4f}" + (f" (at best {high:.4f} against at worst {low:.4f})"
                                                             if within_ranges else ""))
        if fell:
            row["check"] = "FELL"
            problems.append((s, f"{s}: {', '.join(fell)} (fell by more than {tolerance:g} against "
                                f"{before.source})"))
        elif s not in before.slices:
            row["check"] = "new"
        elif any(row[f"{label} after"] is None for label in GATED_METRICS.values()):
            row["check"] = "missing"
        else:
            row["check"] = "ok"
        rows.append(row)
    header = f"Before: {before.source}, {before.setting}\nAfter:  {now.source}, {now.setting}"
    for what, a, b in (("golden set", before.golden_sha256, now.golden_sha256),
                       ("corpus", before.corpus_sha256, now.corpus_sha256)):
        if a and b and a != b:
            header += f"\nwarning: the {what} differs between the two (sha256 {a[:12]} -> {b[:12]}); a change may be " \
                      f"the {what}'s, not the ranking's"
    return header + "\n" + _table(rows), problems


def _worse_queries(run: RunFolder, previous: RunFolder, slices: tuple[str, ...]) -> str:
    """The failing slices' queries whose first relevant rank at the chosen setting is worse than at the previous
    run's (not found counts as worst), one line per slice; empty when there are none."""
    def ranks(folder: RunFolder) -> pl.DataFrame:
        return folder.queries([folder.chosen]).filter(pl.col("error").is_null()).select(
            "query_id", "query", "slice", "rank")

    worse = ranks(run).join(ranks(previous).drop("slice"), on=["query_id", "query"], suffix="_before").filter(
        (pl.col("rank_before") > 0) & ((pl.col("rank") == 0) | (pl.col("rank") > pl.col("rank_before"))))
    lines = []
    for s in slices:
        part = worse if s == OVERALL else worse.filter(pl.col("slice") == s)
        named = [f"{q} (rank {a} -> {b or 'not found'})" for q, a, b in part.select("query_id", "rank_before",
                                                                                    "rank").rows()]
        if named:
            lines.append(f"  {s}: {', '.join(named)}")
    if not lines:
        return ""
    return "\n".join([f"Queries worse than in run {previous.run_id}, in the failing slices (`rqsweep explain RUN_DIR "
                      "QUERY_ID` shows why):", *lines])


def _numerics_only(before: Snapshot, now: Snapshot) -> bool:
    """Whether the two differ only in their numerics (the same model on two machines' math)."""
    return before.profile is not None and now.profile is not None and \
        differing_keys(before.profile, now.profile) == ["numerics"]


def _profile_note(before: Snapshot, now: Snapshot, allow_different: bool) -> str | None:
    """None when both were measured the same way; a note when allowed to differ or only their numerics do;
    NotComparable otherwise."""
    if now.profile is None or before.profile is None:
        return (f"note: {(before if before.profile is None else now).source} records no server profile "
                "(written before rqsweep kept one): whether both were ranked alike is not checked")
    differences = profile_differences(before.profile, now.profile)
    if not differences:
        return None
    if _numerics_only(before, now):
        return (f"note: {before.source} and {now.source} ran the same model on different math ({differences[0]}: "
                "the C library's); their figures differ where a rank moves within the model's precision, so a "
                "slice fails only if it fell by more than the tolerance with every numerically sensitive query at "
                "its worst before and its best now"
                + ("" if before.ranges and now.ranges else f" ({(now if before.ranges else before).source} records "
                   "no such range: its exact figures stand in)"))
    both = (f"{before.source} was measured on {describe_profile(before.profile)}; {now.source} on "
            f"{describe_profile(now.profile)} ({'; '.join(differences)})")
    if allow_different:
        return f"warning: {both} (compared as asked by --allow-different)"
    raise NotComparable(before.file, "server_profile" if before.file.suffix == ".json" else "rqsweep.server_profile",
                        f"{both}: their numbers measure different rankings, so the gate does not compare them "
                        "(exit 6); pass --allow-different to compare anyway")


def gate(current: Path, previous: Path | None, gate_file: Path | None, tolerance: float,
         allow_different: bool = False, mode: str = "exact") -> GateResult:
    """Gate run folder `current` against a previous run folder and/or a gate file (either may be None).

    Structure is always checked; direction against each reference given: in `mode` "exact", any fall beyond
    the tolerance; in "significant", a significant paired regression against `previous` (`gate_significance`),
    which refuses a gate file. A reference measured with another backend, embedder or server profile raises
    InputError unless `allow_different`.
    """
    if mode == "significant" and (previous is None or gate_file is not None):
        raise InputError(gate_file or current, "--gate-mode", "significant: pairs per-query values with a previous "
                         "run folder (PREVIOUS_RUN_DIR, --compare); a gate file holds none: gate it in exact mode")
    run = read_run_folder(current)
    now = _snapshot(run)
    previous_run = read_run_folder(previous) if previous is not None else None
    references = [_snapshot(previous_run)] if previous_run is not None else []
    if gate_file is not None:
        references.append(read_gate_file(gate_file))
    notes = [note for ref in references if (note := _profile_note(ref, now, allow_different))]
    problems = _structure(now, set().union(*(ref.slices.keys() for ref in references)))
    sections = []
    for ref in references:
        table, fell = _compare(ref, now, tolerance, _numerics_only(ref, now))
        sections.append(table)
        if mode == "exact":
            problems += fell
    if mode == "significant":
        rows, regressed, paired = paired_rows(run, previous_run)
        if paired < MIN_PAIRS:
            raise InputError(previous, "--gate-mode", f"significant: {paired} queries ran in both runs (the same id "
                             f"and text, neither search failed); a paired test needs at least {MIN_PAIRS}, so no "
                             "regression could be found and the gate cannot pass: compare with a run of the same "
                             "golden set, or gate in exact mode")
        sections.append(f"Paired per query against run {references[0].source.removeprefix('run ')} "
                        f"({paired} queries ran in both; the table above is for reading, not the verdict):\n"
                        + _table(rows))
        problems += regressed
        said = f"Gate mode: significant ({METHOD})."
    else:
        said = "\n".join([f"Gate mode: exact (fails on any fall beyond the tolerance {tolerance:g}, at {DECIMALS} "
                          "decimals).", *tolerance_warnings(tolerance, run_noise(run, list(GATED_METRICS)))])
    failing = tuple(dict.fromkeys(s for s, _ in problems))
    if problems:
        verdict = f"Gate FAILED: {', '.join(failing)}\n" + "\n".join(f"  {p}" for _, p in problems)
        if previous_run is not None and (worse := _worse_queries(run, previous_run, failing)):
            verdict += "\n" + worse
    elif mode == "significant":
        verdict = ("Gate passed: every slice has its metrics, none is at zero, and none regressed significantly "
                   "against the previous run.")
    else:
        verdict = (f"Gate passed: every slice has its metrics, none is at zero, and none fell by more than "
                   f"{tolerance:g} (compared at {DECIMALS} decimals).")
    return GateResult(not problems, failing, tuple(p for _, p in problems),
                      "\n\n".join([*notes, said, *sections, verdict]))


def _json_number(metric: str, value: float | None) -> str:
    # Fixed decimals keep the slices' lines aligned, so that a diff of them reads like a table.
    if value is None:
        return "null"
    return str(value) if metric == "queries" else f"{value:.{DECIMALS}f}"


def _profile_kept(profile: dict | None) -> dict | None:
    return None if profile is None else {k: v for k, v in profile.items() if k != "base_url"}


def gate_file_text(snapshot: Snapshot, run_id: str, config: str) -> str:
    """A gate file's text: stable key order and one slice per line, so a diff reads as before / after."""
    width = max(len(json.dumps(s)) for s in snapshot.slices) + 1
    lines = [
        "{",
        f'  "{FORMAT_KEY}": {GATE_FILE_FORMAT},',
        f'  "config": {json.dumps(config)},',
        f'  "run_id": {json.dumps(run_id)},',
        f'  "golden_sha256": {json.dumps(snapshot.golden_sha256)},',
        f'  "corpus_sha256": {json.dumps(snapshot.corpus_sha256)},',
        # Where the server was is the machine's business, not the committed file's.
        f'  "server_profile": {json.dumps(_profile_kept(snapshot.profile), sort_keys=True)},',
        f'  "setting": {json.dumps(snapshot.setting)},',
        '  "slices": {',
    ]
    names = sorted(snapshot.slices, key=lambda s: (s == OVERALL, s))
    for i, s in enumerate(names):
        metrics = ", ".join(f'"{m}": {_json_number(m, snapshot.slices[s][m])}' for m in FILE_METRICS)
        comma = "," if i < len(names) - 1 else ""
        lines.append(f"    {(json.dumps(s) + ':').ljust(width)} {{{metrics}}}{comma}")
    ranged = [s for s in names if s in (snapshot.ranges or {})]
    if ranged:  # the figures another machine's math may give (`numeric_range`), for a gate run there
        lines += ["  },", f'  "{RANGES}": {{']
        for i, s in enumerate(ranged):
            pairs = ", ".join(f'"{m}": [{_json_number(m, snapshot.ranges[s][m][0])}, '
                              f'{_json_number(m, snapshot.ranges[s][m][1])}]'
                              for m in GATED_METRICS if m in snapshot.ranges[s])
            lines.append(f"    {(json.dumps(s) + ':').ljust(width)} {{{pairs}}}{',' if i < len(ranged) - 1 else ''}")
    return "\n".join([*lines, "  }", "}"]) + "\n"


def write_gate_file(run_dir: Path, path: Path) -> str | None:
    """(Re)write the gate file at `path` from a finished run's chosen setting.

    Returns the before / after table against the file's previous content, or None when there was none.
    Raises InputError for a run without a feasible setting: it has no chosen setting to accept.
    """
    run = read_run_folder(run_dir)
    if run.best is None:
        raise InputError(run_dir / GRID, "", f"no feasible setting: nothing to write into {path}")
    now = _snapshot(run)
    before = read_gate_file(path) if path.exists() else None
    text = gate_file_text(now, run.run_id, run.name)
    write_text(path, text)  # atomic: a committed file is never left half-written
    return None if before is None else _compare(before, now, float("inf"))[0]
