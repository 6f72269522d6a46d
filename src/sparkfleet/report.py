"""The run's report: JSON (the schema in report-schema.json, the source of the others), Markdown, JUnit XML.

Built from what events.Fleet read from the runner's events; never from the
runner's artifacts or the inventory, so a secret that Ansible hid (no_log)
cannot reach a report.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from sparkfleet import reportdir
from sparkfleet.ansible_options import private_files
from sparkfleet.collection_home import collection_module
from sparkfleet.events import Fleet, Host

table = collection_module("verification._fleet_table")
verification = collection_module("verification._verification")

SCHEMA = "sparkfleet-report/1"
SCHEMA_FILE = Path(__file__).with_name("report-schema.json")


def host_report(host: Host, refresh: dict | None = None, rollout: str | None = None, check: bool = False) -> dict:
    """The host's entry; in a refresh (refresh: the fleet's plan), where it was in the rollout (the run's last
    play, serial: its batch) and what it runs now, or under --check what it would move."""
    entry = None if not refresh else table.refresh_entry(
        host.facts.get("spark_images_pinned") or [], refresh.get("diff") or [], host.batches.get(rollout or ""),
        host.facts.get("spark_images_refresh_failure"), check=check)
    found = table.host_entry(host.facts, unreachable=host.unreachable, counts=host.counts, failures=host.failures,
                             refresh=entry, changes=host.changes)
    # platform: the host class under its old key, deprecated (a platform is an OCI platform), removed in 1.0.0.
    return {**found, "platform": found["host_class"]}


def with_history(entry: dict, check: bool) -> dict:
    """'converged' means nothing changed (the README's word): a host whose verification state stayed the same
    while a task changed it (a launcher repaired by hand) is 'updated', or under --check 'would change'."""
    if entry.get("history") == "converged" and (entry.get("counts") or {}).get("changed"):
        return {**entry, "history": "would change" if check else "updated"}
    return entry


def build(fleet: Fleet, meta: dict[str, Any]) -> dict:
    refresh = fleet.controller_facts.get("spark_images_refresh")
    check = bool(meta.get("check"))
    # Under --check every host of a refresh is told what it would move; otherwise the hosts of a rollout.
    moved = refresh and (check or any(d.get("changed") for d in refresh.get("diff") or []))
    return {
        "schema": SCHEMA,
        **meta,
        # (the controller, which wrote the lock, is no host of the rollout)
        "hosts": {name: with_history(host_report(host, refresh if moved and host is not fleet.controller else None,
                                                 fleet.play, check), check)
                  for name, host in sorted(fleet.hosts.items())},
        "refresh": ({"diff": [{k: d.get(k) for k in ("name", "tag", "old", "new", "changed", "line")}
                              for d in refresh.get("diff", [])]} if refresh else None),
        "warnings": list(fleet.warnings) + (refresh_warnings(fleet) if check and refresh else []),
        "clusters": fleet.controller_facts.get("spark_cluster_verdicts"),
        "proposal": fleet.controller_facts.get("spark_matrix_proposal"),
    }


def refresh_warnings(fleet: Fleet) -> list[str]:
    """refresh --check: each host on which the rollout would fail, as the check play read it (playbooks/refresh.yml),
    in the collection's one sentence (_verification.refresh_blocker)."""
    found = [verification.refresh_blocker(name, host.facts.get("spark_container_runtime_registered"))
             for name, host in sorted(fleet.hosts.items()) if host is not fleet.controller]
    return [line for line in found if line]


def change_lines(change: dict, check: bool) -> list[str]:
    """What one change of a host's did, as a person reads it on the screen, in report.md and in its JUnit case:
    'changed: TASK (PATH)', then each line the task said it moved (old -> new)."""
    head = f"{'would change' if check else 'changed'}: {change['task']}" + (
        f" ({change['path']})" if change.get("path") else "")
    return [head] + [f"  {line}" for line in change.get("lines") or []]


def host_ok(entry: dict) -> bool:
    return entry["reachable"] and not entry["failures"] and entry["counts"].get("failed", 0) == 0


def summary_rows(report: dict) -> list[list[str]]:
    """The per-host summary as rows of text (also the Markdown table): the collection's fleet table."""
    return [table.row(name, entry) for name, entry in report["hosts"].items()]


HEADERS = list(table.HEADERS)


def target_rows(report: dict) -> list[list[str]]:
    """One row per image and venv of every host (the table after the hosts'): what each check found for it."""
    return [row for name, entry in report["hosts"].items() for row in table.target_rows(name, entry)]


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
    if report.get("errors"):
        out += ["## Errors", ""] + [f"- {e}" for e in report["errors"]] + [""]
    if report.get("warnings"):
        out += ["## Warnings", ""] + [f"- {w}" for w in report["warnings"]] + [""]
    out += cluster_markdown(report.get("clusters"))
    out += ["## Hosts", "", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    out += ["| " + " | ".join(c.replace("|", "\\|").replace("\n", "<br>") for c in row) + " |"
            for row in summary_rows(report)]
    rows = target_rows(report)
    if rows:  # each image and venv on a row of its own: what each check found for it
        out += ["", "## Each image and venv", "", "| " + " | ".join(table.TARGET_HEADERS) + " |",
                "|" + "---|" * len(table.TARGET_HEADERS)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    for name, h in report["hosts"].items():
        details = []
        if h.get("refresh"):
            r = h["refresh"]
            details.append(f"refresh: {table.cell(name, h, 'history')}")
            details += [f"image {i['name']}: `{i['old']}` -> `{i['new']}`, runs `{i['now']}`" for i in r["images"]]
        details += list((h["verification"] or {}).get("lines", []))
        details += [f"FAILED {f['task']}: {f['msg']}" for f in h["failures"]]
        if h["unreachable"]:
            details.append(f"UNREACHABLE: {h['unreachable']}")
        changes = h.get("changes") or []
        details += [f"{'would change' if report.get('check') else 'changed'}: {c['task']}"
                    + (f" (`{c['path']}`)" if c.get("path") else "")
                    + "".join(f"\n  - {line}" for line in c.get("lines") or []) for c in changes]
        if details:
            out += ["", f"### {name}", ""] + [f"- {d}" for d in details]
        diffs = [c for c in changes if c["diff"]]
        if diffs:
            fence = "~~~~" if any("```" in c["diff"] for c in diffs) else "```"
            out += ["", fence + "diff"]
            for c in diffs:
                out += [f"# {c['task']}", c["diff"]]
            out.append(fence)
    return "\n".join(out) + "\n"


def cluster_markdown(clusters: list[dict] | None) -> list[str]:
    """Each cluster: its verdict, rails and bandwidths, then every check with what was found and expected, and
    for a failure its likely cause and the fix."""
    out = []
    for verdict in clusters or []:
        out += [f"## Cluster {verdict['cluster']}: {verdict['verdict']}", "",
                f"- nodes: {', '.join(verdict['nodes'])}",
                "- rails: " + ", ".join(f"{r['interface']} ({r['hca'] or 'no RDMA device named'}, "
                                        f"{r['subnet'] or 'link-local'})" for r in verdict["rails"])]
        for kind, values in verdict["bandwidth"].items():
            unit = "GB/s bus bandwidth" if kind == "nccl" else "Gb/s"
            out += [f"- {kind}: " + ", ".join(f"{v['where']} {v['value']} {unit}" for v in values)] if values else []
        out += ["", "| check | where | status | found | expected | cause, fix or why |", "|---|---|---|---|---|---|"]
        for c in verdict["checks"]:
            note = f"{c['cause']}; fix: {c['fix']}" if c["status"] == "failed" else c.get("why") or ""
            cells = [c["check"], c["where"], c["status"], str(c.get("found") or ""), str(c.get("expected") or ""), note]
            out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        out.append("")
    return out


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
        said = [line for change in h.get("changes") or [] for line in change_lines(change, report.get("check"))]
        case(name, "run", failure=run_failure or None,
             text="\n".join([f"changed={h['counts'].get('changed', 0)} ok={h['counts'].get('ok', 0)}", *said]))
        if h.get("refresh"):
            case(name, "refresh", failure=h["refresh_failure"] if h["refresh"]["outcome"] == "rolled back" else None,
                 text=f"batch {h['refresh']['batch']}: {h['refresh']['outcome']}")
        if h["host_class"] is not None:  # None: a controller-side play, no class gathered
            case(name, "class", failure=None if h["host_class"] == "spark" or h.get("override")
                 else f"class {h['host_class']}",
                 text=f"{h.get('override') or h['host_class']}{' (simulated)' if h['simulated'] else ''}")
        if h["runtime"] is not None:
            case(name, "runtime", failure=None if h["runtime"]["registered"] else
                 f"nvidia runtime not registered; Docker's runtimes: {', '.join(h['runtime']['runtimes'])}")
        for image in h["images"]:
            case(name, f"image {image['name']}", text=f"{image['ref']} ({image.get('source')})")
        if h["venv"]:
            status = h["venv"]["status"]
            case(name, "venv", failure=None if status in ("verified", "simulated") else f"venv {status}",
                 skipped="simulated host: the venv was checked with the test bed's stand-in torch"
                 if status == "simulated" else None,
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
    for verdict in report.get("clusters") or []:
        for c in verdict["checks"]:
            detail = f"found {c.get('found')}, expected {c.get('expected')}"
            case(f"cluster.{verdict['cluster']}", f"{c['check']} {c['where']}",
                 failure=f"{detail}; likely: {c['cause']}; fix: {c['fix']}" if c["status"] == "failed" else None,
                 skipped=f"{c['status']}: {c.get('why')}" if c["status"] in ("not run", "not judged") else None,
                 text=detail)
    if report["exit_code"] != 0 and not counts["failures"]:
        # A run that failed without a failing host (bad input, nothing targeted, cancelled) fails here.
        case("sparkfleet", "run", failure="; ".join(report.get("errors") or [])
             or f"{report['status']} (exit {report['exit_code']})")
    for key, value in counts.items():
        suite.set(key, str(value))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def write(report: dict, directory: Path) -> dict[str, Path]:
    with private_files():
        return _write(report, directory)


def _write(report: dict, directory: Path) -> dict[str, Path]:
    paths = {"json": directory / "report.json", "markdown": directory / "report.md",
             "junit": directory / "report.junit.xml"}
    texts = {"json": json.dumps(report, indent=2, sort_keys=False) + "\n", "markdown": markdown(report),
             "junit": junit(report)}
    for kind, path in paths.items():
        reportdir.write_text(path, texts[kind])
    return paths
