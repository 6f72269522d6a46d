"""Running a command: its playbook through ansible-runner under the inventory's lock, then the report, the
screen's summary and the exit code. The doctor's and the lab's own steps are in doctor.py and lab.py.
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import json
import os
import sys
from pathlib import Path

from rich.console import Console

from sparkfleet import __version__, inventory_copy, report, reportdir, selection, variables
from sparkfleet.ansible_options import AnsibleOptions, private_files
from sparkfleet.arguments import REPORT_ROOT
from sparkfleet.collection_home import PROJECT_DIR, collection_module
from sparkfleet.command_table import CONFIGURED, Command, extra_vars
from sparkfleet.events import Fleet
from sparkfleet.inventory_copy import InventoryCopy
from sparkfleet.outcome import EXIT_BAD_INPUT, EXIT_BUSY, EXIT_OK
from sparkfleet.run_lock import InventoryBusy, run_lock
from sparkfleet.runner import Run, ansible_config, temporary_base, temporary_directory_problem
from sparkfleet.terminal import make_console, print_summary


def error(text: str) -> None:
    print(f"sparkfleet: {text}", file=sys.stderr)


def ansible_cmdline(args: argparse.Namespace) -> list[str]:
    """The pass-through options as typed (the run itself moves inline -e values into files)."""
    return AnsibleOptions.from_args(args).argv() + [
        word for extra in args.extra_vars or [] for word in ("--extra-vars", extra)]


def ask_passwords(options: AnsibleOptions) -> dict[str, str]:
    """Ask on the terminal for each password ansible-playbook will prompt for; map its prompt to the answer.

    The answers go to ansible-runner in memory, which types them at
    ansible-playbook's own prompts: never argv, a file or an artifact.
    """
    return {prompt: getpass.getpass(asked, stream=sys.stderr) for asked, prompt in options.prompts()}


def report_dir_for(command: str, chosen: Path | None) -> Path:
    """The run's report directory, claimed as sparkfleet's own (reportdir.py); reportdir.Refused if it cannot be."""
    with private_files():
        return reportdir.chosen(chosen) if chosen else reportdir.default(command, REPORT_ROOT)


def point_latest(directory: Path) -> None:
    if directory.parent.resolve() != REPORT_ROOT.resolve():
        return
    link = REPORT_ROOT / "latest"
    tmp = REPORT_ROOT / ".latest.tmp"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(directory.name)
    os.replace(tmp, link)


def resolve_inventory(record: Command, args: argparse.Namespace, config) -> str | None:
    """The inventory a run reads, as ansible-playbook finds it: -i, else ANSIBLE_INVENTORY, else the ansible.cfg in
    effect; a command that can run without one (the controller's checks, the doctor) then this machine. None: the
    command needs one and nothing names it."""
    if args.inventory:
        return args.inventory
    if record.inventory_default in (None, CONFIGURED):
        return config.inventory or ("localhost," if record.inventory_default == CONFIGURED else None)
    return record.inventory_default


def problems_before_run(record: Command, args: argparse.Namespace, inventory: InventoryCopy, config,
                        notes: list[str] | None = None) -> list[tuple[str, list]]:
    """What makes the run bad input, found before anything runs, as (heading, one line each) groups: variables
    named or typed wrong, a broken image lock, a --limit or a tag that matches nothing. What is not bad input but
    should change (a variable set under its old name) is added to `notes`. Everything is read from the inventory's
    copy; what is said names the inventory as typed."""
    found = _problems(args, inventory.source, config, notes)
    if notes:
        notes[:] = [inventory.shown(note) for note in notes]
    return [(heading, [inventory.shown(line) for line in lines]) for heading, lines in found]


def _problems(args: argparse.Namespace, inventory: str, config, notes: list[str] | None) -> list[tuple[str, list]]:
    listing = selection.list_inventory(inventory, config.env)
    inventoried = variables.inventory_values(inventory, config.env, listing)
    values = {**inventoried, **variables.extra_values(args.extra_vars)}
    found = []
    misnamed = variables.unknown({source: set(named) for source, named in values.items()})
    if notes is not None:
        old = {name for named in values.values() for name in named} & set(variables.renamed())
        notes += variables.renamed_in_use({source: set(named) for source, named in values.items()},
                                          variables.files_setting(inventory, old) if inventoried and old else None)
    if misnamed:
        found.append(("these variables look like sparkfleet's but are not (nothing was run; fix each name, or "
                      "remove it, then run again)", misnamed))
    mistyped = variables.mistyped(values, variables.files_setting(inventory, {n for v in values.values() for n in v})
                                  if inventoried else None)
    broken_lock = variables.lock_problems(inventoried, inventory) if inventoried else []
    # What the lock and the derived recipes name that no catalog has (once the lock itself reads)
    stray = variables.catalog_problems(inventoried, inventory) if inventoried and not broken_lock else []
    if mistyped or broken_lock or stray:
        said = [p if "sparkfleet pin" in p else f"{p} (sparkfleet pin -i INVENTORY writes the lock)"
                for p in broken_lock]
        found.append(("these values cannot be used (nothing was run; fix each, then run again)",
                      mistyped + said + stray))
    selected = selection.limit_problems(args.limit, listing, inventory)
    selected += selection.tag_problems(args.tags, getattr(args, "skip_tags", None))
    if selected:
        found.append(("this selection matches nothing (nothing was run; fix it, then run again)", selected))
    return found


def refused(record: Command, args: argparse.Namespace, console: Console, inventory: str | None, config,
            groups: list[tuple[str, list]], code: int = EXIT_BAD_INPUT) -> int:
    """A run refused before it started: each problem on stderr, and the report every run writes (its errors, a
    failing JUnit case), reports/latest pointing at it, so a CI job that reads the report sees the failure."""
    for heading, lines in groups:
        error(f"{heading}:\n  " + "\n  ".join(lines) if lines else heading)
    if code == EXIT_BUSY and args.report_dir:
        error(f"no report was written into {args.report_dir}: the run that holds the inventory may be writing there")
        return code
    try:
        directory = report_dir_for(record.name.replace("-", "_"), args.report_dir)
    except (reportdir.Refused, OSError) as exc:
        error(f"no report was written: {exc}")
        return code
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()
    meta = {"playbook": record.playbook, "inventory": str(inventory or ""), "limit": args.limit,
            "check": bool(args.check), "started_at": now, "finished_at": now, "duration_s": 0.0, "status": "failed",
            "exit_code": code}
    errors = [line for heading, lines in groups for line in (lines or [heading])]
    data = report.build(Fleet(), {"command": record.name.replace("-", " "), **meta, "argv": typed_argv(),
                                  "versions": versions(config), "errors": errors})
    paths = report.write(data, directory)
    point_latest(directory)
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2))
    print_summary(data, paths, console)
    return code


def run_command(record: Command, args: argparse.Namespace, console: Console) -> int:
    """The record's playbook, run (command_table.py says what each command adds)."""
    if getattr(args, "json", False):
        console = make_console(stderr=True, no_color=args.no_color)
    try:
        config = ansible_config()
    except ValueError as exc:
        return refused(record, args, console, args.inventory, None, [(str(exc), [])])
    inventory = resolve_inventory(record, args, config)
    if inventory is None:
        return refused(record, args, console, None, config, [(
            f"no inventory: sparkfleet {' '.join(record.words)} runs on the hosts of one; name it with -i "
            "INVENTORY, or set ANSIBLE_INVENTORY, or inventory = ... under [defaults] in your ansible.cfg "
            f"(in use: {config.described})", [])])
    args = argparse.Namespace(**{**vars(args), "inventory": inventory})
    if not selection.is_host_list(inventory) and not Path(inventory).exists():
        return refused(record, args, console, inventory, config, [(
            f"inventory {inventory} not found; expected a directory such as inventory/example (copy it to "
            "inventory/<yours> and list your Sparks there).", [])])
    unusable = temporary_directory_problem()
    if unusable:
        return refused(record, args, console, inventory, config, [
            ("the temporary directory cannot be used (nothing was run)", [unusable])])
    trusted = collection_module("common._trusted")
    try:
        # The files Ansible reads or runs by the options' say (a vault password script runs as this user).
        for what, path in AnsibleOptions.from_args(args).files():
            trusted.check_path(path, what, "file")
    except trusted.Untrusted as exc:
        return refused(record, args, console, inventory, config, [
            ("a file the options name is missing, or another user can change it (nothing was run)", [str(exc)])])
    try:
        # Judged once and copied: Ansible reads the copy alone, never the user's files by name again.
        judged = inventory_copy.copy(inventory, temporary_base())
    except trusted.Untrusted as exc:
        return refused(record, args, console, inventory, config, [
            ("the inventory, or a folder on its way, can be changed by another user (nothing was run)", [str(exc)])])
    try:
        return _run_judged(record, args, console, config, judged)
    finally:
        judged.remove()


def _run_judged(record: Command, args: argparse.Namespace, console: Console, config,
                judged: InventoryCopy) -> int:
    command, playbook, tags, inventory = record.name, record.playbook, record.tags, judged.typed
    as_json = getattr(args, "json", False)
    notes: list[str] = []
    found = problems_before_run(record, args, judged, config, notes)
    if found:
        return refused(record, args, console, inventory, config, found)
    if record.prepare:
        args = record.prepare(args)
    args = argparse.Namespace(**{**vars(args), "extra_vars": extra_vars(record, args)})
    options = AnsibleOptions.from_args(args, tags)
    run = Run(playbook=playbook, inventory=inventory, report_dir=Path("."), options=options,
              extra_vars=args.extra_vars, passwords=ask_passwords(options),
              live=False if args.plain or as_json else None, console=console, fast=getattr(args, "fast", False),
              config=config, judged=judged)
    fleet = Fleet()
    fleet.warnings += notes  # in the summary and the report, with Ansible's own warnings
    try:
        # the controller's checks write nothing into the inventory: they need not wait for a provision
        with run_lock("localhost," if record.controller else inventory, command.replace("-", " ")):
            # Claimed once the inventory is this run's: a run refused as busy touches no report directory.
            try:
                directory = report_dir_for(command.replace("-", "_"), args.report_dir)
            except (reportdir.Refused, OSError) as exc:
                error(f"{exc}" if isinstance(exc, reportdir.Refused) else f"cannot make the report directory: {exc}")
                return EXIT_BAD_INPUT
            run.report_dir = directory.resolve()
            outcome, meta = run.execute(fleet)
            if outcome.exit_code() == EXIT_OK and fleet.targeted_nothing():
                groups = selection.list_inventory(judged.source, config.env).populated_groups()
                outcome.errors = [f"nothing to do: no host of inventory {inventory} matches "
                                  f"{', '.join(repr(p) for p in dict.fromkeys(fleet.unmatched))}"
                                  + (f" (with --limit {options.limit})" if options.limit else "")
                                  + f"; the inventory's groups: {', '.join(groups) or 'none'}. List your Sparks "
                                  "under 'sparks' (see inventory/example)"]
                outcome.nothing_targeted = True
                meta.update(status="failed", exit_code=outcome.exit_code())
    except InventoryBusy as exc:
        return refused(record, args, console, inventory, config, [(str(exc), [])], code=EXIT_BUSY)
    except ValueError as exc:
        return refused(record, args, console, inventory, config, [(str(exc), [])])
    if outcome.exit_code() == EXIT_BAD_INPUT:
        error("; ".join(outcome.errors) if outcome.nothing_targeted else "Ansible stopped on bad input: "
              + ("; ".join(outcome.errors) or f"ansible-playbook exited {outcome.rc}")
              + f". Expected an inventory, variables and a vault password Ansible can read (check the inventory "
              f"with: ansible-inventory -i {inventory} --graph).")
    data = report.build(fleet, {"command": command.replace("-", " "), **meta, "argv": typed_argv(),
                                "versions": versions(config), "errors": outcome.errors})
    if record.redact:
        data = record.redact(data, fleet, args)
    paths = report.write(data, directory)
    point_latest(directory)
    if as_json:
        print(json.dumps(data, indent=2))
    if record.files:
        paths.update(record.files(fleet, directory, console))
    for line in record.lines(fleet, data):
        console.print(line, highlight=False, markup=False)
    for line in collection_module("cluster._verdict").verdict_lines(data.get("clusters") or []):
        console.print(line, highlight=False, markup=False, style="red" if line.startswith("  FAILED") else None)
    print_summary(data, paths, console, diffs=options.diff)
    return outcome.exit_code()


def typed_argv() -> list[str]:
    """The command as typed, each inline -e value left out (it may hold a secret; an @file only names one)."""
    hidden = "<inline -e, not recorded>"
    out: list[str] = [Path(sys.argv[0]).name]
    for word in sys.argv[1:]:
        if out[-1] in ("-e", "--extra-vars") and not word.startswith("@"):
            word = hidden
        elif word.startswith("--extra-vars=") and not word.startswith("--extra-vars=@"):
            word = f"--extra-vars={hidden}"
        elif word.startswith("-e") and word != "-e" and not word.startswith("-e@") and not word.startswith("--"):
            word = f"-e{hidden}"
        out.append(word)
    return out


def ansible_core_version() -> str | None:
    try:
        from ansible.release import __version__ as core
    except ImportError:
        return None
    return core


def versions(config) -> dict:
    return {"sparkfleet": __version__, "ansible_core": ansible_core_version(), "collection": str(PROJECT_DIR),
            "config_file": str(config.path) if config else None}
