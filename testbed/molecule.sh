#!/usr/bin/env bash
# molecule.sh SCENARIO...: `molecule test -s SCENARIO` for each at once, each into a log of its own, then each
# log printed when all are done (a failed one whole, a passed one's end); exits non-zero when any failed.
# A scenario's emulated hosts keep about one core busy (qemu-user), so two scenarios on two cores take about the
# time of the longer one. Each is timed as a part ("+ molecule: NAME", left out of the table's sum: the stage
# that runs this script is timed whole).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
declare -A pids
for scenario in "$@"; do
    "$here/timed.sh" "+ molecule: $scenario" molecule test -s "$scenario" > "$logs/$scenario.log" 2>&1 &
    pids[$scenario]=$!
done
rc=0
for scenario in "$@"; do
    if wait "${pids[$scenario]}"; then
        echo "== molecule test -s $scenario: passed (its log's end)"
        tail -n 25 "$logs/$scenario.log"
    else
        rc=1
        echo "== molecule test -s $scenario: FAILED (its whole log)"
        cat "$logs/$scenario.log"
    fi
done
exit "$rc"
