"""The version a SOAT server states: its MCP `initialize` answer (serverInfo.version), as SOAT releases give it,
read by the probe against a real loopback server and kept in the run's server profile."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

import pytest

from rqsweep.backends.http.auth import Secret, Target
from rqsweep.backends.http.client import SoatClient
from rqsweep.backends.http.mapping import SearchScope
from rqsweep.backends.http.probe import probe
from tests.http_support import Loopback, QuietHandler

TOKEN = "sk_test-token-Qq7"


def _fake_soat(mcp: tuple[int, str, bytes] | None) -> type[BaseHTTPRequestHandler]:
    """A SOAT that searches (finding nothing), whose /health states no version (as SOAT's does not) and whose /mcp
    answers `mcp` (status, content type, body), or 404 when None. The MCP route takes the bearer token and
    insists on being told that both JSON and event streams are accepted, as the MCP SDK does."""

    class Handler(QuietHandler):
        initialize_seen: list[dict] = []

        def do_GET(self) -> None:
            self.reply(200, b'{"status": "ok"}')

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            if self.path == "/api/v1/knowledge/search":
                return self.reply(200, b'{"results": []}')
            if self.path != "/mcp" or mcp is None:
                return self.reply(404, b'{"error": {"code": "NOT_FOUND", "message": "no"}}')
            accept = self.headers.get("Accept", "")
            if "application/json" not in accept or "text/event-stream" not in accept:
                return self.reply(406, b'{"jsonrpc": "2.0", "error": {"code": -32000}}')
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self.reply(401, b'{"error": {"code": "UNAUTHORIZED", "message": "no"}}')
            Handler.initialize_seen.append(body)
            status, kind, data = mcp
            self.reply(status, data, kind)

    return Handler


def _initialize_answer(version: str) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                                                  "serverInfo": {"name": "soat", "title": "SOAT", "version": version}}}


def _probed(mcp: tuple[int, str, bytes] | None) -> tuple[dict, list[dict]]:
    handler = _fake_soat(mcp)
    server = Loopback(handler)
    client = SoatClient(Target(server.url, Secret(TOKEN), None, None), retries=1, backoff=0.001)
    try:
        profile = probe(client, "vpn certificate", SearchScope(project_id="proj_1"))
    finally:
        client.close()
        server.close()
    return profile.record(server.url, "direct"), handler.initialize_seen


@pytest.mark.parametrize("kind", ["text/event-stream", "application/json"])
def test_the_version_is_the_one_mcp_initialize_states(kind):
    answer = json.dumps(_initialize_answer("0.31.2"))
    body = (f"event: message\ndata: {answer}\n\n" if kind == "text/event-stream" else answer).encode()
    record, seen = _probed((200, kind, body))
    assert record["version"] == "0.31.2"
    assert [m["method"] for m in seen] == ["initialize"]
    assert seen[0]["params"]["clientInfo"]["name"] == "rqsweep"


@pytest.mark.parametrize("mcp", [None, (401, "application/json", b'{"error": {"code": "UNAUTHORIZED"}}'),
                                 (200, "text/event-stream", b"event: message\n\n"),
                                 (200, "application/json", b'{"jsonrpc": "2.0", "id": 1, "result": {}}')],
                         ids=["no MCP route", "MCP refuses the token", "an empty stream", "no serverInfo"])
def test_a_server_whose_mcp_states_no_version_is_probed_all_the_same(mcp):
    record, _ = _probed(mcp)
    assert record["version"] is None
    assert record["backend"] == "http"
