# Copyright: sparkfleet contributors
# Apache License 2.0
"""The verification's one judge: from what spark_gpu_verify and spark_abi_scan returned, the state a host records,
the failures that fail it and the lines a user reads; and the lines again from a recorded state.

Every path calls it: a provision's and a verify's spark_verify (the filter spark_verification), a refresh's check of
the new images (the same filter, in spark_verify/tasks/images.yml), a new venv's verdict (the filter
spark_venv_verdict) and the doctor, which reads the recorded state back (spark_doctor). A probe that could not run
is judged as any other answer ("error", with why), never left to fail its task before the judgement.
"""

from __future__ import annotations

from typing import Any


def host_class(facts: dict | None) -> str | None:
    """The host's class (spark, aarch64-other, not-spark) from its preflight facts or a recorded state; `platform`,
    the key's old name, in what an older sparkfleet gathered or recorded."""
    facts = facts or {}
    return facts.get("host_class") or facts.get("platform")


def _results(registered: Any) -> list[dict]:
    """A loop's registered results, the skipped ones left out."""
    if isinstance(registered, dict):
        return [r for r in registered.get("results", []) if not r.get("skipped")]
    return []


def named(pinned: list | None) -> dict[str, dict]:
    """The pinned images by the launcher that runs each: a result keyed by launcher path names its image."""
    return {p.get("launcher_path"): {"name": p.get("name"), "ref": p.get("ref")}
            for p in pinned or [] if isinstance(p, dict) and p.get("launcher_path")}


def _short(ref: str | None) -> str | None:
    """sha256:0123456789ab (the digest's first 12 hex digits), or an image ID / tag as it is."""
    if not ref:
        return None
    digest = ref.rpartition("@")[2] if "@" in ref else ref
    return digest[:19] if digest.startswith("sha256:") else digest


def gpu_entry(kind: str, result: dict, images: dict[str, dict] | None = None) -> dict:
    """One GPU check as the state records it, from spark_gpu_verify's result (or its failure, as 'error'), named
    by its image (name and digest) where the launcher is a pinned image's."""
    image = (images or {}).get(result.get("item")) or {}
    entry = {
        "kind": kind,
        "target": result.get("item"),
        "name": image.get("name"),
        "digest": image.get("ref"),
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
        if "verdict" not in result:  # the probe itself did not run: the module's message says why
            entry.update(hypothesis=entry["hypothesis"] or "the probe did not run",
                         fix=entry["fix"] or "make the launcher or interpreter named run on the host, then verify "
                                             "again")
    return entry


def abi_entry(result: dict) -> dict:
    """One ABI scan as the state records it, from spark_abi_scan's result."""
    return {"target": result.get("item"), "verdict": result.get("verdict", "error"),
            "findings": result.get("findings", []),
            "evidence": sorted({f.get("evidence") for f in result.get("findings_by_evidence", [])
                                if f.get("evidence")}),
            "notes": result.get("notes", []),
            "shared_objects": result.get("shared_objects_scanned"), "unreadable": len(result.get("unreadable", []))}


def _what(entry: dict) -> str:
    """'image ngc sha256:0123456789ab (/usr/local/bin/spark-ngc)', or 'python /opt/venv/bin/python'."""
    if entry.get("name"):
        return (f"{entry.get('kind')} {entry['name']} {_short(entry.get('digest')) or ''} "
                f"({entry.get('target')})").replace("  ", " ")
    return f"{entry.get('kind')} {entry.get('target')}"


def gpu_line(entry: dict, fix: bool = False) -> str:
    """'GPU image ngc sha256:0123456789ab (/usr/local/bin/spark-ngc): OK True 13.0', or the verdict with the
    diagnosis (and its fix)."""
    line = " ".join(w for w in (f"GPU {_what(entry)}:",
                                str(entry.get("verdict")).upper(), entry.get("line")) if w)
    if entry.get("notes"):
        line += f" ({'; '.join(entry['notes'])})"
    if entry.get("verdict") != "ok":
        line += f" - {entry.get('hypothesis')}: {entry.get('evidence')}"
        if fix:
            line += f". Fix: {entry.get('fix')}"
    return line


def smoke_entry(kind: str, result: dict, images: dict[str, dict] | None = None) -> dict:
    """One smoke step as the state records it, from spark_smoke_train's result (or its failure, as 'error')."""
    image = (images or {}).get(result.get("item")) or {}
    entry = {"kind": kind, "target": result.get("item"), "name": image.get("name"), "digest": image.get("ref"),
             "verdict": result.get("verdict", "error"), "device": result.get("device"),
             "gpu_verified": bool(result.get("gpu_verified")), "stage": result.get("stage"),
             "error": result.get("error") or result.get("msg"), "fix": result.get("fix"),
             "first_loss": result.get("first_loss"), "last_loss": result.get("last_loss"), "drop": result.get("drop"),
             "seconds_per_step": result.get("seconds_per_step"), "peak_gpu_memory_mb": result.get("peak_gpu_memory_mb"),
             "mem_available_mb": result.get("mem_available_mb"), "parts": result.get("parts"),
             "blockers": result.get("blockers") or [], "unsloth": result.get("unsloth")}
    if entry["verdict"] == "ok" and not entry["gpu_verified"]:
        entry.update(verdict="failed", stage="device",
                     error=f"it learned on the {entry['device'] or 'CPU'}, not on the GPU: that is no GPU "
                           "verification", fix="fix the GPU line first (the verification above)")
    return entry


def smoke_line(entry: dict) -> str:
    """'SMOKE image ngc sha256:… (…): OK loss 5.47 -> 5.01 (-8%), 0.006 s/step, peak 120 MiB', or where it stopped."""
    head = f"SMOKE {_what(entry)}: {str(entry.get('verdict')).upper()}"
    if entry.get("verdict") == "ok":
        drop = round((entry.get("drop") or 0) * 100)
        peak = f", peak {entry['peak_gpu_memory_mb']} MiB" if entry.get("peak_gpu_memory_mb") is not None else ""
        loop = (entry.get("parts") or {}).get("loop")
        through = f" through {loop}" if loop and loop != "plain" else ""
        unsloth = entry.get("unsloth") or {}
        also = (f"; Unsloth's path {unsloth.get('first_loss')} -> {unsloth.get('last_loss')}" if unsloth else "")
        return (f"{head} loss {entry.get('first_loss')} -> {entry.get('last_loss')} (-{drop}%) on "
                f"{entry.get('device')}{through}, {entry.get('seconds_per_step')} s/step{peak}{also}")
    others = "".join(f"; also at {b.get('stage')} - {b.get('error')}. Fix: {b.get('fix')}"
                     for b in (entry.get("blockers") or [])[1:])
    return f"{head} at {entry.get('stage')} - {entry.get('error')}. Fix: {entry.get('fix')}{others}"


def abi_line(entry: dict) -> str:
    """'ABI /opt/venv/bin/python: OK (40 shared objects)', or the verdict with each finding."""
    findings = entry.get("findings") or []
    return (f"ABI {entry.get('target')}: {str(entry.get('verdict')).upper()}"
            + (f" - {'; '.join(findings)}" if findings else
               f" ({entry['shared_objects']} shared objects)" if entry.get("shared_objects") is not None else "")
            + (f"; note: {'; '.join(entry['notes'])}" if entry.get("notes") else ""))


def not_verified_line(entry: dict) -> str:
    return f"NOT VERIFIED {entry.get('target')}: {entry.get('reason')}"


def venv_entry(active: Any) -> dict | None:
    """The bare-pip venv spark_venv made active (its own verification happened before the switch)."""
    if not isinstance(active, dict) or not active.get("path"):
        return None
    check = active.get("verification") or {}
    stale = active.get("staleness") or {}
    status = active.get("status")
    if check.get("simulated") and status == "verified":  # the test bed's stand-in torch verified nothing
        status = "simulated"
    venv = {"path": active["path"], "matrix": active.get("matrix"), "fingerprint": active.get("fingerprint"),
            "status": status, "line": None, "verified_by": check.get("verified_by"),
            "stale": bool(stale.get("stale")), "age_days": stale.get("age_days"),
            "new_venv_failed": bool(active.get("new_venv_failed"))}
    text = f"VENV {active['path']} ({venv['matrix']}): {str(status).upper()} {check.get('line') or ''}".rstrip()
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


def drift_lines(pinned: list | None, venv: Any, runtime: dict | None) -> list[str]:
    """How a host differs from what a provision leaves (read by sparkfleet verify, which changes nothing): each
    image's (module_utils/images/_pinned.py's as_run), the venv's (spark_venv_active's), and the nvidia runtime
    missing from Docker (`runtime`: spark_container_runtime_registered, given only where it was read, not
    registered). Each line names the command that moves the host."""
    lines = [line for p in pinned or [] if isinstance(p, dict) for line in p.get("drift") or []]
    lines += list((venv or {}).get("drift") or []) if isinstance(venv, dict) else []
    if isinstance(runtime, dict) and runtime.get("unanswered"):
        lines.append(f"runtime: Docker did not answer ({' '.join(str(runtime['unanswered']).split())[:300]}), and "
                     "every launcher runs --runtime=nvidia - install and start it (`sparkfleet provision` with "
                     "spark_container_runtime_install_docker: true), then provision registers the runtime")
    elif isinstance(runtime, dict) and str(runtime.get("registered")).lower() != "true":
        lines.append(f"runtime: Docker does not list the nvidia runtime (its runtimes: "
                     f"{', '.join(runtime.get('runtimes') or []) or 'none'}), and every launcher runs "
                     "--runtime=nvidia - `sparkfleet provision` registers it (role spark_container_runtime)")
    return lines


def _digest(ref: Any) -> str | None:
    """The digest of a reference (sha256:...), or None: what the metrics label an image's locked and running by."""
    text = str(ref or "")
    return text.rpartition("@")[2] if "@sha256:" in text else None


def drift_items(pinned: list | None, venv: Any, runtime: dict | None) -> list[dict]:
    """drift_lines as data, for the fleet's metrics: each {kind (image, launcher, venv or runtime), image (its name,
    or None), locked and running (digests, or None)}, one per line, in drift_lines' order."""
    items = []
    for p in pinned or []:
        if not isinstance(p, dict):
            continue
        kinds = list(p.get("drift_kinds") or [])
        for position, _line in enumerate(p.get("drift") or []):
            items.append({"kind": kinds[position] if position < len(kinds) else "image", "image": p.get("name"),
                          "locked": _digest(p.get("locked_ref")), "running": _digest(p.get("ref"))})
    if isinstance(venv, dict):
        items += [{"kind": "venv", "image": None, "locked": None, "running": None} for _line in venv.get("drift") or []]
    if isinstance(runtime, dict) and str(runtime.get("registered")).lower() != "true":
        items.append({"kind": "runtime", "image": None, "locked": None, "running": None})
    return items


def judge(data: dict) -> dict:
    """{state, failures, lines} of a host's verification, from spark_verify's registered results (`images`,
    `pythons`, `abi`), its preflight facts (`preflight`; `platform`, their old key, still read), why the GPU
    cannot be verified here, what was wanted, the active venv and the pinned images."""
    preflight = data.get("preflight") or data.get("platform") or {}
    reason = (data.get("gpu_not_verifiable") or "").strip()
    images = named(data.get("pinned"))
    gpu = [gpu_entry("image", r, images) for r in _results(data.get("images"))]
    gpu += [gpu_entry("python", r) for r in _results(data.get("pythons"))]
    abi = [abi_entry(r) for r in _results(data.get("abi"))]
    smoke_data = data.get("smoke") or {}
    smoke = [smoke_entry("image", r, images) for r in _results(smoke_data.get("images"))]
    smoke += [smoke_entry("python", r) for r in _results(smoke_data.get("pythons"))]
    wanted = list(data.get("wanted_images") or []) + list(data.get("wanted_pythons") or [])
    not_verified = [{"target": t, "reason": reason} for t in wanted] if reason else []
    failures = [f"{g['kind']} {g['target']}: {g['line'] or 'no answer'} - {g.get('hypothesis')}: {g.get('evidence')}. "
                f"Fix: {g.get('fix')}" for g in gpu if g["verdict"] != "ok"]
    failures += [f"ABI {a['target']}: {'; '.join(a['findings'])}" for a in abi if a["verdict"] != "ok"]
    failures += [smoke_line(m) for m in smoke if m["verdict"] != "ok"]
    drift = drift_lines(data.get("pinned"), data.get("venv"), data.get("runtime"))
    failures += drift
    lines = [f"DRIFT {line}" for line in drift]
    lines += [gpu_line(g) for g in gpu] + [abi_line(a) for a in abi] + [smoke_line(m) for m in smoke]
    lines += [not_verified_line(n) for n in not_verified]
    # The smoke step asked for where the GPU cannot be verified: not run, and why, on the screen and in the state.
    smoke_not_run = reason if smoke_data.get("asked") and reason and wanted else None
    if smoke_not_run:
        lines.append(f"SMOKE not run: {smoke_not_run}")
    venv = venv_entry(data.get("venv"))
    if venv:
        lines.append(venv["line"])
    if not lines:
        lines = [f"nothing to verify yet (no images or interpreters provisioned){'; ' + reason if reason else ''}"]
    if preflight.get("simulated"):
        lines = [f"SIMULATED host: {line}" for line in lines]
    state = {
        "host_class": host_class(preflight),
        "simulated": bool(preflight.get("simulated")),
        "gpu": gpu,
        "abi": abi,
        "smoke": smoke,
        "not_verified": not_verified,
        "gpu_not_verifiable": reason or None,
        "venv": venv,
        "images": [{"name": p.get("name"), "ref": p.get("ref"), "tag": p.get("tag")}
                   for p in data.get("pinned") or []],
        "verdict": "failed" if failures else ("not verified" if not_verified or not (gpu or abi) else "ok"),
    }
    if smoke_not_run:
        state["smoke_not_run"] = smoke_not_run
    if drift:  # only a verify reads drift (a provision moves the host instead): a provision's state keeps its shape
        state["drift"] = drift
        state["drift_items"] = drift_items(data.get("pinned"), data.get("venv"), data.get("runtime"))
    return {"state": state, "failures": failures, "lines": lines}


def recorded_lines(verification: dict) -> list[str]:
    """The lines of a recorded verification (the state file's), each GPU failure with its fix: the doctor's."""
    return ([gpu_line(g, fix=True) for g in verification.get("gpu") or []]
            + [not_verified_line(n) for n in verification.get("not_verified") or []]
            + [abi_line(a) for a in verification.get("abi") or []]
            + [smoke_line(m) for m in verification.get("smoke") or []])


def venv_verdict(build: dict, gpu: dict | None, abi: dict | None, simulated: bool = False) -> dict:
    """Whether the venv spark_venv built (or found built) passed: the GPU line and the ABI scan must both be ok, and
    its pip check may hold only what the matrix accepts.

    Returns C(passed), the C(verification) recorded in the venv's marker, and the C(failure) message that
    names both checks and what stays active.
    """
    gpu, abi = gpu or {}, abi or {}
    gpu_text = f"{gpu.get('verdict', 'error')}: {gpu.get('line') or gpu.get('msg', 'no line')}"
    if gpu.get("hypothesis"):
        gpu_text += f" ({gpu['hypothesis']}: {gpu.get('evidence')})"
    abi_text = f"{abi.get('verdict', 'error')} {'; '.join(abi.get('findings', []))}{abi.get('msg', '')}".rstrip()
    # The venv's own pip check (spark_venv's `dependencies`): only the matrix's accepted deviations may remain. A
    # venv built before sparkfleet ran it has none recorded: not judged, said in the notes.
    dependencies = build.get("dependencies")
    unaccepted = list((dependencies or {}).get("unaccepted") or [])
    deps_text = ("ok" if not unaccepted else "broken: " + "; ".join(unaccepted[:6])
                 + (f" (and {len(unaccepted) - 6} more)" if len(unaccepted) > 6 else "")
                 + " - each must be installed by a step of the matrix or accepted in its accepted: list")
    active = build.get("active")
    failure = (f"the new venv {build.get('path')} failed verification (gpu {gpu_text}; abi {abi_text}; pip check "
               f"{deps_text}); "
               + (f"the active venv {active['path']} is untouched" if active else "no venv is active"))
    notes = [] if dependencies is not None else ["pip check: not recorded for this venv (built before sparkfleet "
                                                 "ran it)"]
    return {
        "passed": gpu.get("verdict") == "ok" and abi.get("verdict") == "ok" and not unaccepted,
        "verification": {
            "line": gpu.get("line"), "gpu": gpu.get("verdict", "error"), "abi": abi.get("verdict", "error"),
            "dependencies": "ok" if not unaccepted else "broken",
            "accepted_deviations": list((dependencies or {}).get("accepted") or []),
            "dependency_problems": unaccepted,
            "abi_findings": abi.get("findings", []), "torch": gpu.get("torch_version"), "simulated": bool(simulated),
            "verified_by": "stand-in torch on a simulated host (test bed)" if simulated else "GPU probe and ABI scan",
            # the GPU frameworks the probe did not exercise, and ABI evidence that is not a finding
            "notes": [*gpu.get("notes", []), *abi.get("notes", []), *notes],
        },
        "failure": failure,
    }


def limits(preflight: dict | None, can_run_containers: bool) -> dict:
    """Why a check cannot run on this host: C(gpu) (the GPU line) and C(containers) (scans inside images); '' = it can.

    A simulated host has a recorded nvidia-smi, so nothing about its GPU is verifiable; a host whose Docker cannot
    start containers (the lab's emulated hosts) can neither scan its images nor run the GPU probe in them.
    """
    containers = "" if can_run_containers else \
        "Docker on this host cannot start containers (spark_verify_can_run_containers: false)"
    if (preflight or {}).get("simulated"):
        gpu = "simulated host: its GPU is a recorded nvidia-smi" + (
            " and its Docker cannot start containers" if containers else "")
    else:
        gpu = containers
    return {"gpu": gpu, "containers": containers}


def refreshed(previous: dict | None, check: dict, launchers: list[str]) -> dict:
    """The host's verification state after a refresh passed on it: its images' entries as the refresh's check
    judged them (`check`, judge()'s state of the images alone), its interpreters' and its venv's as the last
    provision recorded them (`previous`), in the order judge() gives - what a provision right after the refresh
    records, so that it changes nothing. `launchers`: the images' launcher paths (a not-verified entry names
    either a launcher or an interpreter)."""
    if not isinstance(previous, dict):
        return check

    def interpreters(key: str) -> list[dict]:
        return [e for e in previous.get(key) or [] if isinstance(e, dict) and e.get("kind") == "python"]

    gpu = [e for e in check.get("gpu") or [] if e.get("kind") == "image"] + interpreters("gpu")
    # judge() lists the interpreters' ABI scans first (an interpreter is a path, an image a reference)
    abi = [e for e in previous.get("abi") or [] if isinstance(e, dict) and str(e.get("target", "")).startswith("/")]
    abi += [e for e in check.get("abi") or [] if not str(e.get("target", "")).startswith("/")]
    smoke = [e for e in check.get("smoke") or [] if e.get("kind") == "image"] + interpreters("smoke")
    not_verified = [n for n in check.get("not_verified") or [] if n.get("target") in launchers]
    not_verified += [n for n in previous.get("not_verified") or []
                     if isinstance(n, dict) and n.get("target") not in launchers]
    failed = any(e.get("verdict") != "ok" for e in gpu + abi + smoke)
    return {**check, "gpu": gpu, "abi": abi, "smoke": smoke, "not_verified": not_verified,
            "venv": previous.get("venv"),
            "verdict": "failed" if failed else ("not verified" if not_verified or not (gpu or abi) else "ok")}


def refresh_blocker(host: str, runtime) -> str | None:
    """refresh --check: why the rollout would fail on this host, as the check play read Docker (its runtimes, or
    that it did not answer), in the one sentence the play and the CLI's reports say; None where nothing would."""
    if not isinstance(runtime, dict) or runtime.get("registered") in (True, "True", "true"):
        return None
    if runtime.get("unanswered"):
        why = f"Docker did not answer ({' '.join(str(runtime['unanswered']).split())[:300]})"
    else:
        listed = ", ".join(map(str, runtime.get("runtimes") or [])) or "none"
        why = f"Docker does not list the nvidia runtime (it lists {listed})"
    return (f"{host}: {why}: the refresh would pull the new digests there, fail the host's check and roll it back. "
            f"Run sparkfleet provision -l {host} first.")
