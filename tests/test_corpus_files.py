"""A corpus from a folder of pages (front matter, headings) and from JSON lines."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rqsweep.cli import main
from rqsweep.corpus import Corpus, Document, Memory, model
from rqsweep.inputs import load_inputs
from tests.minijob import DOCUMENTS, write_job

SMALL_SWEEP = {"strategy": "grid", "knobs": {"recency_half_life_days": {"values": [0, 30]}}}


def pages(folder: Path) -> Path:
    (folder / "it").mkdir(parents=True)
    (folder / "it" / "vpn.md").write_text("---\ntags: {team: it}\n---\n# VPN access\n\nConnect with the client.\n"
                                          "Error VPN-4012 means your certificate expired.\n")
    (folder / "oncall.md").write_text("```\n# not a heading\n```\n## On-call handover ##\nMonday at 10:00.\n")
    (folder / "notes.txt").write_text("Backups run nightly at 02:00 UTC.\n")
    (folder / "pager-new.md").write_text("---\nmemory: team-facts\nupdated_at: 2026-11-28T12:00:00Z\n---\n"
                                         "The pager number is now +1 555 0199.\n")
    (folder / "pager-old.md").write_text("---\nmemory: team-facts\nupdated_at: 2025-11-28T12:00:00Z\n---\n"
                                         "The pager number is +1 555 0100.\n")
    (folder / "cfo.md").write_text("---\nmemory: people\nage_days: 7.5\ntags: {team: finance}\n---\nThe CFO "
                                   "approves expenses above 5000 EUR.\n")
    (folder / "image.png").write_bytes(b"\x89PNG")
    return folder


def folder_job(tmp_path: Path, golden: list[dict], **corpus) -> Path:
    config = write_job(tmp_path, sweep=SMALL_SWEEP, constraints=[], validation=False,
                       corpus={"path": "pages", **corpus} if corpus else "pages", golden="golden.yaml")
    import yaml

    (tmp_path / "golden.yaml").write_text(yaml.safe_dump(golden))
    return config


GOLDEN = [{"id": "q1", "slice": "doc", "query": "vpn certificate expired", "expected": "it/vpn.md"},
          {"id": "q2", "slice": "fresh", "query": "pager number", "expected": "pager-new.md"}]


def test_a_folder_of_pages_is_a_corpus_keyed_by_relative_path(tmp_path, capsys):
    pages(tmp_path / "pages")
    config = folder_job(tmp_path, GOLDEN)
    corpus = load_inputs(config).corpus
    docs = {d.key: d for d in corpus.documents}
    assert sorted(docs) == ["it/vpn.md", "notes.txt", "oncall.md"]
    assert (docs["it/vpn.md"].title, docs["it/vpn.md"].path, dict(docs["it/vpn.md"].tags)) == (
        "VPN access", "/it/vpn.md", {"team": "it"})
    assert docs["it/vpn.md"].content.startswith("# VPN access")
    assert docs["oncall.md"].title == "On-call handover"  # the fenced line is code, not a heading
    assert docs["notes.txt"].title == ""
    memories = {m.key: (m.store, m.age_days, dict(m.tags)) for m in corpus.memories}
    # Ages count to the newest updated_at (no as_of): the same on any day the run is made.
    assert memories == {"cfo.md": ("people", 7.5, {"team": "finance"}), "pager-new.md": ("team-facts", 0.0, {}),
                        "pager-old.md": ("team-facts", 365.0, {})}
    code = main([str(config), "--quiet", "--output-dir", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err


def test_as_of_and_the_glob_are_the_configs_and_the_hash_follows_the_pages(tmp_path):
    pages(tmp_path / "pages")
    config = folder_job(tmp_path, GOLDEN[:1], glob="it/*.md", as_of="2026-12-01")
    inputs = load_inputs(config)
    assert [d.key for d in inputs.corpus.documents] == ["it/vpn.md"] and inputs.corpus.memories == ()
    config = folder_job(tmp_path, GOLDEN, as_of="2026-12-01")
    before = load_inputs(config)
    assert {m.key: m.age_days for m in before.corpus.memories}["pager-new.md"] == 2.5
    (tmp_path / "pages" / "notes.txt").write_text("Backups run at 03:00 UTC.\n")
    assert load_inputs(config).sha256 != before.sha256


@pytest.mark.parametrize("name, content, words", [
    ("bad.md", "---\ntags: {team: it}\n# no end\n", ["bad.md: front matter", "never closed"]),
    ("bad.md", "---\nauthor: me\n---\ntext\n", ["bad.md: front matter.author", "unknown key"]),
    ("bad.md", "---\nage_days: 3\n---\ntext\n", ["bad.md: front matter.age_days", "only a memory has an age"]),
    ("bad.md", "---\nmemory: facts\n---\ntext\n", ["bad.md: front matter.memory", "exactly one of `updated_at`"]),
    ("bad.md", "---\nmemory: facts\nupdated_at: soon\n---\ntext\n", ["bad.md: front matter.updated_at", "'soon'"]),
    ("bad.md", "---\nmemory: facts\nupdated_at: 2026-02-30\n---\ntext\n",  # the file's line, not front matter's
     ["bad.md: updated_at: '2026-02-30': not a valid date or time (day is out of range for month; line 3)"]),
    ("bad.md", "---\nmemory: facts\nage_days: -1\n---\ntext\n",
     ["bad.md: front matter.age_days", "expected a finite number >= 0, got -1"]),
    ("bad.md", "---\nmemory: facts\nage_days: .inf\n---\ntext\n", ["bad.md: front matter.age_days", "got inf"]),
    # Was "only a memory has an age: add `memory: STORE`", to a page that has `memory:` (issue 35, item 22).
    ("bad.md", "---\nmemory:\nage_days: 3\n---\ntext\n",
     ["bad.md: front matter.memory: is empty: give it a value, or remove the key"]),
    ("bad.md", b"\xff\xfe", ["bad.md", "not UTF-8"]),
])
def test_bad_pages_are_refused_naming_the_page(tmp_path, capsys, name, content, words):
    pages(tmp_path / "pages")
    page = tmp_path / "pages" / name
    page.write_bytes(content) if isinstance(content, bytes) else page.write_text(content)
    config = folder_job(tmp_path, GOLDEN)
    code = main([str(config), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2, err
    for word in words:
        assert word in err


def test_an_empty_page_is_skipped_with_a_warning(tmp_path, capsys):
    # It stopped the whole run (issue 35, item 22); it has nothing to search.
    pages(tmp_path / "pages")
    (tmp_path / "pages" / "empty.md").write_text("---\ntitle: Empty\n---\n\n")
    (tmp_path / "pages" / "blank.txt").write_text(" \n")
    assert main([str(folder_job(tmp_path, GOLDEN)), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "corpus: 3 documents, 3 memories" in out
    assert "warning: 2 pages have no content and are not searched (first: 'blank.txt')" in out
    config = folder_job(tmp_path, GOLDEN, glob=["empty.md", "blank.txt"])
    assert main([str(config), "--dry-run"]) == 2
    assert "pages: every page that empty.md, blank.txt match here has no content" in capsys.readouterr().err


def test_a_future_updated_at_and_an_empty_glob_are_refused(tmp_path, capsys):
    pages(tmp_path / "pages")
    for corpus, words in [({"as_of": "2026-01-01"}, ["pager-new.md: front matter.updated_at", "is after"]),
                          ({"glob": "*.rst"}, ["pages: no page matches *.rst"])]:
        assert main([str(folder_job(tmp_path, GOLDEN, **corpus)), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert all(w in err for w in words), err


@pytest.mark.parametrize("glob, where", [
    ("/abs/**/*.md", "corpus.glob: '/abs/**/*.md'"),  # was a NotImplementedError traceback (item 14)
    (["**/*.md", "../*.md"], "corpus.glob[1]: '../*.md'"),  # read the files beside the folder as pages (item 22)
])
def test_a_glob_that_leaves_the_corpus_folder_is_refused(tmp_path, capsys, glob, where):
    pages(tmp_path / "pages")
    (tmp_path / "outside.md").write_text("Not a page of the corpus.\n")
    assert main([str(folder_job(tmp_path, GOLDEN, glob=glob)), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"job.yaml: {where}: a glob is matched inside the corpus folder" in err, err


@pytest.mark.parametrize("target, words", [("nowhere.md", "No such file or directory"),
                                           ("link.md", "Too many levels of symbolic links")])
def test_a_dangling_or_looping_link_among_the_pages_is_refused_naming_it(tmp_path, capsys, target, words):
    # They were dropped without a word: the run searched a corpus without the page the link stood for.
    pages(tmp_path / "pages")
    (tmp_path / "pages" / "link.md").symlink_to(target)
    assert main([str(folder_job(tmp_path, GOLDEN)), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"link.md: cannot read page: {words} (a symbolic link to '{target}')" in err, err


def test_documents_and_memories_from_json_lines(tmp_path, capsys):
    rows = [{"key": k, "path": p, "content": c} for k, p, c in DOCUMENTS[:2]]
    rows.append({"source_type": "memory", "key": "m1", "content": "The pager is +1 555 0199.", "age_days": 2,
                 "store": "facts"})
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = write_job(tmp_path, corpus="corpus.jsonl", golden="golden.yaml")
    import yaml

    (tmp_path / "golden.yaml").write_text(yaml.safe_dump([{"slice": "s", "query": "pager", "expected": "m1"}]))
    corpus = load_inputs(config).corpus
    assert [d.key for d in corpus.documents] == ["doc-vpn", "doc-oncall"]
    assert [(m.key, m.store, m.age_days) for m in corpus.memories] == [("m1", "facts", 2.0)]
    (tmp_path / "corpus.jsonl").write_text(json.dumps(rows[0]) + "\n" + json.dumps({"key": "x"}) + "\n")
    assert main([str(config), "--dry-run"]) == 2
    assert "corpus.jsonl: line 2.content: expected a non-empty string" in capsys.readouterr().err


_TEXT = st.text(st.sampled_from(["a", "é", "\u3000", '"', "\\", "\n", "😀", " "]), max_size=6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_TEXT, _TEXT, st.dictionaries(_TEXT, _TEXT, max_size=2)), max_size=7),
       st.lists(st.tuples(_TEXT, st.floats(0, 1e6)), max_size=7), st.integers(1, 4))
def test_the_corpus_hash_is_that_of_its_whole_json_text(documents, memories, rows_at_once):
    """Hashed a block of rows at a time, the digest is the one of json.dumps over every row at once: what earlier
    runs recorded as corpus_sha256."""
    corpus = Corpus(tuple(Document(f"d{i}{k}", c, path=k, tags=t) for i, (k, c, t) in enumerate(documents)),
                    tuple(Memory(f"m{i}", c, age_days=a) for i, (c, a) in enumerate(memories)))
    rows = [[asdict(d) for d in corpus.documents], [asdict(m) for m in corpus.memories]]
    whole = hashlib.sha256(json.dumps(rows, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model, "_ROWS_HASHED_AT_ONCE", rows_at_once)
        assert corpus.sha256 == whole
