"""sparkfleet's command line: the commands, what each runs, their options, help and examples (argparse).

Nothing here runs anything: commands.py runs what the parser returns.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path

import shtab

from sparkfleet.command_table import COMMANDS, CONFIGURED, GROUPS, Command
from sparkfleet.outcome import EXIT_BAD_INPUT

# Where reports go by default; reports/latest points at the last one.
REPORT_ROOT = Path("reports")
EXIT_CODES = ("Exit codes: 0 all ok, 2 a host failed, 3 a host was unreachable, 4 bad input (usage, inventory, "
              "variables, nothing targeted), 5 another sparkfleet run holds the inventory, 130 cancelled (Ctrl-C, "
              "SIGTERM, SIGHUP).")


class HelpText(argparse.HelpFormatter):
    """Paragraphs wrapped to the terminal; indented lines (the examples) kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(line if line.startswith("  ") or not line else
                         textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent)
                         for line in text.splitlines())


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors as bad input (exit 4): exit 2 means a host failed."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def epilog(command: Command) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in command.examples) + "\n\n" + EXIT_CODES


def ansible_options(parser: argparse.ArgumentParser, inventory_default: str | None = None) -> None:
    # .complete: what shell completion offers after the option (shtab): paths, where a path is asked for.
    # Not required: without it, the inventory ANSIBLE_INVENTORY or the ansible.cfg in effect names (as for
    # ansible-playbook); commands.resolve_inventory says when nothing names one.
    default = inventory_default or "the inventory ANSIBLE_INVENTORY or your ansible.cfg names"
    parser.add_argument("-i", "--inventory", default=None if inventory_default == CONFIGURED else inventory_default,
                        help=f"inventory directory or file, e.g. inventory/example (default: {default})"
                        ).complete = shtab.FILE
    parser.add_argument("-l", "--limit", help="only these hosts or groups (Ansible pattern)")
    parser.add_argument("-C", "--check", action="store_true", help="change nothing; say what would change")
    parser.add_argument("-D", "--diff", action="store_true", help="show file changes")
    parser.add_argument("-t", "--tags", help="only roles/stages with these tags, comma-separated")
    parser.add_argument("--skip-tags", help="skip roles/stages with these tags, comma-separated")
    parser.add_argument("-u", "--user", help="connect as this user")
    parser.add_argument("-c", "--connection", help="connection type (ssh, local, ...)")
    parser.add_argument("-b", "--become", action="store_true", help="run operations with become (sudo)")
    parser.add_argument("-K", "--ask-become-pass", action="store_true",
                        help="ask for the become (sudo) password on the terminal")
    parser.add_argument("--ask-vault-pass", action="store_true", help="ask for the vault password on the terminal")
    parser.add_argument("--vault-id", action="append", dest="vault_ids", default=[], metavar="ID",
                        help="a vault identity (label@source, source a file, a script or 'prompt'); repeatable")
    parser.add_argument("--vault-password-file", metavar="FILE", help="the vault password file").complete = shtab.FILE
    parser.add_argument("--private-key", metavar="FILE", help="the SSH private key file").complete = shtab.FILE
    parser.add_argument("-f", "--forks", type=int, help="how many hosts at once")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more output (-vvv for more)")
    parser.add_argument("-e", "--extra-vars", action="append", metavar="VARS", default=[],
                        help="extra variables (key=value, YAML/JSON, or @file); repeatable; inline values are "
                             "handed to Ansible in a private file, never on a command line")
    parser.add_argument("--report-dir", type=Path,
                        help="where this run's report goes (default reports/<time>-<command>, and reports/latest "
                             "points at it)").complete = shtab.DIRECTORY
    parser.add_argument("--plain", action="store_true", help="no live display: one line per task")
    parser.add_argument("--fast", action="store_true",
                        help="run under Mitogen (pip install 'sparkfleet[fast]'): one Python per host for the whole "
                             "run, several times faster on a converged fleet; hosts reached over ssh, local or "
                             "docker connections")
    parser.add_argument("--json", action="store_true",
                        help="print the report (report.json) on stdout; progress and the summary go to stderr")
    parser.add_argument("--no-color", action="store_true", help="no colour (also when NO_COLOR is set)")


def add_command(subparsers, command: Command) -> None:
    """The record's parser: its help, what it runs, its examples, the options every run has and its own."""
    parser = subparsers.add_parser(command.words[-1], help=command.short, formatter_class=HelpText,
                                   description=f"{command.description} Runs {command.runs}.", epilog=epilog(command))
    ansible_options(parser, inventory_default=command.inventory_default)
    for option in command.options:
        parser.add_argument(*option.flags, **option.settings)
    parser.set_defaults(record=command)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="sparkfleet", formatter_class=HelpText,
        description="Take DGX Spark machines to a verified, reproducible ML environment, and prove it. "
                    "Each command runs one of the project's playbooks through ansible-runner (plain "
                    "ansible-playbook runs the same playbooks), shows live progress, ends with a summary table "
                    "per host and writes report.json, report.md and report.junit.xml.",
        epilog="Shell completion: sparkfleet completion bash > /etc/bash_completion.d/sparkfleet\n\n" + EXIT_CODES,
    )
    parser.add_argument("--version", action="version", version=argparse.SUPPRESS,
                        help="show sparkfleet's, ansible-core's and the collection's versions and the ansible.cfg "
                             "in use, and exit")
    parser.set_defaults(record=None)  # a command of the table sets its record; lab, report and completion none
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    groups = {}
    for command in COMMANDS:
        where = sub
        if len(command.words) == 2:
            if command.words[0] not in GROUPS:  # the table's own mistake: say where to mend it
                raise LookupError(f"sparkfleet {' '.join(command.words)} is in the group {command.words[0]!r}, "
                                  "which has no line in GROUPS of src/sparkfleet/command_table.py: add one (its "
                                  "line in --help and its description)")
            if command.words[0] not in groups:
                short, description = GROUPS[command.words[0]]
                groups[command.words[0]] = sub.add_parser(command.words[0], help=short, description=description) \
                    .add_subparsers(dest=f"{command.words[0]}_command", required=True, metavar="SUBCOMMAND")
            where = groups[command.words[0]]
        add_command(where, command)
    lab = sub.add_parser("lab", help="the test bed's lab of emulated Sparks",
                         description="The lab: emulated aarch64 hosts standing in for Sparks, with the test bed's "
                                     "registry, apt repository and package index (testbed/). 'up' starts them and "
                                     "provisions them with pin + provision; 'down' removes them. LAB_PREFIX (the "
                                     "hosts' names) and LAB_INVENTORY (its directory) run a lab beside another.")
    lab_sub = lab.add_subparsers(dest="lab_command", required=True, metavar="SUBCOMMAND")
    up = lab_sub.add_parser("up", help="start N lab hosts, pin, provision, report",
                            description="Start the test bed's services and N lab hosts, pin the lab registry's "
                                        "stand-in images, then provision (site.yml) with the summary and reports.")
    up.add_argument("-n", "--hosts", type=int, default=int(os.environ.get("LAB_HOSTS", "2")),
                    help="number of lab hosts (default $LAB_HOSTS or 2)")
    up.add_argument("--report-dir", type=Path, help="where the provisioning report goes")
    up.add_argument("--plain", action="store_true", help="no live display: one line per task")
    up.add_argument("--no-color", action="store_true", help="no colour (also when NO_COLOR is set)")
    lab_sub.add_parser("down", help="remove the lab hosts and stop the test bed's services")
    show = sub.add_parser("report", help="show a run's report again",
                          description="Print the summary table of a run's report.json (default reports/latest) "
                                      "and rewrite its Markdown and JUnit XML from it.")
    show.add_argument("path", nargs="?", type=Path, default=REPORT_ROOT / "latest",
                      help="a report directory or its report.json (default reports/latest)").complete = shtab.FILE
    show.add_argument("--no-color", action="store_true", help="no colour (also when NO_COLOR is set)")
    show.add_argument("--metrics", type=Path, metavar="FILE",
                      help="write the report as Prometheus metrics to FILE instead (for node_exporter's textfile "
                           "collector, e.g. /var/lib/prometheus/node-exporter/sparkfleet.prom; monitoring/ holds "
                           "the alert rules)").complete = shtab.FILE
    add_watch(sub)
    completion = sub.add_parser("completion", help="print a shell completion script",
                                description="Print the completion script for a shell, e.g. "
                                            "sparkfleet completion bash > /etc/bash_completion.d/sparkfleet")
    completion.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    return parser


def add_watch(sub) -> None:
    """sparkfleet watch install|run|status|remove (watch.py)."""
    from sparkfleet import watch

    group = sub.add_parser("watch", help="verify the fleet on a timer and keep its metrics for Prometheus",
                           description="The fleet verified on a systemd timer (read-only: sparkfleet verify), its "
                                       "report written as Prometheus metrics into node_exporter's textfile folder, "
                                       "for the alert rules of monitoring/ (docs/watching.md).")
    kinds = group.add_subparsers(dest="watch_command", required=True, metavar="SUBCOMMAND")
    helps = {"install": "write the systemd service and timer and start the timer",
             "run": "one cycle: verify, then its metrics (what the timer runs)",
             "status": "what the timer does and what the last metrics say",
             "remove": "stop the timer and remove the units and the metrics file"}
    for name, text in helps.items():
        parser = kinds.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        if name in ("install", "run"):
            parser.add_argument("-i", "--inventory", required=True, help="the inventory to verify")
            parser.add_argument("--state-dir", type=Path, default=watch.STATE_DIR,
                                help=f"where each cycle keeps its report (default {watch.STATE_DIR})")
        if name == "install":
            parser.add_argument("--interval", default="30min",
                                help="how often, as systemd reads it (default 30min; e.g. 1h, 2h30min)")
        if name in ("install", "remove"):
            parser.add_argument("--unit-dir", type=Path, default=watch.UNIT_DIR,
                                help=f"where the units go (default {watch.UNIT_DIR})")
        parser.add_argument("--textfile-dir", type=Path, default=watch.TEXTFILE_DIR,
                            help=f"node_exporter's textfile folder (default {watch.TEXTFILE_DIR}, Debian's)")
