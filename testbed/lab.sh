#!/usr/bin/env bash
# The lab fleet: emulated aarch64 containers (systemd + Docker, standing in
# for DGX OS) that site.yml provisions like real Sparks.
#   lab.sh up [N]   start N hosts (default $LAB_HOSTS or 2), write
#                   inventory/lab/hosts.yml, install the hardware doubles
#   lab.sh down     remove every lab host, its Docker volume and the hosts file
#   lab.sh doubles HOST   install the hardware doubles on a running container
# A second lab beside the user's (the fleet tests): LAB_PREFIX names its hosts
# (default sparkfleet-lab), LAB_INVENTORY its inventory directory (default
# inventory/lab), LAB_VENV_HOST the host number that builds the venv (default
# 1; 0 for none). LAB_ARCH=amd64 makes native x86_64 hosts of the same
# recipe (sparkfleet/host-spark-amd64: no emulation; they classify as
# not-spark, so they need spark_preflight_require_spark=false, the override
# path); bench/fleet.py uses them to tell emulation from round trips.
source "$(dirname "$0")/lib.sh"

PREFIX="${LAB_PREFIX:-sparkfleet-lab}"
[[ "$PREFIX" =~ ^[a-z][a-z0-9-]*$ ]] || die "LAB_PREFIX is '$PREFIX'; expected lower-case letters, digits and '-'."
ARCH="${LAB_ARCH:-arm64}"
case "$ARCH" in
    arm64) IMAGE=sparkfleet/host-spark:latest; RECIPE=spark ;;
    amd64) IMAGE=sparkfleet/host-spark-amd64:latest; RECIPE=spark:amd64 ;;
    *) die "LAB_ARCH is '$ARCH'; expected arm64 (emulated Sparks, the default) or amd64 (native hosts)." ;;
esac
INVENTORY_DIR="${LAB_INVENTORY:-$REPO_DIR/inventory/lab}"
HOSTS_FILE="$INVENTORY_DIR/hosts.yml"
VENV_HOST="${LAB_VENV_HOST:-1}"
# No --privileged on our machines (it needs CAP_SYS_RESOURCE): an explicit list.
CAPS=(SYS_ADMIN NET_ADMIN SYS_PTRACE IPC_LOCK SYS_NICE MKNOD AUDIT_WRITE SYS_CHROOT)

lab_names() {
    docker ps -a --filter "label=io.sparkfleet.lab" --filter "name=^$PREFIX-[0-9]+\$" --format '{{.Names}}' | sort -V
}

start_host() {
    local name="$1" state cap_args=() c
    state="$(docker inspect --format '{{.State.Status}}' "$name" 2>/dev/null || true)"
    case "$state" in
        running) say "$name already running"; return 0 ;;
        "") ;;
        *) say "$name is $state: starting it"; docker start "$name" >/dev/null; return 0 ;;
    esac
    for c in "${CAPS[@]}"; do cap_args+=(--cap-add "$c"); done
    say "starting $name ($IMAGE, linux/$ARCH, systemd as PID 1)"
    # Host network: the inner dockerd cannot program iptables under emulation
    # and must reach the test registry on 127.0.0.1.
    docker run -d --name "$name" --label io.sparkfleet.lab=1 \
        --platform "linux/$ARCH" --network host "${cap_args[@]}" \
        --cgroupns host -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
        --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
        -v "$name-docker:/var/lib/docker" \
        "$IMAGE" >/dev/null
}

wait_booted() {
    local name="$1" state
    state="$(systemd_ready "$name" 180)" || exit 1
    say "$name booted (systemd: $state)"
}

write_inventory() {
    local name
    {
        echo "---"
        echo "# Written by testbed/lab.sh for the running lab; do not edit."
        echo "all:"
        echo "  children:"
        echo "    sparks:"
        echo "      hosts:"
        for name in $(lab_names); do
            echo "        $name:"
            # The bare-pip venv (off by default) on the first host only.
            if [ "$name" = "$PREFIX-$VENV_HOST" ]; then echo "          spark_venv_enabled: true"; fi
        done
    } > "$HOSTS_FILE"
    say "wrote $HOSTS_FILE ($(lab_names | wc -l) hosts)"
}

# The hardware doubles a simulated Spark gets (testbed/doubles): each file's path here and on the host. Installed
# from outside, in one tar stream through `docker exec` (no module run under emulation: a copy task per file took
# some 50 s a host), by `up` and by testbed/lab/prepare.yml (Molecule's prepare step), both through
# `lab.sh doubles HOST`. A host whose files read the same (sha256 and modes) is left as it is.
doubles() {
    local file
    echo "nvidia-smi/nvidia-smi usr/bin/nvidia-smi"
    echo "dgx-release etc/dgx-release"
    (cd "$TESTBED_DIR/doubles/nvidia-smi/recordings" && find . -type f | LC_ALL=C sort) | while read -r file; do
        echo "nvidia-smi/recordings/${file#./} usr/share/sparkfleet-lab/nvidia-smi/${file#./}"
    done
}

doubles_sums() {  # the sums and modes of the doubles: here (no argument) or on host $1
    local here=() there=() mine theirs
    while read -r mine theirs; do here+=("$TESTBED_DIR/doubles/$mine"); there+=("/$theirs"); done < <(doubles)
    if [ -z "${1:-}" ]; then
        sha256sum "${here[@]}" | cut -d' ' -f1; stat -c %a "${here[@]}"
    else
        docker exec "$1" sh -c 'sha256sum "$@" | cut -d" " -f1; stat -c %a "$@"' sh "${there[@]}" 2>/dev/null || true
    fi
}

# install_doubles HOST: prints "installed" or "unchanged" (prepare.yml's changed_when reads it).
install_doubles() {
    local host="$1" stage mine theirs
    [[ "$host" =~ ^[a-z][a-z0-9-]*$ ]] || die "the host is '$host'; expected a container's name (lower-case letters, digits and '-')."
    if [ "$(doubles_sums "$host")" = "$(doubles_sums)" ]; then
        echo "unchanged"
        return 0
    fi
    stage="$(mktemp -d)"
    # shellcheck disable=SC2064
    trap "rm -rf '$stage'" RETURN
    while read -r mine theirs; do
        mkdir -p "$stage/$(dirname "$theirs")"
        cp "$TESTBED_DIR/doubles/$mine" "$stage/$theirs"
    done < <(doubles)
    chmod -R u=rwX,go=rX "$stage"
    chmod 0755 "$stage/usr/bin/nvidia-smi"
    # --no-overwrite-dir: /usr, /etc and the rest keep their own owner and mode; the files are root's.
    tar -C "$stage" --owner=0 --group=0 -c usr etc | docker exec -i "$host" tar -x --no-overwrite-dir -C / \
        || die "could not install the hardware doubles on $host (docker exec tar failed)."
    [ "$(doubles_sums "$host")" = "$(doubles_sums)" ] || die "the hardware doubles on $host do not read as installed."
    echo "installed"
}

up() {
    local count="${1:-${LAB_HOSTS:-2}}" i extra said installed=()
    [[ "$count" =~ ^[1-9][0-9]*$ ]] || die "LAB_HOSTS is '$count'; expected a whole number of hosts, 1 or more (e.g. LAB_HOSTS=3)."
    "$TESTBED_DIR/images.sh" "$RECIPE"
    for i in $(seq 1 "$count"); do start_host "$PREFIX-$i"; done
    for extra in $(lab_names); do
        i="${extra##*-}"
        if [ "$i" -gt "$count" ]; then
            say "removing $extra (LAB_HOSTS=$count)"
            docker rm -f "$extra" >/dev/null
            docker volume rm -f "$extra-docker" >/dev/null
        fi
    done
    for i in $(seq 1 "$count"); do wait_booted "$PREFIX-$i"; done
    write_inventory
    for i in $(seq 1 "$count"); do
        said="$(install_doubles "$PREFIX-$i")" || exit 1
        if [ "$said" = "installed" ]; then installed+=("$PREFIX-$i"); fi
    done
    if [ "${#installed[@]}" -eq 0 ]; then
        say "every host had the hardware doubles: none installed again"
    else
        say "installed the hardware doubles on ${installed[*]}"
    fi
}

down() {
    local name
    if ! docker info >/dev/null 2>&1; then
        rm -f "$HOSTS_FILE"
        say "no docker engine answers: no lab hosts can be running"
        return 0
    fi
    for name in $(lab_names); do
        say "removing $name and its volume"
        docker rm -f "$name" >/dev/null
        docker volume rm -f "$name-docker" >/dev/null
    done
    rm -f "$HOSTS_FILE"
    say "lab is down"
}

case "${1:-}" in
    up) shift; up "$@" ;;
    down) down ;;
    doubles) [ $# -eq 2 ] || die "usage: $0 doubles HOST"; install_doubles "$2" ;;
    *) die "usage: $0 up [N] | down | doubles HOST" ;;
esac
