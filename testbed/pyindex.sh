#!/usr/bin/env bash
# The test bed's Python package index on 127.0.0.1 (testbed/pyindex.py):
# stand-in wheels under the real names and pins for the bare-pip venv.
#   pyindex.sh start [PORT]   build the tree and serve it (default 5090)
#   pyindex.sh stop [PORT]
# Layout: http://127.0.0.1:PORT/pypi/<name>/ (PyPI) and /cu130/<name>/ (PyTorch's cu130 index).
source "$(dirname "$0")/lib.sh"

port="${2:-5090}"
[[ "$port" =~ ^[0-9]+$ ]] || die "port '$port' is not a number; expected e.g. 5090."
ROOT="$STATE_DIR/pyindex"

answers() {
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
        "http://127.0.0.1:$port/cu130/torch/" 2>/dev/null
}

start() {
    if answers; then
        say "package index answers on http://127.0.0.1:$port"
        return 0
    fi
    rm -rf "$ROOT"
    mkdir -p "$ROOT"
    say "serving the package index on http://127.0.0.1:$port (log: $STATE_DIR/pyindex-$port.log)"
    setsid python3 "$TESTBED_DIR/pyindex.py" serve "$ROOT" "$port" \
        >>"$STATE_DIR/pyindex-$port.log" 2>&1 < /dev/null &
    echo $! > "$STATE_DIR/pyindex-$port.pid"
    for _ in $(seq 1 20); do
        answers && return 0
        sleep 0.5
    done
    die "the package index did not answer on 127.0.0.1:$port (log $STATE_DIR/pyindex-$port.log); is the port taken?"
}

stop() {
    local pidfile="$STATE_DIR/pyindex-$port.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        kill "$(cat "$pidfile")"
        say "package index on 127.0.0.1:$port stopped"
    fi
    rm -f "$pidfile"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) die "usage: $0 start|stop [PORT]" ;;
esac
