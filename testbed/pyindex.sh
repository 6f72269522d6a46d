#!/usr/bin/env bash
# The test bed's Python package index on 127.0.0.1 (testbed/pyindex.py):
# stand-in wheels under the real names and pins for the bare-pip venv.
#   pyindex.sh start [PORT]   build the tree and serve it (default 5090)
#   pyindex.sh stop [PORT]
# Layout: http://127.0.0.1:PORT/pypi/<name>/ (PyPI) and /cu130/<name>/ (PyTorch's cu130 index).
source "$(dirname "$0")/lib.sh"

port="$(service_port "${2:-}" 5090)"
ROOT="$STATE_DIR/pyindex"

start() {
    if ! service_answers "http://127.0.0.1:$port/cu130/torch/"; then
        rm -rf "$ROOT"
        mkdir -p "$ROOT"
    fi
    # uv's real wheels from PyPI first (once), so that the server starts within service_start's wait
    python3 "$TESTBED_DIR/pyindex.py" fetch > /dev/null
    service_start pyindex "$port" "http://127.0.0.1:$port/cu130/torch/" "" \
        python3 "$TESTBED_DIR/pyindex.py" serve "$ROOT" "$port"
}

case "${1:-}" in
    start) start ;;
    stop) service_stop pyindex "$port" ;;
    *) die "usage: $0 start|stop [PORT]" ;;
esac
