"""The draft's semantic slice: questions in a user's own words about a page, written by the judge endpoint
(`judge:`, the chat model that grades `rqsweep pool`'s pairs) -> that page. Without an endpoint none are made."""

from __future__ import annotations

import random
from typing import Sequence

from rqsweep.config import JudgeConfig
from rqsweep.corpus import Corpus
from rqsweep.draft.rules import Candidate
from rqsweep.judge.client import ChatClient

PROMPT = ("Write one question a colleague would type into the search box of this knowledge base, in their own "
          "words, that the page below answers. Do not copy its title or any phrase of three words or more from it. "
          "Answer with the question alone, on one line.\n\nPage:\n{item}")
PAGE_CHARS = 3000  # of each page, in the prompt


def semantic(corpus: Corpus, judge: JudgeConfig, rows: int, seed: int) -> list[Candidate]:
    """Up to `rows` questions (and the judge's budget of calls), one per page of a seeded sample of the pages."""
    keys = sorted(corpus.documents.columns["key"])
    calls = min(rows, len(keys), judge.budget if judge.budget is not None else rows)
    chosen = set(random.Random(seed).sample(keys, calls))
    out: list[Candidate] = []
    with ChatClient.of(judge) as client:
        for doc in corpus.documents:
            if doc.key in chosen:
                text = client.ask(PROMPT.format(item=doc.content[:PAGE_CHARS])).text.strip()
                question = text.splitlines()[0].strip().strip('"') if text else ""
                if question:
                    out.append(Candidate("semantic", question, (doc.key,), f"semantic ({client.name})"))
    return out


def unmade(judge: JudgeConfig | None) -> Sequence[str]:
    """Why the draft holds no semantic rows, when it holds none for want of an endpoint."""
    return [] if judge is not None else [
        "semantic: none made: the config names no judge endpoint (`judge:`); paraphrases need a model, and no rule "
        "writes them. Add queries in users' own words by hand, or configure `judge:` and draft again."]
