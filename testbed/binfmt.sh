#!/usr/bin/env bash
# Register qemu-aarch64 in binfmt_misc so arm64 binaries and containers run
# on this x86_64 machine.
source "$(dirname "$0")/lib.sh"

BINFMT=/proc/sys/fs/binfmt_misc
if [ "$(uname -m)" = "aarch64" ]; then
    say "native aarch64 host: no emulation needed"
    exit 0
fi
if [ -e "$BINFMT/qemu-aarch64" ] && grep -q '^enabled' "$BINFMT/qemu-aarch64" && grep -q '^flags:.*F' "$BINFMT/qemu-aarch64"; then
    say "qemu-aarch64 registered in binfmt_misc"
    exit 0
fi
require_root
require_debian
apt_install qemu-user-static binfmt-support
if [ ! -e "$BINFMT/register" ]; then
    say "mounting binfmt_misc on $BINFMT"
    mount -t binfmt_misc binfmt_misc "$BINFMT" 2>/dev/null \
        || die "cannot mount binfmt_misc on $BINFMT (is the binfmt_misc kernel module available, and is this a privileged container?). Without it aarch64 hosts cannot be emulated; run on a machine or VM with binfmt_misc."
fi
say "registering qemu-aarch64 (fix-binary flag, so containers find the interpreter)"
update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
if ! grep -q '^flags:.*F' "$BINFMT/qemu-aarch64" 2>/dev/null; then
    [ -e "$BINFMT/qemu-aarch64" ] && echo -1 > "$BINFMT/qemu-aarch64"
    update-binfmts --import qemu-aarch64 >/dev/null 2>&1 || update-binfmts --enable qemu-aarch64
fi
grep -q '^enabled' "$BINFMT/qemu-aarch64" 2>/dev/null \
    || die "qemu-aarch64 is not enabled in $BINFMT after update-binfmts; see 'update-binfmts --display qemu-aarch64'."
grep -q '^flags:.*F' "$BINFMT/qemu-aarch64" \
    || die "qemu-aarch64 is registered without the F (fix-binary) flag; containers will not find /usr/bin/qemu-aarch64-static. Check /usr/share/binfmts/qemu-aarch64."
say "qemu-aarch64 registered: $(grep '^flags' "$BINFMT/qemu-aarch64")"
