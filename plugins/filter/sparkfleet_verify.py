# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters that turn spark_verify's registered results into the state and the judgement
(module_utils/verification/_verification.py judges; these are its edge), and the fleet table and the state file's
history.
(ansible-doc reads each filter's documentation from plugins/filter/<filter>.yml.)
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _state as state_file
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _fleet_table as table
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _verification as verification


def spark_verification(data: dict) -> dict:
    """The verification's judgement (module_utils/verification/_verification.py's judge): state, failures and lines."""
    return verification.judge(data)


def spark_refresh_blocker(host: str, runtime: dict) -> str:
    """refresh --check: why the rollout would fail on the host (module_utils/verification/_verification.py's
    refresh_blocker), '' where nothing would."""
    return verification.refresh_blocker(host, runtime) or ""


def spark_verification_refreshed(check: dict, state_text: str | None, launchers: list[str]) -> dict:
    """The state a refresh records for a host that passed it: the refresh's check of its images, with its
    interpreters and venv as the state file (its text, read by the preflight facts) had them."""
    previous = state_file.parse(state_text)
    return verification.refreshed((previous or {}).get("verification"), check, list(launchers or []))


def spark_fleet_table(hosts: list, hostvars: Any, active: list | None = None) -> list[str]:
    """The fleet table (module_utils/verification/_fleet_table, the sparkfleet CLI's table too) as lines, from hostvars.

    hosts: the play's hosts (ansible_play_hosts_all); active: those still running it (ansible_play_hosts) - any
    other stopped earlier (failed or unreachable). Ansible's PLAY RECAP gives the task counts, so they are left out.
    """
    rows = []
    shown = tuple(header for header in table.HEADERS if header not in table.COUNT_HEADERS)
    for host in hosts:
        hvars = hostvars[host]
        facts = {key: hvars.get(key) for key in table.FACTS}
        facts["spark_preflight"] = (hvars.get("ansible_facts") or {}).get("spark_preflight")
        stopped = active is not None and host not in active
        entry = table.host_entry(facts, failures=[{"task": None, "msg": "stopped earlier in this run"}] if stopped
                                 else [])
        rows.append([table.cell(host, entry, header) for header in shown])
    return table.text_lines(rows, shown)


def spark_verification_limits(preflight: dict, can_run_containers: bool) -> dict:
    """Why a check cannot run on this host (module_utils/verification/_verification.py's limits)."""
    return verification.limits(preflight, can_run_containers)


def spark_verification_history(state: dict, record: dict | None = None, read: bool = False) -> str:
    """fresh (never provisioned), restored (lost its state, known to the controller), converged or updated.

    From spark_state's results: the host's own state file and the controller's record of the host. A host whose
    state file is new but whose record existed before is one that was reinstalled. `read` (sparkfleet verify:
    spark_state asked in check mode, nothing written): converged, differs (not what the last provision recorded),
    not provisioned, or reinstalled (the controller knows it: a provision restores it).
    """
    status = (state or {}).get("status")
    if status == "created":
        if read:
            return "reinstalled" if (record or {}).get("previous") else "not provisioned"
        return "restored" if (record or {}).get("previous") else "fresh"
    if read and status != "unchanged":
        return "differs"
    return "converged" if status == "unchanged" else "updated"


def spark_state_unchanged(text: str | None, content: dict, path: str) -> dict | None:
    """spark_state's result for a state file whose text (read by the preflight facts, or a lookup on the
    controller) already holds `content`: nothing to write, so no module call; None when it would change.

    The same judgement as spark_state's (module_utils/host/_state.py: merge, then render), on the content as the
    module would receive it (through JSON).
    """
    previous = state_file.parse(text)
    if previous is None:
        return None
    merged, status = state_file.merge(previous, json.loads(json.dumps(content)), now="")
    if status != "unchanged" or text != state_file.render(merged):
        return None
    return {"changed": False, "path": path, "status": status, "previous": previous, "recorded": merged}


class FilterModule:
    def filters(self):
        return {"spark_verification": spark_verification, "spark_fleet_table": spark_fleet_table,
                "spark_verification_history": spark_verification_history,
                "spark_state_unchanged": spark_state_unchanged,
                "spark_verification_limits": spark_verification_limits,
                "spark_verification_refreshed": spark_verification_refreshed,
                "spark_refresh_blocker": spark_refresh_blocker}
