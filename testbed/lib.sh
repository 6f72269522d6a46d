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
