"""The pluggable judge: `judge:` grades `rqsweep pool`'s pairs through a chat endpoint, here a fake one on loopback."""

from __future__ import annotations

import json
import os
import threading

import polars as pl
import pytest

from rqsweep.backends import BACKENDS
from rqsweep.cli import main
from rqsweep.config import load_config
from rqsweep.errors import InputError
from rqsweep.judge import ChatClient
from rqsweep.judge.grading import cohen_kappa
from rqsweep.job import run
from rqsweep.report.pool import COLUMNS
from tests.http_support import Loopback, QuietHandler, leaks
from tests.test_pool import BASELINE, read_csv, unlabelled_answer_job, with_judgments, write_csv

SECRET = "sk-judge-Xq7-never-in-output"
KEY_ENV = "RQSWEEP_TEST_JUDGE_KEY"


class FakeJudge:
    """A chat-completions endpoint that grades 2 where the item is the CFO memory and the query asks about
    expenses or the CFO, else 0; it counts the calls and the keys it was sent. `refuse`: answer 401, echoing
    the Authorization header as some servers do."""

    def __init__(self, refuse: bool = False):
        self.calls, self.keys, self.lock = 0, set(), threading.Lock()
        judge = self

        class Handler(QuietHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with judge.lock:
                    judge.calls += 1
                    judge.keys.add(self.headers.get("Authorization"))
                if refuse:
                    return self.reply(401, json.dumps({"error": f"bad key {self.headers['Authorization']}"}).encode())
                prompt = body["messages"][-1]["content"]
                grade = "2" if "CFO approves" in prompt and ("CFO" in prompt.split("Item:")[0] or
                                                             "expenses" in prompt.split("Item:")[0]) else "0"
                answer = {"choices": [{"message": {"role": "assistant", "content": f"Grade: {grade}"}}],
                          "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42}}
                self.reply(200, json.dumps(answer).encode())

        self.server = Loopback(Handler)
        self.url = self.server.url


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    judge = FakeJudge()
    yield judge
    judge.server.close()


def judged_job(folder, url, **judge):
    return unlabelled_answer_job(folder, ranked="all", judge={"kind": "openai-compatible", "base_url": url,
                                                              "model": "fake-judge", "api_key_env": KEY_ENV, **judge})


def test_the_judges_grades_land_in_a_judgments_file_and_a_second_pool_makes_no_calls(tmp_path, fake, capsys):
    config = judged_job(tmp_path, fake.url)
    first = run(config, quiet=True)
    assert main(["pool", str(first.run_dir)]) == 0
    pool = read_csv(first.run_dir / "pool.csv")
    judged = read_csv(first.run_dir / "pool.judged.csv")
    assert fake.calls == len(pool) and fake.keys == {f"Bearer {SECRET}"}
    assert tuple(judged[0]) == (*COLUMNS, "judge") and {r["judge"] for r in judged} == {"openai-compatible fake-judge"}
    assert {(r["query_id"], r["key"]) for r in judged if r["grade"] == "2"} == {("e1", "mem-cfo"), ("e2", "mem-cfo")}
    assert {r["grade"] for r in judged} == {"0", "2"}
    spent = json.loads((first.run_dir / "judge.json").read_text())
    assert (spent["calls"], spent["tokens"], spent["cached"]) == (len(pool), 42 * len(pool), 0)
    assert "graded" in capsys.readouterr().out

    calls = fake.calls
    assert main(["pool", str(first.run_dir)]) == 0  # the cache answers every pair
    assert fake.calls == calls
    assert read_csv(first.run_dir / "pool.judged.csv") == judged
    assert json.loads((first.run_dir / "judge.json").read_text())["cached"] == len(pool)
    assert main(["report", str(first.run_dir), "--quiet"]) == 0
    assert (f"The judge (openai-compatible fake-judge) graded {len(pool)} pairs of this run's pool: 0 calls, 0 tokens, "
            f"{len(pool)} answers from its cache") in (first.run_dir / "report.md").read_text()

    # The judge's file as the golden set's judgments, beside a person's: the choice follows the graded answer, and
    # the report states their agreement on the pairs both graded.
    person = [dict(r, grade=g) for r in pool for q, k, g in [("e1", "mem-cfo", "1"), ("e1", "doc-vpn", "0")]
              if (r["query_id"], r["key"]) == (q, k)]
    write_csv(tmp_path / "person.csv", person)
    with_judgments(config, os.path.relpath(first.run_dir / "pool.judged.csv", tmp_path), "person.csv")
    second = run(config, quiet=True)
    assert second.best == BASELINE and fake.calls == calls
    used = pl.read_parquet(second.run_dir / "judgments.parquet").filter(
        (pl.col("key") == "mem-cfo") & pl.col("query_id").is_in(["e1", "e2"]))
    assert used.select("query_id", "grade", "judge", "used").sort("query_id", "judge").rows() == [
        ("e1", 1, "", True), ("e1", 2, "openai-compatible fake-judge", False),
        ("e2", 2, "openai-compatible fake-judge", True)]
    # (person, judge): (1, 2) and (0, 0): observed 1/2, by chance 1/4, kappa (1/2 - 1/4) / (3/4)
    assert ("openai-compatible fake-judge and people graded 2 of the same pairs: Cohen's kappa 0.33"
            in (second.run_dir / "report.md").read_text())
    assert leaks(tmp_path, [SECRET]) == []


def test_the_budget_caps_the_calls(tmp_path, fake):
    first = run(judged_job(tmp_path, fake.url, budget=3), quiet=True)
    assert main(["pool", str(first.run_dir)]) == 0
    judged = read_csv(first.run_dir / "pool.judged.csv")
    assert fake.calls == 3 and sum(r["grade"] != "" for r in judged) == 3
    spent = json.loads((first.run_dir / "judge.json").read_text())
    assert (spent["calls"], spent["over_budget"], spent["budget"]) == (3, len(judged) - 3, 3)


def test_the_api_key_never_reaches_an_error_or_a_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(KEY_ENV, SECRET)
    refusing = FakeJudge(refuse=True)
    try:
        first = run(judged_job(tmp_path, refusing.url), quiet=True)
        assert main(["pool", str(first.run_dir)]) == 3
    finally:
        refusing.server.close()
    err = capsys.readouterr().err
    assert "answered HTTP 401" in err and SECRET not in err
    assert (first.run_dir / "pool.csv").exists()  # written before the judge was asked: nothing is lost
    assert leaks(tmp_path, [SECRET]) == []


def test_an_unset_key_variable_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(InputError, match=f"\\${KEY_ENV}: is not set"):
        ChatClient("http://127.0.0.1:9", "m", KEY_ENV)


def test_cohen_kappa():
    assert cohen_kappa([(0, 0), (1, 1), (2, 2)]) == 1.0
    assert cohen_kappa([(1, 2), (0, 0)]) == pytest.approx(1 / 3)
    assert cohen_kappa([(0, 1), (1, 0)]) == -1.0
    assert cohen_kappa([(1, 1), (1, 1)]) is None and cohen_kappa([]) is None


@pytest.mark.parametrize("judge, where, problem", [
    ({"base_url": "http://user:pw@127.0.0.1:9", "model": "m"}, "judge.base_url", "must not carry credentials"),
    ({"base_url": "http://127.0.0.1:9", "model": "m", "prompt": "grade {query}"}, "judge.prompt",
     "must name {query} and {item}"),
    ({"base_url": "http://127.0.0.1:9"}, "judge.model", "is required"),
    ({"base_url": "http://127.0.0.1:9", "model": "m", "budget": -1}, "judge.budget", "must be >= 0"),
    ({"kind": "anthropic", "base_url": "http://127.0.0.1:9", "model": "m"}, "judge.kind", "openai-compatible"),
])
def test_a_bad_judge_section_is_named(tmp_path, judge, where, problem):
    with pytest.raises(InputError) as caught:
        load_config(unlabelled_answer_job(tmp_path, judge=judge), BACKENDS)
    assert caught.value.where == where and problem in caught.value.problem and "pw" not in str(caught.value)
