"""The `sparkfleet` command: the project's playbooks through ansible-runner, with progress and reports.

Plain `ansible-playbook` does every job too (the commands say which playbook each runs); this driver adds live
progress, a summary table per host, reports (JSON, Markdown, JUnit XML) and exit codes that tell failed hosts
from unreachable ones from bad input. Its parts: arguments.py (the commands and their options), commands.py (a
run, its report and summary), doctor.py and lab.py (those commands' own steps), runner.py (ansible-runner),
events.py (what each host did), report.py and terminal.py (the reports and the screen).
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import sys
from pathlib import Path

from rich.console import Console

from sparkfleet import __version__, lab, report, watch
from sparkfleet.arguments import build_parser
from sparkfleet.collection_home import PROJECT_DIR
from sparkfleet.commands import ansible_core_version, error, run_command
from sparkfleet.outcome import EXIT_BAD_INPUT, EXIT_CANCELLED, EXIT_OK
from sparkfleet.runner import CANCEL_SIGNALS, ansible_config
from sparkfleet.terminal import make_console, print_summary

__all__ = ["main"]


def collection_version() -> str:
    """The collection's version: galaxy.yml in a checkout, MANIFEST.json where it was installed as a collection."""
    galaxy, manifest = PROJECT_DIR / "galaxy.yml", PROJECT_DIR / "MANIFEST.json"
    if galaxy.is_file():
        found = re.search(r"^version:\s*(\S+)", galaxy.read_text(), re.M)
        return found.group(1) if found else "?"
    if manifest.is_file():
        try:
            return str(json.loads(manifest.read_text())["collection_info"]["version"])
        except (ValueError, KeyError, TypeError):
            return "?"
    return "?"


def version_text() -> str:
    """sparkfleet, ansible-core, the collection and the configuration a run here would use (like ansible --version)."""
    core = ansible_core_version() or "not installed"
    try:
        config = ansible_config().described
    except ValueError as exc:
        config = str(exc)
    collection = collection_version()
    return (f"sparkfleet {__version__}\n  ansible-core {core}\n  collection sparkfleet.spark {collection} = "
            f"{PROJECT_DIR}\n"
            f"  config file = {config}\n  python = {sys.version.split()[0]} ({sys.executable})")


def show_report(path: Path, console: Console, metrics_file: Path | None = None) -> int:
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
    if metrics_file is not None:  # the same report as Prometheus metrics (metrics.py), nothing else rewritten
        from sparkfleet import metrics

        try:
            series = metrics.write(data, metrics_file)
        except metrics.MetricsError as exc:
            error(str(exc))
            return EXIT_BAD_INPUT
        console.print(f"wrote: {metrics_file} ({series} series of {source})", markup=False, soft_wrap=True)
        return EXIT_OK
    paths = report.write(data, source.parent)
    print_summary(data, paths, console)
    return int(data.get("exit_code", EXIT_OK))


def main(argv: list[str] | None = None) -> int:
    """The command; a cancel (Ctrl-C, SIGTERM, SIGHUP) before the playbook starts - while the inventory is read,
    at a password prompt - ends it with 130 and a line that says nothing ran, as a cancel during the run does."""
    cancelled = {"by": "SIGINT"}

    def on_signal(signum, frame):
        cancelled["by"] = signal.Signals(signum).name
        raise KeyboardInterrupt

    # SIGINT too: started in the background of a script (`sparkfleet ... &`, nohup) it is inherited ignored, and
    # Ctrl-C at the terminal it is later given must still cancel (the run's own handlers set it as well).
    previous = {sig: signal.signal(sig, on_signal) for sig in CANCEL_SIGNALS}
    try:
        return _main(argv)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
            print(f"\nsparkfleet: cancelled ({cancelled['by']}) before the playbook started: nothing was run on "
                  "any host", file=sys.stderr)
        return EXIT_CANCELLED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    if "--version" in (sys.argv[1:] if argv is None else argv)[:1]:
        print(version_text())
        return EXIT_OK
    args = parser.parse_args(argv)
    console = make_console(no_color=getattr(args, "no_color", False))
    if args.record is not None:  # a command of the table (command_table.py): its playbook, run
        return run_command(args.record, args, console)
    own = {"lab": lambda: lab.lab(args, console), "report": lambda: show_report(args.path, console, args.metrics),
           "watch": lambda: watch.watch(args, console),
           "completion": lambda: completion(parser, args.shell)}
    return own[args.command]()


def completion(parser, shell: str) -> int:
    import shtab

    print(shtab.complete(parser, shell=shell))
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
