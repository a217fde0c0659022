"""Corpora: what a corpus is and rqsweep's corpus files (model.py), a folder of pages (pages.py), and the reader
that picks between them by the path (`load_corpus`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from rqsweep.config import Chunking, CorpusFiles
from rqsweep.corpus.model import (Chunk, Corpus, Document, Memory, Table, chunk_contents, chunk_document,
                                  chunk_id, corpus_from_rows, memory_updated_at, read_corpus_file)
from rqsweep.corpus.texts import Texts
from rqsweep.corpus.pages import read_pages
from rqsweep.errors import InputError, shown

__all__ = ["Chunk", "Chunking", "Corpus", "Document", "Memory", "Table", "Texts", "chunk_contents", "chunk_document",
           "chunk_id", "corpus_from_rows", "load_corpus", "memory_updated_at"]

CORPUS_FORMATS = ("corpora read: rqsweep's file (.yaml, .yml, .json: documents and memories), JSON lines (.jsonl: a "
                  "document per line, or a memory with source_type memory), a folder of Markdown and plain-text pages")


def _to_stderr(message: str) -> None:
    print(f"rqsweep: warning: {message}", file=sys.stderr)


def load_corpus(path: Path, files: CorpusFiles = CorpusFiles(), warn: Callable[[str], None] = _to_stderr) -> Corpus:
    """Read a corpus: rqsweep's file (YAML or JSON with `documents` and `memories`), JSON lines of documents and
    memories, or a folder of pages (pages.py, which `warn`s of pages it leaves out)."""
    if path.is_dir():
        return read_pages(path, files, warn)
    if path.suffix.lower() not in (".yaml", ".yml", ".json", ".jsonl") and path.exists():
        raise InputError(path, "", f"{shown(path.suffix or path.name)}: not a corpus layout rqsweep reads; "
                                   f"{CORPUS_FORMATS}")
    return read_corpus_file(path)
