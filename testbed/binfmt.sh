#!/usr/bin/env bash
# Register qemu-aarch64 in binfmt_misc so arm64 binaries and containers run
# on this x86_64 machine.
source "$(dirname "$0")/lib.sh"

BINFMT=/proc/sys/fs/binfmt_misc
if [ "$(uname -m)" = "aarch64" ]; then
    say "native aarch64 host: no emulation needed"
    exit 0
fi
# Flags: F (fix-binary) so containers find the interpreter; C (credentials)
# so setuid programs such as sudo work in the emulated hosts (a fresh Spark's
# login user runs sudo with a password).
wanted_flags() { grep -q '^flags:.*F' "$BINFMT/qemu-aarch64" && grep -q '^flags:.*C' "$BINFMT/qemu-aarch64"; }

# Register again with C added, keeping the interpreter, magic, mask and flags.
add_credentials_flag() {
    local entry="$BINFMT/qemu-aarch64" interpreter flags magic mask
    interpreter="$(sed -n 's/^interpreter //p' "$entry")"
    flags="$(sed -n 's/^flags: //p' "$entry")"
    magic="$(sed -n 's/^magic //p' "$entry" | sed 's/../\\x&/g')"
    mask="$(sed -n 's/^mask //p' "$entry" | sed 's/../\\x&/g')"
    say "registering qemu-aarch64 again with the credentials flag (flags ${flags}OC), so sudo works in emulated hosts"
    echo -1 > "$entry"
    printf '%s' ":qemu-aarch64:M::${magic}:${mask}:${interpreter}:${flags//[OC]/}OC" > "$BINFMT/register"
}

if [ -e "$BINFMT/qemu-aarch64" ] && grep -q '^enabled' "$BINFMT/qemu-aarch64" && wanted_flags; then
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
grep -q '^flags:.*C' "$BINFMT/qemu-aarch64" || add_credentials_flag
wanted_flags \
    || die "qemu-aarch64 is registered with flags '$(sed -n 's/^flags: //p' "$BINFMT/qemu-aarch64")', expected F and C; see $BINFMT/qemu-aarch64."
say "qemu-aarch64 registered: $(grep '^flags' "$BINFMT/qemu-aarch64")"
