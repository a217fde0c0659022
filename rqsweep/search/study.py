"""Where an optimisation study lives: a journal file in the run folder, or a database named by a URL.

The run folder's journal is written once per batch of told trials, never half: signals are held
while it is written, and what a batch asked but did not tell stays in memory, so a stopped run
leaves only finished trials behind. A URL (`sqlite:///...` for one machine, `postgresql://...`
for many) opens Optuna's RDB storage, with a heartbeat so that a worker killed mid-trial leaves its
trial to be failed and asked again.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import warnings
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator

import optuna
import sqlalchemy.exc
from optuna.storages.journal import BaseJournalBackend

from rqsweep.errors import BackendError
from rqsweep.scrub import redact_url

HEARTBEAT_SECONDS = 5
GRACE_SECONDS = 20  # a trial whose worker has been silent this long is failed and asked again
MAX_RETRIES = 3
# Processes opening one new database at once (a coordinator and its workers started together) each make its tables
# and rows: one that finds one made by another first opens it again. Each such failure means that another process
# made progress, so a few attempts are enough for many processes.
OPEN_ATTEMPTS = 8
# What a database that stops answering (restarting, unreachable) raises through Optuna: its own wrapper of
# SQLAlchemy's errors, or SQLAlchemy's where Optuna does not wrap them.
STORAGE_ERRORS = (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError)


@contextmanager
def held_signals() -> Iterator[None]:
    """Defer SIGINT and SIGTERM until the block ends (a write that must not be cut in half)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda number, _frame: caught.append(number))
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for number in caught[:1]:
            signal.raise_signal(number)


class BatchedJournalFile(BaseJournalBackend):
    """An Optuna journal (the format `JournalFileBackend` and optuna-dashboard read), appended only by `commit`.

    Operations are kept in memory until `commit` appends them in one write. A last line cut by a process
    killed mid-append is dropped on opening, from the file too, so that the next append starts a line
    of its own (the run folder's lock keeps other processes out meanwhile).
    """

    def __init__(self, path: Path):
        self.path = path
        self._logs: list[dict[str, Any]] = []
        if path.exists():
            whole = 0  # bytes of complete lines
            raw = path.read_bytes()
            for line in raw.splitlines(keepends=True):
                if not line.endswith(b"\n"):
                    break
                self._logs.append(json.loads(line))
                whole += len(line)
            if whole < len(raw):
                with open(path, "r+b") as f:
                    f.truncate(whole)
                    os.fsync(f.fileno())
        self._written = len(self._logs)

    def read_logs(self, log_number_from: int) -> Iterable[dict[str, Any]]:
        return self._logs[log_number_from:]

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        self._logs.extend(logs)

    def commit(self) -> None:
        """Append every operation since the last commit to the file, fsync'd, with signals held."""
        pending = self._logs[self._written:]
        if not pending:
            return
        data = b"".join(json.dumps(log, separators=(",", ":")).encode() + b"\n" for log in pending)
        with held_signals():
            with open(self.path, "ab") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            self._written = len(self._logs)


class StudyStorage:
    """An Optuna storage and how to make its latest writes durable (`commit`)."""

    def __init__(self, url: str | None, folder: Path | None):
        """A database at `url`, or (None) a journal file in `folder` (a run folder's state)."""
        self.url = url
        self._journal: BatchedJournalFile | None = None
        if url is None:
            assert folder is not None
            folder.mkdir(parents=True, exist_ok=True)
            self._journal = BatchedJournalFile(folder / "optuna.journal")
            self.optuna: optuna.storages.BaseStorage = optuna.storages.JournalStorage(self._journal)
        else:
            for attempt in range(1, OPEN_ATTEMPTS + 1):
                try:
                    self.optuna = _rdb_storage(url)
                    break
                except Exception as exc:  # SQLAlchemy: bad URL, unreachable server, refused login, a race
                    if attempt < OPEN_ATTEMPTS and _made_meanwhile(exc):
                        continue
                    raise BackendError(f"cannot open the study storage {redact_url(url)}: {_reason(exc)}") from None

    heartbeat_seconds = HEARTBEAT_SECONDS

    @property
    def shared(self) -> bool:
        """Whether other processes may add trials (a database), so the study must be re-read before deciding."""
        return self._journal is None

    def commit(self) -> None:
        if self._journal is not None:
            self._journal.commit()

    @contextmanager
    def answering(self, then: str = "") -> Iterator[None]:
        """A database that stops answering within the block is a BackendError naming it (and what to do `then`),
        not a traceback; the study keeps every told trial, and the trials left running are asked again."""
        try:
            yield
        except STORAGE_ERRORS as exc:
            raise BackendError(f"the study storage {self.describe()} stopped answering: {_reason(exc)}"
                               + (f"; {then}" if then else "")) from None

    @contextmanager
    def beating(self, trial_ids: list[int]) -> Iterator[None]:
        """Keep the trials' heartbeats going while they are evaluated (a database only): a worker that dies
        stops beating, and after `GRACE_SECONDS` any worker fails its trials and asks them again."""
        if self._journal is not None:
            yield
            return
        stop = threading.Event()

        def beat_all() -> None:
            for trial_id in trial_ids:
                self.optuna.record_heartbeat(trial_id)  # type: ignore[attr-defined]

        def beat() -> None:
            while not stop.wait(HEARTBEAT_SECONDS):
                try:
                    beat_all()
                except STORAGE_ERRORS:  # a missed beat: the next is tried; the main thread reports a storage down
                    pass

        beat_all()  # before anything else: a trial that never beat could never be found stale

        thread = threading.Thread(target=beat, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def fail_stale(self, study: optuna.Study) -> None:
        """Fail the trials of workers that died, and ask them again: those whose heartbeat stopped, and those
        whose worker died between asking and its first heartbeat (no `worker` attribute after `GRACE_SECONDS`)."""
        if self._journal is not None:
            return
        optuna.storages.fail_stale_trials(study)
        now = datetime.now()
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback(MAX_RETRIES)
        for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            started = trial.datetime_start
            if "worker" in trial.user_attrs or started is None or (now - started).total_seconds() < GRACE_SECONDS:
                continue
            try:
                if self.optuna.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL):
                    retry(study, self.optuna.get_trial(trial._trial_id))
            except optuna.exceptions.UpdateFinishedTrialError:  # another worker failed it first
                pass

    def describe(self) -> str:
        """Where the study lives, the password redacted."""
        return redact_url(self.url) if self.url else str(self._journal.path)  # type: ignore[union-attr]


def _rdb_storage(url: str) -> optuna.storages.RDBStorage:
    with warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.9
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # pool_pre_ping: a connection the server dropped (a restart) is replaced before use, not failed.
        return optuna.storages.RDBStorage(
            driver_url(url), heartbeat_interval=HEARTBEAT_SECONDS, grace_period=GRACE_SECONDS,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(MAX_RETRIES),
            engine_kwargs={"pool_pre_ping": True})


def _made_meanwhile(exc: Exception) -> bool:
    """Whether opening failed on a table, type or row that another process made first: a unique key taken (a row,
    or a PostgreSQL type), a table that already exists, or SQLite's lock on a file another process is writing."""
    said = str(getattr(exc, "orig", None) or exc)
    return (isinstance(exc, sqlalchemy.exc.IntegrityError)
            or isinstance(exc, sqlalchemy.exc.DBAPIError) and ("already exists" in said or "database is locked" in said))


def _reason(exc: BaseException) -> str:
    """The first line of what the database said, any password redacted (Optuna's wrapper says only that a commit
    failed: the reason is its cause's)."""
    if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return redact_url((str(getattr(exc, "orig", None) or exc).splitlines() or [type(exc).__name__])[0])


def study_name(config_name: str, run_id: str) -> str:
    """A run's study: named after its config and run id, so one database holds many runs' studies."""
    return f"{config_name}/{run_id}"


def driver_url(url: str) -> str:
    """SQLAlchemy's URL for a storage URL: `postgresql://` goes through psycopg 3, the driver rqsweep ships."""
    return re.sub(r"^postgres(ql)?://", "postgresql+psycopg://", url)
