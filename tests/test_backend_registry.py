"""A backend is one entry of `rqsweep.backends.BACKENDS`: its section's reader, its builder and what its searches
cost. The config knows no backend by name, so a new kind needs its own module and that entry, nothing else."""

from __future__ import annotations

import importlib
import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar

import pytest

from rqsweep.backends import BACKENDS, BackendKind
from rqsweep.config import Section, load_config
from rqsweep.dry_run import dry_run
from rqsweep.errors import InputError
from tests.minijob import write_job


@dataclass(frozen=True)
class EchoConfig:
    kind: ClassVar[str] = "echo"
    depth: int


def read_echo(sec: Section) -> EchoConfig:
    sec.only("kind", "depth")
    return EchoConfig(sec.get("depth", int, 1, lambda v: v >= 1, "must be >= 1"))


def never_built(*args, **kwargs):
    raise AssertionError("reading a config or a dry run builds no backend")


ECHO = BackendKind(read_echo, "tests.test_backend_registry:never_built", "on the echo backend, none at all")


def test_a_new_kind_is_read_and_dry_run_from_its_registry_entry_alone(tmp_path, monkeypatch):
    monkeypatch.setitem(BACKENDS, "echo", ECHO)
    config = write_job(tmp_path, backend={"kind": "echo", "depth": 3})
    assert load_config(config, BACKENDS).backend == EchoConfig(3)
    assert dry_run(config).endswith("(setting x query) evaluations: 480; on the echo backend, none at all")


@pytest.mark.parametrize("backend, where, problem", [
    ({"kind": "echo", "depth": 0}, "backend.depth", "0: must be >= 1"),
    ({"kind": "echo", "embedder": {}}, "backend.embedder", "unknown key (allowed here: kind, depth)"),
    ({"kind": "embedded", "depth": 3}, "backend.depth", "unknown key"),
    ({"kind": "nope"}, "backend.kind", "'nope': expected one of embedded, http, echo"),
])
def test_a_kind_s_own_reader_names_file_key_path_and_value(tmp_path, monkeypatch, backend, where, problem):
    monkeypatch.setitem(BACKENDS, "echo", ECHO)
    with pytest.raises(InputError) as caught:
        load_config(write_job(tmp_path, backend=backend), BACKENDS)
    assert caught.value.file.endswith("job.yaml") and caught.value.where == where
    assert problem in caught.value.problem


def test_a_kind_s_builder_is_imported_by_name_when_it_is_built():
    with pytest.raises(AssertionError, match="builds no backend"):
        ECHO.build()
    for kind in BACKENDS.values():  # each shipped kind names a builder that exists
        module, function = kind.builder.split(":")
        assert callable(getattr(importlib.import_module(module), function))


def test_the_first_kind_is_the_default(tmp_path):
    assert load_config(write_job(tmp_path), BACKENDS).backend.kind == next(iter(BACKENDS)) == "embedded"
    assert load_config(write_job(tmp_path, backend={"kind": "echo"}), {"echo": ECHO}).backend == EchoConfig(1)
    assert load_config(write_job(tmp_path, backend=None), {"echo": ECHO}).backend == EchoConfig(1)


def test_reading_a_config_loads_no_backend_s_engine_or_client(tmp_path):
    # The readers are light modules: a config is read (and refused) before an engine, a client or Dask loads.
    config = write_job(tmp_path, backend={"kind": "http", "base_url": "http://127.0.0.1:1"})
    probe = ("import sys; from rqsweep.backends import BACKENDS; from rqsweep.config import load_config; "
             f"assert load_config({str(config)!r}, BACKENDS).backend.kind == 'http'; "
             "print(sorted(m for m in sys.modules if m.startswith(('rqsweep.backends.', 'rqsweep.engine', 'dask', "
             "'httpx', 'urllib3'))))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.split() == ["['rqsweep.backends.base',", "'rqsweep.backends.embedded_config',",
                              "'rqsweep.backends.http',", "'rqsweep.backends.http.config']"]
