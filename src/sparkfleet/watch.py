"""`sparkfleet watch`: the fleet verified on a timer and its metrics kept where node_exporter reads them.

- `watch install` writes a systemd service and timer (sparkfleet-watch.service, .timer) that run `sparkfleet watch
  run` every --interval (30 minutes by default), and starts the timer where systemd runs this machine;
- `watch run` is one cycle: the read-only `sparkfleet verify` of the inventory into the state folder's report
  directory, then that report as metrics (metrics.py) into node_exporter's textfile folder. Whatever ended the
  verify (a host failed, unreachable, bad input, another run holding the lock), its exit code is a metric; the
  cycle fails only where the metrics could not be written;
- `watch status` says what the timer does and what the last metrics say; `watch remove` takes it all away.

The service is a oneshot (the timer never starts it while it runs; sparkfleet's run lock holds besides) with the
hardening systemd offers a root job: the file system read-only but for the state folder, the textfile folder and
the inventory's .sparkfleet/, a private /tmp, no new privileges. Every value written into a unit is checked where
it enters: a path of plain characters, an interval systemd reads as one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from sparkfleet import metrics
from sparkfleet.collection_home import collection_module
from sparkfleet.outcome import EXIT_BAD_INPUT, EXIT_FAILED_HOSTS, EXIT_OK

UNIT = "sparkfleet-watch"
UNIT_DIR = Path("/etc/systemd/system")
TEXTFILE_DIR = Path("/var/lib/prometheus/node-exporter")  # Debian's prometheus-node-exporter reads it
STATE_DIR = Path("/var/lib/sparkfleet/watch")
METRICS_FILE = "sparkfleet.prom"
# A path written into a unit: plain characters only (systemd would read a space, a quote or a % as syntax).
_PLAIN_PATH = re.compile(r"^/[A-Za-z0-9._/@+-]*$")
# An interval as systemd reads it in OnUnitActiveSec= (5min, 30min, 1h, 2h30min), 1 minute at least.
_INTERVAL = re.compile(r"^(\d+(s|min|h|d))+$")


class WatchError(Exception):
    """Bad input for a watch command; str() says what was found, what was expected and what to do."""


def _plain(path: Path, what: str) -> Path:
    absolute = Path(os.path.abspath(path))
    if not _PLAIN_PATH.match(str(absolute)):
        raise WatchError(f"{what} is {str(absolute)!r}; a systemd unit holds it, so it must be a path of letters, "
                         "digits and . _ / @ + - only: move it, or link it from such a path")
    return absolute


def _interval(text: str) -> str:
    seconds = 0
    for number, unit in re.findall(r"(\d+)(s|min|h|d)", text or ""):
        seconds += int(number) * {"s": 1, "min": 60, "h": 3600, "d": 86400}[unit]
    if not _INTERVAL.match(text or "") or seconds < 60:
        raise WatchError(f"--interval is {text!r}; expected a span systemd reads, 1 minute or more, such as 30min, "
                         "1h or 2h30min")
    return text


def systemd_running() -> bool:
    """Whether systemd manages this machine (sd_booted(): /run/systemd/system is there)."""
    return Path("/run/systemd/system").is_dir()


def units(sparkfleet: Path, inventory: Path, textfile_dir: Path, state_dir: Path, interval: str) -> dict[str, str]:
    """The service and the timer, by file name."""
    writable = [str(textfile_dir), str(state_dir)]
    if inventory.is_dir():
        writable.append(f"-{inventory / '.sparkfleet'}")  # the run lock and the hosts' records ("-": may be missing)
    # PrivateTmp= gives the service a /tmp (and /var/tmp) of its own: what lies there is hidden from it, the
    # sparkfleet it runs too (a checkout or venv under /tmp: "Unable to locate executable"), and what it writes there
    # is lost. Left off only where a path the service needs is there, and said in the unit.
    hidden = [str(p) for p in (sparkfleet, inventory, textfile_dir, state_dir)
              if any(str(p) == tmp or str(p).startswith(tmp + "/") for tmp in ("/tmp", "/var/tmp"))]
    private_tmp = ("PrivateTmp=yes" if not hidden else
                   f"# PrivateTmp= left off: it would hide {', '.join(hidden)} from the service")
    service = f"""[Unit]
Description=sparkfleet watch: verify the fleet (read-only) and write its metrics for node_exporter
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
ExecStart={sparkfleet} watch run -i {inventory} --textfile-dir {textfile_dir} --state-dir {state_dir}
# Ansible's own temporary and SSH control folders, inside what the service may write.
Environment=ANSIBLE_LOCAL_TEMP={state_dir}/ansible-tmp ANSIBLE_SSH_CONTROL_PATH_DIR={state_dir}/ssh NO_COLOR=1
# Every other temporary file (Python's tempfile: the runner's private folder) in a folder of the run's own, which
# systemd makes writable under ProtectSystem=strict and removes when the run ends: /tmp is read-only there where
# PrivateTmp= is left off.
RuntimeDirectory=sparkfleet-watch
RuntimeDirectoryMode=0700
Environment=TMPDIR=%t/sparkfleet-watch
ProtectSystem=strict
ReadWritePaths={' '.join(writable)}
{private_tmp}
NoNewPrivileges=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictSUIDSGID=yes
LockPersonality=yes
Nice=10
TimeoutStartSec=1h
"""
    timer = f"""[Unit]
Description=sparkfleet watch every {interval}

[Timer]
OnBootSec=5min
OnUnitActiveSec={interval}
RandomizedDelaySec=60
Unit={UNIT}.service

[Install]
WantedBy=timers.target
"""
    return {f"{UNIT}.service": service, f"{UNIT}.timer": timer}


def _systemctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, check=False)


def install(args: argparse.Namespace, console: Console) -> int:
    if "," in args.inventory:
        raise WatchError(f"-i is the host list {args.inventory!r}; the timer verifies an inventory file or folder: "
                         "list the hosts in one (inventory/example shows how) and give its path")
    inventory = _plain(Path(args.inventory), "the inventory")
    if not inventory.exists():
        raise WatchError(f"inventory {inventory} not found; expected the inventory sparkfleet verify reads")
    textfile_dir = _plain(args.textfile_dir, "--textfile-dir")
    state_dir = _plain(args.state_dir, "--state-dir")
    unit_dir = _plain(args.unit_dir, "--unit-dir")
    interval = _interval(args.interval)
    sparkfleet = _plain(Path(sys.argv[0]) if Path(sys.argv[0]).is_absolute() else
                        Path(shutil.which("sparkfleet") or Path(sys.executable).parent / "sparkfleet"),
                        "sparkfleet's own path")
    files = collection_module("common._files")
    trusted = collection_module("common._trusted")
    try:
        trusted.make_dir(str(state_dir), 0o700)
        trusted.make_dir(str(textfile_dir), 0o755)
        if inventory.is_dir():
            # The run lock's and the records' folder, made now: the service's sandbox (ProtectSystem=strict) lets
            # it be written only where it exists when the unit starts (ReadWritePaths= skips a missing one).
            trusted.make_dir(str(inventory / ".sparkfleet"), 0o700, "the inventory's .sparkfleet folder")
        for name, text in units(sparkfleet, inventory, textfile_dir, state_dir, interval).items():
            files.atomic_write(str(unit_dir / name), text, 0o644)
    except trusted.Untrusted as exc:
        raise WatchError(f"{exc}") from None
    console.print(f"wrote: {unit_dir / (UNIT + '.service')}, {unit_dir / (UNIT + '.timer')} (every {interval}: "
                  f"sparkfleet verify of {inventory}, its metrics in {textfile_dir / METRICS_FILE})", markup=False,
                  soft_wrap=True)
    if not systemd_running():
        console.print(f"systemd does not run this machine: nothing was started; where it does, `systemctl "
                      f"daemon-reload && systemctl enable --now {UNIT}.timer`", markup=False, soft_wrap=True)
        return EXIT_OK
    if unit_dir != UNIT_DIR:
        console.print(f"the units are not in {UNIT_DIR}: nothing was started; link them there, then `systemctl "
                      f"daemon-reload && systemctl enable --now {UNIT}.timer`", markup=False, soft_wrap=True)
        return EXIT_OK
    for step in (["daemon-reload"], ["enable", "--now", f"{UNIT}.timer"]):
        done = _systemctl(*step)
        if done.returncode != 0:
            raise WatchError(f"systemctl {' '.join(step)} failed: {(done.stderr or done.stdout).strip()}")
    console.print(f"started: {UNIT}.timer (sparkfleet watch status says when it runs next)", markup=False)
    return EXIT_OK


def run(args: argparse.Namespace, console: Console) -> int:
    """One cycle: verify into the state folder's report directory, then its report as metrics."""
    from sparkfleet.command_table import named
    from sparkfleet.commands import run_command

    state_dir = Path(os.path.abspath(args.state_dir))
    trusted = collection_module("common._trusted")
    try:
        trusted.make_dir(str(state_dir), 0o700)
    except trusted.Untrusted as exc:
        raise WatchError(str(exc)) from None
    report_dir = state_dir / "run"
    verify = argparse.Namespace(inventory=args.inventory, limit=None, check=False, diff=False, tags=None,
                                skip_tags=None, extra_vars=[], plain=True, report_dir=report_dir,
                                no_color=True, json=False, smoke=False)
    code = run_command(named("verify"), verify, console)
    source = report_dir / "report.json"
    try:
        data = json.loads(source.read_text())
    except (OSError, ValueError) as exc:
        raise WatchError(f"the verify (exit {code}) left no report at {source} ({exc}); the metrics were not "
                         "written") from None
    try:
        series = metrics.write(data, Path(os.path.abspath(args.textfile_dir)) / METRICS_FILE)
    except metrics.MetricsError as exc:
        raise WatchError(str(exc)) from None
    console.print(f"wrote: {Path(args.textfile_dir) / METRICS_FILE} ({series} series; the verify's exit code was "
                  f"{code})", markup=False, soft_wrap=True)
    return EXIT_OK


def status(args: argparse.Namespace, console: Console) -> int:
    if systemd_running():
        shown = _systemctl("list-timers", f"{UNIT}.timer", "--all", "--no-pager")
        console.print(shown.stdout.strip() or shown.stderr.strip(), markup=False, highlight=False)
        last = _systemctl("show", f"{UNIT}.service", "-p", "Result", "-p", "ExecMainStatus",
                          "-p", "ExecMainExitTimestamp")
        console.print(last.stdout.strip(), markup=False, highlight=False)
    else:
        console.print("systemd does not run this machine: no timer to show", markup=False)
    path = Path(args.textfile_dir) / METRICS_FILE
    try:
        text = path.read_text()
    except OSError as exc:
        console.print(f"no metrics at {path} ({exc.strerror}): no cycle ran, or it wrote elsewhere "
                      "(--textfile-dir)", markup=False, soft_wrap=True)
        return EXIT_FAILED_HOSTS
    for line in metrics.summary(text):
        console.print(line, markup=False, soft_wrap=True)
    return EXIT_OK


def remove(args: argparse.Namespace, console: Console) -> int:
    unit_dir = Path(os.path.abspath(args.unit_dir))
    if systemd_running() and unit_dir == UNIT_DIR:
        _systemctl("disable", "--now", f"{UNIT}.timer")
    gone = []
    for path in (unit_dir / f"{UNIT}.service", unit_dir / f"{UNIT}.timer",
                 Path(os.path.abspath(args.textfile_dir)) / METRICS_FILE):
        if path.is_file() and not path.is_symlink():
            path.unlink()
            gone.append(str(path))
    if systemd_running() and unit_dir == UNIT_DIR:
        _systemctl("daemon-reload")
    console.print("removed: " + (", ".join(gone) if gone else "nothing (no watch was installed there)"),
                  markup=False, soft_wrap=True)
    return EXIT_OK


def watch(args: argparse.Namespace, console: Console) -> int:
    """The watch command asked for; bad input is exit 4 with the reason."""
    from sparkfleet.commands import error

    try:
        return {"install": install, "run": run, "status": status, "remove": remove}[args.watch_command](
            args, console)
    except WatchError as exc:
        error(str(exc))
        return EXIT_BAD_INPUT
