#!/usr/bin/env bash
# A real OCI registry (Debian's docker-registry, CNCF distribution) on
# 127.0.0.1, standing in for nvcr.io and Docker Hub, which we cannot reach.
#   registry.sh start [PORT] [UPSTREAM]   start it (default 5000) if it does not answer;
#                              with UPSTREAM (e.g. http://127.0.0.1:5000), a pull-through mirror of it
#   registry.sh stop [PORT]    stop it
#   registry.sh url [PORT]     print its base URL
# Storage and log live in .cache/testbed/registry-PORT/.
source "$(dirname "$0")/lib.sh"

port="${2:-5000}"
[[ "$port" =~ ^[0-9]+$ ]] || die "port '$port' is not a number; expected e.g. 5000."
upstream="${3:-}"
[ -z "$upstream" ] || [[ "$upstream" =~ ^https?://[^[:space:]]+$ ]] \
    || die "upstream '$upstream' is not a URL; expected e.g. http://127.0.0.1:5000."
dir="$STATE_DIR/registry-$port"
url="http://127.0.0.1:$port"

answers() {
    python3 - "$url/v2/" <<'PY'
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError as exc:
    sys.exit(0 if exc.code == 401 else 1)
except OSError:
    sys.exit(1)
PY
}

start() {
    if answers; then
        say "registry answers on $url"
        return 0
    fi
    apt_install docker-registry
    mkdir -p "$dir/data"
    cat > "$dir/config.yml" <<YAML
version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
  headers:
    X-Content-Type-Options: [nosniff]
YAML
    if [ -n "$upstream" ]; then
        printf 'proxy:\n  remoteurl: %s\n' "$upstream" >> "$dir/config.yml"
    fi
    say "starting docker-registry on $url (log: $dir/registry.log)"
    setsid docker-registry serve "$dir/config.yml" >>"$dir/registry.log" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    for _ in $(seq 1 30); do
        answers && { say "registry up on $url"; return 0; }
        sleep 0.5
    done
    tail -n 20 "$dir/registry.log" >&2 || true
    die "docker-registry did not answer on $url within 15 s (log above). Is port $port taken? 'ss -ltnp | grep :$port' tells."
}

stop() {
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        kill "$(cat "$dir/pid")"
        say "registry on $url stopped"
    else
        say "no registry of ours runs on $url"
    fi
    rm -f "$dir/pid"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    url) echo "$url" ;;
    *) die "usage: $0 start|stop|url [PORT]" ;;
esac
