"""Layouts that judge queries in qrels: a BEIR folder, and TREC qrels with a topics file. Neither carries slices."""

from __future__ import annotations

import re
from pathlib import Path

from rqsweep.corpus import corpus_from_rows
from rqsweep.errors import InputError, shown
from rqsweep.files import read_data
from rqsweep.golden.rows import Layout, Row, decode, grade, read_raw, unsupported

BEIR_FILES = ("corpus.jsonl", "queries.jsonl", "qrels")
_HEADER_CELL = re.compile(r"[A-Za-z][A-Za-z_ -]*")


def _lines(path: Path, raw: bytes) -> list[tuple[int, str]]:
    return [(n, line) for n, line in enumerate(decode(path, raw).splitlines(), 1) if line.strip()]


def _judged(qrels: dict[str, list[tuple[str, int]]], queries: dict[str, tuple[str, dict]], where: dict[str, str],
            qrels_path: Path, queries_path: Path) -> tuple[list[Row], tuple[str, ...]]:
    """Rows for the judged queries, in the queries file's order, and the ids of the queries without qrels."""
    for qid in qrels:
        if qid not in queries:
            raise InputError(qrels_path, where[qid], f"query {shown(qid)} is judged but not in {queries_path.name}")
    rows = [Row(qrels_path, f"query {qid}", qid, None, text, [(None, key, g) for key, g in qrels[qid]], fields)
            for qid, (text, fields) in queries.items() if qid in qrels]
    return rows, tuple(qid for qid in queries if qid not in qrels)


def _beir_rows(path: Path, what: str) -> tuple[bytes, list[dict]]:
    raw, rows = read_data(path, what)
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("_id"), (str, int)):
            raise InputError(path, f"line {i + 1}", f"expected a JSON object with an `_id`, got {shown(row)}")
    return raw, rows


def read_beir(folder: Path, split: str) -> Layout:
    """`corpus.jsonl` ({_id, title, text}), `queries.jsonl` ({_id, text, metadata?}), `qrels/<split>.tsv`."""
    missing = [name for name in BEIR_FILES if not (folder / name).exists()]
    if missing:
        raise unsupported(folder, f"a folder, but not a BEIR folder (no {', '.join(missing)})")
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        splits = sorted(p.stem for p in (folder / "qrels").glob("*.tsv"))
        raise InputError(folder, "split", f"{shown(split)}: no qrels/{split}.tsv (splits here: {', '.join(splits)})")
    corpus_raw, docs = _beir_rows(folder / "corpus.jsonl", "corpus")
    corpus = corpus_from_rows([{"key": str(d["_id"]), "title": d.get("title") or "",
                                "content": d.get("text") or d.get("title")} for d in docs], [], folder / "corpus.jsonl",
                              lambda _, i: f"line {i + 1}")
    queries_raw, query_rows = _beir_rows(folder / "queries.jsonl", "golden set")
    queries = {}
    for i, q in enumerate(query_rows):
        if not isinstance(q.get("text"), str) or not q["text"].strip():
            raise InputError(folder / "queries.jsonl", f"line {i + 1}.text", f"expected the query's text, got "
                                                                             f"{shown(q.get('text'))}")
        metadata = q.get("metadata") if isinstance(q.get("metadata"), dict) else {}
        if str(q["_id"]) in queries:
            raise InputError(folder / "queries.jsonl", f"line {i + 1}._id", f"duplicate query id {shown(q['_id'])}")
        queries[str(q["_id"])] = (q["text"], {**metadata, **q})
    qrels_raw = read_raw(qrels_path)
    qrels: dict[str, list[tuple[str, int]]] = {}
    where = {}
    for n, line in _lines(qrels_path, qrels_raw):
        cells = line.split("\t")
        if n == 1 and _HEADER_CELL.fullmatch(cells[-1].strip()):
            continue  # the header (query-id, corpus-id, score): a judgement's score is a number, `1.0` too
        if len(cells) != 3:
            raise InputError(qrels_path, f"line {n}", f"expected query-id<TAB>corpus-id<TAB>score, got {shown(line)}")
        qid = cells[0].strip()
        qrels.setdefault(qid, []).append((cells[1].strip(), grade(cells[2].strip(), qrels_path, f"line {n}.score")))
        where.setdefault(qid, f"line {n}")
    rows, unjudged = _judged(qrels, queries, where, qrels_path, folder / "queries.jsonl")
    return Layout(f"BEIR (split {split})", rows, corpus, [corpus_raw, queries_raw, qrels_raw], unjudged)


_TOPIC = re.compile(r"<top>(.*?)</top>", re.DOTALL | re.IGNORECASE)
_NUM = re.compile(r"<num>\s*(?:Number:)?\s*(\S+)", re.IGNORECASE)
_TITLE = re.compile(r"<title>\s*(?:Topic:)?\s*(.*?)\s*(?=<[a-z]+>|</top>|$)", re.DOTALL | re.IGNORECASE)


def _topics(path: Path, raw: bytes) -> dict[str, tuple[str, dict]]:
    """TREC's `<top>` topics (the `<title>` is the query) or `query-id<TAB>text` lines."""
    lines = _lines(path, raw)
    text = "\n".join(line for _, line in lines)
    out = {}
    if _TOPIC.search(text):
        for i, block in enumerate(_TOPIC.findall(text)):
            num, title = _NUM.search(block), _TITLE.search(block)
            if not num or not title or not title.group(1).strip():
                raise InputError(path, f"topic {i + 1}", "a <top> needs a <num> and a non-empty <title>")
            if num.group(1) in out:
                raise InputError(path, f"topic {i + 1}", f"duplicate query id {shown(num.group(1))}")
            out[num.group(1)] = (" ".join(title.group(1).split()), {})
        return out
    for n, line in lines:
        qid, tab, query = line.partition("\t")
        if not tab or not query.strip():
            raise InputError(path, f"line {n}", f"expected query-id<TAB>query text (or TREC <top> topics), "
                                                f"got {shown(line)}")
        if qid.strip() in out:
            raise InputError(path, f"line {n}", f"duplicate query id {shown(qid.strip())}")
        out[qid.strip()] = (query.strip(), {})
    return out


def read_trec(qrels_path: Path, topics_path: Path) -> Layout:
    """TREC qrels (`query-id iteration doc-id grade` per line) and the topics their queries come from."""
    qrels_raw, topics_raw = read_raw(qrels_path), read_raw(topics_path)
    qrels: dict[str, list[tuple[str, int]]] = {}
    where = {}
    for n, line in _lines(qrels_path, qrels_raw):
        cells = line.split()
        if len(cells) != 4:
            raise unsupported(qrels_path, f"line {n}: expected TREC qrels (query-id iteration doc-id grade), "
                                          f"got {shown(line)}")
        qrels.setdefault(cells[0], []).append((cells[2], grade(cells[3], qrels_path, f"line {n}")))
        where.setdefault(cells[0], f"line {n}")
    rows, unjudged = _judged(qrels, _topics(topics_path, topics_raw), where, qrels_path, topics_path)
    return Layout("TREC", rows, None, [qrels_raw, topics_raw], unjudged)
