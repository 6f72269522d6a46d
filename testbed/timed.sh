#!/usr/bin/env bash
# timed.sh STAGE COMMAND [ARGS...]: run COMMAND, then add "STAGE<TAB>seconds<TAB>exit code<TAB>CPU busy %" to
# $SPARKFLEET_TIMINGS/stages.tsv (when set): where make test's time went, for the table CI's log ends with
# (bench/suite_timings.py). CPU busy is the share of all this machine's cores that did work while the stage ran
# (/proc/stat: user, nice, system, irq, softirq, steal against the whole): a stage well under 100 % on a machine
# doing nothing else waited (on a timer, a socket, the disk) and could share its minutes. Exits with COMMAND's status.
set -uo pipefail
stage="$1"
shift
# The CPU's counters since boot: "busy total" in clock ticks.
cpu_ticks() {
    local _cpu user nice system idle iowait irq softirq steal _rest
    read -r _cpu user nice system idle iowait irq softirq steal _rest < /proc/stat
    echo "$(( user + nice + system + irq + softirq + steal )) $(( user + nice + system + idle + iowait + irq + softirq + steal ))"
}
start=$(date +%s%3N)
read -r busy0 total0 < <(cpu_ticks)
"$@"
rc=$?
if [ -n "${SPARKFLEET_TIMINGS:-}" ]; then
    mkdir -p "$SPARKFLEET_TIMINGS"
    ms=$(( $(date +%s%3N) - start ))
    read -r busy1 total1 < <(cpu_ticks)
    busy=$(( total1 > total0 ? 100 * (busy1 - busy0) / (total1 - total0) : 0 ))
    printf '%s\t%d.%d\t%d\t%d\n' "$stage" $(( ms / 1000 )) $(( ms % 1000 / 100 )) "$rc" "$busy" \
        >> "$SPARKFLEET_TIMINGS/stages.tsv"
fi
exit "$rc"
