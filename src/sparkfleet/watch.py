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
the inventory's .sparkfleet/, a private /tmp always, no new privileges. The unit lives in root's own folders
(issue 70): it runs this sparkfleet's interpreter with `-I -m sparkfleet`, never a script path, and every path it
names - the interpreter and the venv it belongs to, the package and the collection it runs, the inventory, the
state and textfile folders - passes the trust rule (module_utils/common/_trusted.py) and lies neither in /tmp or
/var/tmp (a reboot empties them and anyone may then make the name) nor below any other folder every user can write.
Every value written into a unit is checked whole where it enters: a path of plain characters, an interval systemd
reads as one, the operator's uid.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

from rich.console import Console

import sparkfleet
from sparkfleet import metrics
from sparkfleet.collection_home import PROJECT_DIR, collection_module
from sparkfleet.outcome import EXIT_BAD_INPUT, EXIT_BUSY, EXIT_FAILED_HOSTS, EXIT_OK

UNIT = "sparkfleet-watch"
UNIT_DIR = Path("/etc/systemd/system")
TEXTFILE_DIR = Path("/var/lib/prometheus/node-exporter")  # Debian's prometheus-node-exporter reads it
STATE_DIR = Path("/var/lib/sparkfleet/watch")
METRICS_FILE = "sparkfleet.prom"
# A path written into a unit: plain characters only (systemd would read a space, a quote or a % as syntax).
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9._/@+-]*")
# An interval as systemd reads it in OnUnitActiveSec= (5min, 30min, 1h, 2h30min), 1 minute at least.
_INTERVAL = re.compile(r"(\d+(s|min|h|d))+")
# Where systemd's PrivateTmp= gives the service folders of its own, and a reboot an empty folder anyone may fill.
PRIVATE_TMP = ("/tmp", "/var/tmp")


class WatchError(Exception):
    """Bad input for a watch command; str() says what was found, what was expected and what to do."""


def _plain(path: Path, what: str) -> Path:
    absolute = Path(os.path.abspath(path))
    if not _PLAIN_PATH.fullmatch(str(absolute)):
        raise WatchError(f"{what} is {str(absolute)!r}; a systemd unit holds it, so it must be a path of letters, "
                         "digits and . _ / @ + - only: move it, or link it from such a path")
    return absolute


def _below_tmp(path: str) -> str | None:
    return next((tmp for tmp in PRIVATE_TMP if path == tmp or path.startswith(tmp + "/")), None)


def _outside_tmp(path: Path, what: str) -> Path:
    tmp = _below_tmp(str(path))
    if tmp:
        raise WatchError(f"{what} is {path}, in {tmp}: a reboot empties {tmp}, and any user could then put their "
                         f"own there for root's timer to run or read (its private {tmp} hides it besides). Install "
                         "sparkfleet, and keep the inventory and the folders, in root's own folders (pip install "
                         "into /opt/sparkfleet, the inventory in /etc or /srv), then run again")
    return path


def _rooted(path: Path, what: str, kind: str = "any") -> Path:
    """A path the unit names or the service reads, judged: plain, by the trust rule over its whole length, and
    neither in /tmp or /var/tmp (as typed or once its links are followed) nor below another folder every user
    can write (/dev/shm): after a reboot anyone could make that name first, and root would run or read theirs."""
    absolute = _outside_tmp(_plain(path, what), what)
    trusted = collection_module("common._trusted")
    try:
        real = trusted.check_path(str(absolute), what, kind)
    except trusted.Untrusted as exc:
        raise WatchError(f"{exc}; the timer runs as root, so every path it names must be root's alone") from None
    _outside_tmp(Path(real), what)
    above = os.path.dirname(real)
    while above != "/":
        mode = os.stat(above).st_mode
        if mode & stat.S_IWOTH:
            raise WatchError(f"{what} is {real}, below {above}, which every user can write to (mode "
                             f"{stat.S_IMODE(mode):04o}): after a reboot any user could make its names first. Keep it "
                             "in root's own folders, then run again")
        above = os.path.dirname(above)
    return absolute


def runs() -> list[tuple[str, Path, str]]:
    """What the service runs, each (what, path, kind) for _rooted: this interpreter (in its venv), the venv, the
    sparkfleet package and the collection it runs (Ansible loads its roles and plugins as root)."""
    return [("sparkfleet's interpreter", Path(sys.executable), "file"),
            ("sparkfleet's Python environment", Path(sys.prefix), "dir"),
            ("sparkfleet's Python packages", Path(sysconfig.get_paths()["purelib"]), "dir"),
            ("the sparkfleet package", Path(sparkfleet.__file__).parent, "dir"),
            ("the collection sparkfleet runs", PROJECT_DIR, "dir")]


def operator_uid() -> str | None:
    """The uid of the user who typed `sudo sparkfleet watch install` (SUDO_UID, digits only), for the service to
    trust their inventory as the CLI they ran did; None where there is none."""
    sudo = os.environ.get("SUDO_UID", "")
    return sudo if os.geteuid() == 0 and re.fullmatch(r"[0-9]{1,10}", sudo) and sudo != "0" else None


def _interval(text: str) -> str:
    seconds = 0
    for number, unit in re.findall(r"(\d+)(s|min|h|d)", text or ""):
        seconds += int(number) * {"s": 1, "min": 60, "h": 3600, "d": 86400}[unit]
    if not _INTERVAL.fullmatch(text or "") or seconds < 60:
        raise WatchError(f"--interval is {text!r}; expected a span systemd reads, 1 minute or more, such as 30min, "
                         "1h or 2h30min")
    return text


def systemd_running() -> bool:
    """Whether systemd manages this machine (sd_booted(): /run/systemd/system is there)."""
    return Path("/run/systemd/system").is_dir()


def kept_with(inventory: Path) -> Path:
    """The inventory's .sparkfleet/ (the run lock and the hosts' records), for a folder and for a file alike."""
    return (inventory if inventory.is_dir() else inventory.parent) / ".sparkfleet"


def units(python: Path, inventory: Path, textfile_dir: Path, state_dir: Path, interval: str,
          operator: str | None = None) -> dict[str, str]:
    """The service and the timer, by file name. `python`: the interpreter whose sparkfleet the service runs;
    `operator`: the uid of the user who installed it under sudo (operator_uid())."""
    # the run lock and the hosts' records ("-": may be missing)
    writable = [str(textfile_dir), str(state_dir), f"-{kept_with(inventory)}"]
    # The operator's uid, for the service to trust their inventory as the CLI they ran under sudo did.
    environment = f"Environment=SUDO_UID={operator}\n" if operator else ""
    service = f"""[Unit]
Description=sparkfleet watch: verify the fleet (read-only) and write its metrics for node_exporter
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
# The interpreter, isolated (-I: no PYTHON* variable, no user site, no current folder on its path), and the
# package it has: no script path another user could replace.
ExecStart={python} -I -m sparkfleet watch run -i {inventory} --textfile-dir {textfile_dir} --state-dir {state_dir}
# Ansible's own temporary and SSH control folders, inside what the service may write.
Environment=ANSIBLE_LOCAL_TEMP={state_dir}/ansible-tmp ANSIBLE_SSH_CONTROL_PATH_DIR={state_dir}/ssh NO_COLOR=1
{environment}# Every other temporary file (Python's tempfile: the runner's private folder) in a folder of the run's
# own, which systemd makes writable under ProtectSystem=strict and removes when the run ends.
RuntimeDirectory=sparkfleet-watch
RuntimeDirectoryMode=0700
Environment=TMPDIR=%t/sparkfleet-watch
ProtectSystem=strict
ReadWritePaths={' '.join(writable)}
PrivateTmp=yes
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
    inventory = _rooted(inventory, "the inventory")
    textfile_dir = _outside_tmp(_plain(args.textfile_dir, "--textfile-dir"), "--textfile-dir")
    state_dir = _outside_tmp(_plain(args.state_dir, "--state-dir"), "--state-dir")
    unit_dir = _plain(args.unit_dir, "--unit-dir")
    interval = _interval(args.interval)
    for what, path, kind in runs():
        _rooted(path, what, kind)
    files = collection_module("common._files")
    trusted = collection_module("common._trusted")
    try:
        trusted.make_dir(str(state_dir), 0o700)
        trusted.make_dir(str(textfile_dir), 0o755)
        # The run lock's and the records' folder, made now: the service's sandbox (ProtectSystem=strict) lets it be
        # written only where it exists when the unit starts (ReadWritePaths= skips a missing one).
        trusted.make_dir(str(kept_with(inventory)), 0o700, "the inventory's .sparkfleet folder")
    except trusted.Untrusted as exc:
        raise WatchError(f"{exc}") from None
    for path, what in ((state_dir, "--state-dir"), (textfile_dir, "--textfile-dir")):
        _rooted(path, what, "dir")
    try:
        for name, text in units(Path(sys.executable), inventory, textfile_dir, state_dir, interval,
                                operator_uid()).items():
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
    started = datetime.datetime.now(datetime.UTC)
    code = run_command(named("verify"), verify, console)
    source = report_dir / "report.json"
    if code == EXIT_BUSY:
        # Another run held the inventory: this cycle verified nothing and wrote no report, so its metrics say so,
        # with its own time, rather than the last report's exit code and hosts again.
        data = held(started)
    else:
        try:
            data = json.loads(trusted.read_file(str(source), "the cycle's report"))
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


def held(started: datetime.datetime) -> dict:
    """The metrics' report of a cycle another run's lock stopped: its exit code (5) and times, no host (none was
    verified)."""
    ended = datetime.datetime.now(datetime.UTC)
    return {"command": "verify", "started_at": started.replace(microsecond=0).isoformat(),
            "finished_at": ended.replace(microsecond=0).isoformat(),
            "duration_s": round((ended - started).total_seconds(), 1), "status": "failed", "exit_code": EXIT_BUSY,
            "hosts": {}}


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
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:  # a \r stays a \r
            text = handle.read()
    except OSError as exc:
        console.print(f"no metrics at {path} ({exc.strerror}): no cycle ran, or it wrote elsewhere "
                      "(--textfile-dir)", markup=False, soft_wrap=True)
        return EXIT_FAILED_HOSTS
    try:
        lines = metrics.summary(text)
    except metrics.MetricsError as exc:
        raise WatchError(f"{path}: {exc}") from None
    for line in lines:
        console.print(line, markup=False, soft_wrap=True)
    return EXIT_OK


def remove(args: argparse.Namespace, console: Console) -> int:
    unit_dir = Path(os.path.abspath(args.unit_dir))
    if systemd_running() and unit_dir == UNIT_DIR:
        _systemctl("disable", "--now", f"{UNIT}.timer")
    gone = []
    for folder, names in ((unit_dir, (f"{UNIT}.service", f"{UNIT}.timer")),
                          (Path(os.path.abspath(args.textfile_dir)), (METRICS_FILE,))):
        gone += _removed(folder, names)
    if systemd_running() and unit_dir == UNIT_DIR:
        _systemctl("daemon-reload")
    console.print("removed: " + (", ".join(gone) if gone else "nothing (no watch was installed there)"),
                  markup=False, soft_wrap=True)
    return EXIT_OK


def _removed(folder: Path, names: tuple[str, ...]) -> list[str]:
    """Each of `names` in `folder` that is a regular file of a trusted owner, removed through the descriptor of the
    folder judged by the trust rule (a link, or a folder a link or another user could swap, is refused, never
    followed); what was removed."""
    trusted = collection_module("common._trusted")
    if not os.path.lexists(folder):
        return []
    try:
        trusted.check_dir(str(folder), "the folder to remove the watch from")
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (trusted.Untrusted, OSError) as exc:
        raise WatchError(f"{exc}; nothing was removed there") from None
    gone = []
    try:
        for name in names:
            try:
                info = os.lstat(name, dir_fd=fd)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_uid in trusted.trusted_owners():
                os.unlink(name, dir_fd=fd)
                gone.append(str(folder / name))
    finally:
        os.close(fd)
    return gone


def watch(args: argparse.Namespace, console: Console) -> int:
    """The watch command asked for; bad input is exit 4 with the reason."""
    from sparkfleet.commands import error

    try:
        return {"install": install, "run": run, "status": status, "remove": remove}[args.watch_command](
            args, console)
    except WatchError as exc:
        error(str(exc))
        return EXIT_BAD_INPUT
