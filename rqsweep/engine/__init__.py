"""The embedded engine: SOAT's knowledge-search ranking, reproduced in process.

    index = Index.build(corpus, FeatureHashEmbedder(1024), Chunking("size", 1000, 200))
    results = index.search("vpn gateway", Knobs(rrf_k=20), limit=10)           # the reference path
    plan = index.plan("vpn gateway", ["mem-vpn-host"], limit=10)                # candidates, once
    positions = expected_positions(plan, SettingsBatch.from_knobs(settings), 10)  # the fast path
"""

from rqsweep.engine.batch import QueryPlan, SettingsBatch, expected_positions
from rqsweep.engine.index import Index, SearchResult, clamp_limit
from rqsweep.scope import Scope

__all__ = ["Index", "QueryPlan", "Scope", "SearchResult", "SettingsBatch", "clamp_limit", "expected_positions"]
