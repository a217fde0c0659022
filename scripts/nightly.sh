#!/bin/sh
# The nightly sweep and gate of docs/nightly.md, for cron. Run it from the checkout's root:
#
#     scripts/nightly.sh CONFIG GATE_FILE [MAIL_TO]
#
# Tonight's run is gated against GATE_FILE and against the newest finished run of the same inputs (config,
# sweep, corpus and golden set): after a revert, that is the last night that ran them, not the night of what was
# reverted, which the committed gate file judges instead. The night is appended to logs/nightly.log (made when
# missing); a night that fails is mailed to MAIL_TO, its subject saying what rqsweep's exit code means. Exits with
# rqsweep's code. RQSWEEP names the rqsweep to run (default .venv/bin/rqsweep).
set -u
if [ $# -lt 2 ]; then
    echo "usage: $0 CONFIG GATE_FILE [MAIL_TO]" >&2
    exit 64
fi
config=$1 gate_file=$2 mail_to=${3:-}
rqsweep=${RQSWEEP:-.venv/bin/rqsweep}
mkdir -p logs || exit 1
night=$(mktemp) || exit 1
trap 'rm -f "$night"' EXIT

sweep() {
    # The dry run checks the inputs and the gate file, and names the inputs' hash and where their runs are.
    plan=$("$rqsweep" "$config" --dry-run --gate-file "$gate_file") || return
    printf '%s\n' "$plan"
    inputs=$(printf '%s\n' "$plan" | sed -n 's/^inputs sha256: \([0-9a-f]*\).*/\1/p')
    folders=$(printf '%s\n' "$plan" | sed -n 's/^run folders: //p')
    prev=
    for record in "$folders"/*/run.json; do  # run ids start with the time: the last match is the newest
        if grep -q '"status": "complete"' "$record" 2>/dev/null \
                && grep -q "\"inputs_sha256\": \"$inputs\"" "$record"; then
            prev=${record%/run.json}
        fi
    done
    echo "previous run of the same inputs: ${prev:-none}"
    "$rqsweep" "$config" --quiet --gate-file "$gate_file" ${prev:+--compare "$prev"}
}

{
    echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) rqsweep nightly: $config"
    sweep
} >"$night" 2>&1
code=$?
cat "$night" >>logs/nightly.log
if [ "$code" -ne 0 ] && [ -n "$mail_to" ]; then
    case $code in
        2) what="invalid input (config, corpus, golden set, gate file or run folder) or an unwritable output" ;;
        3) what="the backend failed" ;;
        4) what="no feasible setting" ;;
        5) what="the gate failed" ;;
        130 | 143) what="interrupted" ;;
        1) what="an unexpected failure (a bug: the log has its traceback)" ;;
        *) what="rqsweep could not run" ;;
    esac
    mail -s "rqsweep nightly: $what (exit $code)" "$mail_to" <"$night"
fi
exit "$code"
