#!/usr/bin/env bash
# A real, signed apt repository on 127.0.0.1 standing in for NVIDIA's
# libnvidia-container repository (unreachable here). Packages carry the real
# names and two versions; see testbed/doubles/nvidia-container-toolkit/.
#   aptrepo.sh start [PORT]   build (if its recipe changed) and serve (default 5080)
#   aptrepo.sh stop [PORT]
# Layout: http://127.0.0.1:PORT/stable/deb/{arm64,amd64}/ (flat, one signed
# repository per architecture, as NVIDIA's) and /gpgkey. The lab's Sparks take
# arm64; the native x86_64 hosts of bench/fleet.py (LAB_ARCH=amd64) amd64.
source "$(dirname "$0")/lib.sh"

port="$(service_port "${2:-}" 5080)"
DOUBLE="$TESTBED_DIR/doubles/nvidia-container-toolkit"
ROOT="$STATE_DIR/aptrepo"
VERSIONS=(1.17.8-1 1.18.0-1)
ARCHES=(arm64 amd64)

recipe_hash() {
    # Contents only: the same recipe in another checkout hashes the same.
    { sha256sum < "$0"; (cd "$DOUBLE" && find . -type f -print0 | sort -z | xargs -0 sha256sum); } \
        | sha256sum | cut -c1-16
}

deb() {  # deb NAME VERSION DEPENDS FILES...   (FILES: src:dest)
    local name="$1" version="$2" depends="$3" pkg spec
    shift 3
    pkg="$ROOT/build/$name-$version"
    rm -rf "$pkg"
    mkdir -p "$pkg/DEBIAN"
    for spec in "$@"; do
        install -D -m 0755 "${spec%%:*}" "$pkg${spec#*:}"
    done
    sed -i "s/@VERSION@/${version%-*}/" "$pkg/usr/bin/nvidia-ctk" 2>/dev/null || true
    {
        echo "Package: $name"
        echo "Version: $version"
        echo "Architecture: $ARCH"
        echo "Maintainer: sparkfleet test bed <noreply@localhost>"
        [ -n "$depends" ] && echo "Depends: $depends"
        echo "Description: sparkfleet test-bed stand-in for NVIDIA's $name"
        echo " Built by testbed/aptrepo.sh; behaves as NVIDIA documents the real package."
    } > "$pkg/DEBIAN/control"
    dpkg-deb --root-owner-group -Zxz --build "$pkg" "$ROOT/www/stable/deb/$ARCH/${name}_${version}_${ARCH}.deb" >/dev/null
}

build() {
    local hash v gnupg="$ROOT/gnupg" ARCH
    hash="$(recipe_hash)"
    if [ -f "$ROOT/recipe" ] && [ "$(cat "$ROOT/recipe")" = "$hash" ]; then
        return 0
    fi
    apt_install dpkg-dev apt-utils gnupg
    say "building the signed apt repository in $ROOT (recipe $hash)"
    rm -rf "$ROOT"
    mkdir -p "$gnupg" "$ROOT/build"
    chmod 700 "$gnupg"
    for ARCH in "${ARCHES[@]}"; do
        mkdir -p "$ROOT/www/stable/deb/$ARCH"
        for v in "${VERSIONS[@]}"; do
            deb libnvidia-container1 "$v" "" "$DOUBLE/README.md:/usr/share/doc/libnvidia-container1/README.sparkfleet"
            deb libnvidia-container-tools "$v" "libnvidia-container1 (>= $v)" \
                "$DOUBLE/nvidia-container-runtime:/usr/bin/nvidia-container-cli"
            deb nvidia-container-toolkit-base "$v" "python3" \
                "$DOUBLE/nvidia-ctk:/usr/bin/nvidia-ctk" \
                "$DOUBLE/nvidia-container-runtime:/usr/bin/nvidia-container-runtime"
            deb nvidia-container-toolkit "$v" \
                "nvidia-container-toolkit-base (= $v), libnvidia-container-tools (>= $v), libnvidia-container-tools (<< 2.0.0)" \
                "$DOUBLE/README.md:/usr/share/doc/nvidia-container-toolkit/README.sparkfleet"
        done
    done
    rm -rf "$ROOT/build"
    # A throwaway signing key, made for this repository only.
    GNUPGHOME="$gnupg" gpg --batch --quiet --passphrase '' \
        --quick-gen-key "sparkfleet test bed apt signing <noreply@localhost>" rsa3072 sign never
    GNUPGHOME="$gnupg" gpg --batch --armor --export > "$ROOT/www/gpgkey"
    for ARCH in "${ARCHES[@]}"; do
        (
            cd "$ROOT/www/stable/deb/$ARCH"
            apt-ftparchive packages . > Packages
            gzip -9kf Packages
            apt-ftparchive -o APT::FTPArchive::Release::Origin="sparkfleet test bed" \
                -o APT::FTPArchive::Release::Label="libnvidia-container (stand-in)" release . > Release
            GNUPGHOME="$gnupg" gpg --batch --yes --clearsign -o InRelease Release
            GNUPGHOME="$gnupg" gpg --batch --yes -abs -o Release.gpg Release
        )
    done
    echo "$hash" > "$ROOT/recipe"
}

start() {
    build
    service_start aptrepo "$port" "http://127.0.0.1:$port/gpgkey" "" \
        python3 -m http.server --bind 127.0.0.1 --directory "$ROOT/www" "$port"
}

case "${1:-}" in
    start) start ;;
    stop) service_stop aptrepo "$port" ;;
    *) die "usage: $0 start|stop [PORT]" ;;
esac
