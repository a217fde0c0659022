"""The feature-hash embedder against values derived by hand, a literal reference and JavaScript itself."""

from __future__ import annotations

import ctypes
import json
import math
import random
import shutil
import subprocess

import numpy as np
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from rqsweep.engine.embed import FeatureHashEmbedder, fnv1a32, js_lower, to_pgvector_float32, tokens
from rqsweep.engine.embed import feature_hash
from rqsweep.engine.embed.feature_hash import INDEX_SEED, SIGN_SEED, token_features

P = 16777619
M = 2**32

_libc = ctypes.CDLL(None)
_libc.strtof.restype = ctypes.c_float
_libc.strtof.argtypes = [ctypes.c_char_p, ctypes.c_void_p]


def strtof(decimal: str) -> np.float32:
    """What pgvector does with each number of a vector literal."""
    return np.float32(_libc.strtof(decimal.encode(), None))


def fnv1a_bytes(data: bytes, seed: int) -> int:
    """Textbook FNV-1a over bytes: for ASCII text the bytes are the UTF-16 code units."""
    h = seed
    for byte in data:
        h = ((h ^ byte) * P) % M
    return h


# --- FNV-1a -----------------------------------------------------------------------------------------

def test_fnv1a_published_test_vectors():
    # Landon Curt Noll's FNV-1a 32-bit test vectors (ASCII: one UTF-16 unit per byte).
    assert fnv1a_bytes(b"", INDEX_SEED) == 0x811C9DC5
    assert fnv1a_bytes(b"a", INDEX_SEED) == 0xE40C292C
    assert fnv1a_bytes(b"foobar", INDEX_SEED) == 0xBF9CF968
    assert fnv1a32("") == 0x811C9DC5
    assert fnv1a32("a") == 0xE40C292C
    assert fnv1a32("foobar") == 0xBF9CF968


def test_fnv1a_t_a_by_hand():
    # "t:a" = units 0x74 0x3A 0x61; each step is h = ((h ^ unit) * 16777619) mod 2**32.
    assert 0x811C9DC5 ^ 0x74 == 0x811C9DB1
    assert 0x811C9DB1 * P % M == 0xF10C3DA3
    assert 0xF10C3DA3 ^ 0x3A == 0xF10C3D99
    assert 0xF10C3D99 * P % M == 0x0F44F7DB
    assert 0x0F44F7DB ^ 0x61 == 0x0F44F7BA
    assert 0x0F44F7BA * P % M == 0xC391F9CE
    assert fnv1a32("t:a", INDEX_SEED) == 0xC391F9CE  # index 0xC391F9CE % 1024 = 0x1CE = 462
    # Sign seed 1099511628 = 0x4189374C.
    assert 0x4189374C ^ 0x74 == 0x41893738
    assert 0x41893738 * P % M == 0x6301ED28
    assert (0x6301ED28 ^ 0x3A) * P % M == 0xEE083356
    assert (0xEE083356 ^ 0x61) * P % M == 0xEDE89F95
    assert fnv1a32("t:a", SIGN_SEED) == 0xEDE89F95  # odd: sign -1


def test_fnv1a_hashes_utf16_units_not_bytes():
    # 'é' is the single unit 0xE9 (two bytes in UTF-8); '😀' is the pair 0xD83D 0xDE00.
    assert fnv1a32("é", SIGN_SEED) == ((SIGN_SEED ^ 0xE9) * P) % M
    assert fnv1a32("😀", INDEX_SEED) == ((((INDEX_SEED ^ 0xD83D) * P) % M ^ 0xDE00) * P) % M
    # A lone surrogate (a window that split a pair) hashes as its unit.
    assert fnv1a32("\ud83d", INDEX_SEED) == ((INDEX_SEED ^ 0xD83D) * P) % M


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.characters(codec=None, blacklist_categories=()), max_size=30), max_size=20),
       st.sampled_from([INDEX_SEED, SIGN_SEED]))
def test_many_texts_hash_together_as_one_by_one(texts, seed):
    """The embedder hashes its new features together (`fnv1a32_many`): the same hashes as `fnv1a32`, for texts of
    any lengths, astral characters and lone surrogates included."""
    assert feature_hash.fnv1a32_many(texts, seed).tolist() == [fnv1a32(text, seed) for text in texts]


# --- vectors ------------------------------------------------------------------------------------------

def test_one_token_vector_by_hand():
    # "a": features t:a (1.0) and g:^a$ (0.25), the only 3-unit window of "^a$".
    # t:a   -> index 462 (above), sign hash odd -> -1.0
    # g:^a$ -> fnv1a = 0x66C7A36B, index 0x36B = 875; sign hash 0x91BE9130 even -> +0.25
    assert fnv1a32("g:^a$", INDEX_SEED) == 0x66C7A36B and fnv1a32("g:^a$", SIGN_SEED) == 0x91BE9130
    # norm = sqrt(1 + 1/16) = sqrt(17)/4
    expected = np.zeros(1024)
    expected[462] = -1.0 / (math.sqrt(17) / 4)
    expected[875] = 0.25 / (math.sqrt(17) / 4)
    got = FeatureHashEmbedder().embed(["a"])
    assert got.dtype == np.float32 and got.shape == (1, 1024)
    np.testing.assert_array_equal(got[0], expected.astype(np.float32))
    assert np.count_nonzero(got) == 2


def test_repeated_features_count_once():
    # A set: "a a A" has the same features as "a"; "aaaa" has the window "aaa" twice, counted once.
    embedder = FeatureHashEmbedder(dimensions=8)
    np.testing.assert_array_equal(embedder.embed(["a a A"]), embedder.embed(["a"]))
    names = [name for name, _ in token_features("aaaa")]
    assert names == ["t:aaaa", "g:^aa", "g:aaa", "g:aaa", "g:aa$"]
    np.testing.assert_array_equal(embedder.embed(["aaaa"])[0], reference_vector("aaaa", 8))


@pytest.mark.parametrize("text", ["", "   ", "!!! ... --- ___ ¿?", "😀 🎉"])
def test_no_features_give_e0(text):
    got = FeatureHashEmbedder(dimensions=16).embed([text])[0]
    assert got.tolist() == [1.0] + [0.0] * 15


def test_zero_norm_gives_e0():
    # Find two 2-letter tokens whose vectors at D=3 cancel exactly (they share no feature). D is odd on
    # purpose: see test_sign_follows_index_parity_for_even_dimensions.
    def raw(token):
        vec = [0.0, 0.0, 0.0]
        for name, weight in [("t:" + token, 1.0), ("g:^" + token, 0.25), ("g:" + token + "$", 0.25)]:
            sign = 1 if fnv1a_bytes(name.encode(), SIGN_SEED) % 2 == 0 else -1
            vec[fnv1a_bytes(name.encode(), INDEX_SEED) % 3] += sign * weight
        return tuple(vec)
    seen: dict[tuple[float, ...], str] = {}
    pair = None
    for a in "abcdefghijklmnopqrstuvwxyz":
        for b in "abcdefghijklmnopqrstuvwxyz":
            vec = raw(a + b)
            opposite = seen.get(tuple(-x for x in vec))
            if opposite and any(vec):
                pair = (opposite, a + b)
            seen.setdefault(vec, a + b)
    assert pair is not None
    embedder = FeatureHashEmbedder(dimensions=3)
    assert embedder.embed([" ".join(pair)]).tolist() == [[1.0, 0.0, 0.0]]
    assert embedder.embed([pair[0]]).tolist() != [[1.0, 0.0, 0.0]]


def test_sign_follows_index_parity_for_even_dimensions():
    # The FNV prime is odd, so a hash's low bit is the seed's low bit xor the low bits of all units. The
    # index seed is odd and the sign seed even, so for even D an odd index always gets +1 and an even
    # index -1: contributions never cancel, and every SOAT vector is >= 0 on odd, <= 0 on even indices.
    vectors = FeatureHashEmbedder().embed(["The quick brown fox", "ΟΔΟΣ 東京 café v1.2.3", "a b c d e f g"])
    assert (vectors[:, 1::2] >= 0).all() and (vectors[:, 0::2] <= 0).all()


def test_float32_deterministic_and_batch_independent():
    rng = random.Random(7)
    words = ["alpha", "beta", "Γάμμα", "δέλτα", "東京", "café", "x_1", "v2.0", "ΣΟΦΙΑ", "𐐀𐐁"]
    texts = [" ".join(rng.choices(words, k=rng.randint(0, 12))) for _ in range(1300)]  # > 2 blocks of 512
    first = FeatureHashEmbedder().embed(texts)
    assert first.dtype == np.float32 and first.shape == (1300, 1024)
    one_by_one = FeatureHashEmbedder()
    np.testing.assert_array_equal(np.vstack([one_by_one.embed([t]) for t in reversed(texts)])[::-1], first)
    np.testing.assert_array_equal(FeatureHashEmbedder().embed(texts), first)
    norms = np.linalg.norm(first.astype(np.float64), axis=1)
    np.testing.assert_allclose(norms, 1.0, rtol=1e-6)


def test_identity_names_embedder_and_dimensions():
    assert FeatureHashEmbedder().identity == "feature-hash/1024"
    assert FeatureHashEmbedder(dimensions=256).identity == "feature-hash/256"
    with pytest.raises(ValueError):
        FeatureHashEmbedder(dimensions=0)


# --- tokens, lower-casing, UTF-16 windows ------------------------------------------------------------

def test_tokens_strip_trailing_runs():
    assert tokens("end. v1.2.3. foo_-_ a--b-- x._ _hidden -5 state-of-the-art.") == [
        "end", "v1.2.3", "foo", "a--b", "x", "hidden", "5", "state-of-the-art"]


def test_tokens_unicode():
    assert tokens("Café naïve-RÉSUMÉ ΟΔΟΣ 東京タワー😀x ß ẞ") == [
        "café", "naïve-résumé", "οδος", "東京タワー", "x", "ß", "ß"]


def test_windows_count_utf16_units_and_split_surrogate_pairs():
    # U+10400 DESERET CAPITAL LONG I lower-cases to U+10428 = units D801 DC28.
    assert tokens("𐐀𐐀") == ["𐐨𐐨"]
    assert [name for name, _ in token_features("𐐨𐐨")] == [
        "t:\ud801\udc28\ud801\udc28",
        "g:^\ud801\udc28",
        "g:\ud801\udc28\ud801",
        "g:\udc28\ud801\udc28",
        "g:\ud801\udc28$",
    ]
    assert [weight for _, weight in token_features("𐐨𐐨")] == [1.0, 0.25, 0.25, 0.25, 0.25]


def test_js_lower_full_and_contextual_mappings():
    # Unicode SpecialCasing: İ -> i + COMBINING DOT ABOVE (not a letter, so it splits the token).
    assert js_lower("İstanbul") == "i\u0307stanbul"
    assert tokens("İstanbul") == ["i", "stanbul"]
    # Final_Sigma: Σ -> ς after a cased letter (case-ignorables skipped) unless a cased letter follows.
    assert js_lower("ΟΔΟΣ") == "οδος"
    assert js_lower("ΣΑ Σ ΑΣ.Α ΑΣ' Α\u0345Σ") == "σα σ ασ.α ας' α\u0345ς"
    # U+0345 is cased and case-ignorable: it is skipped, so nothing cased precedes this Σ.
    assert js_lower("\u0345Σ") == "\u0345σ"
    assert js_lower("K") == "k"  # KELVIN SIGN


def test_js_lower_knows_letters_newer_than_python_unicode_database():
    # Unicode 16 added U+1C89 -> U+1C8A and Garay (U+10D50 -> U+10D70); Node's ICU maps them, and a
    # cased Garay letter after Σ makes it non-final.
    assert js_lower("\u1c89") == "\u1c8a"
    assert js_lower("ΑΣ\U00010d50") == "ασ\U00010d70"


# --- the literal reading of section 4, and JavaScript itself ----------------------------------------

_DOC_TOKEN = regex.compile(r"[\p{L}\p{N}][\p{L}\p{N}_.-]*")


def reference_vector(text: str, dimensions: int) -> np.ndarray:
    """Section 4 read literally: an insertion-ordered set, summed in order, float64, then strtof(repr)."""
    features: dict[str, float] = {}
    for match in _DOC_TOKEN.findall(js_lower(text)):
        token = match.rstrip("._-")
        if not token:
            continue
        units = token.encode("utf-16-le", "surrogatepass")
        unit_chars = "".join(chr(int.from_bytes(units[i:i + 2], "little")) for i in range(0, len(units), 2))
        features.setdefault("t:" + unit_chars, 1.0)
        padded = "^" + unit_chars + "$"
        for i in range(len(padded) - 2):
            features.setdefault("g:" + padded[i:i + 3], 0.25)
    vec = [0.0] * dimensions
    for name, weight in features.items():
        sign = 1.0 if fnv1a32(name, SIGN_SEED) % 2 == 0 else -1.0
        vec[fnv1a32(name, INDEX_SEED) % dimensions] += sign * weight
    norm = math.sqrt(sum(v * v for v in vec))
    if not features or norm == 0:
        vec = [1.0] + [0.0] * (dimensions - 1)
    else:
        vec = [v / norm for v in vec]
    return np.array([strtof(repr(v)) for v in vec], dtype=np.float32)


_ALPHABET = list("abcxyz019 .-_,!?'") + ["Σ", "Α", "ς", "é", "ß", "İ", "東", "😀", "𐐀", "\u0345", "\u0307",
                                          "\u1c89", "\U00010d50", "ﬁ", "ǅ"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_ALPHABET), max_size=40).map("".join), st.sampled_from([1, 3, 16, 1024]))
def test_matches_literal_reference(text, dimensions):
    # Small dimensions force many features onto one index with mixed weights.
    got = FeatureHashEmbedder(dimensions).embed([text])[0]
    np.testing.assert_array_equal(got.view(np.uint32), reference_vector(text, dimensions).view(np.uint32))


_BATCH_PIECES = _ALPHABET + ["\t", "\n", "\x0b", "\x0c", "\r", "  ", "\x1c", "\xa0", "\u3000", "SKU-4711",
                              "https://a.b/c?d=1", "3.14", "-5", "naïve-résumé", "<b>", "ΟΔΟΣ ", "ΣΑΣ. ", "İ"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_BATCH_PIECES), max_size=30).map("".join), max_size=10),
       st.sampled_from([3, 1024]), st.sampled_from([1, 40, 1 << 22]))
def test_a_batch_embeds_each_text_as_the_literal_reference(texts, dimensions, slots):
    """The batch path (runs cut and numbered for all texts at once, a (feature, row) counted once by its slot)
    gives each text the literal reading's vector bit for bit, whatever the block of rows."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(feature_hash, "_SLOTS", slots)
        patch.setattr(feature_hash, "_MIN_ROWS_PER_BLOCK", 1)
        got = FeatureHashEmbedder(dimensions).embed(texts)
    assert got.shape == (len(texts), dimensions)
    for text, vector in zip(texts, got):
        np.testing.assert_array_equal(vector.view(np.uint32), reference_vector(text, dimensions).view(np.uint32))


def test_texts_arrow_cannot_hold_are_embedded_text_by_text():
    texts = ["a\ud800b pager", "\udfff", "pager rotation"]
    got = FeatureHashEmbedder(16).embed(texts)
    for text, vector in zip(texts, got):
        np.testing.assert_array_equal(vector.view(np.uint32), reference_vector(text, 16).view(np.uint32))


_JS_EMBED = r"""
const fnv1a = (s, seed) => {
  let h = seed >>> 0;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619) >>> 0;
  return h;
};
const embed = (text, D) => {
  const tokens = (text.toLowerCase().match(/[\p{L}\p{N}][\p{L}\p{N}_.-]*/gu) || [])
    .map((t) => t.replace(/[._-]+$/, '')).filter((t) => t.length > 0);
  const features = new Map();
  for (const t of tokens) {
    if (!features.has('t:' + t)) features.set('t:' + t, 1.0);
    const p = '^' + t + '$';
    for (let i = 0; i + 3 <= p.length; i++) {
      const g = 'g:' + p.slice(i, i + 3);
      if (!features.has(g)) features.set(g, 0.25);
    }
  }
  const v = new Array(D).fill(0);
  for (const [f, w] of features) v[fnv1a(f, 2166136261) % D] += (fnv1a(f, 1099511628) % 2 === 0 ? 1 : -1) * w;
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  if (features.size === 0 || norm === 0) return [1, ...new Array(D - 1).fill(0)];
  return v.map((x) => x / norm);
};
const { texts, D } = JSON.parse(require('fs').readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify(texts.map((t) => `[${embed(t, D).join(',')}]`)));
"""


def test_bit_exact_against_javascript():
    """Section 4 written in JavaScript, run by Node, stored the way SOAT stores it (literal -> strtof)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the JavaScript cross-check needs it")
    rng = random.Random(2024)
    pieces = _ALPHABET + ["ΟΔΟΣ ", "Ἀθῆναι", "naïve-résumé", "SKU-4711", "v1.2.3.", "İstanbul", "ΣΑΣ. ",
                          "東京タワー", "한국어", "مرحبا", "Ünïcödé", "a_b_", "x-.", "\U0001d400", "\u2163"]
    texts = ["".join(rng.choices(pieces, k=rng.randint(0, 30))) for _ in range(300)]
    for dimensions in (7, 1024):
        js = subprocess.run([node, "-e", _JS_EMBED], input=json.dumps({"texts": texts, "D": dimensions}),
                            capture_output=True, text=True, check=True, encoding="utf-8")
        literals = json.loads(js.stdout)
        expected = np.array([[strtof(x) for x in lit[1:-1].split(",")] for lit in literals], dtype=np.float32)
        got = FeatureHashEmbedder(dimensions).embed(texts)
        mismatched = [t for t, a, b in zip(texts, got, expected) if not np.array_equal(a.view(np.uint32),
                                                                                       b.view(np.uint32))]
        assert not mismatched, mismatched[:3]


# --- float32 as pgvector stores it -------------------------------------------------------------------

def test_float32_rounding_follows_strtof_of_shortest_decimal():
    rng = np.random.default_rng(5)
    low = rng.uniform(-1, 1, 4000).astype(np.float32)
    high = np.nextafter(low, np.float32(np.inf))
    midpoints = (low.astype(np.float64) + high.astype(np.float64)) / 2  # exact in float64
    ordinary = rng.uniform(-1, 1, 4000)
    values = np.concatenate([midpoints, ordinary, [0.0, 1.0, -0.0, 1e-40, -3e-45]])
    expected = np.array([strtof(repr(float(v))) for v in values], dtype=np.float32)
    got = to_pgvector_float32(values)
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    # The plain cast disagrees on some midpoints: the case this function exists for.
    assert (values.astype(np.float32).view(np.uint32) != expected.view(np.uint32)).any()
