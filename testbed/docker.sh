#!/usr/bin/env bash
# Make sure a Docker engine answers: install Debian's docker.io if needed and
# start dockerd in the background when none is running.
source "$(dirname "$0")/lib.sh"

if docker info >/dev/null 2>&1; then
    say "docker engine answers ($(docker info --format '{{.ServerVersion}}'))"
    exit 0
fi
require_root
require_debian
apt_install docker.io iptables
say "starting dockerd (log: $STATE_DIR/dockerd.log)"
# setsid: dockerd must outlive the make process that started it.
setsid dockerd >"$STATE_DIR/dockerd.log" 2>&1 < /dev/null &
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        say "docker engine up ($(docker info --format '{{.ServerVersion}} {{.Driver}}'))"
        exit 0
    fi
    sleep 1
done
tail -n 20 "$STATE_DIR/dockerd.log" >&2 || true
die "dockerd did not answer within 60 s; its log is above ($STATE_DIR/dockerd.log)."
