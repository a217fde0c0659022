"""Errors a user can act on, each tied to the exit code the command line reports."""

from __future__ import annotations


class RqsweepError(Exception):
    """Base class: a message for the user, and the process exit code it maps to."""

    exit_code = 1


class InputError(RqsweepError):
    """Invalid config, corpus or golden set: names the file, the key path and the value."""

    exit_code = 2

    def __init__(self, file: object, where: str, problem: str):
        self.file, self.where, self.problem = str(file), where, problem
        location = f"{self.file}: {where}" if where else self.file
        super().__init__(f"{location}: {problem}")


class NotComparable(InputError):
    """Two runs ranked by different models or servers: their numbers measure different rankings."""

    exit_code = 6


class OutputError(RqsweepError):
    """An output that cannot be written (a read-only folder, a full disk, a file-size limit): names the file and
    its folder. Exit 2, as the other things the user must fix before running again."""

    exit_code = 2


class BackendError(RqsweepError):
    """A backend could not answer (unreachable server, rejected credentials, bad responses)."""

    exit_code = 3


class BackendRefused(BackendError):
    """A backend failure that asking again meets again, not a passing outage: a request the server refuses as
    invalid, a seeded corpus it cannot search. The message says what to fix; `--resume` alone does not help."""


class SearchesFailed(BackendError):
    """Searches failed for good in a run that wrote its results all the same (raised after writing): the
    settings they belong to count as incomplete, and `--resume` retries them."""

    def __init__(self, message: str, run_dir: object):
        self.run_dir = run_dir
        super().__init__(message)


class NoFeasibleSetting(RqsweepError):
    """Every evaluated setting violates a constraint (raised after the run's files are written)."""

    exit_code = 4

    def __init__(self, message: str, run_dir: object):
        self.run_dir = run_dir
        super().__init__(message)


def shown(value: object, limit: int = 80) -> str:
    """A user's value as error messages echo it: its repr, cut to `limit` characters (a value can be megabytes)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM ended the command; `run_dir` and `config` say how to continue, once a run folder exists."""

    def __init__(self, signal_number: int, run_dir: object = None, config: object = None):
        self.signal_number, self.run_dir, self.config = signal_number, run_dir, config
        super().__init__(signal_number)
