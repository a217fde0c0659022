"""SOAT over HTTP: a running deployment as the backend, in direct or replay mode (docs/http-backend.md).

Modules, one concept each: `config` (the `backend:` section, read before the rest loads), `auth` (base URL,
token, profiles, login), `client` (the shared client: concurrency, pacing, retries, circuit breaker), `mapping`
(request bodies, results to ids), `probe` (what the server accepts), `seed` (corpus -> project, key -> id map),
`direct` (one search per setting and query), `completeness` and `replay` (a search or few per query, proven
exact), `backend` (the `Backend`).
"""
