"""Credentials never reach logs, Parquet, run.json, reports or error messages."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rqsweep import cli
from rqsweep.backends import BACKENDS
from rqsweep.backends.http.auth import resolve_target
from rqsweep.backends.http.config import HttpConfig
from rqsweep.config import load_config
from rqsweep.corpus import Chunking, load_corpus
from rqsweep.errors import InputError
from rqsweep.serve import Accounts
from tests.http_support import EMBEDDED, PASSWORD, http_backend, leaks, serving, write_config, write_corpus

API_KEY = "sk_live_Kx93-secret-api-key"


@pytest.fixture()
def logs(caplog):
    caplog.set_level(logging.DEBUG)  # httpx and httpcore log requests at DEBUG
    return caplog


def test_api_key_from_a_profile_and_login_password_never_leak(tmp_path, monkeypatch, capsys, logs):
    write_corpus(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SOAT_PROFILE", "ci")
    monkeypatch.setenv("SOAT_PASSWORD", PASSWORD)
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        server.accounts.api_keys[API_KEY] = None
        ids = server.store.preload(load_corpus(tmp_path / "corpus.yaml"), Chunking(), "keyed")
        (tmp_path / "ids.json").write_text(json.dumps(ids))
        (tmp_path / "home" / ".soat").mkdir(parents=True)
        (tmp_path / "home" / ".soat" / "config.json").write_text(json.dumps({"ci": {"baseUrl": server.url,
                                                                                   "token": API_KEY}}))
        keyed = write_config(tmp_path, "keyed", {"kind": "http", "ids": "ids.json", "project_id": ids["project_id"],
                                                 "mode": "replay", "verify": 1})
        out = tmp_path / "out"
        assert cli.main([str(keyed), "--output-dir", str(out)]) == 0
        login = write_config(tmp_path, "login", http_backend(server.url, mode="direct", password=PASSWORD) |
                             {"token": "sk_config_token_unused_when_logging_in"})
        assert cli.main([str(login), "--output-dir", str(out)]) == 0
        tokens = list(server.accounts._sessions)
        # A rejected key: the message says so without repeating it.
        server.accounts.api_keys.clear()
        assert cli.main([str(keyed), "--output-dir", str(out), "--quiet"]) == 3
    secrets = [API_KEY, PASSWORD, "sk_config_token_unused_when_logging_in", *tokens]
    captured = capsys.readouterr()
    assert "rejected the credentials" in captured.err
    assert (out / "keyed").exists() and (out / "login").exists()
    assert leaks(out, secrets) == []
    for text in (captured.out, captured.err, logs.text):
        assert not [s for s in secrets if s in text]
    assert "***" in (next((out / "login").iterdir()) / "run.json").read_text()  # the config's token, redacted


def test_serve_accepts_a_confined_api_key_only_in_its_project(tmp_path):
    import httpx

    write_corpus(tmp_path)
    with serving(write_config(tmp_path, "embedded", EMBEDDED)) as server:
        mine = server.store.create_project("mine")
        other = server.store.create_project("other")
        server.accounts = Accounts("admin", PASSWORD, {API_KEY: mine})
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {API_KEY}"}) as http:
            ok = http.post("/api/v1/knowledge/search", json={"project_id": mine, "query": "x"})
            denied = http.post("/api/v1/knowledge/search", json={"project_id": other, "query": "x"})
            admin_only = http.post("/api/v1/projects", json={"name": "new"})
    assert ok.status_code == 200
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "API_KEY_PROJECT_SCOPE"
    assert admin_only.status_code == 403


# --- base URLs carry no secrets; missing credentials are input errors (exit 2) ----------------------------


@pytest.mark.parametrize("url, secret", [
    ("https://ci-user:pw-Qx7-in-the-url@soat.example.com", "pw-Qx7-in-the-url"),
    ("https://soat.example.com/?token=tok-Qx7-in-the-query", "tok-Qx7-in-the-query"),
    ("https://soat.example.com/#tok-Qx7-in-the-fragment", "tok-Qx7-in-the-fragment"),
    ("htps://ci-user:pw-Qx7-bad-scheme@soat.example.com", "pw-Qx7-bad-scheme"),
])
def test_a_base_url_with_a_secret_is_refused_at_config_time_without_echoing_it(tmp_path, capsys, url, secret):
    write_corpus(tmp_path)
    config = write_config(tmp_path, "leaky", {"kind": "http", "base_url": url})
    with pytest.raises(InputError) as exc:
        load_config(config, BACKENDS)
    assert exc.value.where == "backend.base_url" and secret not in str(exc.value)
    assert cli.main([str(config), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "backend.base_url" in err and secret not in err
    assert not (tmp_path / "out").exists()  # refused before a run folder (run.json, Parquet) exists


def _target(backend: dict, env: dict, profiles: Path):
    """resolve_target for a `backend` section of job.yaml (as HttpConfig fields), an environment and a profile file."""
    return resolve_target(HttpConfig(**backend), Path("job.yaml"), env, profiles)


def test_a_base_url_with_a_secret_from_the_environment_or_a_profile_is_refused(tmp_path):
    profiles = tmp_path / "config.json"
    profiles.write_text(json.dumps({"ci": {"baseUrl": "https://soat.example.com?key=sk_live_in_profile"}}))
    with pytest.raises(InputError) as exc:
        _target({}, {"SOAT_BASE_URL": "https://admin:pw-env-secret@soat.example.com"}, profiles)
    assert (exc.value.file, exc.value.where) == ("environment", "SOAT_BASE_URL")
    assert "pw-env-secret" not in str(exc.value) and "soat.example.com" in str(exc.value)
    with pytest.raises(InputError) as exc:
        _target({"profile": "ci"}, {}, profiles)
    assert (exc.value.file, exc.value.where) == (str(profiles), "ci.baseUrl")
    assert "sk_live_in_profile" not in str(exc.value)
    clean = _target({"profile": "ci"}, {"SOAT_BASE_URL": "https://soat.example.com/"}, profiles)
    assert clean.base_url == "https://soat.example.com"  # the environment comes before the profile


def test_missing_profile_base_url_or_password_name_where_to_set_them(tmp_path):
    missing = tmp_path / "no-such" / "config.json"
    cases = [
        ({"profile": "ci"}, {}, missing, ("job.yaml", "backend.profile"), f"{missing} does not exist"),
        ({}, {"SOAT_PROFILE": "ci"}, missing, ("environment", "SOAT_PROFILE"), "'ci'"),
        ({}, {}, missing, ("job.yaml", "backend.base_url"), "SOAT_BASE_URL"),
        ({"base_url": "https://soat.example.com", "username": "admin"}, {}, missing,
         ("job.yaml", "backend.password"), "SOAT_PASSWORD"),
    ]
    for backend, env, profiles, (file, where), words in cases:
        with pytest.raises(InputError) as exc:
            _target(backend, env, profiles)
        assert (exc.value.file, exc.value.where) == (file, where) and words in exc.value.problem
    profiles = tmp_path / "config.json"
    profiles.write_text(json.dumps({"default": {"baseUrl": "https://soat.example.com"}}))
    with pytest.raises(InputError, match=r"backend.profile: 'ci': .* has no such profile \(it has: 'default'\)"):
        _target({"profile": "ci"}, {}, profiles)
    profiles.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        _target({}, {}, profiles)


def test_a_missing_password_exits_2_naming_the_config(tmp_path, monkeypatch, capsys):
    write_corpus(tmp_path)
    monkeypatch.delenv("SOAT_PASSWORD", raising=False)
    config = write_config(tmp_path, "nopassword", http_backend("http://127.0.0.1:9"))
    assert cli.main([str(config), "--output-dir", str(tmp_path / "out"), "--quiet"]) == 2
    assert f"{config}: backend.password: backend.username 'admin'" in capsys.readouterr().err
    assert not any((tmp_path / "out").rglob("run.json"))
