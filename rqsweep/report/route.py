"""`rqsweep route RUN_DIR "query text" [--feature NAME=VALUE]`: the request fields routing.json's rules choose for a
query, and why.

The text's features are computed from the query (`decide.query_features`). The default search's features are
taken, in order, from `--feature`, or, when the text is one of the run's golden queries, from the baseline's
ranked list the run kept (hits.parquet); a feature still unknown is missing, and the rule sends the query the
global setting, as `apply_rules` and docs/routing-rules.md's TypeScript do.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl

from rqsweep.backends.base import RankedHit
from rqsweep.decide.query_features import FEATURES, SEARCH_FEATURES, search_features, text_features
from rqsweep.decide.rules import choose_request
from rqsweep.errors import InputError
from rqsweep.runfolder import HITS, QUERIES, read_run_folder
from rqsweep.runfolder.folder import ROUTING
from rqsweep.runfolder.tables import read_routing


def parse_features(pairs: list[str]) -> dict[str, float]:
    """`--feature NAME=VALUE` arguments as name -> value; InputError naming the argument when one is not."""
    out = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in FEATURES:
            raise InputError("--feature", pair, f"no feature {name!r}; the features: {', '.join(FEATURES)}")
        try:
            out[name] = float(value)
        except ValueError:
            raise InputError("--feature", pair, f"{value!r} is not a number") from None
        if math.isnan(out[name]):
            raise InputError("--feature", pair, "NaN is no value: leave the feature out to have it missing")
    return out


def _kept_search(run_dir: Path, query: str) -> dict[str, float | None] | None:
    """The default search's features of a golden query of the run, from the baseline's kept ranked list."""
    ids = (pl.scan_parquet(run_dir / QUERIES).filter(pl.col("query") == query).select("query_id")
           .unique().collect()["query_id"].to_list())
    if not ids:
        return None
    rows = (pl.scan_parquet(run_dir / HITS).filter(pl.col("is_baseline") & (pl.col("query_id") == ids[0]))
            .sort("position").collect())
    errors = rows.filter(pl.col("error").is_not_null())["error"].to_list()
    return search_features(errors[0] if errors else [
        RankedHit(r["position"], r["key"], r["source_type"], r["chunk"], r["score"], r["vector"], r["lexical"],
                  r["similarity_score"], r["blend_factor"]) for r in rows.filter(pl.col("key").is_not_null())
        .iter_rows(named=True)])


def route(run_dir: Path, query: str, given: dict[str, float]) -> tuple[dict, list[str]]:
    """The request fields for `query` and the lines that say why."""
    read_run_folder(run_dir)
    data = read_routing(run_dir)
    if data is None or "rules" not in data:
        raise InputError(run_dir / ROUTING, "rules", "the run has no routing rules (they need `validation:` and a "
                         "run of this version): run the sweep again")
    try:
        return _route(run_dir, data["rules"], query, given)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a hand-edited file: its keys are the writer's
        raise InputError(run_dir / ROUTING, "rules", f"damaged ({type(exc).__name__}: {exc}); run the sweep again to "
                         "rewrite it") from None


def _route(run_dir: Path, rules: dict, query: str, given: dict[str, float]) -> tuple[dict, list[str]]:
    features: dict[str, float | None] = {**text_features(query), **given}
    rule = rules["rule"]
    source = []
    if rule is not None and rule["feature"] in SEARCH_FEATURES:
        kept = None if rule["feature"] in given else _kept_search(run_dir, query)
        if kept is not None:
            features.update({k: v for k, v in kept.items() if k not in given})
        source = [f"{rule['feature']} from: " + (
            "--feature" if rule["feature"] in given else "the run's default search of this golden query"
            if kept is not None else f"nowhere: not a golden query of the run; pass --feature {rule['feature']}=VALUE "
            "from one default search (docs/routing-rules.md)")]
    request, why = choose_request(rules, features)
    shown = " ".join(f"{k}={'missing' if v is None else f'{v:g}'}" for k, v in features.items())
    return request, [json.dumps(request), f"why: {why}", f"rule: {rules['sentence']}",
                     f"features: {shown}", *source]
