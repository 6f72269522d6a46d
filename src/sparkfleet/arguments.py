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

from sparkfleet.runner import EXIT_BAD_INPUT

# command -> (playbook, tags, what it does)
COMMANDS = {
    "provision": ("playbooks/site.yml", None,
                  "Run site.yml on the inventory's 'sparks': preflight, NVIDIA container runtime, images pinned "
                  "by digest, the bare-pip venv where enabled, verification. Also the way to restore a host "
                  "after an OS reinstall: it comes back on the locked digests and matrix, verified from scratch."),
    "verify": ("playbooks/site.yml", "spark_preflight,spark_images,spark_venv,spark_verify",
               "Re-verify every host: site.yml without the container-runtime role. On a converged host it "
               "changes nothing (an image the lock pins that went missing is pulled again)."),
    "pin": ("playbooks/pin.yml", None,
            "Resolve the configured image tags once, on the controller, and write the lock into the inventory "
            "(review its diff with --check --diff first)."),
    "refresh": ("playbooks/refresh.yml", None,
                "Fleet-wide tag refresh: resolve once, show the lock diff (--check stops there), then roll out "
                "canary first in batches (-e '{\"refresh_batches\": [1, 2, \"50%\"]}'), verify each host, roll "
                "back a host that fails and stop before the next batch; the lock is written once the canary "
                "passed."),
    "matrix-check": ("playbooks/matrix_check.yml", None,
                     "Ask the indexes, installing nothing, whether every pin of the stack matrix exists as a "
                     "wheel for the Spark target and whether each step of the sequence resolves after the earlier "
                     "ones without moving a pinned package (a conflict is named as pip states it); show the "
                     "matrix's age."),
    "matrix-lock": ("playbooks/matrix_check.yml", None,
                    "The matrix check, then, when it passes, the hash lock of the whole resolved set written with "
                    "the inventory (group_vars/all/spark_venv_lock.yml): every package each step resolves to, "
                    "through the inventory's mirrors, with its wheel's sha256, what the venv installs with pip's "
                    "--require-hashes (always from a mirror, else with spark_venv_require_hashes: true). Review its "
                    "diff like the matrix's and commit it; nothing is written when a step does not resolve."),
    "matrix-propose": ("playbooks/matrix_propose.yml", None,
                       "Renew the stack matrix: work out the newest set its indexes offer that resolves together "
                       "(each pin at its version or newer, the sequence kept), or take a set given "
                       "(-e '{\"matrix_propose_pins\": [\"trl==1.10.0\"]}'), show each pin old -> new with its "
                       "release day, check and hash-lock the candidate, build it on the canary beside the active "
                       "venv (which, with the rest of the fleet, is not touched), prove it there by the GPU "
                       "verification and the smoke step, and write it with its evidence as "
                       "<inventory>/matrix/spark-stack-<day>.yml to review and commit. A failure writes nothing and "
                       "names the stage and the pins to blame."),
    "advisories-check": ("playbooks/advisories_check.yml", None,
                         "List the issues of NVIDIA/dgx-spark-playbooks created or updated since "
                         "matrix/advisories.yml was last reviewed (its checked_on), for review. Opt-in network: asks "
                         "GitHub's API (GITHUB_TOKEN in the environment raises the rate limit). Changes nothing: "
                         "record what affects you in the file and set checked_on."),
    "cluster-verify": ("playbooks/cluster_verify.yml", None,
                       "Prove each cluster of spark_clusters (Sparks joined through their ConnectX-7 ports), "
                       "read-only and bounded in time: per node the CX-7 interfaces, link speed, PCIe width, MTU, "
                       "addresses, RDMA devices, CmaTotal and any nccl.conf; per pair and rail which port answers "
                       "at the other end of the cable, reach, frames of the full MTU, TCP and RDMA bandwidth and "
                       "SSH with pinned host keys; then a bounded NCCL all_gather in the locked NGC image. Each "
                       "check against matrix/cluster-thresholds.yml; a failure names its likely cause and the fix."),
    "doctor": ("playbooks/doctor.yml", None,
               "What someone debugging a DGX Spark needs, in one paste-able report per host, read-only: DGX OS, "
               "kernel, driver and CUDA, the GPU and its compute capability, Docker, its runtimes and CDI, the toolkit "
               "packages and their holds, each pinned image and whether it is present, the active venv and its "
               "matrix fingerprint, the last verification with its diagnosis, the ABI findings. No secret; hostnames "
               "replaced unless --keep-hostnames. Without -i it reports on this machine (-c local). Writes doctor.md "
               "and doctor.json."),
}
SHORT_HELP = {"doctor": "a paste-able report of a Spark for debugging, without secrets",
              "provision": "provision the Sparks (site.yml); also restores a reinstalled host",
              "verify": "re-verify every host", "pin": "resolve the image tags and write the lock",
              "refresh": "fleet-wide tag refresh: canary, batches, rollback"}
# Where reports go by default; reports/latest points at the last one.
REPORT_ROOT = Path("reports")
EXIT_CODES = ("Exit codes: 0 all ok, 2 a host failed, 3 a host was unreachable, 4 bad input (usage, inventory, "
              "variables, nothing targeted), 5 another sparkfleet run holds the inventory, 130 cancelled (Ctrl-C, "
              "SIGTERM, SIGHUP).")
# Each command's examples, shown by its --help.
EXAMPLES = {
    "provision": ["sparkfleet provision -i inventory/mylab", "sparkfleet provision -i inventory/mylab --check --diff "
                  "--limit spark-01", "sparkfleet provision -i inventory/mylab -u nvidia -b -K --ask-vault-pass"],
    "verify": ["sparkfleet verify -i inventory/mylab", "sparkfleet verify -i inventory/mylab --smoke",
               "sparkfleet verify -i inventory/mylab --json | jq .hosts"],
    "pin": ["sparkfleet pin -i inventory/mylab --check --diff", "sparkfleet pin -i inventory/mylab"],
    "refresh": ["sparkfleet refresh -i inventory/mylab --check",
                "sparkfleet refresh -i inventory/mylab -e '{\"refresh_batches\": [1, 2, \"50%\"]}'"],
    "doctor": ["sparkfleet doctor", "sparkfleet doctor -i inventory/mylab -l spark-03"],
    "matrix-check": ["sparkfleet matrix check", "sparkfleet matrix check -e matrix_check_skip_steps=torch"],
    "matrix-lock": ["sparkfleet matrix lock -i inventory/mylab",
                    "sparkfleet matrix lock -i inventory/mylab --check --diff"],
    "matrix-propose": ["sparkfleet matrix propose -i inventory/mylab --canary spark-01",
                       "sparkfleet matrix propose -i inventory/mylab --canary spark-01 "
                       "-e '{\"matrix_propose_pins\": [\"trl==1.10.0\", \"datasets==4.7.0\"]}'"],
    "cluster-verify": ["sparkfleet cluster verify -i inventory/mylab",
                       "sparkfleet cluster verify -i inventory/mylab -e cluster_verify_tcp_seconds=10"],
    "advisories-check": ["sparkfleet advisories check",
                         "GITHUB_TOKEN=$(cat ~/.github-token) sparkfleet advisories check"],
}


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


def epilog(command: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[command]) + "\n\n" + EXIT_CODES


# The controller's own checks: they run on this machine, read the inventory's variables (index mirrors, tokens)
# and write nothing into it. Without -i they take the inventory the user's ansible.cfg names, else localhost.
CONTROLLER_CHECKS = ("matrix-check", "matrix-lock", "advisories-check")
CONFIGURED = "the inventory your ansible.cfg or ANSIBLE_INVENTORY names, else localhost,"


def ansible_options(parser: argparse.ArgumentParser, inventory_default: str | None = None) -> None:
    # .complete: what shell completion offers after the option (shtab): paths, where a path is asked for.
    parser.add_argument("-i", "--inventory", required=inventory_default is None,
                        default=None if inventory_default == CONFIGURED else inventory_default,
                        help="inventory directory or file, e.g. inventory/example"
                             + (f" (default: {inventory_default})" if inventory_default else "")).complete = shtab.FILE
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


def group(subparsers, name: str, short: str, description: str):
    """A command of subcommands (matrix, advisories, cluster); args.<name>_command says which one was typed."""
    return subparsers.add_parser(name, help=short, description=description).add_subparsers(
        dest=f"{name}_command", required=True, metavar="SUBCOMMAND")


def subcommand(subparsers, name: str, command: str, short: str, runs: str, inventory_default: str | None = None):
    """A subcommand (matrix check, cluster verify, ...) of COMMANDS' `command`: its help, what it runs, examples."""
    parser = subparsers.add_parser(name, help=short, epilog=epilog(command), formatter_class=HelpText,
                                   description=f"{COMMANDS[command][2]} Runs {runs}.")
    ansible_options(parser, inventory_default=inventory_default)
    return parser


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
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for name, (playbook, tags, text) in COMMANDS.items():
        if name in ("matrix-check", "matrix-lock", "matrix-propose", "advisories-check", "cluster-verify"):
            continue
        command = sub.add_parser(name, help=SHORT_HELP[name], formatter_class=HelpText,
                                 description=f"{text} Runs {playbook}" + (f" --tags {tags}" if tags else "") + ".",
                                 epilog=epilog(name))
        ansible_options(command, inventory_default="localhost," if name == "doctor" else None)
        if name == "doctor":
            command.add_argument("--keep-hostnames", action="store_true",
                                 help="keep the hosts' names in the report (replaced by host-N otherwise)")
        if name in ("provision", "verify", "refresh"):
            command.add_argument("--smoke", action="store_true",
                                 help="also prove each image and venv by the smoke step: a tiny model trained on "
                                      "the GPU for a few dozen steps, which must learn (-e spark_verify_smoke=true)")
    matrix_sub = group(sub, "matrix", "the bare-pip stack matrix",
                       "The bare-pip stack matrix (matrix/spark-stack.yml).")
    subcommand(matrix_sub, "check", "matrix-check", "check every pin against its index", "playbooks/matrix_check.yml "
               "(-e matrix_check_skip_steps=torch for an index this machine cannot reach)", CONFIGURED)
    subcommand(matrix_sub, "lock", "matrix-lock", "check, then write the hash lock of the whole resolved set",
               "playbooks/matrix_check.yml -e matrix_lock=true (matrix_lock_file or spark_venv_lock_file: another "
               "path)", CONFIGURED)
    propose = subcommand(matrix_sub, "propose", "matrix-propose", "propose a newer matrix, proved on a canary",
                         "playbooks/matrix_propose.yml")
    propose.add_argument("--canary", required=True, metavar="HOST",
                         help="the host of the inventory the candidate is built and proved on (its active venv is "
                              "not touched)")
    advisories_sub = group(sub, "advisories", "upstream advisories (matrix/advisories.yml)",
                           "Upstream advisories: known problems with images, pins and playbooks, dated "
                           "(matrix/advisories.yml).")
    subcommand(advisories_sub, "check", "advisories-check", "list the upstream issues since the last review",
               "playbooks/advisories_check.yml", CONFIGURED)
    cluster_sub = group(sub, "cluster", "Sparks joined through their ConnectX-7 ports",
                        "Sparks joined into a cluster through their ConnectX-7 ports (spark_clusters; provision "
                        "sets them up with the role spark_cluster).")
    subcommand(cluster_sub, "verify", "cluster-verify", "prove each cluster's link, RDMA and NCCL",
               "playbooks/cluster_verify.yml")
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
    completion = sub.add_parser("completion", help="print a shell completion script",
                                description="Print the completion script for a shell, e.g. "
                                            "sparkfleet completion bash > /etc/bash_completion.d/sparkfleet")
    completion.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    return parser
