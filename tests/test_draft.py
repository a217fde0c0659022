"""`rqsweep draft`: a draft golden set from a config's corpus, typed by slice, each row marked synthetic,
deterministic for a corpus and seed, and a run on it completes."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml

from rqsweep import job
from rqsweep.cli import main
from rqsweep.corpus import Corpus, Document, Memory, load_corpus
from rqsweep.draft import ROWS_PER_SLICE, draft
from rqsweep.draft.rules import entity, exact_token, freshness, reword_heading
from rqsweep.golden import load_golden
from tests.http_support import Loopback, QuietHandler

ROOT = Path(__file__).resolve().parents[1]
HANDBOOK_CORPUS = ROOT / "configs" / "handbook" / "corpus.yaml"
TYPED = ("exact_token", "exact_name", "freshness", "entity")


def handbook_config(folder: Path, **extra) -> Path:
    """The handbook's corpus, the feature hash (docs/embedders.md's one line) and a small grid."""
    config = {"name": "draft", "corpus": str(HANDBOOK_CORPUS), "golden": "draft.yaml",
              "backend": {"kind": "embedded", "embedder": {"kind": "feature-hash", "dimensions": 1024}},
              "sweep": {"strategy": "grid", "knobs": {"rrf_k": {"values": [10, 60]},
                                                      "min_similarity": {"include_off": True, "values": [0.3]},
                                                      "recency_half_life_days": {"values": [0, 30]}}},
              "constraints": [{"metric": "recall_at_10", "slice": "*", "max_drop": 0.2}],
              "workers": 1, "output_dir": "results", **extra}
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def drafted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("handbook-draft")
    config = handbook_config(folder)
    assert main(["draft", str(config)]) == 0
    return config


def test_the_handbook_draft_has_rows_of_every_typed_slice_each_marked_with_its_generator(drafted, capsys):
    rows = yaml.safe_load((drafted.parent / "draft.yaml").read_text())
    for name in TYPED:
        mine = [r for r in rows if r["slice"] == name]
        assert 0 < len(mine) <= ROWS_PER_SLICE, name
        assert {r["synthetic"] for r in mine} == {name}
    assert not [r for r in rows if r["slice"] == "semantic"]
    # The golden readers take the draft as it is, synthetic and all.
    golden = load_golden(drafted.parent / "draft.yaml", load_corpus(HANDBOOK_CORPUS))
    assert len(golden.queries) == len(rows)
    assert {q.synthetic for q in golden.queries} == set(TYPED)


def test_the_handbook_counts_the_docs_quote_are_the_drafts(drafted):
    import re

    page = (ROOT / "docs" / "start-without-a-golden-set.md").read_text().replace("\n", " ")
    quoted = re.search(r"the draft makes (\d+) rows: (\d+) exact_token, (\d+) exact_name, (\d+) freshness .*?, "
                       r"(\d+) entity", page)
    rows = yaml.safe_load((drafted.parent / "draft.yaml").read_text())
    assert [int(n) for n in quoted.groups()] == [len(rows), *(sum(r["slice"] == s for r in rows) for s in TYPED)]


def test_without_a_judge_no_semantic_row_is_made_and_the_draft_says_so(tmp_path, capsys):
    assert main(["draft", str(handbook_config(tmp_path)), "--out", str(tmp_path / "d.yaml")]) == 0
    out = capsys.readouterr().out
    assert "semantic: none made: the config names no judge endpoint (`judge:`)" in out
    assert "# semantic: none made" in (tmp_path / "d.yaml").read_text()
    assert "leak check: 0 queries occur nearly verbatim in their expected item" in out


def test_a_second_draft_writes_the_same_bytes_and_another_seed_samples_other_rows(drafted, tmp_path):
    again, other = tmp_path / "again.yaml", tmp_path / "other.yaml"
    assert main(["draft", str(drafted), "--out", str(again)]) == 0
    assert again.read_bytes() == (drafted.parent / "draft.yaml").read_bytes()
    assert main(["draft", str(drafted), "--out", str(other), "--seed", "1"]) == 0
    assert other.read_bytes() != again.read_bytes()  # the handbook has more headings than a slice keeps


def test_a_run_on_the_draft_completes(drafted):
    result = job.run(drafted, quiet=True)
    grid = result.grid.filter(pl.col("slice") != "overall")
    assert set(grid["slice"]) == set(TYPED)
    assert (result.run_dir / "report.md").read_text().count("## Which slices tell the settings apart") == 1


def test_the_draft_refuses_to_write_over_a_golden_set(drafted, capsys):
    assert main(["draft", str(drafted)]) == 2
    assert "exists: rqsweep draft writes no golden set over another; name a new file with --out FILE" in (
        capsys.readouterr().err)


def test_a_draft_is_written_as_yaml_or_csv_only(drafted, tmp_path, capsys):
    assert main(["draft", str(drafted), "--out", str(tmp_path / "draft.json")]) == 2
    assert "draft.json': a draft is written as .yaml, .yml or .csv" in capsys.readouterr().err
    assert not (tmp_path / "draft.json").exists()


def test_a_csv_draft_reads_back_with_its_synthetic_column(drafted, tmp_path):
    out = tmp_path / "draft.csv"
    assert main(["draft", str(drafted), "--out", str(out)]) == 0
    assert out.read_text().splitlines()[0] == "id,slice,query,expected,synthetic"
    golden = load_golden(out, load_corpus(HANDBOOK_CORPUS))
    assert {q.synthetic for q in golden.queries} == set(TYPED)


SMALL = Corpus(
    [Document("it/vpn.md", "# VPN access\nError VPN-4012 means your certificate expired. Use vpn2.example.net.",
              title="VPN access"),
     Document("oncall.md", "# On-call\nEscalate SEV-1 incidents. Error VPN-4012 is IT's.", title="On-call")],
    [Memory("pager-old", "The on-call pager number is +1 555 0100.", "team-facts", age_days=400),
     Memory("pager-new", "The on-call pager number is now +1 555 0199.", "team-facts", age_days=3),
     Memory("other-store", "The on-call pager number is +1 555 0142.", "it-facts", age_days=1),
     Memory("dpo", "Ingrid Solberg is the Data Protection Officer; ask her about SEV-1 privacy incidents.",
            "people", age_days=10)])


def test_exact_tokens_are_identifiers_that_occur_in_exactly_one_item():
    # VPN-4012 is in two documents, SEV-1 in a document and a memory: neither is kept.
    assert sorted((c.query, c.expected) for c in exact_token(SMALL)) == [("vpn2.example.net", ("it/vpn.md",))]


@pytest.mark.parametrize("heading, query", [
    ("On-call rotation", "what is the on-call rotation"),
    ("The Incident severity levels", "what are the incident severity levels"),
    ("Types of leave (2026)", "what are the types of leave"),
    ("Creating a flag", "what is creating a flag"),
    ("2. Who approves expenses?", "who approves expenses?"),
])
def test_a_heading_is_reworded_by_the_stated_rule(heading, query):
    assert reword_heading(heading) == query


def test_freshness_pairs_memories_of_one_store_and_expects_the_newer():
    # other-store says the same in another store: not a twin of either.
    assert [(c.query, c.expected) for c in freshness(SMALL)] == [("what is the on-call pager number",
                                                                   ("pager-new",))]


def test_an_entity_is_a_name_memories_hold_and_no_document_names():
    assert sorted((c.query, c.expected) for c in entity(SMALL)) == [
        ("what is Data Protection Officer", ("dpo",)), ("who is Ingrid Solberg", ("dpo",))]


class Paraphraser(QuietHandler):
    """A chat endpoint that asks about the page's first heading in other words."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        page = body["messages"][-1]["content"].split("Page:\n", 1)[1]
        topic = page.splitlines()[0].lstrip("# ").lower()
        answer = {"choices": [{"message": {"role": "assistant", "content": f"how do i deal with {topic}?\n"}}]}
        self.reply(200, json.dumps(answer).encode())


def test_with_a_judge_endpoint_the_semantic_slice_holds_its_paraphrases():
    from rqsweep.config import JudgeConfig

    server = Loopback(Paraphraser)
    try:
        made = draft(SMALL, JudgeConfig(server.url, "fake-paraphraser"), seed=0)
    finally:
        server.close()
    semantic = [(q.query, q.expected[0].key, q.synthetic) for q in made.queries if q.slice == "semantic"]
    assert semantic == [("how do i deal with vpn access?", "it/vpn.md", "semantic (openai-compatible fake-paraphraser)"),
                        ("how do i deal with on-call?", "oncall.md", "semantic (openai-compatible fake-paraphraser)")]
    assert made.notes == ()
