"""sparkfleet doctor's own steps: this machine when no inventory is given, the hostnames in its report.json
replaced as in its doctor.md, and doctor.md and doctor.json written from each host's report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from sparkfleet import reportdir
from sparkfleet.ansible_options import private_files
from sparkfleet.collection_home import collection_module
from sparkfleet.events import Fleet


def doctor_args(args: argparse.Namespace) -> argparse.Namespace:
    """On this machine when no inventory is given; the hostname choice as an extra variable."""
    extra = list(args.extra_vars)
    if args.inventory == "localhost,":
        extra.append('{"doctor_hosts": "localhost"}')
        args = argparse.Namespace(**{**vars(args), "connection": args.connection or "local"})
    if args.keep_hostnames:
        extra.append('{"doctor_keep_hostnames": true}')
    return argparse.Namespace(**{**vars(args), "extra_vars": extra})


def redacted(data: dict, fleet: Fleet) -> dict:
    """The doctor's report.json as its doctor.md has it: each host's name replaced by its label (host-1, ...),
    a host that failed or was unreachable (no doctor's report of its own) by the next free label; and, whatever
    the hosts' outcome, addresses and users' homes in paths left out (module_utils/host/_doctor.py's scrub)."""
    doctor = collection_module("host._doctor")
    labels = {name: (host.facts.get("spark_doctor") or {}).get("host") for name, host in fleet.hosts.items()
              if name != "localhost" and host is not fleet.controller}
    taken = {int(label.rpartition("-")[2]) for label in labels.values()
             if label and label.startswith("host-") and label.rpartition("-")[2].isdigit()}
    free = (n for n in range(1, len(labels) + len(taken) + 2) if n not in taken)
    for name in sorted(labels):
        labels[name] = labels[name] or f"host-{next(free)}"
    for name in sorted(labels, key=len, reverse=True):  # a name inside another is replaced after it
        data = doctor.redact(data, [name], labels[name])
    return doctor.scrub(data, [str(Path.home())])


def write(fleet: Fleet, directory: Path, console: Console) -> dict[str, Path]:
    """doctor.md and doctor.json from each host's report (the controller's own when it ran on this machine)."""
    hosts = [h for _, h in sorted(fleet.hosts.items()) if h is not fleet.controller]
    reports = [h.facts["spark_doctor"] for h in [fleet.controller, *hosts] if "spark_doctor" in h.facts]
    if not reports:
        return {}
    text = "\n".join(r["markdown"] for r in reports)
    paths = {"doctor markdown": directory / "doctor.md", "doctor json": directory / "doctor.json"}
    with private_files():
        reportdir.write_text(paths["doctor markdown"], text)
        reportdir.write_text(paths["doctor json"], json.dumps([{k: v for k, v in r.items() if k != "markdown"}
                                                               for r in reports], indent=2) + "\n")
    console.print(text, highlight=False, markup=False, soft_wrap=True)  # Markdown to paste: never re-wrapped
    return paths
