"""The draft's typed slices, each a stated rule over the corpus (no model): what a query of the slice asks, and the
item that answers it.

- exact_token: an identifier (a code, SKU, error number, version, host: a word holding a digit and a capital, an
  underscore, or a digit and a letter joined by `-`, `.` or `_`) that occurs in exactly one item -> that item. The
  query is the identifier alone, as a user pastes it.
- exact_name: a page's title, or one of its headings (levels 2 and 3; of two words or more, not opening with a stop
  word) that no other page shares, reworded: leading numbering, parentheses and a leading article dropped,
  lowercased, and a question put before it by its head noun (its last word before `of`, `for`, `in`, `on`, `to`,
  `with`): "what are" for a plural head, "what is" otherwise, then "the" unless it opens with a gerund (-ing)
  -> that page.
- freshness: two memories of one store about the same subject: the Jaccard similarity of their word sets at least
  JACCARD and the cosine of their feature-hash vectors (SOAT's eval embedder: tokens and character grams) at least
  COSINE -> the newer. The query asks for the subject: "what is the" + the first run of two words or more that
  both share (in the newer's order, not across punctuation), cut before its first verb of state (is, was, moved,
  ...) and trimmed of stop words.
- entity: a capitalised name (a run of capitalised words; a sentence's first word left out when it is a common
  word or stands alone; months and weekdays left out) in at most two memories that no document names -> those
  memories. The query is "who is" + a name shaped like a person's (two words, each a capital then lower case),
  "what is" + any other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import chain, combinations

import numpy as np

from rqsweep.corpus import Corpus
from rqsweep.corpus.pages import first_heading
from rqsweep.engine.embed import FeatureHashEmbedder

JACCARD = 0.4
COSINE = 0.6
ENTITY_MEMORIES = 2  # a name in more memories than this is a topic, not an entity to look up

_STRIP = ".,;:!?()[]{}\"'`*<>|#"
_IDENTIFIER = re.compile(r"[A-Za-z0-9][\w.:/+-]*[A-Za-z0-9]")
_HEADING = re.compile(r"^ {0,3}#{2,3}[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$", re.M)
_WORD = re.compile(r"\w+(?:[-'.]\w+)*|[,;:()]")  # words, and the punctuation a subject does not run across
_NAME = re.compile(r"[A-Z][\w'’-]*(?:[ ][A-Z][\w'’-]*)*")
STOP = frozenset("a an the this that these those our your their its it is are was were be been has have had now "
                 "to of in on at for from by with and or but as so since every each all any some not no still "
                 "when where who what which how there here then than also only just".split())
_STATE_VERBS = frozenset("is are was were has have had moved runs run starts start changed became now".split())
_CALENDAR = frozenset("january february march april may june july august september october november december monday "
                      "tuesday wednesday thursday friday saturday sunday".split())
_HEAD_ENDS = frozenset("of for in on to with".split())


@dataclass(frozen=True)
class Candidate:
    slice: str
    query: str
    expected: tuple[str, ...]
    generator: str  # what `synthetic` says of the row


def _identifiers(text: str) -> set[str]:
    found = set()
    for word in text.split():
        word = word.strip(_STRIP)
        if not 3 <= len(word) <= 60 or not _IDENTIFIER.fullmatch(word):
            continue
        digit, letter = any(c.isdigit() for c in word), any(c.isalpha() for c in word)
        capital = any(c.isupper() for c in word)
        joined = any(c in "-._" for c in word) and not re.fullmatch(r"\d+-[a-z]+", word)
        if (digit and capital) or ("_" in word and letter) or (digit and letter and joined):
            found.add(word)
    return found


def exact_token(corpus: Corpus) -> list[Candidate]:
    where: dict[str, set[str]] = {}
    for item in chain(corpus.documents, corpus.memories):
        for word in _identifiers(item.content):
            where.setdefault(word, set()).add(item.key)
    return [Candidate("exact_token", word, (keys.pop(),), "exact_token")
            for word, keys in where.items() if len(keys) == 1]


def reword_heading(heading: str) -> str | None:
    """A heading as a question, by the rule above; None when nothing is left of it."""
    text = re.sub(r"\s*\([^)]*\)", "", re.sub(r"^\d+(?:\.\d+)*[.)]?\s+", "", heading.strip()))
    words = text.strip(_STRIP + " ").lower().split()
    if words and words[0] in ("a", "an", "the"):
        words = words[1:]
    if not words:
        return None
    if heading.rstrip().endswith("?"):
        return " ".join(words) + "?"
    head = next((words[i - 1] for i, w in enumerate(words) if w in _HEAD_ENDS and i), words[-1])
    plural = head.endswith("s") and not head.endswith(("ss", "us", "is"))
    article = "" if words[0].endswith("ing") else " the"
    return f"{'what are' if plural else 'what is'}{article} {' '.join(words)}"


def exact_name(corpus: Corpus) -> list[Candidate]:
    pages: dict[str, set[str]] = {}  # a title or heading, lowercased -> the pages holding it
    for doc in corpus.documents:
        headings = [h for h in _HEADING.findall(doc.content)
                    if len(h.split()) >= 2 and h.split()[0].lower() not in STOP | {"before", "after", "if"}]
        for title in [doc.title or first_heading(doc.content), *headings]:
            if title.strip():
                pages.setdefault(title.strip().lower(), set()).add(doc.key)
    return [Candidate("exact_name", query, (next(iter(keys)),), "exact_name") for title, keys in pages.items()
            if len(keys) == 1 and (query := reword_heading(title)) is not None]


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _first_run(a: list[str], b: list[str]) -> list[str]:
    """The first run of two words or more of `a` that `b` holds too, contiguous and in order, not across
    punctuation (the longest one starting there)."""
    for i in range(len(a)):
        longest = 0
        for j in range(len(b)):
            n = 0
            while i + n < len(a) and j + n < len(b) and a[i + n] == b[j + n] and a[i + n][0].isalnum():
                n += 1
            longest = max(longest, n)
        if longest >= 2:
            return a[i:i + longest]
    return []


def subject(newer: str, older: str) -> str | None:
    """What two memories are both about: the first run of words both share (`_first_run`), cut before its first
    verb of state (when words are left before it), trimmed of stop words at both ends; None when nothing is left."""
    run = _first_run(_words(newer), _words(older))
    cut = next((i for i, w in enumerate(run) if w in _STATE_VERBS and any(x not in STOP for x in run[:i])), None)
    run = run[:cut]
    while run and run[0] in STOP:
        run = run[1:]
    while run and run[-1] in STOP:
        run = run[:-1]
    return " ".join(run) or None


def freshness(corpus: Corpus) -> list[Candidate]:
    memories = list(corpus.memories)
    vectors = FeatureHashEmbedder(1024).embed([m.content for m in memories]).astype(np.float64)
    words = [{w for w in _words(m.content) if w[0].isalnum()} for m in memories]
    newest: dict[str, tuple[float, str]] = {}  # query -> (age, key) of the newest memory it asks for
    for i, j in combinations(range(len(memories)), 2):
        a, b = memories[i], memories[j]
        if a.store != b.store or a.age_days == b.age_days:
            continue
        jaccard = len(words[i] & words[j]) / len(words[i] | words[j]) if words[i] | words[j] else 0.0
        cosine = float(vectors[i] @ vectors[j])  # the feature hash's rows are unit vectors
        if jaccard < JACCARD or cosine < COSINE:
            continue
        newer, older = (a, b) if a.age_days < b.age_days else (b, a)
        what = subject(newer.content, older.content)
        if what is None:
            continue
        new = (newer.age_days, newer.key)
        query = f"what is the {what}"
        newest[query] = min(newest.get(query, new), new)
    return [Candidate("freshness", q, (key,), "freshness") for q, (_, key) in newest.items()]


def _names(text: str) -> set[str]:
    found = set()
    for match in _NAME.finditer(text):
        words = match.group(0).split(" ")
        start = match.start() == 0 or text[:match.start()].rstrip().endswith((".", "!", "?", ":", ";"))
        if start and words[0].lower() in STOP | {"since", "every", "incident"}:
            words = words[1:]
        elif start and len(words) == 1:
            words = []  # a capitalised first word alone: any word at a sentence's start
        name = " ".join(words).rstrip("'’-")
        if (len(name) >= 3 and not any(c.isdigit() for c in name) and not name.isupper()
                and name.lower().removesuffix("s") not in _CALENDAR):
            found.add(name)
    return found


def entity(corpus: Corpus) -> list[Candidate]:
    named: dict[str, set[str]] = {}
    for memory in corpus.memories:
        for name in _names(memory.content):
            named.setdefault(name, set()).add(memory.key)
    unnamed = {name for name, keys in named.items() if len(keys) <= ENTITY_MEMORIES}
    for doc in corpus.documents:  # a document at a time: a large corpus is not held whole
        text = f"{doc.title}\n{doc.content}".lower()
        unnamed -= {name for name in unnamed if name.lower() in text}
    return [Candidate("entity", f"{'who' if _person(name) else 'what'} is {name}", tuple(sorted(named[name])), "entity")
            for name in unnamed]


def _person(name: str) -> bool:
    words = name.split()
    return len(words) == 2 and all(w[0].isupper() and w[1:].isalpha() and w[1:].islower() for w in words)


RULES = (exact_token, exact_name, freshness, entity)
