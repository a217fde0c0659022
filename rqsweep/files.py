"""Reading the files users hand rqsweep: one place for their I/O, encoding and syntax errors."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rqsweep.errors import InputError


def read_data(path: Path, what: str) -> tuple[bytes, object]:
    """The bytes and the parsed content of a YAML, JSON or JSON-lines file (chosen by its suffix).

    Every failure is an `InputError` naming the file (and the line where the parser says).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(path, "", f"cannot read {what}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, "", f"not UTF-8 text (byte {exc.start})") from None
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise InputError(path, f"line {n}", f"not valid JSON: {exc.msg}") from None
        return raw, rows
    if suffix == ".json":
        try:
            return raw, json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(path, "", f"not valid JSON: {exc.msg} (line {exc.lineno})") from None
    try:
        return raw, yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(path, "", f"not valid YAML: {exc}") from None
