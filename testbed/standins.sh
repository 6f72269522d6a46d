#!/usr/bin/env bash
# Push the lab's stand-in images to the lab registry under the real
# repository names: nvidia/pytorch:25.11-py3 and :25.09-py3 as OCI indexes
# (arm64 + amd64, as NGC serves them), unsloth/unsloth:dgxspark-latest as a
# Docker manifest list (as Docker Hub serves it). Pushing again gives the
# same digests; STANDIN_SEED=<text> moves the tags to new content.
source "$(dirname "$0")/lib.sh"
url="$("$TESTBED_DIR/registry.sh" url "${1:-5000}")"
"$TESTBED_DIR/registry.sh" start "${1:-5000}"
py="$REPO_DIR/.venv/bin/python"
seed="${STANDIN_SEED:-}"
for tag in 25.11-py3 25.09-py3; do
    say "stand-in nvidia/pytorch:$tag: $("$py" "$TESTBED_DIR/oci_push.py" "$url" "nvidia/pytorch:$tag" --seed "$seed" | cut -c1-90)"
done
say "stand-in unsloth/unsloth:dgxspark-latest: $("$py" "$TESTBED_DIR/oci_push.py" "$url" unsloth/unsloth:dgxspark-latest --list-type docker --seed "$seed" | cut -c1-90)"
