#!/usr/bin/env bash
# Build and cache the host images from debootstrap:
#   sparkfleet/host-plain  a minimal aarch64 Debian (a non-Spark host)
#   sparkfleet/host-spark  systemd + docker.io, standing in for DGX OS
#   sparkfleet/host-amd64  a minimal x86_64 Debian (other hardware, native)
# Each image's folder under images/ names its architecture in `arch`;
# NAME:ARCH builds a folder's recipe for another architecture as
# sparkfleet/host-NAME-ARCH (spark:amd64, a native host with systemd and
# Docker for bench/fleet.py; not built by default).
# An image is rebuilt only when its recipe (this script, its package list,
# overlay and Dockerfile tail, the architecture) changes: the recipe hash is
# an image label.
# Usage: images.sh [plain|spark|amd64|spark:amd64 ...]   (default: plain spark amd64, built in parallel)
source "$(dirname "$0")/lib.sh"

SUITE=bookworm
MIRROR="${SPARKFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

recipe_hash() {
    local name="$1" arch="$2" dir="$TESTBED_DIR/images/$1"
    {
        # Contents only: the same recipe in another checkout hashes the same.
        sha256sum < "$TESTBED_DIR/images.sh"
        (cd "$dir" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
        echo "$SUITE"
        # An image of another Debian release names it in its folder's `suite` (the default images hash as before).
        [ ! -f "$dir/suite" ] || cat "$dir/suite"
        # The folder's own architecture hashes as before (no rebuild of the default images).
        [ "$arch" = "$(cat "$dir/arch")" ] || echo "$arch"
    } | sha256sum | cut -c1-16
}

image_label() {
    docker image inspect --format '{{ index .Config.Labels "io.sparkfleet.recipe" }}' "$1" 2>/dev/null || true
}

build_one() {
    local name="${1%%:*}" arch="${1#*:}" dir image hash work include cache suite
    dir="$TESTBED_DIR/images/$name"
    if [ "$arch" = "$1" ]; then
        arch="$(cat "$dir/arch")"
        image="sparkfleet/host-$name:latest"
    else
        image="sparkfleet/host-$name-$arch:latest"
    fi
    hash="$(recipe_hash "$name" "$arch")"
    if [ "$(image_label "$image")" = "$hash" ]; then
        say "$image is current (recipe $hash)"
        return 0
    fi
    work="$STATE_DIR/image-$name-$arch"
    # One package cache per image: two debootstraps filling one cache at
    # once corrupt each other's downloads.
    cache="$STATE_DIR/debootstrap-cache-$name-$arch"
    rm -rf "$work"
    mkdir -p "$work/rootfs" "$cache"
    include="$(grep -v '^#' "$dir/packages" | grep -v '^$' | paste -sd, -)"
    suite="$SUITE"
    [ ! -f "$dir/suite" ] || suite="$(cat "$dir/suite")"
    say "$image: debootstrap $suite $arch with $include (a few minutes under emulation; log $work.log)"
    local attempt
    for attempt in 1 2; do
        if debootstrap --arch="$arch" --variant=minbase --cache-dir="$cache" \
                --include="$include" "$suite" "$work/rootfs" "$MIRROR" >"$work.log" 2>&1; then
            break
        fi
        if [ "$attempt" -eq 2 ]; then
            tail -n 20 "$work.log" >&2
            die "debootstrap for $image failed twice (log above, $work.log). Check that $MIRROR is reachable and qemu-aarch64 is registered (testbed/binfmt.sh)."
        fi
        say "$image: debootstrap failed (a download, most often); retrying once"
        rm -rf "$work/rootfs" && mkdir -p "$work/rootfs"
    done
    if [ -d "$dir/overlay" ]; then
        cp -a "$dir/overlay/." "$work/rootfs/"
    fi
    # apt caches and machine identity do not belong in an image.
    rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
    : > "$work/rootfs/etc/machine-id"
    tar -C "$work/rootfs" -cf "$work/rootfs.tar" .
    rm -rf "$work/rootfs"
    {
        echo "FROM scratch"
        echo "ADD rootfs.tar /"
        echo "LABEL io.sparkfleet.recipe=\"$hash\""
        cat "$dir/Dockerfile.tail"
    } > "$work/Dockerfile"
    say "$image: docker build --platform linux/$arch"
    # The legacy builder labels a FROM-scratch image with --platform; 'docker
    # import' would label it amd64 and Molecule's platform check refuses that.
    DOCKER_BUILDKIT=0 docker build --quiet --platform "linux/$arch" -t "$image" "$work" >/dev/null 2>"$work.build.log" \
        || { cat "$work.build.log" >&2; die "docker build of $image failed (above)."; }
    rm -rf "$work"
    say "$image built (recipe $hash, $(docker image inspect --format '{{.Architecture}}' "$image"))"
}

main() {
    local names=("$@") pids=() n rc=0
    [ "${#names[@]}" -gt 0 ] || names=(plain spark amd64)
    for n in "${names[@]}"; do
        [ -d "$TESTBED_DIR/images/${n%%:*}" ] || die "unknown image '$n'; expected one of: $(ls "$TESTBED_DIR/images" | paste -sd' '), or NAME:ARCH"
        case "$n" in *:*) [[ "${n#*:}" =~ ^(arm64|amd64)$ ]] || die "unknown architecture in '$n'; expected arm64 or amd64 (e.g. spark:amd64)" ;; esac
    done
    "$TESTBED_DIR/docker.sh"
    "$TESTBED_DIR/binfmt.sh"
    apt_install debootstrap
    for n in "${names[@]}"; do
        build_one "$n" &
        pids+=("$!")
    done
    for n in "${pids[@]}"; do
        wait "$n" || rc=1
    done
    [ "$rc" -eq 0 ] || die "an image build failed (see above)."
}

main "$@"
