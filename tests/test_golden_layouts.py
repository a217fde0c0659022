"""Golden sets and corpora in the layouts teams hold them in, read through the real command line: CSV and TSV,
SOAT's golden.json of every version, BEIR folders, TREC qrels with topics, slice rules, folders of pages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rqsweep.cli import main
from rqsweep.backends import BACKENDS
from rqsweep.config import load_config
from rqsweep.inputs import load_inputs
from tests.minijob import DOCUMENTS, MEMORIES, QUERIES, write_job
from tests.soat_golden import SOAT_GOLDEN_CONFIG, needs_soat_golden

SMALL_SWEEP = {"strategy": "grid", "knobs": {"rrf_k": {"values": [1, 60]}}}


def cli(capsys, *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def job(folder: Path, **overrides) -> Path:
    return write_job(folder, sweep=SMALL_SWEEP, constraints=[], **overrides)


def refused(capsys, config: Path, *words: str) -> str:
    code, _, err = cli(capsys, config, "--dry-run")
    assert code == 2, err
    for word in words:
        assert word in err, (word, err)
    assert "Traceback" not in err
    return err


# CSV and TSV

def test_a_csv_golden_set_with_named_columns_reads_keys_between_semicolons_and_grades(tmp_path):
    config = job(tmp_path, golden="queries.csv")
    (tmp_path / "queries.csv").write_text(
        "id,slice,query,expected\n"
        "d1,document,vpn certificate expired,doc-vpn\n"
        'f1,freshness,"pager number, now",mem-pager-new; mem-pager-old\n'
        "e1,entity,CFO,mem-cfo=3;doc-expenses=1;doc-laptop=0\n")
    golden = load_inputs(config).golden
    assert golden.layout == "CSV"
    assert [(q.id, q.slice, q.query) for q in golden.queries] == [
        ("d1", "document", "vpn certificate expired"), ("f1", "freshness", "pager number, now"),
        ("e1", "entity", "CFO")]
    assert [e.key for e in golden.queries[1].expected] == ["mem-pager-new", "mem-pager-old"]
    # Grade 0 is judged not relevant: it is not an expected item.
    assert [(e.key, e.grade) for e in golden.queries[2].expected] == [("mem-cfo", 3), ("doc-expenses", 1)]
    assert golden.graded


def test_a_tsv_without_id_and_slice_columns_runs_as_one_slice_with_a_warning(tmp_path, capsys):
    config = job(tmp_path, golden="queries.tsv")
    (tmp_path / "queries.tsv").write_text("query\texpected\nvpn certificate expired\tdoc-vpn\nCFO\tmem-cfo\n")
    code, out, err = cli(capsys, config, "--dry-run")
    assert code == 0, err
    assert "2 queries in 1 slices (all)" in out
    assert "warning: the golden set has no slices" in out and "protects against a collapse" in out


@pytest.mark.parametrize("name, content, words", [
    ("queries.csv", "id,slice,question,expected\n", ["queries.csv", "names no query column", "formats read:",
                                                     "BEIR folder", "TREC qrels"]),
    ("queries.csv", "query,expected,weight\nx,doc-vpn,1\n", ["queries.csv: line 1", "unknown column 'weight'"]),
    ("queries.csv", "query,expected\nvpn,doc-nope\n", ["queries.csv: line 2.expected[0]", "'doc-nope'",
                                                        "does not exist"]),
    ("queries.csv", "query,expected\nvpn,doc-vpn,extra\n", ["queries.csv: line 2", "3 cells, the header names 2"]),
    ("queries.xlsx", "PK", ["queries.xlsx", "not a golden-set layout", "formats read:"]),
    ("queries.yaml", "{queries: 3}\n", ["queries.yaml", "SOAT golden-set version"]),
    ("queries.yaml", "{a: 1}\n", ["queries.yaml", "expected a list of {id?, slice, query, expected} rows",
                                  "formats read:", "CSV or TSV"]),
    ("qrels.txt", "1 0 doc-vpn 1\n", ["qrels.txt", "TREC qrels need their topics", "formats read:"]),
])
def test_every_unsupported_golden_input_names_the_file_and_the_formats_read(tmp_path, capsys, name, content, words):
    config = job(tmp_path, golden=name)
    (tmp_path / name).write_text(content)
    refused(capsys, config, *words)


# Issue 35: CSV files that read wrong without a word (another column than meant, a default id, "got None").
@pytest.mark.parametrize("content, words", [
    ("id,slice,query,expected,query\nd1,document,vpn certificate expired,doc-vpn,standing desk\n",
     ["queries.csv: line 1", "column 'query' is named twice (columns 3 and 5)"]),
    # An empty id took the default q0002 of its row, another row's id: the duplicate named the other line.
    ("id,slice,query,expected\nq0002,document,vpn,doc-vpn\n,document,backups,doc-backup\n",
     ["queries.csv: line 3.id: no id, where line 2 has one"]),
    ("id,slice,query,expected\nd1,document,,doc-vpn\n", ["queries.csv: line 2.query: is empty or missing"]),
    ("id,slice,query,expected\nd1,document,vpn,\n", ["queries.csv: line 2.expected: is empty or missing"]),
    # Excel's CSV where ',' is the decimal comma: was "names no query and no expected column".
    ("id;slice;query;expected\nd1;document;vpn;doc-vpn\n",
     ["queries.csv: line 1: the header 'id;slice;query;expected' separates its columns with ';'",
      "a .csv file's columns are separated by ','"]),
])
def test_a_csv_that_would_read_wrong_is_refused_naming_line_and_column(tmp_path, capsys, content, words):
    config = job(tmp_path, golden="queries.csv")
    (tmp_path / "queries.csv").write_text(content)
    refused(capsys, config, *words)


def test_yaml_rows_give_every_query_an_id_or_none(tmp_path, capsys):
    config = job(tmp_path)
    (tmp_path / "golden.yaml").write_text("- {slice: a, query: vpn, expected: doc-vpn}\n"
                                          "- {id: q0001, slice: a, query: backups, expected: doc-backup}\n")
    refused(capsys, config, "golden.yaml: [0].id: no id, where [1] has one")
    (tmp_path / "golden.yaml").write_text("- {slice: a, query: vpn, expected: doc-vpn}\n- slice: a\n  query:\n")
    refused(capsys, config, "golden.yaml: [1].query: is empty or missing")
    (tmp_path / "golden.yaml").write_text("- {slice: a, query: vpn, expected: doc-vpn}\n- {slice: a, query: x}\n")
    refused(capsys, config, "golden.yaml: [1].expected: is empty or missing")


def test_a_folder_that_is_not_beir_is_refused_naming_what_is_missing(tmp_path, capsys):
    config = job(tmp_path, golden="pages")
    (tmp_path / "pages").mkdir()
    refused(capsys, config, "pages: a folder, but not a BEIR folder (no corpus.jsonl, queries.jsonl, qrels)",
            "formats read:")


# SOAT's golden.json

def soat_golden(folder: Path, version: int, **document) -> Path:
    """SOAT's golden.json of the mini job's data; from version 2 with ages, a second memory store of stale
    near-twins and the freshness kind, as SOAT's later versions carry."""
    memories = [{"key": k, "content": c} for k, c, _ in MEMORIES]
    if version >= 2:
        memories = [{"key": k, "content": c, "age_days": a, "memory": "stale" if k.endswith("old") else "facts"}
                    for k, c, a in MEMORIES]
    data = {"version": version,
            "corpus": {"documents": [{"key": k, "path": p, "content": c} for k, p, c in DOCUMENTS] + (
                [document] if document else []), "memories": memories},
            "queries": [{"id": i, "query": q, "kind": s if version >= 2 or s != "freshness" else "entity",
                         "expected": [{"source_type": "document" if e.startswith("doc") else "memory", "key": e}]}
                        for i, s, q, e in QUERIES]}
    path = folder / "golden.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("version", [1, 3])
def test_soat_golden_json_of_versions_1_and_3_in_the_inline_layout_runs(tmp_path, capsys, version):
    config = job(tmp_path, corpus=None, golden="golden.json", validation=False)
    soat_golden(tmp_path, version)
    code, out, err = cli(capsys, config, "--quiet", "--output-dir", tmp_path / "out")
    assert code == 0, err
    assert ("freshness" in out) == (version >= 2), out  # the summary's per-slice table
    golden = load_inputs(config).golden
    assert golden.layout == f"SOAT golden.json v{version}"
    ages = {m.key: (m.store, m.age_days) for m in golden.corpus.memories}
    assert ages["mem-pager-old"] == (("stale", 400.0) if version >= 2 else ("default", 0.0))


@needs_soat_golden
def test_the_shared_soat_golden_set_reads():
    config = load_config(SOAT_GOLDEN_CONFIG, BACKENDS)
    inputs = load_inputs(config.path)
    assert inputs.golden.layout == "SOAT golden.json v1" and len(inputs.golden.queries) == 50


def test_a_pointer_document_is_refused_naming_its_key(tmp_path, capsys):
    config = job(tmp_path, corpus=None, golden="golden.json")
    soat_golden(tmp_path, 3, key="doc-search-guide", path="/docs/search.md", source="docs/modules/search.md",
                section="Ranking")
    refused(capsys, config, "golden.json: corpus.documents[5]", "'doc-search-guide' is a pointer",
            "'docs/modules/search.md'", "'Ranking'", "inline content", "frozen corpus")


# BEIR and TREC, with the config's slice rule

def write_beir(folder: Path, header: bool = True) -> Path:
    """A BEIR folder of the mini job's documents and queries, graded qrels in the test split."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": k, "title": p.rsplit("/", 1)[-1], "text": c}) + "\n" for k, p, c in DOCUMENTS))
    queries = [(i, s, q, e) for i, s, q, e in QUERIES if e.startswith("doc")]
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": i, "text": q, "metadata": {"kind": s}}) + "\n" for i, s, q, _ in queries)
        + json.dumps({"_id": "unjudged", "text": "lunch menu"}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] * header + [f"{i}\t{e}\t2" for i, _, _, e in queries]
    lines += ["d3\tdoc-oncall\t1", "d3\tdoc-missing\t0"]  # a grade 0 of a document the corpus lacks is not read
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return folder


def test_a_beir_folder_carries_its_corpus_and_graded_qrels(tmp_path, capsys):
    write_beir(tmp_path / "beir")
    config = job(tmp_path, corpus=None, golden={"path": "beir", "slices": {"field": "kind"}})
    golden = load_inputs(config).golden
    assert golden.layout == "BEIR (split test)"
    assert [q.slice for q in golden.queries] == ["document"] * 4 + ["exact_token"] * 2
    assert {q.id: [(e.key, e.grade) for e in q.expected] for q in golden.queries}["d3"] == [
        ("doc-backup", 2), ("doc-oncall", 1)]
    assert golden.corpus.documents[0].title == "vpn.md"
    assert any("1 queries of the queries file are not judged" in w for w in golden.warnings)


def test_the_slice_rule_can_be_a_sidecar_file_or_a_pattern_on_the_id(tmp_path, capsys):
    write_beir(tmp_path / "beir", header=False)
    # Every query of queries.jsonl, the one its qrels do not judge too (a sidecar can cover every split).
    (tmp_path / "slices.tsv").write_text("query-id\tslice\nunjudged\tpages\n" + "".join(
        f"{i}\t{'tokens' if s == 'exact_token' else 'pages'}\n" for i, s, _, e in QUERIES if e.startswith("doc")))
    config = job(tmp_path, corpus=None, golden={"path": "beir", "slices": {"file": "slices.tsv"}})
    assert load_inputs(config).golden.slices == ["pages", "tokens"]
    config = job(tmp_path, corpus=None, golden={"path": "beir", "slices": {"pattern": "^(?P<slice>[a-z])"}})
    assert load_inputs(config).golden.slices == ["d", "t"]
    (tmp_path / "slices.tsv").write_text("d1\tpages\n")
    config = job(tmp_path, corpus=None, golden={"path": "beir", "slices": {"file": "slices.tsv"}})
    refused(capsys, config, "slices.tsv", "gives query 'd2' no slice")
    # A line naming a query the golden set does not have was ignored (issue 35, item 22): a typo in an id left
    # its query to another line, or to no slice.
    (tmp_path / "slices.tsv").write_text("".join(f"{i}\tpages\n" for i in ("d1", "d2", "dd3", "d3", "d4", "t1", "t2")))
    refused(capsys, config, "slices.tsv: line 3: query 'dd3' is not in the golden set beir")
    config = job(tmp_path, corpus=None, golden={"path": "beir", "slices": {"pattern": "^x"}})
    refused(capsys, config, "job.yaml: golden.slices.pattern", "needs a group")
    config = job(tmp_path, corpus=None, golden={"path": "beir", "split": "dev"})
    refused(capsys, config, "beir: split: 'dev': no qrels/dev.tsv (splits here: test)")


@pytest.mark.parametrize("pattern", [r"^(?P<slice>[a-z])\d+$", r"^([a-z])\d+$"])
def test_a_slice_pattern_takes_its_group_not_the_context_around_it(tmp_path, pattern):
    write_beir(tmp_path / "beir")
    config = job(tmp_path, corpus=None, golden={"path": "beir", "slices": {"pattern": pattern}})
    assert load_inputs(config).golden.slices == ["d", "t"]


def test_a_headerless_beir_qrels_files_first_line_is_a_judgement(tmp_path):
    write_beir(tmp_path / "beir", header=False)
    (tmp_path / "beir" / "qrels" / "test.tsv").write_text("d1\tdoc-vpn\t1\nt1\tdoc-vpn\t2\n")
    config = job(tmp_path, corpus=None, golden={"path": "beir", "slices": {"field": "kind"}})
    golden = load_inputs(config).golden
    assert {q.id: [(e.key, e.grade) for e in q.expected] for q in golden.queries} == {
        "d1": [("doc-vpn", 1)], "t1": [("doc-vpn", 2)]}


def test_the_golden_sets_hash_covers_its_slice_file(tmp_path):
    # --resume refuses changed inputs by this hash: a sidecar that moves a query to another slice changes the run.
    write_beir(tmp_path / "beir")
    sidecar = tmp_path / "slices.tsv"
    config = job(tmp_path, corpus=None, golden={"path": "beir", "slices": {"file": "slices.tsv"}})
    hashes = []
    for slice_of_d1 in ("pages", "pages", "tokens"):
        sidecar.write_text("".join(f"{i}\t{slice_of_d1 if i == 'd1' else 'pages'}\n" for i, _, _, e in QUERIES
                                   if e.startswith("doc")))
        hashes.append(load_inputs(config).golden.sha256)
    assert hashes[0] == hashes[1] != hashes[2]


@pytest.mark.parametrize("topics", [
    "d1\tvpn certificate expired\nt1\tVPN-4012\nx9\tnot judged\n",
    "<top>\n<num> Number: d1\n<title> vpn certificate\nexpired\n<desc> Description:\nwhy.\n</top>\n"
    "<top>\n<num> t1\n<title> VPN-4012\n</top>\n",
])
def test_trec_qrels_with_a_topics_file(tmp_path, capsys, topics):
    (tmp_path / "qrels.txt").write_text("d1 0 doc-vpn 3\nd1 0 doc-laptop 1\nt1 0 doc-vpn 1\n")
    (tmp_path / "topics.txt").write_text(topics)
    config = job(tmp_path, golden={"path": "qrels.txt", "topics": "topics.txt",
                                   "slices": {"pattern": "^(d|t)"}})
    golden = load_inputs(config).golden
    assert golden.layout == "TREC"
    assert [(q.id, q.slice, q.query) for q in golden.queries] == [
        ("d1", "d", "vpn certificate expired"), ("t1", "t", "VPN-4012")]
    assert [(e.key, e.grade) for e in golden.queries[0].expected] == [("doc-vpn", 3), ("doc-laptop", 1)]
    (tmp_path / "qrels.txt").write_text("d1 0 doc-vpn 3\nq7 0 doc-vpn 1\n")
    refused(capsys, config, "qrels.txt: line 2", "query 'q7' is judged but not in topics.txt")


@pytest.mark.parametrize("cell", ["--1", "\u00b2", "1.0"])
def test_a_hand_edited_grade_that_is_no_integer_is_refused_naming_its_line(tmp_path, capsys, cell):
    # `--1` and `²` pass str.isdigit once a `-` is stripped, and int() then refuses them.
    (tmp_path / "qrels.txt").write_text(f"d1 0 doc-vpn 3\nt1 0 doc-vpn {cell}\n", encoding="utf-8")
    (tmp_path / "topics.txt").write_text("d1\tvpn certificate expired\nt1\tVPN-4012\n")
    config = job(tmp_path, golden={"path": "qrels.txt", "topics": "topics.txt"})
    refused(capsys, config, "qrels.txt: line 2", f"expected an integer relevance grade, got '{cell}'")


@pytest.mark.parametrize("grade", ["99999999999999999999", "9223372036854775808", "-9223372036854775809"])
def test_a_grade_beyond_64_bits_is_refused_by_the_dry_run(tmp_path, capsys, grade):
    # It passed --dry-run, then the run died in polars (an Int64 column) with a traceback.
    config = job(tmp_path, golden="queries.csv")
    (tmp_path / "queries.csv").write_text(f"query,expected\nvpn,doc-vpn={grade};doc-laptop=1\n")
    refused(capsys, config, f"queries.csv: line 2.expected.doc-vpn: {grade}: a relevance grade must fit in 64 bits")


def test_a_relevance_level_no_item_reaches_is_refused(tmp_path, capsys):
    (tmp_path / "qrels.txt").write_text("d1 0 doc-vpn 3\nt1 0 doc-vpn 1\n")
    (tmp_path / "topics.txt").write_text("d1\tvpn certificate expired\nt1\tVPN-4012\n")
    config = job(tmp_path, golden={"path": "qrels.txt", "topics": "topics.txt"}, relevance_level=2)
    code, out, err = cli(capsys, config, "--dry-run")
    assert code == 0, err
    assert "1 queries have no item graded 2 or more (first: 't1')" in out
    config = job(tmp_path, golden={"path": "qrels.txt", "topics": "topics.txt"}, relevance_level=4)
    refused(capsys, config, "job.yaml: relevance_level: 4: no expected item of qrels.txt is graded 4 or more")


def test_a_headerless_beir_qrels_line_with_a_score_of_1_0_is_refused_not_taken_for_a_header(tmp_path, capsys):
    # Read as a header, its judgement was dropped and the warning said its query was not judged.
    qrels = write_beir(tmp_path / "beir", header=False) / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text().replace("\t2\n", "\t1.0\n", 1))
    config = job(tmp_path, corpus=None, golden="beir")
    refused(capsys, config, "test.tsv: line 1.score: expected an integer relevance grade, got '1.0'")


def test_a_beir_corpus_error_names_its_line(tmp_path, capsys):
    write_beir(tmp_path / "beir")
    with (tmp_path / "beir" / "corpus.jsonl").open("a") as f:
        f.write(json.dumps({"_id": "doc-vpn", "text": "again"}) + "\n")
    config = job(tmp_path, corpus=None, golden="beir")
    refused(capsys, config, "corpus.jsonl: line 6.key: duplicate key 'doc-vpn' (first at line 1)")


def test_run_json_records_the_golden_sets_layout(tmp_path, capsys):
    write_beir(tmp_path / "beir")
    config = job(tmp_path, corpus=None, golden={"path": "beir", "slices": {"field": "kind"}}, validation=False)
    code, _, err = cli(capsys, config, "--quiet", "--output-dir", tmp_path / "out")
    assert code == 0, err
    run_dir = next((tmp_path / "out" / "mini").iterdir())
    assert json.loads((run_dir / "run.json").read_text())["golden_layout"] == "BEIR (split test)"


def test_a_csv_grading_some_keys_only_and_an_unknown_corpus_layout_are_refused(tmp_path, capsys):
    config = job(tmp_path, golden="queries.csv")
    (tmp_path / "queries.csv").write_text("query,expected\nvpn,doc-vpn=2;doc-laptop\n")
    refused(capsys, config, "queries.csv: line 2.expected", "grade every key (key=grade) or none")
    (tmp_path / "queries.csv").write_text("query,expected\nvpn,doc-laptop=0;doc-laptop=2\n")
    refused(capsys, config, "queries.csv: line 2.expected[1]", "'doc-laptop' is graded twice (0, 2)")
    (tmp_path / "corpus.csv").write_text("key,content\n")
    config = job(tmp_path, corpus="corpus.csv")
    refused(capsys, config, "corpus.csv: '.csv': not a corpus layout rqsweep reads", "a folder of Markdown")
