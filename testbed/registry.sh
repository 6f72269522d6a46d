#!/usr/bin/env bash
# A real OCI registry (Debian's docker-registry, CNCF distribution) on
# 127.0.0.1, standing in for nvcr.io and Docker Hub, which we cannot reach.
#   registry.sh start [PORT] [UPSTREAM]   start it (default 5000) if it does not answer;
#                              with UPSTREAM (e.g. http://127.0.0.1:5000), a pull-through mirror of it
#   registry.sh stop [PORT]    stop it
#   registry.sh url [PORT]     print its base URL
# Storage and configuration live in .cache/testbed/registry-PORT/, the log in registry-PORT.log.
source "$(dirname "$0")/lib.sh"

port="$(service_port "${2:-}" 5000)"
upstream="${3:-}"
[ -z "$upstream" ] || [[ "$upstream" =~ ^https?://[^[:space:]]+$ ]] \
    || die "upstream '$upstream' is not a URL; expected e.g. http://127.0.0.1:5000."
dir="$STATE_DIR/registry-$port"
url="http://127.0.0.1:$port"

start() {
    if service_answers "$url/v2/" 401; then
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
    service_start registry "$port" "$url/v2/" 401 docker-registry serve "$dir/config.yml"
}

case "${1:-}" in
    start) start ;;
    stop) service_stop registry "$port" ;;
    url) echo "$url" ;;
    *) die "usage: $0 start|stop|url [PORT]" ;;
esac
