"""sparkfleet lab: the test bed's services and lab hosts (testbed/, in a checkout), then pin and provision."""

from __future__ import annotations

import argparse
import os
import subprocess

from rich.console import Console

from sparkfleet.collection_home import PROJECT_DIR
from sparkfleet.command_table import named
from sparkfleet.commands import error, run_command
from sparkfleet.outcome import EXIT_BAD_INPUT, EXIT_FAILED_HOSTS, EXIT_OK


def lab(args: argparse.Namespace, console: Console) -> int:
    testbed = PROJECT_DIR / "testbed"
    if not testbed.is_dir():
        error(f"sparkfleet lab needs a checkout of the sparkfleet repository (its testbed/); this sparkfleet runs "
              f"from {PROJECT_DIR}. Clone the repository and run `make lab` there.")
        return EXIT_BAD_INPUT
    if args.lab_command == "down":
        for script in (["lab.sh", "down"], ["cluster.sh", "down"], ["aptrepo.sh", "stop"], ["registry.sh", "stop"],
                       ["pyindex.sh", "stop"]):
            subprocess.run([str(testbed / script[0]), *script[1:]], check=False)
        return EXIT_OK
    if args.hosts < 1:
        error(f"--hosts is {args.hosts}; expected 1 or more")
        return EXIT_BAD_INPUT
    for script in (["aptrepo.sh", "start"], ["registry.sh", "start"], ["pyindex.sh", "start"],
                   ["lab.sh", "up", str(args.hosts)], ["standins.sh"]):
        if subprocess.run([str(testbed / script[0]), *script[1:]], check=False).returncode != 0:
            error(f"testbed/{' '.join(script)} failed (output above)")
            return EXIT_FAILED_HOSTS
    # The inventory testbed/lab.sh wrote: LAB_INVENTORY names another, for a lab beside the user's.
    inventory = os.environ.get("LAB_INVENTORY") or str(PROJECT_DIR / "inventory" / "lab")
    base = argparse.Namespace(inventory=inventory, limit=None, check=False, diff=False, tags=None, skip_tags=None,
                              extra_vars=[], plain=args.plain, report_dir=None, no_color=args.no_color)
    pinned = run_command(named("pin"), argparse.Namespace(**{**vars(base), "report_dir": None}), console)
    if pinned != EXIT_OK:
        return pinned
    return run_command(named("provision"), argparse.Namespace(**{**vars(base), "report_dir": args.report_dir}), console)
