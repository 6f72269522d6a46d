"""The `sparkfleet` command: runs the project's playbooks through ansible-runner.

Plain `ansible-playbook site.yml -i inventory/<yours>` does the same job;
this driver adds a repository-independent entry point and an exit code that
tells failed hosts from unreachable ones from bad input.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sparkfleet import __version__

PROJECT_DIR = Path(__file__).resolve().parents[2]

EXIT_OK = 0
EXIT_FAILED_HOSTS = 2
EXIT_UNREACHABLE = 3
EXIT_BAD_INPUT = 4
EXIT_CANCELLED = 130

PLAYBOOKS = {"provision": "site.yml"}


@dataclass
class RunOutcome:
    status: str
    rc: int
    failed: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)

    def exit_code(self) -> int:
        if self.status == "canceled":
            return EXIT_CANCELLED
        if self.unreachable:
            return EXIT_UNREACHABLE
        if self.failed or self.status != "successful" or self.rc != 0:
            return EXIT_FAILED_HOSTS
        return EXIT_OK


def ansible_cmdline(args: argparse.Namespace) -> list[str]:
    """The pass-through options, with Ansible's own meaning."""
    cmd: list[str] = []
    if args.limit:
        cmd += ["--limit", args.limit]
    if args.check:
        cmd.append("--check")
    if args.diff:
        cmd.append("--diff")
    if args.tags:
        cmd += ["--tags", args.tags]
    for extra in args.extra_vars or []:
        cmd += ["--extra-vars", extra]
    return cmd


def outcome_from_stats(status: str, rc: int, stats: dict | None) -> RunOutcome:
    stats = stats or {}
    return RunOutcome(
        status=status,
        rc=rc,
        failed=set(stats.get("failures", {})),
        unreachable=set(stats.get("dark", {})),
    )


def run_playbook(playbook: str, args: argparse.Namespace) -> RunOutcome:
    import ansible_runner

    inventory = Path(args.inventory).resolve()
    private = Path(tempfile.mkdtemp(prefix="sparkfleet-run-"))
    env = {
        "ANSIBLE_CONFIG": str(PROJECT_DIR / "ansible.cfg"),
        # ansible-runner runs ansible-playbook from PATH: the venv's bin first.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private),
            project_dir=str(PROJECT_DIR),
            playbook=str(PROJECT_DIR / playbook),
            inventory=str(inventory),
            cmdline=shlex.join(ansible_cmdline(args)),
            envvars=env,
            quiet=False,
            suppress_env_files=True,
        )
    except KeyboardInterrupt:
        return RunOutcome(status="canceled", rc=EXIT_CANCELLED)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return outcome_from_stats(runner.status, runner.rc or 0, runner.stats)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkfleet",
        description="Provision NVIDIA DGX Spark machines to a verified, reproducible ML environment.",
    )
    parser.add_argument("--version", action="version", version=f"sparkfleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    provision = sub.add_parser(
        "provision",
        help="run site.yml on the inventory's Sparks",
        description="Run site.yml (the whole provisioning) on the hosts in the inventory's "
                    "'sparks' group. Options pass through to ansible-playbook.",
    )
    provision.add_argument("-i", "--inventory", required=True,
                           help="inventory directory or file, e.g. inventory/example")
    provision.add_argument("-l", "--limit", help="only these hosts or groups (Ansible pattern)")
    provision.add_argument("-C", "--check", action="store_true", help="change nothing; say what would change")
    provision.add_argument("-D", "--diff", action="store_true", help="show file changes")
    provision.add_argument("-t", "--tags", help="only roles/stages with these tags, comma-separated")
    provision.add_argument("-e", "--extra-vars", action="append", metavar="VARS",
                           help="extra variables (key=value, YAML/JSON, or @file); repeatable")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not Path(args.inventory).exists():
        print(f"sparkfleet: inventory {args.inventory} not found; expected a directory such as "
              f"inventory/example (copy it to inventory/<yours> and list your Sparks there).",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    outcome = run_playbook(PLAYBOOKS[args.command], args)
    code = outcome.exit_code()
    if outcome.unreachable:
        print(f"sparkfleet: unreachable: {', '.join(sorted(outcome.unreachable))}", file=sys.stderr)
    if outcome.failed:
        print(f"sparkfleet: failed: {', '.join(sorted(outcome.failed))}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
