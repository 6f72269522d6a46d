"""sparkfleet's own variables, named wrong: an inventory or -e variable that looks like one of sparkfleet's
(spark_*, sparkfleet_*, cluster_*) but is not, named with the nearest known one, before any host is touched.

Ansible ignores a variable nothing reads, so a typo (spark_verify_can_run_container for
spark_verify_can_run_containers) surfaced later as a Docker error, or never. The names sparkfleet knows are the
roles' argument specs, the variables its playbooks read, and the image lock pin writes into the inventory.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from sparkfleet.collection_home import PROJECT_DIR

PREFIX = re.compile(r"^(spark|sparkfleet|cluster)_")
# Read by the playbooks (not by a role's argument spec), or written into the inventory by sparkfleet itself.
PLAYBOOK_VARIABLES = {"spark_images_lock", "cluster_verify_nccl_image", "cluster_verify_nccl_max_bytes",
                      "cluster_verify_nccl_headroom", "cluster_verify_tcp_seconds", "cluster_verify_rdma_seconds",
                      "cluster_verify_thresholds_file"}


def known() -> set[str]:
    names = set(PLAYBOOK_VARIABLES)
    for path in sorted((PROJECT_DIR / "roles").glob("*/meta/argument_specs.yml")):
        for entry in (yaml.safe_load(path.read_text()) or {}).get("argument_specs", {}).values():
            names |= set((entry or {}).get("options") or {})
    return names


def unknown(names_by_source: dict[str, set[str]], names: set[str] | None = None) -> list[str]:
    """One sentence per variable that looks like sparkfleet's and is not: where it was set, the nearest name."""
    names = known() if names is None else names
    found: dict[str, list[str]] = {}
    for source, variables in names_by_source.items():
        for name in variables:
            if PREFIX.match(name) and name not in names:
                found.setdefault(name, []).append(source)
    out = []
    for name, sources in sorted(found.items()):
        near = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.75)
        out.append(f"{name}, set for {', '.join(sorted(sources)[:4])}{' ...' if len(sources) > 4 else ''}: "
                   + (f"did you mean {near[0]}?" if near else "no role reads it (each role's README lists its "
                                                               "variables)"))
    return out


def inventory_names(inventory: str, env: dict[str, str]) -> dict[str, set[str]]:
    """Each host's inventory variables (group_vars and host_vars merged), as ansible-inventory lists them; empty
    when it cannot list them without help (a vaulted file, a dynamic source that fails): Ansible then says why."""
    try:
        proc = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", inventory, "--list"],
                              capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
                              env={**os.environ, **env})
        data = json.loads(proc.stdout) if proc.returncode == 0 else {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}
    hostvars = ((data.get("_meta") or {}).get("hostvars") or {}) if isinstance(data, dict) else {}
    return {f"host {host}": set(values) for host, values in hostvars.items() if isinstance(values, dict)}


def extra_names(extra_vars: list[str]) -> dict[str, set[str]]:
    """The variables each -e sets (inline JSON/YAML, key=value, or @file); one that cannot be read is left to
    Ansible, which says why."""
    out: dict[str, set[str]] = {}
    for value in extra_vars or []:
        try:
            text = Path(value[1:]).expanduser().read_text() if value.startswith("@") else value
            data = yaml.safe_load(text)
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(data, dict):
            data = dict(word.split("=", 1) for word in value.split() if "=" in word) if "=" in value else {}
        if data:
            out.setdefault(f"-e {value if value.startswith('@') else '(inline)'}", set()).update(map(str, data))
    return out
