#!/usr/bin/env bash
# Make sure a Docker engine answers: install Debian's docker.io if needed and
# start dockerd in the background when none is running.
source "$(dirname "$0")/lib.sh"

# Emulated hosts share this machine's network namespace (host network: they
# reach the test registry on 127.0.0.1 and cannot program iptables under
# qemu). Their inner dockerd must not run with "bridge": "none", which
# deletes this machine's docker0; it uses this empty bridge instead.
LAB_BRIDGE=sparkfleet0
ensure_lab_bridge() {
    if ! ip link show "$LAB_BRIDGE" >/dev/null 2>&1; then
        say "creating bridge $LAB_BRIDGE for the emulated hosts' inner dockerd"
        ip link add name "$LAB_BRIDGE" type bridge \
            || die "cannot create bridge $LAB_BRIDGE (ip link add failed); the test bed needs root and CAP_NET_ADMIN."
    fi
    ip link set "$LAB_BRIDGE" up
}

if docker info >/dev/null 2>&1; then
    say "docker engine answers ($(docker info --format '{{.ServerVersion}}'))"
    ensure_lab_bridge
    exit 0
fi
require_root
require_debian
apt_install docker.io iptables iproute2
say "starting dockerd (log: $STATE_DIR/dockerd.log)"
# setsid: dockerd must outlive the make process that started it.
setsid dockerd >"$STATE_DIR/dockerd.log" 2>&1 < /dev/null &
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        say "docker engine up ($(docker info --format '{{.ServerVersion}} {{.Driver}}'))"
        ensure_lab_bridge
        exit 0
    fi
    sleep 1
done
tail -n 20 "$STATE_DIR/dockerd.log" >&2 || true
die "dockerd did not answer within 60 s; its log is above ($STATE_DIR/dockerd.log)."
