#!/usr/bin/env bash
# timed.sh STAGE COMMAND [ARGS...]: run COMMAND, then add "STAGE<TAB>seconds<TAB>exit code" to
# $SPARKFLEET_TIMINGS/stages.tsv (when set): where make test's time went, for the table CI's log ends with
# (bench/suite_timings.py). Exits with COMMAND's status.
set -uo pipefail
stage="$1"
shift
start=$(date +%s%3N)
"$@"
rc=$?
if [ -n "${SPARKFLEET_TIMINGS:-}" ]; then
    mkdir -p "$SPARKFLEET_TIMINGS"
    ms=$(( $(date +%s%3N) - start ))
    printf '%s\t%d.%d\t%d\n' "$stage" $(( ms / 1000 )) $(( ms % 1000 / 100 )) "$rc" >> "$SPARKFLEET_TIMINGS/stages.tsv"
fi
exit "$rc"
