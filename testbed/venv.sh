#!/usr/bin/env bash
# Create .venv with sparkfleet and its test tools, and the collections from
# PyPI. Re-runs only when pyproject.toml or collections/ change.
source "$(dirname "$0")/lib.sh"

VENV="$REPO_DIR/.venv"
STAMP="$VENV/.sparkfleet-installed"
# What pip installs is in pyproject.toml and setup.py (the runtime requirements).
want="$(cat "$REPO_DIR/pyproject.toml" "$REPO_DIR/setup.py" | sha256sum | cut -c1-16)"

# Python 3.12 first: DGX OS's own, and the oldest that runs the newest ansible-core (2.21), which the test venv
# carries so that the lab's fleet tests run the Ansible users install today (the older cores the collection
# admits are ansible-test's, in venvs of their own). pyenv's builds before PATH, where a pyenv shim of a
# version not selected fails.
pick_python() {
    local py
    for py in "${PYTHON:-}" "$HOME"/.pyenv/versions/3.12.*/bin/python3.12 python3.12 python3.13 python3.11 python3; do
        [ -n "$py" ] || continue
        command -v "$py" >/dev/null || continue
        if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$py"; return 0
        fi
    done
    return 1
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
    say "venv current ($VENV)"
else
    py="$(pick_python)" || {
        apt_install python3 python3-venv
        py="$(pick_python)" || die "no Python 3.11 or newer found (python3 is $(python3 --version 2>&1)); sparkfleet needs 3.11+. Install one, or set PYTHON=/path/to/python3.11."
    }
    if [ ! -x "$VENV/bin/python" ]; then
        say "creating $VENV with $py ($("$py" --version))"
        if ! "$py" -m venv "$VENV" 2>/dev/null; then
            rm -rf "$VENV"
            apt_install python3-venv
            "$py" -m venv "$VENV" || die "'$py -m venv' failed; on Debian install python3-venv."
        fi
    fi
    say "installing sparkfleet and its test tools into $VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$VENV/bin/python" -m pip install -q -e "$REPO_DIR[test]" \
        || die "pip install of sparkfleet[test] failed (above); PyPI must be reachable."
    echo "$want" > "$STAMP"
fi
"$VENV/bin/python" "$REPO_DIR/collections/install_from_pypi.py"
