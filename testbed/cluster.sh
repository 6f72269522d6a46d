#!/usr/bin/env bash
# A lab cluster: two nodes standing in for Sparks joined through their CX-7
# ports, each in a network namespace of its own (Docker's --network none),
# joined back to back by veth pairs named as a Spark's interfaces are: one
# pair per rail, the two PCIe halves of the QSFP port (enp1s0f1np1 and
# enP2p1s0f1np1). No RDMA device and no GPU: those checks say they could not
# run. The nodes are native x86_64 (systemd-networkd, which netplan applies
# through, cannot start under qemu-user), reached by Ansible through
# `docker exec` (their management link); sshd listens on the rails only.
#   cluster.sh up         start two nodes, cable them back to back, write the inventory
#   cluster.sh cable A B  (re)cable: A and B are the rails' pairings, e.g. "0-0 1-1" straight
#                         or "0-1 1-0" crossed (node 1's rail first, node 2's second)
#   cluster.sh down       remove the nodes (their cables go with them)
# CLUSTER_PREFIX names the nodes (default sparkfleet-cx), CLUSTER_INVENTORY
# the inventory directory (default inventory/cluster-lab).
source "$(dirname "$0")/lib.sh"

PREFIX="${CLUSTER_PREFIX:-sparkfleet-cx}"
[[ "$PREFIX" =~ ^[a-z][a-z0-9-]*$ ]] || die "CLUSTER_PREFIX is '$PREFIX'; expected lower-case letters, digits and '-'."
INVENTORY_DIR="${CLUSTER_INVENTORY:-$REPO_DIR/inventory/cluster-lab}"
IMAGE=sparkfleet/host-cluster:latest
RAILS=(enp1s0f1np1 enP2p1s0f1np1)
# What a node needs of the kernel: its own links and addresses (NET_ADMIN), raw sockets for ping, systemd.
CAPS=(SYS_ADMIN NET_ADMIN NET_RAW SYS_PTRACE AUDIT_WRITE SYS_CHROOT)

node_names() {
    docker ps -a --filter "label=io.sparkfleet.cluster" --filter "name=^$PREFIX-[0-9]+\$" --format '{{.Names}}' | sort -V
}

start_node() {
    local name="$1" cap_args=() c
    if [ -n "$(docker ps -q --filter "name=^$name\$")" ]; then
        say "$name already running"
        return 0
    fi
    docker rm -f "$name" >/dev/null 2>&1 || true
    for c in "${CAPS[@]}"; do cap_args+=(--cap-add "$c"); done
    # A machine-id of its own, as every machine has: udev derives a rail's MAC (and so its IPv6 link-local
    # address) from it, and two nodes booted with the one systemd makes from this host's would share both.
    mkdir -p "$STATE_DIR"
    printf '%s\n' "$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')" > "$STATE_DIR/$name.machine-id"
    say "starting $name ($IMAGE, a network namespace of its own)"
    docker run -d --name "$name" --hostname "$name" --label io.sparkfleet.cluster=1 --network none \
        -v "$STATE_DIR/$name.machine-id:/etc/machine-id:ro" \
        "${cap_args[@]}" --cgroupns host -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
        --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
        --sysctl net.ipv6.conf.all.disable_ipv6=0 --sysctl net.ipv6.conf.default.disable_ipv6=0 \
        "$IMAGE" >/dev/null
}

wait_booted() {
    local name="$1" state
    state="$(systemd_ready "$name" 60)" || exit 1
    # A Spark's /sys is writable and udevd runs: Docker mounts the node's own (network-namespaced) sysfs
    # read-only, so udevd did not start at boot; netplan apply writes uevents there, and networkd configures a
    # link (a rail cabled later) only once udev initialized it.
    docker exec "$name" mount -o remount,rw /sys
    docker exec "$name" systemctl start systemd-udevd
    # DGX OS's first login user, the same on every node.
    docker exec "$name" sh -c 'id nvidia >/dev/null 2>&1 || useradd -m -s /bin/bash nvidia'
    say "$name booted (systemd: $state)"
}

pid_of() { docker inspect --format '{{.State.Pid}}' "$1"; }

# cable "0-0 1-1": node 1's rail i to node 2's rail j for each i-j (a QSFP cable's two halves).
cable() {
    local pairing first second a b p1 p2 rail
    first="$PREFIX-1"; second="$PREFIX-2"
    p1="$(pid_of "$first")"; p2="$(pid_of "$second")"
    for rail in "${RAILS[@]}"; do
        docker exec "$first" ip link del "$rail" 2>/dev/null || true
        docker exec "$second" ip link del "$rail" 2>/dev/null || true
    done
    for pairing in "$@"; do
        [[ "$pairing" =~ ^([01])-([01])$ ]] || die "cable '$pairing': expected RAIL-RAIL such as 0-0 or 0-1"
        a="${RAILS[${BASH_REMATCH[1]}]}"; b="${RAILS[${BASH_REMATCH[2]}]}"
        ip link add "$a" netns "$p1" type veth peer name "$b" netns "$p2"
        docker exec "$first" ip link set "$a" up
        docker exec "$second" ip link set "$b" up
        say "cabled $first $a <-> $second $b"
    done
}

write_inventory() {
    local name
    mkdir -p "$INVENTORY_DIR/group_vars/all"
    {
        echo "---"
        echo "# Written by testbed/cluster.sh for the running lab cluster; do not edit."
        echo "all:"
        echo "  children:"
        echo "    sparks:"
        echo "      hosts:"
        for name in $(node_names); do
            echo "        $name: {ansible_connection: community.docker.docker, ansible_python_interpreter: /usr/bin/python3}"
        done
    } > "$INVENTORY_DIR/hosts.yml"
    say "wrote $INVENTORY_DIR/hosts.yml ($(node_names | wc -l) nodes)"
}

up() {
    local i
    "$TESTBED_DIR/docker.sh"
    "$TESTBED_DIR/images.sh" cluster
    for i in 1 2; do start_node "$PREFIX-$i"; done
    for i in 1 2; do wait_booted "$PREFIX-$i"; done
    cable 0-0 1-1
    write_inventory
}

down() {
    local name
    docker info >/dev/null 2>&1 || { say "no docker engine answers: no cluster nodes can be running"; return 0; }
    for name in $(node_names); do
        say "removing $name"
        docker rm -f "$name" >/dev/null
        rm -f "$STATE_DIR/$name.machine-id"
    done
    rm -f "$INVENTORY_DIR/hosts.yml"
}

case "${1:-}" in
    up) up ;;
    cable) shift; cable "$@" ;;
    down) down ;;
    *) die "usage: $0 up | cable PAIRING... | down" ;;
esac
