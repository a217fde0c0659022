"""The config's rule for the slice of each query (`golden.slices`): a field of the query, a sidecar file, or a
pattern on the id."""

from __future__ import annotations

import re
from pathlib import Path

from rqsweep.config import SliceRule
from rqsweep.errors import InputError, shown
from rqsweep.golden.rows import Layout

SINGLE_SLICE = "all"
NO_SLICES_WARNING = (f"the golden set has no slices: every query runs as one slice {SINGLE_SLICE!r}. Slices are what "
                     "protects against a collapse (a setting that lifts the average while one kind of query falls "
                     "apart): give them a column, or a `golden.slices` rule (field, file or pattern)")


def _sidecar(path: Path, layout: Layout, golden: Path) -> tuple[bytes, dict[str, str]]:
    try:
        raw = path.read_bytes()
        content = raw.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, "", f"cannot read the slice file: {getattr(exc, 'strerror', None) or exc}") from None
    known = {r.id for r in layout.rows}.union(layout.unjudged)
    out = {}
    for n, line in enumerate(content.splitlines(), 1):
        if not line.strip() or n == 1 and line.lower().replace("_", "-").startswith("query-id\t"):
            continue
        qid, tab, slice_ = line.partition("\t")
        qid, slice_ = qid.strip(), slice_.strip()
        if not tab or not slice_:
            raise InputError(path, f"line {n}", f"expected query-id<TAB>slice, got {shown(line)}")
        if qid in out:
            raise InputError(path, f"line {n}", f"query {shown(qid)} is given a slice twice")
        if qid not in known:  # a typo in an id would leave its query to another line, or to no slice
            raise InputError(path, f"line {n}", f"query {shown(qid)} is not in the golden set {golden.name}")
        out[qid] = slice_
    return raw, out


def assign_slices(layout: Layout, rule: SliceRule | None, config: Path | None, golden: Path) -> tuple[str, ...]:
    """Give every row its slice (the rule's, when the config states one); returns the warnings. A sidecar file
    joins the files the layout's hash covers, and names queries of the golden set (at `golden`) only."""
    rows = layout.rows
    if rule is None:
        if all(r.slice is None for r in rows):
            for r in rows:
                r.slice = SINGLE_SLICE
            return (NO_SLICES_WARNING,)
        for r in rows:
            if r.slice is None:
                raise InputError(r.file, f"{r.where}.slice", "is missing (other queries have one)")
        return ()
    sidecar = None
    if rule.file:
        raw, sidecar = _sidecar(rule.file, layout, golden)
        layout.raw.append(raw)
    pattern = re.compile(rule.pattern) if rule.pattern else None
    for r in rows:
        if sidecar is not None:
            found, where = sidecar.get(r.id), (rule.file, "")
        elif pattern is not None:
            match = pattern.search(r.id)
            found = match and (match.groupdict().get("slice") or match.group(1))
            where = (config, "golden.slices.pattern")
        else:
            value = r.fields.get(rule.field)
            found = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
            where = (config, "golden.slices.field")
        if not found:
            raise InputError(where[0], where[1], f"gives query {shown(r.id)} no slice")
        r.slice = found
    return ()
