"""Job configs: YAML -> typed, validated objects. Every error names the file, the key path and the value."""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Protocol
from urllib.parse import urlsplit

from rqsweep.errors import InputError, shown
from rqsweep.files import read_data
from rqsweep.knobs import CHECKS, HALF_LIFE, KNOBS, MIN_SIMILARITY, OFF, RRF_K, KnobError, Knobs
from rqsweep.scope import Scope
from rqsweep.scrub import redact_url

SAMPLERS = ("tpe", "gp", "random", "nsga2")
# Enumerating a million settings takes about 3 s; the per-query table then holds settings x queries
# rows (1,980 x 165 for the handbook), so a larger grid is a typo more often than a plan.
MAX_GRID_SETTINGS = 1_000_000
_MISSING = object()
# Config keys whose values are secrets: never echoed in errors, redacted in run.json and Parquet.
SECRET_KEY = re.compile(r"token|password|secret|^api_key$|authorization", re.IGNORECASE)


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a service's base URL, in words that never repeat it; None when it can.

    A base URL reaches logs, run.json, Parquet metadata and error messages, so it may not carry
    secrets: user info, a query or a fragment are refused.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"expected an http:// or https:// URL with a host (got scheme {shown(parts.scheme)})"
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        return (f"must not carry credentials, a query or a fragment (host {parts.hostname}): "
                "give secrets through their own keys or environment variables")
    return None


class Section:
    """A mapping being read: remembers its file and key path, and rejects keys nobody asked for."""

    def __init__(self, data: object, file: Path, path: str):
        if not isinstance(data, dict):
            raise InputError(file, path or "(top level)", f"expected a mapping, got {shown(data)}")
        self.data, self.file, self.path = data, file, path

    def where(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    def fail(self, key: str | int, value: object, problem: str) -> InputError:
        shown_value = "(value not shown)" if isinstance(key, str) and SECRET_KEY.search(key) else shown(value)
        return InputError(self.file, self.where(key), f"{shown_value}: {problem}")

    def url(self, key: str) -> str | None:
        """An http(s) URL that carries no secret (see `url_problem`), without a trailing slash."""
        value = self.get(key, str, None)
        problem = None if value is None else url_problem(value)
        if problem:  # said without the value: it may hold a secret
            raise InputError(self.file, self.where(key), problem)
        return None if value is None else value.rstrip("/")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _MISSING,
            check: Callable[[Any], bool] | None = None, rule: str = "") -> Any:
        if key not in self.data or (self.data[key] is None and default is not _MISSING):
            if default is _MISSING:
                raise InputError(self.file, self.where(key), "is required")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            if float in kinds and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            else:
                names = " or ".join(k.__name__ for k in kinds)
                raise self.fail(key, value, f"expected {names}")
        if check is not None and not check(value):
            raise self.fail(key, value, rule)
        return value

    def choice(self, key: str, options: tuple[str, ...], default: str | object = _MISSING) -> str:
        return self.get(key, str, default, lambda v: v in options, f"expected one of {', '.join(options)}")

    def section(self, key: str, default: dict | None = None) -> "Section":
        value = self.data.get(key, default if default is not None else _MISSING)
        if value is _MISSING:
            raise InputError(self.file, self.where(key), "is required")
        return Section({} if value is None else value, self.file, self.where(key))

    def only(self, *allowed: str) -> "Section":
        unknown = sorted(set(self.data) - set(allowed))
        if unknown:
            raise InputError(self.file, self.where(unknown[0]),
                             f"unknown key (allowed here: {', '.join(allowed)})")
        return self

    def knob(self, key: str, checker: Callable[[object], Any], default: Any = _MISSING) -> Any:
        if key not in self.data:
            if default is _MISSING:
                raise InputError(self.file, self.where(key), "is required")
            return default
        try:
            return checker(self.data[key])
        except KnobError as exc:
            raise self.fail(key, self.data[key], exc.rule) from None


@dataclass(frozen=True)
class Chunking:
    """How documents are cut into chunks (section 5 of the SOAT contract)."""

    strategy: Literal["whole", "size"] = "size"
    chunk_size: int = 1000
    chunk_overlap: int = 200


@dataclass(frozen=True)
class KnobSpec:
    """Values of one knob: a list, a range (`step`, or `num` points, optionally log-spaced), or `quantiles` of the
    data the knob acts on (`DATA_KEYS`), resolved when the run starts (`rqsweep.search.space.resolve`), and `values`
    beside them when given."""

    values: tuple | None = None
    quantiles: tuple[float, ...] | None = None
    low: float | None = None
    high: float | None = None
    step: float | None = None
    num: int | None = None
    log: bool = False
    off: bool = False  # `include_off`: also try the knob switched off (no floor / no recency blend)

    def range_points(self) -> int | float:
        """How many values the range spans, counted without building them (inf when the count overflows)."""
        if self.step is not None:
            points = (self.high - self.low) / self.step
            return math.floor(points + 1e-9) + 1 if math.isfinite(points) else math.inf
        if self.num is not None:
            return self.num
        return int(self.high) - int(self.low) + 1  # a bare rrf_k range: every integer in it

    def size(self) -> int | float:
        """How many values a grid tries for this knob, at most (rounding rrf_k can merge some)."""
        if self.quantiles is not None:
            return len(self.quantiles) + len(self.values or ()) + self.off
        return len(self.values) if self.values is not None else self.range_points() + self.off


@dataclass(frozen=True)
class SweepConfig:
    strategy: Literal["grid", "optimize"]
    knobs: dict[str, KnobSpec]
    sampler: str = "tpe"
    # repr=False keeps these out of the inputs hash: a study may grow (`--resume --n-trials`), stop early or
    # live elsewhere without its results changing meaning.
    n_trials: int = field(default=100, repr=False)  # distinct settings evaluated, the baseline not counted
    seed: int | None = None
    timeout: float | None = field(default=None, repr=False)
    warm_start: int = 0  # at most this many coarse-grid settings enqueued before the sampler proposes
    batch_size: int = 8  # settings proposed before any is told (one fast-path batch or HTTP wave)
    storage: str | None = field(default=None, repr=False)  # study URL; None = a journal file in the run folder
    source: str = "inline"
    file: Path | None = field(default=None, repr=False)  # where the sweep is written (the config, when inline)
    path: str = field(default="", repr=False)  # its key path in that file ("sweep" inline)

    def data_knobs(self) -> list[str]:
        """The knobs whose values come from the data (`quantiles`), resolved when the run starts."""
        return [k for k, spec in self.knobs.items() if spec.quantiles is not None]

    def where(self, knob: str) -> str:
        """The key path of a knob's data-derived values in `file`, for errors."""
        return ".".join(p for p in (self.path, "knobs", knob, DATA_KEYS[knob]) if p)


@dataclass(frozen=True)
class Constraint:
    """A slice collapses when `metric` < `min`, or falls more than `max_drop` below the baseline's."""

    metric: str
    slice: str  # a slice name, "overall", or "*" for every slice
    min: float | None = None
    max_drop: float | None = None

    def describe(self) -> str:
        bound = f">= {self.min:g}" if self.min is not None else f"drop <= {self.max_drop:g} vs baseline"
        return f"{self.metric}[{self.slice}] {bound}"


@dataclass(frozen=True)
class Objective:
    metric: str = "mrr"
    slice: str = "overall"


@dataclass(frozen=True)
class Validation:
    """k-fold cross-validation over queries, stratified by slice (`validation:`), on the evaluated grid; with
    `group: expected`, the queries that share an expected key stay in one fold (paraphrases of one answer)."""

    folds: int = 5
    seed: int = 0
    group: str | None = None


def read_validation(value: object, file: Path) -> Validation | None:
    """The `validation:` value: a mapping {folds, seed}, true for the defaults, false (or folds 0) for none.

    Absent (None) means the defaults: a run states its held-out gain unless told not to.
    """
    if value is None or value is True:
        return Validation()
    if value is False:
        return None
    sec = Section(value, file, "validation").only("folds", "seed", "group")
    folds = sec.get("folds", int, Validation.folds, lambda v: v == 0 or v >= 2,
                    "must be >= 2 (or 0 for no cross-validation)")
    seed = sec.get("seed", int, Validation.seed, lambda v: v >= 0, "must be >= 0")
    group = sec.get("group", str, "query", lambda v: v in ("query", "expected"),
                    "must be query (each query on its own) or expected (queries sharing an expected key together)")
    return Validation(folds, seed, None if group == "query" else group) if folds else None


@dataclass(frozen=True)
class WorkersConfig:
    """Where the parallel work runs: `n` loky processes here, or a Dask cluster.

    With `backend: dask`, no `address` starts a LocalCluster of `n` worker processes on this machine;
    an `address` joins an existing cluster and waits until `n` of its workers are there.
    `n` = -1: every core (loky, LocalCluster), or at least one worker (an existing cluster).
    `corpus_shards` (Dask, embedded backend): the corpus is cut into that many shards, each indexed on a worker;
    0 builds the whole index here and sends it to every worker.
    """

    backend: Literal["loky", "dask"] = "loky"
    n: int = 1
    address: str | None = None
    corpus_shards: int = 0


def _workers(top: Section) -> WorkersConfig:
    value = top.data.get("workers", 1)
    count = (lambda v: v >= 1 or v == -1, "must be >= 1 (or -1 for every core)")
    if not isinstance(value, dict):
        return WorkersConfig(n=top.get("workers", int, 1, *count))
    sec = top.section("workers").only("backend", "n", "address", "corpus_shards")
    backend = sec.choice("backend", ("loky", "dask"), "loky")
    address = sec.get("address", str, None, lambda v: "://" in v and not v.endswith("://"),
                      "expected a scheduler address such as tcp://host:8786")
    shards = sec.get("corpus_shards", int, 0, lambda v: v >= 1, "must be an integer >= 1 (shards of the corpus)")
    for key, value in (("address", address), ("corpus_shards", shards or None)):
        if value is not None and backend != "dask":
            raise sec.fail(key, value, "is only used with `backend: dask`")
    return WorkersConfig(backend, sec.get("n", int, 1, *count), address, shards)


@dataclass(frozen=True)
class SliceRule:
    """How queries of a layout without slices (BEIR, TREC) get theirs: exactly one of the three is set."""

    field: str | None = None  # a field of the query's row (BEIR's queries.jsonl, or its `metadata`)
    file: Path | None = None  # a sidecar of `query-id<TAB>slice` lines
    pattern: str | None = None  # a regular expression on the query id: its group `slice` (or its first group)


@dataclass(frozen=True)
class GoldenRules:
    """What a golden set's path alone does not say (`golden: {path, split, topics, slices, judgments}`)."""

    split: str = "test"  # BEIR: qrels/<split>.tsv
    topics: Path | None = None  # TREC: the topics file that goes with the qrels at `golden.path`
    slices: SliceRule | None = None
    judgments: tuple[Path, ...] = ()  # graded pairs outside `expected` (`rqsweep.golden.judgments`)


@dataclass(frozen=True)
class CorpusFiles:
    """A corpus read from a folder of pages (`corpus: {path, glob, as_of}`)."""

    glob: tuple[str, ...] = ("**/*.md", "**/*.txt")
    as_of: datetime | None = None  # a memory's `updated_at` is aged to this instant (default: when the run starts)


def parse_time(value: object) -> datetime | None:
    """A date or time as YAML or an ISO 8601 string gives it, in UTC when it names no zone; None when it is not one."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _slice_rule(sec: Section, base: Path) -> SliceRule:
    sec.only("field", "file", "pattern")
    given = [k for k in ("field", "file", "pattern") if k in sec.data]
    if len(given) != 1:
        raise InputError(sec.file, sec.path, "give exactly one of `field` (of the query), `file` (a sidecar of "
                                             "query-id<TAB>slice lines) or `pattern` (a regular expression on the id)")
    value = sec.get(given[0], str, check=lambda v: bool(v.strip()), rule="expected a non-empty string")
    if given[0] == "pattern":
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise sec.fail("pattern", value, f"not a regular expression: {exc}") from None
        if compiled.groups == 0:
            raise sec.fail("pattern", value, "needs a group that captures the slice, e.g. ^(?P<slice>[a-z]+)-")
    if given[0] == "file":
        return SliceRule(file=(base / value).resolve())
    return SliceRule(**{given[0]: value})


def _golden(top: Section, base: Path) -> tuple[Path, GoldenRules]:
    if not isinstance(top.data.get("golden"), dict):
        return (base / top.get("golden", str)).resolve(), GoldenRules()
    sec = top.section("golden").only("path", "split", "topics", "slices", "judgments")
    topics = sec.get("topics", str, None)
    judgments = sec.get("judgments", (str, list), [], lambda v: all(isinstance(f, str) and f for f in
                                                                      ([v] if isinstance(v, str) else v)),
                        "expected a file, or a list of files")
    rules = GoldenRules(
        split=sec.get("split", str, "test", lambda v: bool(v) and "/" not in v, "expected a split name such as test"),
        topics=(base / topics).resolve() if topics else None,
        slices=_slice_rule(sec.section("slices"), base) if sec.data.get("slices") is not None else None,
        judgments=tuple((base / f).resolve() for f in ([judgments] if isinstance(judgments, str) else judgments)))
    return (base / sec.get("path", str)).resolve(), rules


def _corpus(top: Section, base: Path) -> tuple[Path | None, CorpusFiles]:
    if not isinstance(top.data.get("corpus"), dict):
        corpus = top.get("corpus", str, None)
        return ((base / corpus).resolve() if corpus else None), CorpusFiles()
    sec = top.section("corpus").only("path", "glob", "as_of")
    pattern = sec.data.get("glob", list(CorpusFiles.glob))
    globs = [pattern] if isinstance(pattern, str) else pattern
    if not isinstance(globs, list) or not globs or not all(isinstance(g, str) and g for g in globs):
        raise sec.fail("glob", pattern, "expected a glob such as '**/*.md', or a list of them")
    for i, glob in enumerate(globs):  # pathlib refuses an absolute glob with a traceback; `..` reads outside pages
        if Path(glob).is_absolute() or ".." in Path(glob).parts:
            raise InputError(sec.file, sec.where("glob") + (f"[{i}]" if isinstance(pattern, list) else ""),
                             f"{shown(glob)}: a glob is matched inside the corpus folder: write it relative to "
                             "that folder, without '..'")
    as_of = sec.data.get("as_of")
    if as_of is not None:
        as_of = parse_time(as_of)
        if as_of is None:
            raise sec.fail("as_of", sec.data["as_of"], "expected a date or a time, e.g. 2026-12-01 or "
                                                       "2026-12-01T09:00:00Z")
    return (base / sec.get("path", str)).resolve(), CorpusFiles(tuple(globs), as_of)


@dataclass(frozen=True)
class JudgeConfig:
    """`judge: {kind: openai-compatible, base_url, model, prompt?, budget?, api_key_env?, timeout?}`: the chat endpoint
    that grades `rqsweep pool`'s pairs (`rqsweep.judge`); never required."""

    base_url: str
    model: str
    prompt: str | None = None  # a template naming {query} and {item}; None: `rqsweep.judge.grading.PROMPT`
    budget: int | None = None  # calls a pool may make (cached answers are free); None: no cap
    api_key_env: str | None = None  # the environment variable holding the API key; None: no key sent
    timeout: float = 60.0
    kind: str = "openai-compatible"


def _judge(top: Section) -> JudgeConfig | None:
    if top.data.get("judge") is None:
        return None
    sec = top.section("judge").only("kind", "base_url", "model", "prompt", "budget", "api_key_env", "timeout")
    prompt = sec.get("prompt", str, None, lambda v: "{query}" in v and "{item}" in v, "must name {query} and {item}")
    return JudgeConfig(sec.url("base_url") or sec.get("base_url", str), sec.get("model", str), prompt,
                       sec.get("budget", int, None, lambda v: v >= 0, "must be >= 0 (or null for no cap)"),
                       sec.get("api_key_env", str, None),
                       sec.get("timeout", (int, float), 60.0, lambda v: v > 0, "must be > 0"),
                       sec.choice("kind", ("openai-compatible",), "openai-compatible"))


@dataclass(frozen=True)
class JobConfig:
    name: str
    path: Path
    sha256: str
    raw: dict
    corpus: Path | None
    golden: Path
    backend: Any  # the config of the backend `backend.kind` names, as its own reader made it
    limit: int
    scope: Scope
    sweep: SweepConfig
    baseline: Knobs
    objective: Objective
    constraints: tuple[Constraint, ...]
    metrics: tuple[str, ...] | None  # `metrics:`; None = the default set. Names are checked against the registry
    # by the job (rqsweep.metrics sits downstream of the config)
    workers: WorkersConfig
    output_dir: Path
    validation: Validation | None = Validation()
    holdout: float | None = None  # `holdout: {fraction: F}`: the share of queries never chosen on (`rqsweep.decide.holdout`)
    golden_rules: GoldenRules = GoldenRules()
    corpus_files: CorpusFiles = CorpusFiles()
    relevance_level: int = 1  # binary metrics count an expected item graded at least this (pytrec_eval's default)
    ranked: Literal["chosen", "all"] = "chosen"  # all: every setting's ranked lists in ranked.parquet
    judge: JudgeConfig | None = None  # grades `rqsweep pool`'s pairs; changes nothing a run measures

    def relative(self, path: Path) -> str:
        """`path` as run outputs record it: relative to the config's folder, so no home folder leaks into them."""
        return os.path.relpath(path, self.path.parent)


def _number_list(sec: Section, key: str, checker: Callable) -> tuple:
    values = sec.get(key, list, check=lambda v: len(v) > 0, rule="expected a non-empty list")
    out = []
    for i, v in enumerate(values):
        try:
            out.append(checker(v))
        except KnobError as exc:
            raise InputError(sec.file, f"{sec.where(key)}[{i}]", f"{shown(v)}: {exc.rule}") from None
    return tuple(dict.fromkeys(out))


# Knob -> the key that takes its values from the data: quantiles of the vector channel's similarities (a floor
# acts on those) and of the memories' ages (a half-life acts on those). `rqsweep.search.space.resolve` resolves them.
DATA_KEYS = {MIN_SIMILARITY: "quantiles", HALF_LIFE: "age_quantiles"}


def _quantiles(sec: Section, knob: str) -> KnobSpec:
    key = next(k for k in sec.data if k in DATA_KEYS.values())
    if DATA_KEYS.get(knob) != key:
        instead = f"; use {DATA_KEYS[knob]}" if knob in DATA_KEYS else ""
        raise sec.fail(key, sec.data[key], f"{knob} cannot take {key}{instead}")
    if set(sec.data) - {key, "include_off", "values"}:
        raise InputError(sec.file, sec.path, f"give `{key}` (and `values` to try as well) or a range, not both")
    values = sec.get(key, list, check=lambda v: len(v) > 0, rule="expected a non-empty list of quantiles in [0, 1]")
    for i, q in enumerate(values):
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 1:
            raise InputError(sec.file, f"{sec.where(key)}[{i}]", f"{shown(q)}: a quantile must be a number in [0, 1]")
    extra = _number_list(sec, "values", CHECKS[knob]) if "values" in sec.data else None
    return KnobSpec(values=extra, quantiles=tuple(sorted({float(q) for q in values})),
                    off=sec.get("include_off", bool, False))


def _knob_spec(sec: Section, knob: str) -> KnobSpec:
    sec.only("values", "low", "high", "step", "num", "log", "include_off", *DATA_KEYS.values())
    if any(k in sec.data for k in DATA_KEYS.values()):
        return _quantiles(sec, knob)
    checker = CHECKS[knob]
    if "values" in sec.data:
        if set(sec.data) - {"values", "include_off"}:
            raise InputError(sec.file, sec.path, "give either `values` or a range (low, high, step/num), not both")
        values = _number_list(sec, "values", checker)
        if sec.get("include_off", bool, False):
            if knob not in OFF:
                raise sec.fail("include_off", True, f"{knob} cannot be switched off")
            values = tuple(dict.fromkeys((OFF[knob], *values)))  # off first
        return KnobSpec(values=values)
    low, high = sec.knob("low", checker), sec.knob("high", checker)
    if low is None or high is None or not low <= high:
        raise InputError(sec.file, sec.path, f"need low <= high, got low={shown(low)} high={shown(high)}")
    log = sec.get("log", bool, False)
    if log and low <= 0:
        raise sec.fail("low", low, "a log-spaced range needs low > 0")
    step = sec.get("step", (int, float), None, lambda v: 0 < v < math.inf, "must be a finite number > 0")
    num = sec.get("num", int, None, lambda v: v >= 1, "must be >= 1")
    if step is not None and (num is not None or log):
        raise InputError(sec.file, sec.path, "give `step` for a linear range, or `num` (with `log`), not both")
    if knob == RRF_K and step is not None and step != int(step):
        raise sec.fail("step", step, f"{RRF_K} is an integer: the step must be whole")
    off = sec.get("include_off", bool, False)
    if off and knob not in OFF:
        raise sec.fail("include_off", off, f"{knob} cannot be switched off")
    return KnobSpec(low=low, high=high, step=step, num=num, log=log, off=off)


# The project's sweeps/ (`rqsweep sweeps` lists them): a wheel maps it into the package (pyproject's
# package-dir); a source checkout, editable installs included, has it beside the package.
_PACKAGE = Path(__file__).resolve().parent
SHIPPED_SWEEPS = next(p for p in (_PACKAGE / "sweeps", _PACKAGE.parent / "sweeps") if p.is_dir())


def sweep_folders(config: Path) -> list[Path]:
    """Where a named sweep is looked for, first match wins: a `sweeps/` folder beside the config, one beside the
    config's folder (a project's configs/ and sweeps/), then the sweeps rqsweep ships."""
    return [config.parent / "sweeps", config.parent.parent / "sweeps", SHIPPED_SWEEPS]


def named_sweeps(config: Path | None = None) -> list[tuple[str, Path, str]]:
    """Every sweep a config can name, as (name, file, description), sorted by name; a name found in several
    folders is the file `_sweep_file` would read (the shipped sweeps alone without a config)."""
    found: dict[str, Path] = {}
    for folder in sweep_folders(config) if config is not None else [SHIPPED_SWEEPS]:
        for file in sorted(folder.glob("*.yaml")):
            found.setdefault(file.stem, file.resolve())
    out = []
    for name, file in sorted(found.items()):
        _, data = read_data(file, "sweep")
        description = data.get("description", "") if isinstance(data, dict) else ""
        out.append((name, file, description if isinstance(description, str) else ""))
    return out


def _sweep_file(name: str, config: Path) -> Path:
    """A path relative to the config, or a bare name looked up in `sweep_folders`."""
    if "/" in name or name.endswith((".yaml", ".yml")):
        return (config.parent / name).resolve()
    for folder in sweep_folders(config):
        if (folder / f"{name}.yaml").exists():
            return (folder / f"{name}.yaml").resolve()
    shipped = ", ".join(sorted(p.stem for p in SHIPPED_SWEEPS.glob("*.yaml")))
    raise InputError(config, "sweep", f"{shown(name)}: no sweeps/{name}.yaml beside the config or its folder, and "
                                      f"no shipped sweep of that name (shipped: {shipped}; `rqsweep sweeps` lists "
                                      "them)")


def _sweep(value: object, config: Path) -> SweepConfig:
    if isinstance(value, str):
        file = _sweep_file(value, config)
        _, data = read_data(file, "sweep")
        source = value
    else:
        file, data, source = config, value, "inline"
    sec = Section(data, file, "" if isinstance(value, str) else "sweep")
    sec.only("strategy", "knobs", "optimize", "description")
    strategy = sec.choice("strategy", ("grid", "optimize"), "grid")
    knobs_sec = sec.section("knobs").only(*KNOBS)
    knobs = {k: _knob_spec(knobs_sec.section(k), k) for k in KNOBS if k in knobs_sec.data}
    if not knobs:
        raise InputError(file, knobs_sec.path, "name at least one knob to sweep")
    for knob, spec in knobs.items():
        if spec.quantiles is not None and strategy != "grid":
            raise InputError(file, knobs_sec.where(knob), f"{DATA_KEYS[knob]}: values from the data are for a grid "
                             "(strategy grid); an optimiser takes `values` or a range")
        if (strategy == "grid" and knob != RRF_K and spec.values is None and spec.quantiles is None
                and spec.step is None and spec.num is None):
            raise InputError(file, knobs_sec.where(knob), "a grid over a real range needs `step` or `num`")
    if strategy == "grid":
        _check_grid_size(knobs_sec, knobs)
    opt = sec.section("optimize", {}).only("sampler", "n_trials", "seed", "timeout", "warm_start", "batch_size",
                                           "storage")
    if strategy == "optimize" and "optimize" not in sec.data:
        raise InputError(file, sec.where("optimize"), "strategy optimize needs n_trials (and optionally sampler, seed)")
    sampler = opt.choice("sampler", SAMPLERS, "tpe")
    missing = [m for m in ("torch", "scipy") if importlib.util.find_spec(m) is None]
    if strategy == "optimize" and sampler == "gp" and missing:
        raise InputError(file, opt.where("sampler"), f"'gp': Optuna's GPSampler needs {' and '.join(missing)}, "
                         "which are not installed (pip install torch scipy), or use tpe, random or nsga2")
    return SweepConfig(
        strategy=strategy, knobs=knobs,
        sampler=sampler,
        n_trials=opt.get("n_trials", int, 100, lambda v: v >= 1, "must be >= 1"),
        seed=opt.get("seed", int, None),
        timeout=opt.get("timeout", (int, float), None, lambda v: v > 0, "must be > 0 seconds"),
        warm_start=opt.get("warm_start", int, 0, lambda v: v >= 0, "must be >= 0 (0 = no warm start)"),
        batch_size=opt.get("batch_size", int, 8, lambda v: v >= 1, "must be >= 1"),
        storage=_storage(opt, file),
        source=source, file=file, path=sec.path,
    )


def _check_grid_size(knobs_sec: Section, knobs: dict[str, KnobSpec]) -> None:
    """Refuse a grid above MAX_GRID_SETTINGS, from its count alone: building it would exhaust memory first."""
    sizes = {knob: spec.size() for knob, spec in knobs.items()}
    cap = f"above the cap of {MAX_GRID_SETTINGS:,} settings per grid: use a larger step, fewer points or fewer values"
    for knob, size in sizes.items():
        if size > MAX_GRID_SETTINGS:
            raise InputError(knobs_sec.file, knobs_sec.where(knob), f"{size:,} settings from this knob alone, {cap}")
    total = math.prod(sizes.values())
    if total > MAX_GRID_SETTINGS:
        product = " x ".join(f"{size:,} {knob}" for knob, size in sizes.items())
        raise InputError(knobs_sec.file, knobs_sec.path, f"{total:,} settings ({product}), {cap}")


def _constraints(sec_list: object, file: Path) -> tuple[Constraint, ...]:
    if sec_list is None:
        return ()
    if not isinstance(sec_list, list):
        raise InputError(file, "constraints", f"{shown(sec_list)}: expected a list")
    out = []
    for i, item in enumerate(sec_list):
        sec = Section(item, file, f"constraints[{i}]").only("metric", "slice", "min", "max_drop")
        metric = sec.get("metric", str)
        lo = sec.get("min", (int, float), None, lambda v: 0 <= v <= 1, "must be in [0, 1]")
        drop = sec.get("max_drop", (int, float), None, lambda v: 0 <= v <= 1, "must be in [0, 1]")
        if (lo is None) == (drop is None):
            raise InputError(file, sec.path, "give exactly one of `min` (a floor) or `max_drop` (vs the baseline)")
        out.append(Constraint(metric, sec.get("slice", str, "*"), lo, drop))
    return tuple(out)


def _metric_names(top: Section) -> tuple[str, ...] | None:
    names = top.get("metrics", list, None, lambda v: len(v) > 0, "expected a non-empty list of metric names")
    if names is None:
        return None
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise InputError(top.file, f"metrics[{i}]", f"{shown(name)}: expected a metric name")
    return tuple(dict.fromkeys(names))


# The study storages rqsweep ships a driver for (Python's sqlite3, psycopg 3).
STORAGE_SCHEMES = ("sqlite:///", "postgresql://", "postgres://")


def storage_url_problem(url: str) -> str | None:
    """Why rqsweep cannot use `url` as a study storage (its password masked), or None when it can."""
    if not url.startswith(STORAGE_SCHEMES):
        return f"{shown(redact_url(url))}: must be sqlite:///FILE or postgresql://USER@HOST/DB"
    if url.startswith("postgres") and importlib.util.find_spec("psycopg") is None:
        return f"{shown(redact_url(url))}: needs psycopg: pip install 'rqsweep[postgres]'"
    return None


def _storage(opt: Section, file: Path) -> str | None:
    url = opt.get("storage", str, None)
    problem = None if url is None else storage_url_problem(url)
    if problem:
        raise InputError(file, opt.where("storage"), problem)
    return url


def read_chunking(ch: Section) -> Chunking:
    """`chunking: {strategy, chunk_size, chunk_overlap}`, as the embedded engine and HTTP seeding read it."""
    ch.only("strategy", "chunk_size", "chunk_overlap")
    strategy = ch.choice("strategy", ("whole", "size"), "size")
    size = ch.get("chunk_size", int, 1000, lambda v: v >= 1, "must be >= 1")
    overlap = ch.get("chunk_overlap", int, 200, lambda v: 0 <= v < size, f"must be in [0, chunk_size={size})")
    return Chunking(strategy, size, overlap)


def _scope(sec: Section) -> Scope:
    tags = sec.get("tags", dict, {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
        raise sec.fail("tags", tags, "tags must map strings to strings")

    def names(key: str) -> tuple[str, ...] | None:
        value = sec.get(key, list, None)
        if value is not None and not all(isinstance(v, str) for v in value):
            raise sec.fail(key, value, "expected a list of strings")
        return None if value is None else tuple(value)

    include_documents = sec.get("include_documents", bool, True)
    include_memories = sec.get("include_memories", bool, True)
    if not (include_documents or include_memories):
        raise InputError(sec.file, sec.path, "include_documents and include_memories cannot both be false")
    return Scope(tags, include_documents, include_memories, names("memory_stores"),
                 names("document_paths"), names("document_keys"))


class BackendReader(Protocol):
    """What the config needs of a backend kind (`rqsweep.backends.BackendKind`): a reader of its section."""

    read: Callable[[Section], Any]


def load_config(path: Path, backends: Mapping[str, BackendReader]) -> JobConfig:
    """Read and validate a job config; relative paths in it are relative to the config file.

    `backends` (`rqsweep.backends.BACKENDS`) reads the `backend:` section: `kind` is one of its keys, the first by
    default, and that entry's reader reads the rest, so every error still comes here, before any search."""
    path = Path(path)
    raw_bytes, data = read_data(path, "config")
    top = Section(data, path, "").only(
        "name", "description", "corpus", "golden", "backend", "search", "sweep", "baseline",
        "objective", "constraints", "metrics", "workers", "output_dir", "validation", "relevance_level",
        "ranked", "holdout", "judge",
    )
    base = path.parent
    corpus, corpus_files = _corpus(top, base)
    golden, golden_rules = _golden(top, base)
    default_kind = next(iter(backends))
    backend = top.section("backend", {"kind": default_kind})
    kind = backend.choice("kind", tuple(backends), default_kind)
    search = top.section("search", {}).only(
        "limit", "tags", "include_documents", "include_memories", "memory_stores", "document_paths", "document_keys")
    sweep_value = top.data.get("sweep")
    if sweep_value is None:
        raise InputError(path, "sweep", "is required: a file under sweeps/ or an inline {strategy, knobs}")
    b = top.section("baseline", {})
    b.only(*KNOBS)
    default = Knobs()  # SOAT's
    baseline = Knobs(**{k: b.knob(k, CHECKS[k], v) for k, v in default.columns().items()})
    obj = top.section("objective", {}).only("metric", "slice")
    out = top.get("output_dir", str, "results")
    return JobConfig(
        name=top.get("name", str, path.stem, lambda v: v.replace("-", "").replace("_", "").isalnum(),
                     "use letters, digits, '-' and '_' (it names the results folder)"),
        path=path.resolve(), sha256=hashlib.sha256(raw_bytes).hexdigest(), raw=data,
        corpus=corpus,
        golden=golden,
        backend=backends[kind].read(backend),
        limit=search.get("limit", int, 10, lambda v: 1 <= v <= 100, "SOAT caps limit to 1..100"),
        scope=_scope(search),
        sweep=_sweep(sweep_value, path),
        baseline=baseline,
        objective=Objective(obj.get("metric", str, "mrr"), obj.get("slice", str, "overall")),
        constraints=_constraints(top.data.get("constraints"), path),
        metrics=_metric_names(top),
        workers=_workers(top),
        output_dir=(base / out).resolve(),
        validation=read_validation(top.data.get("validation"), path),
        holdout=None if top.data.get("holdout") is None else top.section("holdout", {}).only("fraction").get(
            "fraction", (int, float), check=lambda v: 0 < v < 1, rule="must be above 0 and below 1"),
        golden_rules=golden_rules,
        corpus_files=corpus_files,
        relevance_level=top.get("relevance_level", int, 1, lambda v: v >= 1, "must be an integer grade >= 1"),
        ranked=top.choice("ranked", ("chosen", "all"), "chosen"),
        judge=_judge(top),
    )

