"""Every command that runs a playbook, one record each: what is typed, what it runs, its help and examples, where it
runs, the options of its own and what it shows after the run. arguments.py builds the parser from the records,
commands.py runs the record the parser picked; neither holds a per-command `if`.

To add a command: one Command in COMMANDS (and its playbook). A command of a group (`matrix check`) names the
group in `words`; a new group gets a line in GROUPS.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from sparkfleet import doctor
from sparkfleet.events import Fleet
from sparkfleet.terminal import proposal_lines

# Without -i: the inventory the user's ansible.cfg names (or ANSIBLE_INVENTORY), else this machine.
CONFIGURED = "the inventory your ansible.cfg or ANSIBLE_INVENTORY names, else localhost,"


@dataclass(frozen=True)
class Option:
    """An option of one command: argparse's flags and settings, and the variables it hands the playbook when set."""

    flags: tuple[str, ...]
    settings: dict
    extra_vars: Callable[[object], dict] | None = None  # the option's value -> variables (JSON), when given


@dataclass(frozen=True)
class Command:
    name: str  # the report's and the lock's name for it: "matrix-check"
    words: tuple[str, ...]  # as typed: ("matrix", "check")
    playbook: str
    short: str  # one line in `sparkfleet --help`
    description: str
    examples: tuple[str, ...]
    tags: str | None = None
    runs_note: str = ""  # said after "Runs <playbook>", e.g. the variable a subcommand sets
    inventory_default: str | None = None  # None: -i is required
    controller: bool = False  # runs on this machine, reads the inventory's variables, writes nothing into it
    extra_vars: tuple[dict, ...] = ()  # variables the command always hands the playbook
    options: tuple[Option, ...] = ()
    prepare: Callable[[argparse.Namespace], argparse.Namespace] | None = None  # the arguments, before the run
    redact: Callable[[dict, Fleet, argparse.Namespace], dict] | None = None  # report.json, before it is written
    files: Callable[[Fleet, Path, Console], dict[str, Path]] | None = None  # files of its own, after the report
    lines: Callable[[Fleet, dict], list[str]] = field(default=lambda fleet, data: [])  # shown before the summary

    @property
    def runs(self) -> str:
        return self.playbook + (f" --tags {self.tags}" if self.tags else "") + (f" {self.runs_note}"
                                                                                 if self.runs_note else "")


SMOKE = Option(("--smoke",), {"action": "store_true", "help": "also prove each image and venv by the smoke step: a "
                              "tiny model trained on the GPU for a few dozen steps, which must learn "
                              "(-e spark_verify_smoke=true)"},
               lambda on: {"spark_verify_smoke": True} if on else None)

# The groups of subcommands: name -> (a line in `sparkfleet --help`, the group's description).
GROUPS = {
    "matrix": ("the bare-pip stack matrix", "The bare-pip stack matrix: the inventory's spark_venv_matrix_file, "
               "else matrix/spark-stack.yml."),
    "advisories": ("upstream advisories (matrix/advisories.yml)",
                   "Upstream advisories: known problems with images, pins and playbooks, dated "
                   "(matrix/advisories.yml)."),
    "cluster": ("Sparks joined through their ConnectX-7 ports",
                "Sparks joined into a cluster through their ConnectX-7 ports (spark_clusters; provision sets them up "
                "with the role spark_cluster)."),
}

COMMANDS = [
    Command(
        "provision", ("provision",), "playbooks/site.yml",
        "provision the Sparks (site.yml); also restores a reinstalled host",
        "Run site.yml on the inventory's 'sparks': preflight, NVIDIA container runtime, images pinned by digest, the "
        "bare-pip venv where enabled, verification. Also the way to restore a host after an OS reinstall: it comes "
        "back on the locked digests and matrix, verified from scratch.",
        ("sparkfleet provision -i inventory/mylab", "sparkfleet provision -i inventory/mylab --check --diff --limit "
         "spark-01", "sparkfleet provision -i inventory/mylab -u nvidia -b -K --ask-vault-pass"),
        options=(SMOKE,)),
    Command(
        "verify", ("verify",), "playbooks/verify.yml", "prove every host as it is, changing nothing",
        "Prove every host as it is, changing nothing on any of them (safe from cron): what each runs against the "
        "lock (an image missing, a launcher missing, edited by hand or running another digest than the lock's), "
        "the active venv against the matrix, the nvidia runtime registered with Docker, then the GPU, the "
        "frameworks, the ABI scan and, with --smoke, the smoke step. Each difference fails the host, named with "
        "the command that moves it: provision, or refresh (canary first) for a lock that moved. Nothing is "
        "pulled, built, written or recorded.",
        ("sparkfleet verify -i inventory/mylab", "sparkfleet verify -i inventory/mylab --smoke",
         "sparkfleet verify -i inventory/mylab --json | jq .hosts"),
        options=(SMOKE,)),
    Command(
        "pin", ("pin",), "playbooks/pin.yml", "resolve the image tags and write the lock",
        "Resolve the configured image tags once, on the controller, and write the lock into the inventory (review "
        "its diff with --check --diff first).",
        ("sparkfleet pin -i inventory/mylab --check --diff", "sparkfleet pin -i inventory/mylab")),
    Command(
        "refresh", ("refresh",), "playbooks/refresh.yml", "fleet-wide tag refresh: canary, batches, rollback",
        "Fleet-wide tag refresh: resolve once, show the lock diff (--check stops there), then roll out canary first "
        "in batches (-e '{\"refresh_batches\": [1, 2, \"50%\"]}'), verify each host, roll back a host that fails "
        "and stop before the next batch; the lock is written once the canary passed.",
        ("sparkfleet refresh -i inventory/mylab --check",
         "sparkfleet refresh -i inventory/mylab -e '{\"refresh_batches\": [1, 2, \"50%\"]}'"),
        options=(SMOKE,)),
    Command(
        "doctor", ("doctor",), "playbooks/doctor.yml",
        "a paste-able report of a Spark for debugging, without secrets",
        "What someone debugging a DGX Spark needs, in one paste-able report per host, read-only: DGX OS, kernel, "
        "driver and CUDA, the GPU and its compute capability, Docker, its runtimes and CDI, the toolkit packages and "
        "their holds, each pinned image and whether it is present, the active venv and its matrix fingerprint, the "
        "last verification with its diagnosis, the ABI findings. No secret; hostnames replaced unless "
        "--keep-hostnames. Without -i it reports on this machine (-c local). Writes doctor.md and doctor.json.",
        ("sparkfleet doctor", "sparkfleet doctor -i inventory/mylab -l spark-03"),
        inventory_default="localhost,",
        options=(Option(("--keep-hostnames",), {"action": "store_true", "help": "keep the hosts' names in the report "
                                                "(replaced by host-N otherwise)"}),),
        prepare=doctor.doctor_args,
        redact=lambda data, fleet, args: data if args.keep_hostnames else doctor.redacted(data, fleet),
        files=doctor.write),
    Command(
        "matrix-check", ("matrix", "check"), "playbooks/matrix_check.yml", "check every pin against its index",
        "Ask the indexes, installing nothing, whether every pin of the stack matrix exists as a wheel for the Spark "
        "target and whether each step of the sequence resolves after the earlier ones without moving a pinned "
        "package (a conflict is named as pip states it); show the matrix's age.",
        ("sparkfleet matrix check", "sparkfleet matrix check -e matrix_check_skip_steps=torch"),
        runs_note="(-e matrix_check_skip_steps=torch for an index this machine cannot reach)",
        inventory_default=CONFIGURED, controller=True, lines=lambda fleet, data: fleet.check_lines("table")),
    Command(
        "matrix-lock", ("matrix", "lock"), "playbooks/matrix_check.yml",
        "check, then write the hash lock of the whole resolved set",
        "The matrix check, then, when it passes, the hash lock of the whole resolved set written with the inventory "
        "(group_vars/all/spark_venv_lock.yml): every package each step resolves to, through the inventory's "
        "mirrors, with its wheel's sha256, what the venv installs with --require-hashes (always from a mirror, else "
        "with spark_venv_require_hashes: true). Review its diff like the matrix's and commit it; nothing is written "
        "when a step does not resolve.",
        ("sparkfleet matrix lock -i inventory/mylab", "sparkfleet matrix lock -i inventory/mylab --check --diff"),
        runs_note="-e matrix_lock=true (matrix_lock_file or spark_venv_lock_file: another path)",
        inventory_default=CONFIGURED, controller=True, extra_vars=({"matrix_lock": True},),
        lines=lambda fleet, data: fleet.check_lines("table")),
    Command(
        "matrix-propose", ("matrix", "propose"), "playbooks/matrix_propose.yml",
        "propose a newer matrix, proved on a canary",
        "Renew the stack matrix: work out the newest set its indexes offer that resolves together (each pin at its "
        "version or newer, the sequence kept), or take a set given (-e '{\"matrix_propose_pins\": "
        "[\"trl==1.10.0\"]}'), show each pin old -> new with its release day, check and hash-lock the candidate, "
        "build it on the canary beside the active venv (which, with the rest of the fleet, is not touched), prove "
        "it there by the GPU verification and the smoke step, and write it with its evidence as "
        "<inventory>/matrix/spark-stack-<day>.yml to review and commit. A failure writes nothing and names the "
        "stage and the pins to blame.",
        ("sparkfleet matrix propose -i inventory/mylab --canary spark-01",
         "sparkfleet matrix propose -i inventory/mylab --canary spark-01 "
         "-e '{\"matrix_propose_pins\": [\"trl==1.10.0\", \"datasets==4.7.0\"]}'"),
        options=(Option(("--canary",), {"required": True, "metavar": "HOST",
                                        "help": "the host of the inventory the candidate is built and proved on "
                                                "(its active venv is not touched)"},
                        lambda host: {"matrix_propose_canary": host}),),
        lines=proposal_lines),
    Command(
        "advisories-check", ("advisories", "check"), "playbooks/advisories_check.yml",
        "list the upstream issues since the last review",
        "List the issues of NVIDIA/dgx-spark-playbooks created or updated since matrix/advisories.yml was last "
        "reviewed (its checked_on), for review. Opt-in network: asks GitHub's API (GITHUB_TOKEN in the environment "
        "raises the rate limit). Changes nothing: record what affects you in the file and set checked_on.",
        ("sparkfleet advisories check", "GITHUB_TOKEN=$(cat ~/.github-token) sparkfleet advisories check"),
        inventory_default=CONFIGURED, controller=True, lines=lambda fleet, data: fleet.check_lines("issues")),
    Command(
        "cluster-verify", ("cluster", "verify"), "playbooks/cluster_verify.yml",
        "prove each cluster's link, RDMA and NCCL",
        "Prove each cluster of spark_clusters (Sparks joined through their ConnectX-7 ports), read-only and bounded "
        "in time: per node the CX-7 interfaces, link speed, PCIe width, MTU, addresses, RDMA devices, CmaTotal and "
        "any nccl.conf; per pair and rail which port answers at the other end of the cable, reach, frames of the "
        "full MTU, TCP and RDMA bandwidth and SSH with pinned host keys; then a bounded NCCL all_gather in the "
        "locked NGC image. Each check against matrix/cluster-thresholds.yml; a failure names its likely cause and "
        "the fix.",
        ("sparkfleet cluster verify -i inventory/mylab",
         "sparkfleet cluster verify -i inventory/mylab -e cluster_verify_tcp_seconds=10")),
]


def extra_vars(command: Command, args: argparse.Namespace) -> list[str]:
    """The -e values the run hands Ansible: the user's, then the command's own, then its options' (JSON)."""
    own = [*command.extra_vars]
    for option in command.options:
        value = getattr(args, option.flags[0].lstrip("-").replace("-", "_"), None)
        own.append(option.extra_vars(value) if option.extra_vars and value else None)
    return [*args.extra_vars, *(json.dumps(values) for values in own if values)]


def named(name: str) -> Command:
    """The record of a command by its name ("pin"), for a command that runs others (sparkfleet lab)."""
    return next(command for command in COMMANDS if command.name == name)
