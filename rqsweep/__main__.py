"""The `rqsweep` console script and `python -m rqsweep`: the command line, behind a Ctrl-C guard for start-up.

Importing the command line's modules takes a noticeable moment; a Ctrl-C in it would print a KeyboardInterrupt
traceback, since nothing is running yet that could handle it. Until the command line is loaded, SIGINT ends the
process at once with 130 and one line: nothing has been done that needs undoing.
"""

import os
import signal
import sys


def _starting(signal_number: int, _frame: object) -> None:
    os.write(2, b"rqsweep: interrupted by SIGINT while starting: nothing was done\n")
    os._exit(128 + signal_number)


# Installed on import, the first thing the console script does; a shell's background job ignores SIGINT, and
# keeps doing so.
_previous = signal.getsignal(signal.SIGINT)
if _previous is signal.default_int_handler:
    signal.signal(signal.SIGINT, _starting)


def entry() -> None:
    from rqsweep import cli

    signal.signal(signal.SIGINT, _previous)
    cli.entry()


if __name__ == "__main__":
    sys.exit(entry())
