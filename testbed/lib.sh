# Shared helpers for the test-bed scripts. Sourced, not run.
# Every step prints what it does and fails with what was found, what was
# expected and what to do instead.
set -euo pipefail

TESTBED_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$TESTBED_DIR/.." && pwd)"
STATE_DIR="${SPARKFLEET_STATE_DIR:-$REPO_DIR/.cache/testbed}"
mkdir -p "$STATE_DIR"

say() { printf '[testbed] %s\n' "$*"; }
die() { printf '[testbed] ERROR: %s\n' "$*" >&2; exit 1; }

require_root() {
    [ "$(id -u)" -eq 0 ] || die "running as $(id -un) (uid $(id -u)); the test bed installs packages and starts dockerd, so it needs root. Run it again as root (e.g. 'sudo make ...')."
}

require_debian() {
    local id_like=""
    [ -r /etc/os-release ] || die "/etc/os-release not found; the test bed needs a Debian-family host (Debian 12 tested). Use a Debian 12 machine or container."
    # shellcheck disable=SC1091
    id_like="$(. /etc/os-release && echo "${ID:-} ${ID_LIKE:-}")"
    case " $id_like " in
        *" debian "*|*" ubuntu "*) ;;
        *) die "this host is '$id_like'; the test bed uses apt and Debian packages (docker.io, qemu-user-static, debootstrap, docker-registry). Use a Debian 12 machine." ;;
    esac
    command -v apt-get >/dev/null || die "apt-get not found on a Debian-family host; install apt or use a stock Debian 12 machine."
}

# apt_install PKG... installs only what is missing; 'apt-get update' once.
apt_install() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        return 0
    fi
    require_root
    require_debian
    say "installing Debian packages: ${missing[*]}"
    if [ ! -f "$STATE_DIR/apt-updated" ] || [ -n "$(find "$STATE_DIR/apt-updated" -mmin +720 2>/dev/null)" ]; then
        apt-get update -qq || die "apt-get update failed; check that Debian's archive is reachable."
        touch "$STATE_DIR/apt-updated"
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed; run it by hand to see apt's error."
}

# The test bed's local services (registry, apt repository, package index) all
# start, answer and stop the same way: one process per NAME and PORT, its pid
# and log in $STATE_DIR/NAME-PORT.{pid,log}, health by an HTTP GET.

# service_answers URL [CODE...]: true when URL answers 2xx (or one of CODEs, e.g. 401 for a registry's /v2/).
service_answers() {
    python3 - "$@" <<'PY'
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError as exc:
    sys.exit(0 if str(exc.code) in sys.argv[2:] else 1)
except OSError:
    sys.exit(1)
PY
}

# service_start NAME PORT HEALTH_URL OK_CODES CMD...: run CMD detached unless HEALTH_URL already answers,
# then wait up to 15 s for it to answer. OK_CODES is a space-separated list ("" for none).
service_start() {
    local name="$1" port="$2" health="$3" codes="$4" log i
    shift 4
    log="$STATE_DIR/$name-$port.log"
    # shellcheck disable=SC2086
    if service_answers "$health" $codes; then
        say "$name answers on 127.0.0.1:$port"
        return 0
    fi
    say "starting $name on 127.0.0.1:$port (log: $log)"
    setsid "$@" >>"$log" 2>&1 < /dev/null &
    echo $! > "$STATE_DIR/$name-$port.pid"
    for i in $(seq 1 30); do
        # shellcheck disable=SC2086
        service_answers "$health" $codes && { say "$name up on 127.0.0.1:$port"; return 0; }
        [ "$i" -lt 30 ] && sleep 0.5
    done
    tail -n 20 "$log" >&2 || true
    die "$name did not answer on $health within 15 s (log above). Is port $port taken? 'ss -ltnp | grep :$port' tells."
}

# service_stop NAME PORT: stop the process service_start started, if it runs.
service_stop() {
    local name="$1" port="$2" pidfile="$STATE_DIR/$1-$2.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        kill "$(cat "$pidfile")"
        say "$name on 127.0.0.1:$port stopped"
    else
        say "no $name of ours runs on 127.0.0.1:$port"
    fi
    rm -f "$pidfile"
}

# service_port ARG DEFAULT: the port argument, checked.
service_port() {
    local port="${1:-$2}"
    [[ "$port" =~ ^[0-9]+$ ]] || die "port '$port' is not a number; expected e.g. $2."
    echo "$port"
}

# systemd_ready NAME SECONDS: wait until systemd in the container NAME is up (running, or degraded: a service that
# cannot start in a container); print its state, or say why not and fail.
systemd_ready() {
    local name="$1" seconds="$2" state="" started=$SECONDS
    while [ $((SECONDS - started)) -lt "$seconds" ]; do
        state="$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)"
        case "$state" in
            running|degraded) echo "$state"; return 0 ;;
        esac
        sleep 1
    done
    die "$name did not finish booting in $seconds s (systemd says '${state:-nothing}'); see 'docker logs $name' and 'docker exec $name systemctl --failed'."
}
