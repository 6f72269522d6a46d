"""The run's report: JSON (the schema in report-schema.json, the source of the others), Markdown, JUnit XML.

Built from what events.Fleet read from the runner's events; never from the
runner's artifacts or the inventory, so a secret that Ansible hid (no_log)
cannot reach a report.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from sparkfleet.events import Fleet, Host

SCHEMA = "sparkfleet-report/1"
SCHEMA_FILE = Path(__file__).with_name("report-schema.json")


def _platform(host: Host) -> dict:
    facts = host.facts.get("spark_preflight") or {}
    state = (host.facts.get("spark_verify_result") or {}).get("state") or {}
    override = host.facts.get("spark_preflight_override") in (True, "True", "true")
    return {"platform": facts.get("platform") or state.get("platform"),
            "simulated": bool(facts.get("simulated") or state.get("simulated")),
            "override": "not a Spark (override)" if override else None}


def image_source(pinned: dict) -> str:
    """Where a host's image comes from: the lock, a build FROM a locked image, or a blessed tag already on the host."""
    if pinned.get("derived"):
        return f"derived from {pinned.get('base')} ({pinned.get('image_tag')})"
    local = pinned.get("local_fallback")
    if local:
        return f"local blessed tag {local.get('used')} (wanted {local.get('wanted')}: {local.get('reason')})"
    return "not locked, resolved for this run" if pinned.get("unlocked") else "lock"


def host_report(host: Host) -> dict:
    verify = host.facts.get("spark_verify_result") or {}
    state = verify.get("state") or {}
    runtime = host.facts.get("spark_container_runtime_registered")
    images = [{"name": p.get("name"), "ref": p.get("ref"), "tag": p.get("tag"), "source": image_source(p)}
              for p in host.facts.get("spark_images_pinned") or []]
    venv = host.facts.get("spark_venv_active") or None
    abi = [f for a in state.get("abi") or [] for f in a.get("findings") or []]
    return {
        **_platform(host),
        "reachable": host.unreachable is None,
        "unreachable": host.unreachable,
        "history": verify.get("history"),
        "runtime": ({"registered": runtime.get("registered") in (True, "True", "true"),
                     "runtimes": runtime.get("runtimes", []), "toolkit_version": runtime.get("toolkit_version")}
                    if runtime else None),
        "images": images,
        "venv": ({"path": venv.get("path"), "matrix": venv.get("matrix"), "fingerprint": venv.get("fingerprint"),
                  "status": venv.get("status"), "line": (venv.get("verification") or {}).get("line"),
                  "verified_by": (venv.get("verification") or {}).get("verified_by"),
                  "stale": bool((venv.get("staleness") or {}).get("stale"))} if venv and venv.get("path") else None),
        "verification": {"verdict": state.get("verdict"), "lines": verify.get("lines") or [],
                         "gpu": [{"target": g.get("target"), "verdict": g.get("verdict"), "line": g.get("line")}
                                 for g in state.get("gpu") or []],
                         "failures": verify.get("failures") or []} if verify else None,
        "abi_findings": abi,
        "refresh_failure": host.facts.get("spark_images_refresh_failure"),
        "counts": dict(host.counts),
        "failures": list(host.failures),
    }


def build(fleet: Fleet, meta: dict[str, Any]) -> dict:
    refresh = fleet.controller_facts.get("spark_images_refresh")
    return {
        "schema": SCHEMA,
        **meta,
        "hosts": {name: host_report(host) for name, host in sorted(fleet.hosts.items())},
        "refresh": ({"diff": [{k: d.get(k) for k in ("name", "tag", "old", "new", "changed", "line")}
                              for d in refresh.get("diff", [])]} if refresh else None),
        "warnings": list(fleet.warnings),
    }


def host_ok(entry: dict) -> bool:
    return entry["reachable"] and not entry["failures"] and entry["counts"].get("failed", 0) == 0


def summary_rows(report: dict) -> list[list[str]]:
    """The per-host summary as rows of text (also the Markdown table)."""
    rows = []
    for name, h in report["hosts"].items():
        platform = f"{h['platform'] or '?'}{' (simulated)' if h['simulated'] else ''}"
        if h.get("override"):
            platform = f"{h['override']}{' (simulated)' if h['simulated'] else ''}"
        runtime = "-" if h["runtime"] is None else ("registered" if h["runtime"]["registered"] else "NOT registered")
        images = ", ".join(f"{i['name']}@{str(i['ref']).rsplit('@sha256:', 1)[-1].removeprefix('sha256:')[:12]}"
                           + (" LOCAL" if str(i.get("source", "")).startswith("local") else "")
                           for i in h["images"]) or "-"
        venv = "-" if not h["venv"] else f"{h['venv']['matrix']} {h['venv']['status']}" + (
            " STALE" if h["venv"]["stale"] else "")
        verdict = (h["verification"] or {}).get("verdict") or ("unreachable" if not h["reachable"] else "-")
        gpu = (h["verification"] or {}).get("gpu") or []
        line = "; ".join(f"{g['line']}" for g in gpu if g.get("line")) or (
            "GPU not verifiable (simulated)" if h["simulated"] and h["verification"] else "")
        abi = str(len(h["abi_findings"])) if h["verification"] else "-"
        rows.append([name, platform, h["history"] or "-", runtime, images, venv, verdict, line[:60], abi,
                     str(h["counts"].get("changed", 0)), str(h["counts"].get("failed", 0))])
    return rows


HEADERS = ["host", "platform", "history", "runtime", "images (digest)", "venv", "verdict", "line", "ABI findings",
           "changed", "failed"]


def markdown(report: dict) -> str:
    out = [f"# sparkfleet {report['command']} — {report['status']}", "",
           f"- playbook: `{report['playbook']}`, inventory: `{report['inventory']}`"
           + (f", limit: `{report['limit']}`" if report.get("limit") else "")
           + (" (check mode)" if report.get("check") else ""),
           f"- started {report['started_at']}, {report['duration_s']} s, exit code {report['exit_code']}", ""]
    if report.get("refresh"):
        out += ["## Lock diff", "", "| image | tag | old | new |", "|---|---|---|---|"]
        out += [f"| {d['name']} | {d['tag']} | `{d['old']}` | `{d['new']}` |" for d in report["refresh"]["diff"]]
        out.append("")
    if report.get("warnings"):
        out += ["## Warnings", ""] + [f"- {w}" for w in report["warnings"]] + [""]
    out += ["## Hosts", "", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in summary_rows(report)]
    for name, h in report["hosts"].items():
        details = list((h["verification"] or {}).get("lines", []))
        details += [f"FAILED {f['task']}: {f['msg']}" for f in h["failures"]]
        if h["unreachable"]:
            details.append(f"UNREACHABLE: {h['unreachable']}")
        if details:
            out += ["", f"### {name}", ""] + [f"- {d}" for d in details]
    return "\n".join(out) + "\n"


def junit(report: dict) -> str:
    """One test case per host and check, so CI systems show which host failed what."""
    suite = ET.Element("testsuite", name=f"sparkfleet {report['command']}", timestamp=report["started_at"],
                       time=str(report["duration_s"]))
    counts = {"tests": 0, "failures": 0, "skipped": 0, "errors": 0}

    def case(host: str, check: str, failure: str | None = None, skipped: str | None = None, text: str = ""):
        element = ET.SubElement(suite, "testcase", classname=f"sparkfleet.{host}", name=check)
        counts["tests"] += 1
        if failure is not None:
            ET.SubElement(element, "failure", message=failure[:500]).text = failure
            counts["failures"] += 1
        elif skipped is not None:
            ET.SubElement(element, "skipped", message=skipped[:500])
            counts["skipped"] += 1
        if text:
            ET.SubElement(element, "system-out").text = text

    for name, h in report["hosts"].items():
        if not h["reachable"]:
            case(name, "reachable", failure=f"unreachable: {h['unreachable']}")
            continue
        run_failure = "; ".join(f"{f['task']}: {f['msg']}" for f in h["failures"])
        case(name, "run", failure=run_failure or None,
             text=f"changed={h['counts'].get('changed', 0)} ok={h['counts'].get('ok', 0)}")
        case(name, "platform", failure=None if h["platform"] == "spark" or h.get("override")
             else f"platform {h['platform']}",
             text=f"{h.get('override') or h['platform']}{' (simulated)' if h['simulated'] else ''}")
        if h["runtime"] is not None:
            case(name, "runtime", failure=None if h["runtime"]["registered"] else
                 f"nvidia runtime not registered; Docker's runtimes: {', '.join(h['runtime']['runtimes'])}")
        for image in h["images"]:
            case(name, f"image {image['name']}", text=f"{image['ref']} ({image.get('source')})")
        if h["venv"]:
            case(name, "venv", failure=None if h["venv"]["status"] == "verified" else f"venv {h['venv']['status']}",
                 text=f"{h['venv']['path']} {h['venv']['line']} [{h['venv']['verified_by']}]")
        verification = h["verification"]
        if verification:
            lines = "\n".join(verification["lines"])
            if verification["verdict"] == "failed":
                case(name, "verification", failure="; ".join(verification["failures"]) or "failed", text=lines)
            elif verification["verdict"] != "ok":
                case(name, "verification", skipped=f"{verification['verdict']}: {lines}")
            else:
                case(name, "verification", text=lines)
            case(name, "abi", failure="; ".join(h["abi_findings"]) or None)
    for key, value in counts.items():
        suite.set(key, str(value))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def write(report: dict, directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"json": directory / "report.json", "markdown": directory / "report.md",
             "junit": directory / "report.junit.xml"}
    texts = {"json": json.dumps(report, indent=2, sort_keys=False) + "\n", "markdown": markdown(report),
             "junit": junit(report)}
    for kind, path in paths.items():
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(texts[kind], encoding="utf-8")
        os.replace(tmp, path)
    return paths
