"""Running a playbook through ansible-runner: events, live progress, clean Ctrl-C, kept artifacts.

The runner's private data directory is temporary (it holds the environment
and the extra variables, which may carry secrets) and is removed after the
run; only the artifacts (job events, stdout, status) are kept, in the
report directory. Extra variables given as key=value or YAML reach Ansible
through a file in that temporary directory, never through argv, so the
artifacts' `command` holds only a path; of the environment it records, only
the names are kept.

Exit codes are outcome.py's, Ansible's options ansible_options.py's, the run lock run_lock.py's, bad input
input_errors.py's, the kept artifacts artifacts.py's, --fast mitogen.py's.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from sparkfleet import ansible_config as _config
from sparkfleet.ansible_config import AnsibleConfig
from sparkfleet.ansible_options import AnsibleOptions, extra_vars_files
from sparkfleet.artifacts import scrub_artifacts
from sparkfleet.collection_home import ANSIBLE_CFG, COLLECTIONS_DIR, PROJECT_DIR, collection_module
from sparkfleet.events import Fleet
from sparkfleet.input_errors import ansible_errors
from sparkfleet.inventory_copy import InventoryCopy
from sparkfleet.mitogen import mitogen_env
from sparkfleet.outcome import EXIT_CANCELLED, RunOutcome, outcome_from_stats
from sparkfleet.processes import end_run
from sparkfleet.progress import Progress
from sparkfleet.run_environment import for_run
from sparkfleet.selection import is_host_list

# Ctrl-C, kill's default and a closed terminal end a run the same way: its processes first, then the rest.
CANCEL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def ansible_config(cwd: Path | None = None) -> AnsibleConfig:
    """The Ansible configuration a run started in cwd (default: here) uses, and what sparkfleet adds."""
    return _config.resolve(cwd or Path.cwd(), os.environ, ANSIBLE_CFG, COLLECTIONS_DIR)


# The longest path a Unix socket may have on Linux (sun_path, 108 bytes with its NUL), and what Python's
# multiprocessing adds below the temporary directory for the socket of ansible-core's in-process manager.
SOCKET_PATH_MAX = 107
SOCKET_BELOW_TMPDIR = len("/pymp-xxxxxxxx/listener-xxxxxxxx")


def socket_fits_below(folder: str | Path) -> bool:
    """Whether ansible-core's manager can make its socket below `folder` as the temporary directory."""
    return len(str(folder)) + SOCKET_BELOW_TMPDIR <= SOCKET_PATH_MAX


# Where root's runs keep their temporary folders when the user's TMPDIR fails the trust rule: a folder of root's
# alone, under /run (a tmpfs of root's, emptied at boot like /tmp but never writable by another user).
ROOT_TEMPORARY_BASE = Path("/run/sparkfleet")


def temporary_base() -> Path:
    """The folder the run's temporary folders are made in (its private data, its TMPDIR, the inventory's copy):
    the user's TMPDIR where the trust rule takes it (module_utils/common/_trusted.py; /tmp's sticky bit is
    enough, each folder is made exclusively, 0700), else for root ROOT_TEMPORARY_BASE. Untrusted (its text names
    the folder and what to do) where neither can be used: another user must never be able to swap the folder that
    holds Ansible's module payloads for their own."""
    trusted = collection_module("common._trusted")
    tmp = tempfile.gettempdir()
    try:
        trusted.check_dir(tmp, "the temporary directory (TMPDIR)", sticky_ok=True)
        return Path(tmp)
    except trusted.Untrusted as exc:
        if os.geteuid() != 0:
            raise
        refused = str(exc)
    try:
        trusted.make_dir(str(ROOT_TEMPORARY_BASE), 0o700, "root's temporary folder")
    except (trusted.Untrusted, OSError) as exc:
        raise trusted.Untrusted(f"{refused}; and root's own {ROOT_TEMPORARY_BASE} cannot be used either ({exc}). "
                                "Set TMPDIR to a folder of root's, then run again") from None
    return ROOT_TEMPORARY_BASE


def temporary_directory_problem() -> str | None:
    """Why no run can start with this temporary directory, or None: no trusted folder for the run's temporary
    folders (temporary_base), or ansible-core's manager would find no socket path below it, and every run stop with
    'Local RPC server did not start' and no other word."""
    try:
        tmp = str(temporary_base())
    except collection_module("common._trusted").Untrusted as exc:
        return str(exc)
    if socket_fits_below(tmp):
        return None
    return (f"the temporary directory {tmp} (TMPDIR) is {len(tmp)} characters long: ansible-core listens on a Unix "
            f"socket {SOCKET_BELOW_TMPDIR} characters below it, and a socket's path may have {SOCKET_PATH_MAX} at "
            "most, so ansible-playbook would stop with 'Local RPC server did not start'. Set TMPDIR to a folder of "
            f"at most {SOCKET_PATH_MAX - SOCKET_BELOW_TMPDIR} characters (TMPDIR=/tmp), then run again")


def private_folder(prefix: str) -> Path:
    """A folder of the run's own (0700, made exclusively) in temporary_base()."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=temporary_base()))


def run_tmpdir() -> Path | None:
    """The run's own temporary directory (TMPDIR of ansible-playbook and the modules run on the controller), made in
    temporary_base() and removed with the run, whatever ended it: a module's payload folder (Ansible's wrapper makes
    it there) cannot outlive a cancel that cut the module's own cleanup short, as a busy machine did to a second
    SIGINT (its worker passes one on too). Its name is short, and None (the base itself, as before) where the base
    is so long that a socket below it would pass SOCKET_PATH_MAX: ansible-core's manager listens there."""
    scratch = private_folder("sf-")
    if not socket_fits_below(scratch):
        scratch.rmdir()
        return None
    return scratch


@dataclass
class Run:
    playbook: str
    inventory: str
    report_dir: Path
    options: AnsibleOptions = field(default_factory=AnsibleOptions)
    extra_vars: list[str] = field(default_factory=list)
    # ansible-playbook's prompt (a regex) -> the answer; given to the runner in memory, never written.
    passwords: dict[str, str] = field(default_factory=dict, repr=False)
    live: bool | None = None  # None: when stdout is a terminal
    console: object = None  # rich Console for the progress; default a new one
    fast: bool = False  # Mitogen's strategy (mitogen_env)
    config: AnsibleConfig | None = None  # default: the one for the current directory (ansible_config())
    judged: InventoryCopy | None = None  # the inventory's copy Ansible reads (inventory_copy.py); None: as typed

    @property
    def source(self) -> str:
        return self.judged.source if self.judged else self.inventory

    def cmdline(self, private: Path) -> list[str]:
        # A host list (-i a,b,) goes to ansible-playbook as typed: given to ansible-runner, it becomes a file in
        # the private directory, and the inventory's directory (where the lock is written) a temporary one.
        hosts = ["--inventory", self.inventory] if is_host_list(self.inventory) else []
        if hosts and {h.strip() for h in self.inventory.split(",") if h.strip()} == {"localhost"}:
            # Named in the inventory, localhost is no longer Ansible's implicit one that runs the controller's
            # own Python; this run's is the one that has the collection's needs (the user's -e still wins).
            hosts += ["--extra-vars", json.dumps({"ansible_python_interpreter": sys.executable})]
        return hosts + self.options.argv(base=Path.cwd()) + extra_vars_files(self.extra_vars, private)

    def execute(self, fleet: Fleet) -> tuple[RunOutcome, dict]:
        import ansible_runner

        fast_env = mitogen_env() if self.fast else {}  # before anything is made: a missing Mitogen is bad input
        # What of this shell's environment must not reach ansible-playbook and the modules (run_environment.py):
        # said with the run's warnings, on the screen and in the reports.
        for left_out in for_run():
            fleet.warnings.append(f"left out of the run's environment: {left_out}")
        started = datetime.datetime.now(datetime.UTC)
        clock = time.monotonic()
        private = private_folder("sparkfleet-run-")
        scratch = run_tmpdir()
        # The report directory was claimed (reportdir.py): sparkfleet's own, never a link, the earlier run's
        # events gone. ansible-runner rotates nothing there: the folder holds this run alone.
        artifacts = self.report_dir / "artifacts"
        cancelled = {"asked": False, "ended": False}
        previous_handlers = {sig: signal.getsignal(sig) for sig in CANCEL_SIGNALS}

        def on_signal(signum, frame):
            if cancelled["asked"]:  # a second Ctrl-C (or SIGTERM): stop waiting
                raise KeyboardInterrupt
            cancelled["asked"] = True
            cancelled["by"] = signal.Signals(signum).name
            progress.note(f"cancelling ({signal.Signals(signum).name}): ending the run's processes; "
                          "Ctrl-C again to stop waiting")

        def cancel() -> bool:
            """ansible-runner asks this every few seconds; once asked, the run's processes end here first."""
            progress.tick()
            if cancelled["asked"] and not cancelled["ended"]:
                cancelled["ended"] = True
                end_run(os.getpid())
            return cancelled["asked"]

        progress = Progress(fleet, live=sys.stdout.isatty() if self.live is None else self.live,
                            console=self.console)
        config = self.config or ansible_config()
        env = {
            **config.env,
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "TMPDIR": str(scratch or temporary_base()),
            **fast_env,
            **(self.judged.env() if self.judged else {}),
        }
        for sig in CANCEL_SIGNALS:
            signal.signal(sig, on_signal)
        try:
            with progress:
                runner = ansible_runner.run(
                    private_data_dir=str(private),
                    project_dir=str(PROJECT_DIR),
                    playbook=str(PROJECT_DIR / self.playbook),
                    inventory=None if is_host_list(self.inventory) else str(Path(self.source).resolve()),
                    cmdline=shlex.join(self.cmdline(private)),
                    envvars=env,
                    artifact_dir=str(artifacts),
                    ident="run",
                    rotate_artifacts=0,
                    quiet=True,
                    suppress_env_files=True,
                    event_handler=lambda event: (fleet.handle(event), progress.update())[0] or True,
                    cancel_callback=cancel,
                    passwords=self.passwords,
                )
            outcome = outcome_from_stats(runner.status, runner.rc or 0, runner.stats)
            # A host the connection never reached though Ansible counted a failure (a container not there).
            outcome.unreachable |= {name for name, host in fleet.hosts.items() if host.unreachable}
            if outcome.bad_input:
                outcome.errors = [self.judged.shown(e, as_typed=False) if self.judged else e
                                  for e in ansible_errors(artifacts / "run" / "stdout", self.inventory)]
        except KeyboardInterrupt:
            end_run(os.getpid(), grace=1.0)
            outcome = RunOutcome(status="canceled", rc=EXIT_CANCELLED)
        finally:
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)
            shutil.rmtree(private, ignore_errors=True)
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
            scrub_artifacts(artifacts)
        if outcome.status == "canceled" and not outcome.errors:
            outcome.errors = [f"cancelled ({cancelled.get('by', 'SIGINT')}): every process of the run was ended; "
                              "what it changed before stays, and the hosts' summary shows it. Run the command "
                              "again to finish"]
        finished = datetime.datetime.now(datetime.UTC)
        meta = {"playbook": self.playbook, "inventory": str(self.inventory), "limit": self.options.limit,
                "check": self.options.check, "started_at": started.replace(microsecond=0).isoformat(),
                "finished_at": finished.replace(microsecond=0).isoformat(),
                "duration_s": round(time.monotonic() - clock, 1),
                "status": outcome.status if outcome.status in ("successful", "failed", "canceled", "timeout")
                else "failed", "exit_code": outcome.exit_code()}
        return outcome, meta
