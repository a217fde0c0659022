"""Command line: argument parsing and exit codes, nothing else.

    rqsweep CONFIG [--dry-run] [--compare PREVIOUS_RUN_DIR] [--gate-file FILE [--update-gate-file]] ...
    rqsweep report RUN_DIR [--quiet]
    rqsweep worker CONFIG --storage URL --study NAME   (join a running optimise study)
    rqsweep collect RUN_DIR [--storage URL] [--quiet]  (write an optimise run's results from its study)
    rqsweep explain RUN_DIR QUERY_ID [--setting SETTING_ID]
    rqsweep route RUN_DIR QUERY [--feature NAME=VALUE ...]   (the request fields routing.json's rules choose)
    rqsweep export RUN_DIR [--setting best|baseline|ID] [--format trec] [--output-dir DIR]
    rqsweep pool RUN_DIR [--k K] [--out FILE]          (unlabelled pairs the settings rank, to grade)
    rqsweep sweeps [CONFIG]                           (the named sweeps a config can use)
    rqsweep draft CONFIG [--out FILE] [--seed N]       (a draft golden set from the config's corpus)
    rqsweep gate RUN_DIR [PREVIOUS_RUN_DIR] [--gate-file FILE [--update-gate-file]] [--tolerance T]
                 [--gate-mode exact|significant]
    rqsweep serve CONFIG [--port N] [--fault-rate F ...]   (SOAT's API over the embedded engine; --help)

A run writes its results and report.md / report.html into its run folder, marks it complete (the
`status` of its run.json: report, gate and --compare refuse an unfinished folder), then applies the gate
when asked (`--compare`, `--gate-file`). `--update-gate-file` accepts the run's numbers: it rewrites
the gate file instead of gating against it (a previous run given with --compare still gates).

Exit codes:
    0    success (and the gate passed, when asked)
    1    unexpected failure (a bug: the traceback says where)
    2    invalid input: arguments, config, corpus, golden set, run folder or gate file; or an output that
         cannot be written (read-only folder, full disk, file-size limit; the folder is named)
    3    backend failure; or searches that failed for good in a finished run (`--resume RUN_DIR` retries them)
    4    no feasible setting (results and report are written all the same)
    5    gate failed: a slice regressed, lost its metrics or fell to zero (the slices are named)
    130  interrupted by SIGINT (Ctrl-C): finished work is kept, the run folder's run.json says
         "interrupted", and stderr says how to continue (rqsweep CONFIG --resume RUN_DIR)
    143  ended by SIGTERM (kill, a scheduler's timeout): as 130
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import sys
import threading
import types
from pathlib import Path
from typing import Iterator

from rqsweep import __version__
from rqsweep.errors import Interrupted, NoFeasibleSetting, RqsweepError, SearchesFailed

EXIT_GATE_FAILED = 5
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # exit 128 + the signal's number: 130, 143


def _tolerance(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text}: must be in [0, 1]")
    return value


def _gate_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("gate")
    g.add_argument("--gate-file", type=Path, metavar="FILE",
                   help="gate against this committed JSON of per-slice metrics (see docs/nightly.md)")
    g.add_argument("--update-gate-file", action="store_true",
                   help="accept this run's numbers: rewrite --gate-file from them instead of gating against it")
    g.add_argument("--tolerance", type=_tolerance, default=0.0,
                   help="how far a slice's recall@10 or MRR may fall before the gate fails (default 0, "
                        "compared at 4 decimals)")
    g.add_argument("--gate-mode", choices=("exact", "significant"), default="exact",
                   help="exact (default): fail on any fall beyond --tolerance; significant: fail only on a slice's "
                        "significant paired regression against PREVIOUS_RUN_DIR (Holm-adjusted); two runs sharing "
                        "fewer than 2 queries are refused (exit 2), never passed")
    g.add_argument("--allow-different", action="store_true",
                   help="compare with a previous run measured on another backend or server profile (refused "
                        "otherwise: their numbers measure different rankings)")
    return p


def _workers(text: str) -> int:
    value = int(text)
    if value < 1 and value != -1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 1, or -1 for every core")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be >= 1")
    return value


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rqsweep", parents=[_gate_options()],
        description="Sweep SOAT's knowledge-search knobs over a golden set and write a Parquet grid and a report.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="other commands (--help on each):\n" + "\n".join(f"  rqsweep {name} {args}\n      {what}"
                                                                 for name, (_, args, what) in COMMANDS.items()))
    p.add_argument("config", type=Path, help="job config (YAML), e.g. configs/handbook.yaml")
    p.add_argument("--workers", type=_workers, help="parallel workers, >= 1 or -1 for every core "
                                                     "(overrides the config's `workers`)")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue an interrupted run in RUN_DIR")
    p.add_argument("--output-dir", type=Path, help="where run folders go (default: the config's output_dir)")
    p.add_argument("--quiet", action="store_true", help="no progress output; the summary still prints")
    p.add_argument("--dry-run", action="store_true",
                   help="validate config, golden set and the gate references given (--compare, --gate-file), say "
                        "how many settings and searches a run would make")
    p.add_argument("--n-trials", type=_positive, metavar="N",
                   help="optimise: evaluate N distinct settings in all (overrides the sweep's n_trials; with "
                        "--resume, grows a finished study)")
    p.add_argument("--storage", metavar="URL",
                   help="optimise: the study's storage, sqlite:///FILE or postgresql://USER@HOST/DB (default: a "
                        "journal file in the run folder); see docs/optimise.md")
    p.add_argument("--compare", type=Path, metavar="PREVIOUS_RUN_DIR",
                   help="after the run, gate it against this earlier run folder")
    p.add_argument("--version", action="version", version=f"rqsweep {__version__}")
    return p


def _report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rqsweep report", description="(Re)build report.md and report.html of a run folder from its Parquet files.")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


def _explain_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rqsweep explain",
        description="Show what the baseline and the chosen setting (or --setting) ranked for one query, side by "
                    "side, where each expected item sits, and which knob moved it.")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("query_id", metavar="QUERY_ID")
    p.add_argument("--setting", metavar="SETTING_ID",
                   help="compare the baseline with this setting (an id such as k20_m0.3_h30.0) instead of the "
                        "chosen one; recomputed from the run's config when the run did not store its lists")
    return p


def _route_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rqsweep route",
        description="Print the request fields routing.json's rules choose for a query (first line, JSON), and why "
                    "(docs/routing-rules.md).")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("query", metavar="QUERY", help="the query's text")
    p.add_argument("--feature", action="append", default=[], metavar="NAME=VALUE",
                   help="a feature's value, such as one from a default search (memories_top10=3); repeatable")
    return p


def _export_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rqsweep export",
        description="Write one setting's ranked lists as a TREC run file (<setting>.run) and the golden set's qrels "
                    "(qrels.txt), for trec_eval, ir_measures, ranx or PyTerrier.")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--setting", default="best", metavar="best|baseline|ID",
                   help="best (the chosen setting, default), baseline, or a setting id of the run; lists the run did "
                        "not store are recomputed from its config")
    p.add_argument("--format", default="trec", choices=["trec"], help="trec: TREC run and qrels files")
    p.add_argument("--output-dir", type=Path, metavar="DIR", help="where the files go (default: the run folder)")
    return p


def _pool_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rqsweep pool",
        description="Write the unlabelled (query, item) pairs the run's kept ranked lists put in their top k as a CSV "
                    "to grade (docs/decisions.md); the golden set reads it back as `golden: {judgments: FILE}`.")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--k", type=_positive, metavar="K", help="how deep into each list (default: the run's limit)")
    p.add_argument("--out", type=Path, metavar="FILE", help="where the CSV goes (default: RUN_DIR/pool.csv)")
    return p


def _draft_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rqsweep draft",
        description="Write a draft golden set from the config's corpus, typed by slice (exact_token, exact_name, "
                    "freshness, entity; semantic through `judge:` when configured), each row marked `synthetic`; "
                    "then the leak check on it (docs/start-without-a-golden-set.md).")
    p.add_argument("config", type=Path, metavar="CONFIG")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="where it goes, .yaml or .csv (default: the config's `golden:`, which must not exist yet)")
    p.add_argument("--seed", type=int, default=0, help="which rows a slice keeps when its rule finds more (default 0)")
    return p


def _sweeps_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rqsweep sweeps",
        description="List the named sweeps (`sweep: NAME`): those rqsweep ships, and with CONFIG those a sweeps/ "
                    "folder beside it (or beside its folder) holds, which win over the shipped ones.")
    p.add_argument("config", type=Path, nargs="?", metavar="CONFIG")
    return p


def _gate_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rqsweep gate", parents=[_gate_options()],
                                description="Gate a finished run against an earlier one and/or a gate file.")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("previous", type=Path, nargs="?", metavar="PREVIOUS_RUN_DIR")
    return p


def _worker_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rqsweep worker", description="Join a running optimise study from any machine: ask, evaluate, tell, "
                                           "until the study's budget is spent (see docs/optimise.md).")
    p.add_argument("config", type=Path, help="the coordinator's config (same sweep, corpus and golden set)")
    p.add_argument("--storage", required=True, metavar="URL", help="the study's storage, e.g. postgresql://HOST/DB")
    p.add_argument("--study", required=True, metavar="NAME", help="the study's name: CONFIG_NAME/RUN_ID")
    p.add_argument("--workers", type=_workers, help="parallel workers for this machine's backend")
    p.add_argument("--quiet", action="store_true")
    return p


def _collect_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rqsweep collect",
        description="Write grid.parquet, queries.parquet, run.json and the report of an optimise run from its "
                    "study, including what every worker evaluated; searches no further.")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--storage", metavar="URL", help="the study's storage (default: the one run.json names, "
                                                    "which never holds a password)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


def _check_gate_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.update_gate_file and args.gate_file is None:
        p.error("--update-gate-file needs --gate-file FILE")


def _apply_gate(run_dir: Path, previous: Path | None, args: argparse.Namespace) -> int:
    from rqsweep.gate import gate, write_gate_file

    if previous is None and args.gate_file is None:
        return 0
    against_file = None if args.update_gate_file else args.gate_file
    result = gate(run_dir, previous, against_file, args.tolerance, args.allow_different, args.gate_mode)
    print(result.text)
    if not result.passed:
        return EXIT_GATE_FAILED
    if args.update_gate_file:
        before = write_gate_file(run_dir, args.gate_file)
        print(f"Gate file {args.gate_file} rewritten from this run" +
              (f"; accepted changes:\n{before}" if before else "."))
    return 0


def _print_report(run_dir: Path) -> None:
    print(f"Report: {run_dir / 'report.md'} and {run_dir / 'report.html'}")


# Libraries whose Python code runs as callbacks of native code that turns an exception into another error (polars
# once reported "cannot create expression literal for value of type range" for an interrupt raised in its `lit`).
_DEFERRING = tuple(f"{os.sep}{name}{os.sep}" for name in ("polars", "pyarrow"))


def _deliver_again(signal_number: int) -> None:
    threading.Timer(0.01, os.kill, (os.getpid(), signal_number)).start()


def _interrupt(signal_number: int, frame: types.FrameType | None) -> None:
    if frame is not None and any(part in frame.f_code.co_filename for part in _DEFERRING):
        _deliver_again(signal_number)  # raised once the library's Python code has returned to ours
        return
    raise Interrupted(signal_number)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` within the block, so that a run ends cleanly either way."""
    # A shell's background job ignores SIGINT: it keeps doing so.
    previous = {s: signal.getsignal(s) for s in STOPPING_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}
    hook = sys.unraisablehook

    def redeliver(unraisable) -> None:
        # Raised while a library ran a Python callback that cannot pass exceptions on (polars' dtype parsing,
        # a __del__): Python would print it and go on. The signal is sent again a moment later, from another
        # thread, so that it lands after this hook (and, most likely, the callback) has returned.
        if isinstance(unraisable.exc_value, Interrupted):
            _deliver_again(unraisable.exc_value.signal_number)
        else:
            hook(unraisable)

    for s in previous:
        signal.signal(s, _interrupt)
    sys.unraisablehook = redeliver
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for s, handler in previous.items():
            signal.signal(s, handler)


def _run(argv: list[str]) -> int:
    p = _run_parser()
    args = p.parse_args(argv)
    _check_gate_args(p, args)
    from rqsweep import dry_run, gate, job

    # A bad reference should stop the job before an hour of searching, not after it; a dry run checks it too.
    references = [gate.run_snapshot(args.compare)] if args.compare is not None else []
    if args.gate_file is not None and (args.gate_file.exists() or not args.update_gate_file):
        references.append(gate.read_gate_file(args.gate_file))
    if args.dry_run:
        print(dry_run.dry_run(args.config, n_trials=args.n_trials, storage=args.storage))
        for reference in references:
            print(f"gate against {reference.source}: readable ({reference.setting})")
        return 0
    try:
        with _signals_interrupt():
            outcome = job.run(args.config, workers=args.workers, resume=args.resume, quiet=args.quiet,
                              output_dir=args.output_dir, n_trials=args.n_trials, storage=args.storage)
    except (NoFeasibleSetting, SearchesFailed) as exc:
        _print_report(Path(exc.run_dir))
        raise
    print(outcome.summary)
    print(f"Results: {outcome.run_dir}")
    _print_report(outcome.run_dir)
    return _apply_gate(outcome.run_dir, args.compare, args)


def _worker(argv: list[str]) -> int:
    from rqsweep import job

    args = _worker_parser().parse_args(argv)
    with _signals_interrupt():  # a stopped worker's trials are retried by the others
        n = job.work(args.config, args.storage, args.study, workers=args.workers, quiet=args.quiet)
    print(f"worker: {n} settings evaluated for study {args.study}")
    return 0


def _collect(argv: list[str]) -> int:
    from rqsweep import job

    args = _collect_parser().parse_args(argv)
    try:
        with _signals_interrupt():
            outcome = job.collect(args.run_dir, args.storage, quiet=args.quiet)
    except NoFeasibleSetting as exc:
        _print_report(Path(exc.run_dir))
        raise
    print(outcome.summary)
    print(f"Results: {outcome.run_dir}")
    _print_report(outcome.run_dir)
    return 0


def _report(argv: list[str]) -> int:
    from rqsweep.embedder_sweep import embedder_runs, write_embedder_report
    from rqsweep.progress import Progress
    from rqsweep.report import write_report

    args = _report_parser().parse_args(argv)
    if embedder_runs(args.run_dir):
        write_embedder_report(args.run_dir)
    else:
        write_report(args.run_dir, phase=Progress(0, "rqsweep report", quiet=args.quiet).phase)
    _print_report(args.run_dir)
    return 0


def _explain(argv: list[str]) -> int:
    from rqsweep.report.explain import explain

    args = _explain_parser().parse_args(argv)
    print(explain(args.run_dir, args.query_id, args.setting))
    return 0


def _route(argv: list[str]) -> int:
    from rqsweep.report.route import parse_features, route

    args = _route_parser().parse_args(argv)
    print("\n".join(route(args.run_dir, args.query, parse_features(args.feature))[1]))
    return 0


def _export(argv: list[str]) -> int:
    from rqsweep.report.export import export

    args = _export_parser().parse_args(argv)
    run_file, qrels_file, failed = export(args.run_dir, args.setting, args.output_dir, args.format)
    print(f"TREC run: {run_file}")
    print(f"qrels: {qrels_file}")
    if failed:
        print(f"{failed} failed searches are not in the run file", file=sys.stderr)
    return 0


def _pool(argv: list[str]) -> int:
    from rqsweep.report.pool import write_pool

    args = _pool_parser().parse_args(argv)
    path, rows, spent = write_pool(args.run_dir, args.k, args.out)
    print(f"{rows} unlabelled pairs to grade: {path}")
    if spent is not None:
        print(f"{spent.judge} graded {len(spent.grades)} ({spent.calls} calls, {spent.tokens} tokens, {spent.cached} "
              f"from its cache, {spent.over_budget} over its budget): {path.with_name(path.stem + '.judged.csv')}")
    return 0


def _draft(argv: list[str]) -> int:
    from rqsweep.draft import write_draft

    args = _draft_parser().parse_args(argv)
    _, _, lines = write_draft(args.config, args.out, args.seed)
    print("\n".join(lines))
    return 0


def _sweeps(argv: list[str]) -> int:
    from rqsweep.config import SHIPPED_SWEEPS, named_sweeps

    args = _sweeps_parser().parse_args(argv)
    sweeps = named_sweeps(args.config)
    width = max(len(name) for name, _, _ in sweeps)
    for name, file, description in sweeps:
        where = "shipped" if file.parent == SHIPPED_SWEEPS else str(file)
        print(f"{name:<{width}}  {description}  ({where})")
    return 0


def _gate(argv: list[str]) -> int:
    p = _gate_parser()
    args = p.parse_args(argv)
    _check_gate_args(p, args)
    if args.previous is None and args.gate_file is None:
        p.error("give PREVIOUS_RUN_DIR, --gate-file FILE, or both")
    return _apply_gate(args.run_dir, args.previous, args)


def _serve(argv: list[str]) -> int:
    from rqsweep import serve

    return serve.main(argv)


# Each subcommand: what runs it, its arguments and what it does, as the run command's --help lists them.
COMMANDS = {
    "report": (_report, "RUN_DIR", "rebuild report.md and report.html from the run's Parquet files"),
    "gate": (_gate, "RUN_DIR [PREVIOUS_RUN_DIR] [--gate-file FILE [--update-gate-file]]",
             "the nightly gate on finished runs (docs/nightly.md)"),
    "explain": (_explain, "RUN_DIR QUERY_ID [--setting ID]", "both ranked lists of a query, and what moved it"),
    "route": (_route, "RUN_DIR QUERY [--feature NAME=VALUE]", "the request fields the routing rules choose"),
    "export": (_export, "RUN_DIR [--setting best|baseline|ID] [--format trec]", "a setting's lists as a TREC run"),
    "pool": (_pool, "RUN_DIR [--k K] [--out FILE]", "unlabelled pairs the settings rank, to grade"),
    "sweeps": (_sweeps, "[CONFIG]", "the named sweeps a config can use"),
    "draft": (_draft, "CONFIG [--out FILE] [--seed N]", "a draft golden set from the config's corpus"),
    "worker": (_worker, "CONFIG --storage URL --study NAME", "join a running optimise study"),
    "collect": (_collect, "RUN_DIR [--storage URL]", "write an optimise run's results from its study"),
    "serve": (_serve, "CONFIG [--port N] [--preload IDS]", "SOAT's HTTP API over the embedded engine"),
}


def main(argv: list[str] | None = None) -> int:
    """Entry point: `rqsweep CONFIG ...` runs a sweep; `rqsweep report|explain|gate ...` work on finished run folders;
    `rqsweep serve CONFIG` serves the embedded engine over SOAT's HTTP API."""
    argv = sys.argv[1:] if argv is None else list(argv)
    # A run keeps its original form `rqsweep CONFIG`, so commands are told apart by their first word.
    command, argv = (COMMANDS[argv[0]][0], argv[1:]) if argv and argv[0] in COMMANDS else (_run, argv)
    try:
        return command(argv)
    except RqsweepError as exc:
        print(f"rqsweep: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        number = exc.signal_number if isinstance(exc, Interrupted) else signal.SIGINT
        message = f"rqsweep: interrupted by {signal.Signals(number).name}"
        if isinstance(exc, Interrupted) and exc.run_dir is not None:
            message += (f"; finished work is kept in {exc.run_dir}: "
                        f"continue with: rqsweep {exc.config} --resume {exc.run_dir}")
        print(message, file=sys.stderr)
        return 128 + number


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (`rqsweep ... | head`)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def entry() -> None:
    """The console script: like `main`, but `rqsweep ... | head` ends quietly (141, as SIGPIPE would), as
    command-line tools do.

    SIGPIPE keeps Python's setting (ignored): with its default action, a write to any closed peer (a Dask worker,
    a server, a database) would kill the process silently, its run.json left `running`. A closed pipe is a
    BrokenPipeError instead, which the command's own handling turns into its message and exit code; one that
    reaches here is stdout's, or a bug with its traceback.
    """
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_gone():
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        code = 128 + signal.SIGPIPE
    sys.exit(code)


if __name__ == "__main__":
    entry()
