# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters that turn spark_verify's registered results into the state and the judgement.
(ansible-doc reads each filter's documentation from plugins/filter/<filter>.yml.)
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.sparkfleet.spark.plugins.module_utils import _fleet_table as table
from ansible_collections.sparkfleet.spark.plugins.module_utils import _state as state_file


def _results(registered: Any) -> list[dict]:
    if isinstance(registered, dict):
        return [r for r in registered.get("results", []) if not r.get("skipped")]
    return []


def _gpu_entry(kind: str, result: dict) -> dict:
    entry = {
        "kind": kind,
        "target": result.get("item"),
        "verdict": result.get("verdict", "error"),
        "line": result.get("line"),
        "torch": result.get("torch_version"),
        "torch_cuda": result.get("torch_cuda"),
        "device": (result.get("device") or {}).get("name"),
        "capability": (result.get("device") or {}).get("capability"),
        "notes": result.get("notes", []),
        "frameworks": result.get("frameworks"),
    }
    if entry["verdict"] != "ok":
        entry.update(hypothesis=result.get("hypothesis"), evidence=result.get("evidence") or result.get("msg"),
                     fix=result.get("fix"))
    return entry


def _venv(active: Any) -> dict | None:
    """The bare-pip venv spark_venv made active (its own verification happened before the switch)."""
    if not isinstance(active, dict) or not active.get("path"):
        return None
    check = active.get("verification") or {}
    stale = active.get("staleness") or {}
    venv = {"path": active["path"], "matrix": active.get("matrix"), "fingerprint": active.get("fingerprint"),
            "status": active.get("status"), "line": None, "verified_by": check.get("verified_by"),
            "stale": bool(stale.get("stale")), "age_days": stale.get("age_days"),
            "new_venv_failed": bool(active.get("new_venv_failed"))}
    text = f"VENV {active['path']} ({venv['matrix']}): {str(venv['status']).upper()} {check.get('line') or ''}".rstrip()
    if venv["verified_by"]:
        text += f" [{venv['verified_by']}]"
    if check.get("notes"):
        text += f" ({'; '.join(check['notes'])})"
    if venv["stale"]:
        text += f"; matrix STALE ({venv['age_days']} days since last verified)"
    if venv["new_venv_failed"]:
        text += "; the new venv failed verification, this one stayed"
    venv["line"] = text
    return venv


def spark_verification(data: dict) -> dict:
    platform = data.get("platform") or {}
    reason = (data.get("gpu_not_verifiable") or "").strip()
    gpu = [_gpu_entry("image", r) for r in _results(data.get("images"))]
    gpu += [_gpu_entry("python", r) for r in _results(data.get("pythons"))]
    abi = [{"target": r.get("item"), "verdict": r.get("verdict", "error"), "findings": r.get("findings", []),
            "evidence": sorted({f.get("evidence") for f in r.get("findings_by_evidence", []) if f.get("evidence")}),
            "notes": r.get("notes", []),
            "shared_objects": r.get("shared_objects_scanned"), "unreadable": len(r.get("unreadable", []))}
           for r in _results(data.get("abi"))]
    wanted = list(data.get("wanted_images") or []) + list(data.get("wanted_pythons") or [])
    not_verified = [{"target": t, "reason": reason} for t in wanted] if reason else []
    failures = [f"{g['kind']} {g['target']}: {g['line'] or 'no answer'} - {g.get('hypothesis')}: {g.get('evidence')}. "
                f"Fix: {g.get('fix')}" for g in gpu if g["verdict"] != "ok"]
    failures += [f"ABI {a['target']}: {'; '.join(a['findings'])}" for a in abi if a["verdict"] != "ok"]
    lines = [f"GPU {g['kind']} {g['target']}: {g['verdict'].upper()} {g['line'] or ''}".rstrip()
             + (f" ({'; '.join(g['notes'])})" if g["notes"] else "")
             + (f" - {g.get('hypothesis')}: {g.get('evidence')}" if g["verdict"] != "ok" else "")
             for g in gpu]
    lines += [f"ABI {a['target']}: {a['verdict'].upper()}"
              + (f" - {'; '.join(a['findings'])}" if a["findings"] else f" ({a['shared_objects']} shared objects)")
              + (f"; note: {'; '.join(a['notes'])}" if a["notes"] else "")
              for a in abi]
    lines += [f"NOT VERIFIED {n['target']}: {n['reason']}" for n in not_verified]
    venv = _venv(data.get("venv"))
    if venv:
        lines.append(venv["line"])
    if not lines:
        lines = [f"nothing to verify yet (no images or interpreters provisioned){'; ' + reason if reason else ''}"]
    if platform.get("simulated"):
        lines = [f"SIMULATED host: {line}" for line in lines]
    state = {
        "platform": platform.get("platform"),
        "simulated": bool(platform.get("simulated")),
        "gpu": gpu,
        "abi": abi,
        "not_verified": not_verified,
        "gpu_not_verifiable": reason or None,
        "venv": venv,
        "images": [{"name": p.get("name"), "ref": p.get("ref"), "tag": p.get("tag")}
                   for p in data.get("pinned") or []],
        "verdict": "failed" if failures else ("not verified" if not_verified or not (gpu or abi) else "ok"),
    }
    return {"state": state, "failures": failures, "lines": lines}


def spark_fleet_table(hosts: list, hostvars: Any, active: list | None = None) -> list[str]:
    """The fleet table (module_utils/_fleet_table, the sparkfleet CLI's table too) as lines, from hostvars.

    hosts: the play's hosts (ansible_play_hosts_all); active: those still running it (ansible_play_hosts) - any
    other stopped earlier (failed or unreachable). Ansible's PLAY RECAP gives the task counts, so they are left out.
    """
    rows = []
    for host in hosts:
        hvars = hostvars[host]
        facts = {key: hvars.get(key) for key in table.FACTS}
        facts["spark_preflight"] = (hvars.get("ansible_facts") or {}).get("spark_preflight")
        stopped = active is not None and host not in active
        entry = table.host_entry(facts, failures=[{"task": None, "msg": "stopped earlier in this run"}] if stopped
                                 else [])
        rows.append(table.row(host, entry)[:-len(table.COUNT_HEADERS)])
    return table.text_lines(rows, table.HEADERS[:-len(table.COUNT_HEADERS)])


def spark_verification_limits(platform: dict, can_run_containers: bool) -> dict:
    """Why a check cannot run on this host: C(gpu) (the GPU line) and C(containers) (scans inside images); '' = it can.

    A simulated host has a recorded nvidia-smi, so nothing about its GPU is verifiable; a host whose Docker cannot
    start containers (the lab's emulated hosts) can neither scan its images nor run the GPU probe in them.
    """
    containers = "" if can_run_containers else \
        "Docker on this host cannot start containers (spark_verify_can_run_containers: false)"
    if (platform or {}).get("simulated"):
        gpu = "simulated host: its GPU is a recorded nvidia-smi" + (
            " and its Docker cannot start containers" if containers else "")
    else:
        gpu = containers
    return {"gpu": gpu, "containers": containers}


def spark_verification_history(state: dict, record: dict | None = None) -> str:
    """fresh (never provisioned), restored (lost its state, known to the controller), converged or updated.

    From spark_state's results: the host's own state file and the controller's record of the host. A host whose
    state file is new but whose record existed before is one that was reinstalled.
    """
    status = (state or {}).get("status")
    if status == "created":
        return "restored" if (record or {}).get("previous") else "fresh"
    return "converged" if status == "unchanged" else "updated"


def spark_state_unchanged(text: str | None, content: dict, path: str) -> dict | None:
    """spark_state's result for a state file whose text (read by the preflight facts, or a lookup on the
    controller) already holds `content`: nothing to write, so no module call; None when it would change.

    The same judgement as spark_state's (module_utils/_state.py: merge, then render), on the content as the
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
                "spark_verification_limits": spark_verification_limits}
