"""Grading (query, item) pairs through a `ChatClient`: the prompt, the answer's grade, the cache and the budget.

The cache is a JSON-lines file, one answer a line, keyed by the model, the prompt template, the query and the
item's text: a pair is asked once per (query, item, model, prompt), and a later pool of any run with the same
cache file asks nothing it already asked. Each answer is appended as it comes, so an interrupted grading keeps
what it paid for. The budget caps the calls of one grading (cached answers cost none); pairs past it stay ungraded.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from rqsweep.judge.client import ChatClient

PROMPT = ("You grade search results for relevance.\n\nQuery: {query}\n\nItem: {item}\n\n"
          "How relevant is the item to the query? Answer with one number only: 0 = not relevant, 1 = relevant, "
          "2 = highly relevant (it answers the query).")
ITEM_CHARS = 2000  # of an item's text the prompt shows


@dataclass(frozen=True)
class Pair:
    query_id: str
    query: str
    key: str
    item: str  # the item's text


@dataclass
class Spent:
    """What one grading cost: calls made, their tokens, answers read from the cache, pairs left ungraded."""

    judge: str
    calls: int = 0
    tokens: int = 0
    cached: int = 0
    over_budget: int = 0
    unreadable: int = 0  # answers that named no grade
    budget: int | None = None
    grades: dict[tuple[str, str], int] = field(default_factory=dict)  # (query_id, key) -> grade

    def as_json(self) -> dict:
        return {k: v for k, v in vars(self).items() if k != "grades"} | {"graded": len(self.grades)}


def prompt_of(template: str, pair: Pair) -> str:
    # str.replace, not str.format: a query or an item may hold braces.
    return template.replace("{query}", pair.query).replace("{item}", pair.item[:ITEM_CHARS])


def grade_of(text: str) -> int | None:
    """The first integer an answer names (models wrap it in words or markup), or None."""
    found = re.search(r"-?\d+", text)
    return None if found is None else int(found.group())


def _cache_key(model: str, template: str, pair: Pair) -> str:
    return hashlib.sha256(json.dumps([model, template, pair.query, pair.item]).encode()).hexdigest()


def _read_cache(path: Path) -> dict[str, dict]:
    if not path.exists():
        return {}
    entries = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
            entries[entry["cache_key"]] = entry
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by an interruption: asked again
    return entries


def grade_pairs(client: ChatClient, pairs: Iterable[Pair], cache: Path, template: str | None = None,
                budget: int | None = None) -> Spent:
    """Grade each pair, from the cache or the endpoint (at most `budget` calls), appending new answers to `cache`."""
    template = template or PROMPT
    known = _read_cache(cache)
    spent = Spent(client.name, budget=budget)
    cache.parent.mkdir(parents=True, exist_ok=True)
    with cache.open("a", encoding="utf-8") as out:
        for pair in pairs:
            key = _cache_key(client.model, template, pair)
            entry = known.get(key)
            if entry is not None:
                spent.cached += 1
            elif budget is not None and spent.calls >= budget:
                spent.over_budget += 1
                continue
            else:
                reply = client.ask(prompt_of(template, pair))
                spent.calls, spent.tokens = spent.calls + 1, spent.tokens + reply.tokens
                entry = known[key] = {"cache_key": key, "query_id": pair.query_id, "key": pair.key,
                                      "model": client.model, "answer": reply.text, "tokens": reply.tokens}
                out.write(json.dumps(entry) + "\n")
                out.flush()
            grade = grade_of(entry["answer"])
            if grade is None:
                spent.unreadable += 1
            else:
                spent.grades[(pair.query_id, pair.key)] = grade
    return spent


def cohen_kappa(pairs: list[tuple[int, int]]) -> float | None:
    """Cohen's kappa of two graders' grades of the same items (each grade a category); None when it is undefined
    (no items, or both graders gave one same grade to every item)."""
    if not pairs:
        return None
    n = len(pairs)
    observed = sum(a == b for a, b in pairs) / n
    first, second = [a for a, _ in pairs], [b for _, b in pairs]
    expected = sum(first.count(g) * second.count(g) for g in set(first) | set(second)) / n / n
    return None if expected == 1 else (observed - expected) / (1 - expected)
