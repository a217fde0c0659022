"""A corpus from a folder of Markdown and plain-text pages.

The key is the page's path relative to the folder, the title its first heading. Optional YAML front matter
(between `---` lines at the top) gives `title`, `path` (SOAT's document path; default `/` + the key) and `tags`,
or marks the page as a memory: `memory: STORE` with `updated_at` (a time) or `age_days`. A memory's age is counted
to the corpus's `as_of` (default: the newest `updated_at` among its memories), so a run measures the same ages on
any day and `--resume` finds its inputs unchanged.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path
from typing import Callable

from rqsweep.config import CorpusFiles, parse_time
from rqsweep.corpus.model import Corpus, Document, Memory, age_days
from rqsweep.errors import InputError, shown
from rqsweep.files import load_yaml

FRONT_MATTER = ("title", "path", "tags", "memory", "updated_at", "age_days")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def first_heading(body: str) -> str:
    """The text of the first ATX heading (`# Title`) outside code fences; empty when there is none."""
    fenced = False
    for line in body.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := _HEADING.match(line)):
            return match.group(1).strip()
    return ""


def _split_front_matter(text: str, file: Path) -> tuple[dict, str]:
    lines = text.split("\n")
    if lines[0].rstrip() != "---":
        return {}, text
    end = next((i for i, line in enumerate(lines[1:], 1) if line.rstrip() in ("---", "...")), None)
    if end is None:
        raise InputError(file, "front matter", "opened with --- on the first line but never closed with ---")
    data = load_yaml("\n".join(lines[:end]), file)  # from `---` on: line numbers are the file's
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(file, "front matter", f"expected a mapping, got {shown(data)}")
    unknown = sorted(set(data) - set(FRONT_MATTER))
    if unknown:
        raise InputError(file, f"front matter.{unknown[0]}", f"unknown key (allowed: {', '.join(FRONT_MATTER)})")
    return data, "\n".join(lines[end + 1:])


def _string(meta: dict, key: str, file: Path) -> str | None:
    value = meta.get(key)
    if value is None and key in meta:  # `memory:` with nothing after it would make the page a document
        raise InputError(file, f"front matter.{key}", "is empty: give it a value, or remove the key")
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InputError(file, f"front matter.{key}", f"expected a non-empty string, got {shown(value)}")
    return value


def _time(value: object, file: Path) -> datetime:
    time = parse_time(value)
    if time is None:
        raise InputError(file, "front matter.updated_at", f"expected a date or a time such as 2026-11-28T09:00:00Z, "
                                                          f"got {shown(value)}")
    return time


def _page(file: Path, key: str) -> tuple[Document | None, tuple[str, str, dict, str] | None, dict] | None:
    """A document, or a memory still to be aged (key, store, front matter, content); None for a page without
    content."""
    try:
        text = file.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    except UnicodeDecodeError as exc:
        raise InputError(file, "", f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        link = f" (a symbolic link to {shown(os.readlink(file))})" if file.is_symlink() else ""
        raise InputError(file, "", f"cannot read page: {exc.strerror}{link}") from None
    meta, body = _split_front_matter(text, file)
    content = body.strip("\n")
    if not content.strip():
        return None
    tags = meta.get("tags") or {}
    if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
        raise InputError(file, "front matter.tags", f"tags must map strings to strings, got {shown(tags)}")
    store = _string(meta, "memory", file)
    if store is None:
        aged = [k for k in ("updated_at", "age_days") if k in meta]
        if aged:
            raise InputError(file, f"front matter.{aged[0]}", "only a memory has an age: add `memory: STORE`")
        title = _string(meta, "title", file) or first_heading(content)
        path = _string(meta, "path", file) or f"/{key}"
        return Document(key, content, path, title, dict(tags)), None, meta
    wrong = [k for k in ("title", "path") if k in meta]
    if wrong:
        raise InputError(file, f"front matter.{wrong[0]}", "a memory has no title or path (SOAT keeps only its "
                                                            "content, store and tags)")
    if ("updated_at" in meta) == ("age_days" in meta):
        raise InputError(file, "front matter.memory", "a memory needs exactly one of `updated_at` or `age_days`")
    return None, (key, store, dict(tags), content), meta


def read_pages(folder: Path, files: CorpusFiles, warn: Callable[[str], None]) -> Corpus:
    """Every page the globs match under `folder` (sorted by key), as documents or memories. A page without
    content has nothing to search: it is left out, and `warn` told."""
    # A link that leads nowhere (dangling, or a loop) is kept, so that reading it says so.
    matched = sorted({p for pattern in files.glob for p in folder.glob(pattern)
                      if p.is_file() or p.is_symlink() and not p.exists()})
    if not matched:
        raise InputError(folder, "", f"no page matches {', '.join(files.glob)} in this folder")
    docs, pending, empty = [], [], []
    for file in matched:
        key = file.relative_to(folder).as_posix()
        page = _page(file, key)
        if page is None:
            empty.append(key)
            continue
        doc, memory, meta = page
        if doc is not None:
            docs.append(doc)
        else:
            pending.append((file, memory, meta))
    if empty:
        if len(empty) == len(matched):
            raise InputError(folder, "", f"every page that {', '.join(files.glob)} match here has no content")
        warn(f"{len(empty)} pages have no content and are not searched (first: {shown(empty[0])})")
    times = {file: _time(meta["updated_at"], file) for file, _, meta in pending if "updated_at" in meta}
    as_of = files.as_of or max(times.values(), default=None)
    memories = []
    for file, (key, store, tags, content), meta in pending:
        if file in times:
            age = (as_of - times[file]).total_seconds() / 86_400
            if age < 0:
                raise InputError(file, "front matter.updated_at", f"{times[file].isoformat()} is after the corpus's "
                                                                  f"as_of {as_of.isoformat()}")
        else:
            age = age_days(meta["age_days"], file, "front matter.age_days")
        memories.append(Memory(key, content, store, tags, age))
    return Corpus(tuple(docs), tuple(memories))
