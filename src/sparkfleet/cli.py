"""The `sparkfleet` command: the project's playbooks through ansible-runner, with progress and reports.

Plain `ansible-playbook` does every job too (the commands below say which
playbook each runs); this driver adds live progress, a summary table per
host, reports (JSON, Markdown, JUnit XML) and exit codes that tell failed
hosts from unreachable ones from bad input.
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from rich.console import Console

from sparkfleet import __version__, report
from sparkfleet.collection_home import PROJECT_DIR, collection_module
from sparkfleet.events import Fleet
from sparkfleet.runner import (
    EXIT_BAD_INPUT,
    EXIT_BUSY,
    EXIT_CANCELLED,
    EXIT_FAILED_HOSTS,
    EXIT_OK,
    EXIT_UNREACHABLE,
    AnsibleOptions,
    InventoryBusy,
    Run,
    RunOutcome,
    ansible_config,
    inventory_groups,
    inventory_lock,
    outcome_from_stats,
    private_files,
)
from sparkfleet.terminal import make_console, print_summary

__all__ = ["EXIT_BAD_INPUT", "EXIT_CANCELLED", "EXIT_FAILED_HOSTS", "EXIT_OK", "EXIT_UNREACHABLE", "AnsibleOptions",
           "RunOutcome",
           "build_parser", "main", "outcome_from_stats"]

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
                    "The matrix check, then, when it passes, the hash lock of the whole resolved set written beside "
                    "the matrix (matrix/spark-stack.lock.yml): every package each step resolves to with its wheel's "
                    "sha256, what the venv installs with pip's --require-hashes (spark_venv_require_hashes: true). "
                    "Review its diff like the matrix's; nothing is written when a step does not resolve."),
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
REPORT_ROOT = Path("reports")
EXIT_CODES = ("Exit codes: 0 all ok, 2 a host failed, 3 a host was unreachable, 4 bad input (usage, inventory, "
              "variables, nothing targeted), 5 another sparkfleet run holds the inventory, 130 cancelled (Ctrl-C, "
              "SIGTERM, SIGHUP).")
# Each command's examples, shown by its --help.
EXAMPLES = {
    "provision": ["sparkfleet provision -i inventory/mylab", "sparkfleet provision -i inventory/mylab --check --diff "
                  "--limit spark-01", "sparkfleet provision -i inventory/mylab -u nvidia -b -K --ask-vault-pass"],
    "verify": ["sparkfleet verify -i inventory/mylab", "sparkfleet verify -i inventory/mylab --json | jq .hosts"],
    "pin": ["sparkfleet pin -i inventory/mylab --check --diff", "sparkfleet pin -i inventory/mylab"],
    "refresh": ["sparkfleet refresh -i inventory/mylab --check",
                "sparkfleet refresh -i inventory/mylab -e '{\"refresh_batches\": [1, 2, \"50%\"]}'"],
    "doctor": ["sparkfleet doctor", "sparkfleet doctor -i inventory/mylab -l spark-03"],
    "matrix-check": ["sparkfleet matrix check", "sparkfleet matrix check -e matrix_check_skip_steps=torch"],
    "matrix-lock": ["sparkfleet matrix lock", "sparkfleet matrix lock --check --diff"],
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


def version_text() -> str:
    """sparkfleet, ansible-core, the collection and the configuration a run here would use (like ansible --version)."""
    core = ansible_core_version() or "not installed"
    try:
        config = ansible_config().described
    except ValueError as exc:
        config = str(exc)
    return (f"sparkfleet {__version__}\n  ansible-core {core}\n  collection sparkfleet.spark = {PROJECT_DIR}\n"
            f"  config file = {config}\n  python = {sys.version.split()[0]} ({sys.executable})")


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


# The controller's own checks: they run on this machine, read the inventory's variables (index mirrors, tokens)
# and write nothing into it. Without -i they take the inventory the user's ansible.cfg names, else localhost.
CONTROLLER_CHECKS = ("matrix-check", "matrix-lock", "advisories-check")
CONFIGURED = "the inventory your ansible.cfg or ANSIBLE_INVENTORY names, else localhost,"


def _ansible_options(parser: argparse.ArgumentParser, inventory_default: str | None = None) -> None:
    parser.add_argument("-i", "--inventory", required=inventory_default is None,
                        default=None if inventory_default == CONFIGURED else inventory_default,
                        help="inventory directory or file, e.g. inventory/example"
                             + (f" (default: {inventory_default})" if inventory_default else ""))
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
    parser.add_argument("--vault-password-file", metavar="FILE", help="the vault password file")
    parser.add_argument("--private-key", metavar="FILE", help="the SSH private key file")
    parser.add_argument("-f", "--forks", type=int, help="how many hosts at once")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more output (-vvv for more)")
    parser.add_argument("-e", "--extra-vars", action="append", metavar="VARS", default=[],
                        help="extra variables (key=value, YAML/JSON, or @file); repeatable; inline values are "
                             "handed to Ansible in a private file, never on a command line")
    parser.add_argument("--report-dir", type=Path,
                        help="where this run's report goes (default reports/<time>-<command>, and reports/latest "
                             "points at it)")
    parser.add_argument("--plain", action="store_true", help="no live display: one line per task")
    parser.add_argument("--fast", action="store_true",
                        help="run under Mitogen (pip install 'sparkfleet[fast]'): one Python per host for the whole "
                             "run, several times faster on a converged fleet; hosts reached over ssh, local or "
                             "docker connections")
    parser.add_argument("--json", action="store_true",
                        help="print the report (report.json) on stdout; progress and the summary go to stderr")
    parser.add_argument("--no-color", action="store_true", help="no colour (also when NO_COLOR is set)")


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
        if name in ("matrix-check", "matrix-lock", "advisories-check", "cluster-verify"):
            continue
        command = sub.add_parser(name, help=SHORT_HELP[name], formatter_class=HelpText,
                                 description=f"{text} Runs {playbook}" + (f" --tags {tags}" if tags else "") + ".",
                                 epilog=epilog(name))
        _ansible_options(command, inventory_default="localhost," if name == "doctor" else None)
        if name == "doctor":
            command.add_argument("--keep-hostnames", action="store_true",
                                 help="keep the hosts' names in the report (replaced by host-N otherwise)")
    matrix = sub.add_parser("matrix", help="the bare-pip stack matrix",
                            description="The bare-pip stack matrix (matrix/spark-stack.yml).")
    matrix_sub = matrix.add_subparsers(dest="matrix_command", required=True, metavar="SUBCOMMAND")
    check = matrix_sub.add_parser("check", help="check every pin against its index", epilog=epilog("matrix-check"),
                                  formatter_class=HelpText,
                                  description=COMMANDS["matrix-check"][2] + " Runs playbooks/matrix_check.yml "
                                  "(-e matrix_check_skip_steps=torch for an index this machine cannot reach).")
    _ansible_options(check, inventory_default=CONFIGURED)
    locking = matrix_sub.add_parser("lock", help="check, then write the hash lock of the whole resolved set",
                                    epilog=epilog("matrix-lock"), formatter_class=HelpText,
                                    description=COMMANDS["matrix-lock"][2] + " Runs playbooks/matrix_check.yml "
                                    "-e matrix_lock=true (matrix_lock_file: another path).")
    _ansible_options(locking, inventory_default=CONFIGURED)
    advisories = sub.add_parser("advisories", help="upstream advisories (matrix/advisories.yml)",
                                description="Upstream advisories: known problems with images, pins and "
                                            "playbooks, dated (matrix/advisories.yml).")
    advisories_sub = advisories.add_subparsers(dest="advisories_command", required=True, metavar="SUBCOMMAND")
    upstream = advisories_sub.add_parser("check", help="list the upstream issues since the last review",
                                         epilog=epilog("advisories-check"),
                                         formatter_class=HelpText,
                                         description=COMMANDS["advisories-check"][2] + " Runs "
                                         "playbooks/advisories_check.yml.")
    _ansible_options(upstream, inventory_default=CONFIGURED)
    clusters = sub.add_parser("cluster", help="Sparks joined through their ConnectX-7 ports",
                              description="Sparks joined into a cluster through their ConnectX-7 ports "
                                          "(spark_clusters; provision sets them up with the role spark_cluster).")
    cluster_sub = clusters.add_subparsers(dest="cluster_command", required=True, metavar="SUBCOMMAND")
    proof = cluster_sub.add_parser("verify", help="prove each cluster's link, RDMA and NCCL",
                                   epilog=epilog("cluster-verify"), formatter_class=HelpText,
                                   description=COMMANDS["cluster-verify"][2] + " Runs playbooks/cluster_verify.yml.")
    _ansible_options(proof)
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
                      help="a report directory or its report.json (default reports/latest)")
    show.add_argument("--no-color", action="store_true", help="no colour (also when NO_COLOR is set)")
    completion = sub.add_parser("completion", help="print a shell completion script",
                                description="Print the completion script for a shell, e.g. "
                                            "sparkfleet completion bash > /etc/bash_completion.d/sparkfleet")
    completion.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    return parser


def report_dir_for(command: str, chosen: Path | None) -> Path:
    if chosen:
        return chosen
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return REPORT_ROOT / f"{stamp}-{command}"


def point_latest(directory: Path) -> None:
    if directory.parent.resolve() != REPORT_ROOT.resolve():
        return
    link = REPORT_ROOT / "latest"
    tmp = REPORT_ROOT / ".latest.tmp"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(directory.name)
    os.replace(tmp, link)


def run_command(command: str, args: argparse.Namespace, console: Console) -> int:
    playbook, tags, _ = COMMANDS[command]
    try:
        config = ansible_config()
    except ValueError as exc:
        error(str(exc))
        return EXIT_BAD_INPUT
    inventory = args.inventory or (config.inventory if command in CONTROLLER_CHECKS else None) or "localhost,"
    args = argparse.Namespace(**{**vars(args), "inventory": inventory})
    if "," not in inventory and not Path(inventory).exists():
        error(f"inventory {inventory} not found; expected a directory such as "
              "inventory/example (copy it to inventory/<yours> and list your Sparks there).")
        return EXIT_BAD_INPUT
    directory = report_dir_for(command.replace("-", "_"), args.report_dir)
    if command == "doctor":
        args = doctor_args(args)
    options = AnsibleOptions.from_args(args, tags)
    as_json = getattr(args, "json", False)
    if as_json:
        console = make_console(stderr=True, no_color=args.no_color)
    run = Run(playbook=playbook, inventory=inventory, report_dir=directory.resolve(), options=options,
              extra_vars=args.extra_vars, passwords=ask_passwords(options),
              live=False if args.plain or as_json else None, console=console, fast=getattr(args, "fast", False),
              config=config)
    fleet = Fleet()
    try:
        # the controller's checks write nothing into the inventory: they need not wait for a provision
        with inventory_lock("localhost," if command in CONTROLLER_CHECKS else inventory, command.replace("-", " ")):
            outcome, meta = run.execute(fleet)
            if outcome.exit_code() == EXIT_OK and fleet.targeted_nothing():
                groups = inventory_groups(inventory, config)
                outcome.errors = [f"nothing to do: no host of inventory {inventory} matches "
                                  f"{', '.join(repr(p) for p in dict.fromkeys(fleet.unmatched))}"
                                  + (f" (with --limit {options.limit})" if options.limit else "")
                                  + f"; the inventory's groups: {', '.join(groups) or 'none'}. List your Sparks "
                                  "under 'sparks' (see inventory/example)"]
                outcome.nothing_targeted = True
                meta.update(status="failed", exit_code=outcome.exit_code())
    except InventoryBusy as exc:
        error(str(exc))
        return EXIT_BUSY
    except ValueError as exc:
        error(str(exc))
        return EXIT_BAD_INPUT
    if outcome.exit_code() == EXIT_BAD_INPUT:
        error("; ".join(outcome.errors) if outcome.nothing_targeted else "Ansible stopped on bad input: "
              + ("; ".join(outcome.errors) or f"ansible-playbook exited {outcome.rc}")
              + f". Expected an inventory, variables and a vault password Ansible can read (check the inventory "
              f"with: ansible-inventory -i {inventory} --graph).")
    data = report.build(fleet, {"command": command.replace("-", " "), **meta, "argv": typed_argv(),
                                "versions": versions(config), "errors": outcome.errors})
    if command == "doctor" and not args.keep_hostnames:
        data = doctor_redacted(data, fleet)
    paths = report.write(data, directory)
    point_latest(directory)
    if as_json:
        print(json.dumps(data, indent=2))
    if command == "doctor":
        paths.update(write_doctor(fleet, directory, console))
    if command in ("matrix-check", "matrix-lock", "advisories-check"):
        for line in fleet.check_lines("issues" if command == "advisories-check" else "table"):
            console.print(line, highlight=False, markup=False)
    for line in collection_module("_cluster").verdict_lines(data.get("clusters") or []):
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
            "config_file": str(config.path)}


def doctor_args(args: argparse.Namespace) -> argparse.Namespace:
    """On this machine when no inventory is given; the hostname choice as an extra variable."""
    extra = list(args.extra_vars)
    if args.inventory == "localhost,":
        extra.append('{"doctor_hosts": "localhost"}')
        args = argparse.Namespace(**{**vars(args), "connection": args.connection or "local"})
    if args.keep_hostnames:
        extra.append('{"doctor_keep_hostnames": true}')
    return argparse.Namespace(**{**vars(args), "extra_vars": extra})


def doctor_redacted(data: dict, fleet: Fleet) -> dict:
    """The doctor's report.json as its doctor.md has it: each host's name replaced by its label (host-1, ...)."""
    redact = collection_module("_doctor").redact
    for name, host in fleet.hosts.items():
        label = (host.facts.get("spark_doctor") or {}).get("host")
        if label and name != "localhost":
            data = redact(data, [name], label)
    return data


def write_doctor(fleet: Fleet, directory: Path, console: Console) -> dict[str, Path]:
    """doctor.md and doctor.json from each host's report (the controller's own when it ran on this machine)."""
    hosts = [h for _, h in sorted(fleet.hosts.items()) if h is not fleet.controller]
    reports = [h.facts["spark_doctor"] for h in [fleet.controller, *hosts] if "spark_doctor" in h.facts]
    if not reports:
        return {}
    text = "\n".join(r["markdown"] for r in reports)
    paths = {"doctor markdown": directory / "doctor.md", "doctor json": directory / "doctor.json"}
    with private_files():
        paths["doctor markdown"].write_text(text)
        paths["doctor json"].write_text(json.dumps([{k: v for k, v in r.items() if k != "markdown"}
                                                    for r in reports], indent=2) + "\n")
    console.print(text, highlight=False, markup=False, soft_wrap=True)  # Markdown to paste: never re-wrapped
    return paths


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
    base = argparse.Namespace(inventory=inventory, limit=None, check=False, diff=False,
                              tags=None, extra_vars=[], plain=args.plain, report_dir=None, no_color=args.no_color)
    pinned = run_command("pin", argparse.Namespace(**{**vars(base), "report_dir": None}), console)
    if pinned != EXIT_OK:
        return pinned
    return run_command("provision", argparse.Namespace(**{**vars(base), "report_dir": args.report_dir}), console)


def show_report(path: Path, console: Console) -> int:
    source = path / "report.json" if path.is_dir() else path
    try:
        data = json.loads(source.read_text())
    except (OSError, ValueError) as exc:
        error(f"cannot read {source}: {exc}; expected a report.json written by a sparkfleet "
              "command (reports/latest points at the last one)")
        return EXIT_BAD_INPUT
    if data.get("schema") != report.SCHEMA:
        error(f"{source} is {data.get('schema')!r}, expected {report.SCHEMA}")
        return EXIT_BAD_INPUT
    paths = report.write(data, source.parent)
    print_summary(data, paths, console)
    return int(data.get("exit_code", EXIT_OK))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if "--version" in (sys.argv[1:] if argv is None else argv)[:1]:
        print(version_text())
        return EXIT_OK
    args = parser.parse_args(argv)
    console = make_console(no_color=getattr(args, "no_color", False))
    if args.command == "completion":
        import shtab

        print(shtab.complete(parser, shell=args.shell))
        return EXIT_OK
    if args.command == "lab":
        return lab(args, console)
    if args.command == "report":
        return show_report(args.path, console)
    if args.command == "matrix":
        if args.matrix_command == "lock":
            args.extra_vars = [*args.extra_vars, '{"matrix_lock": true}']
        return run_command(f"matrix-{args.matrix_command}", args, console)
    if args.command == "advisories":
        return run_command("advisories-check", args, console)
    if args.command == "cluster":
        return run_command("cluster-verify", args, console)
    return run_command(args.command, args, console)


if __name__ == "__main__":
    raise SystemExit(main())
