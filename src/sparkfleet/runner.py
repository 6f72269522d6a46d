"""Running a playbook through ansible-runner: events, live progress, clean Ctrl-C, kept artifacts.

The runner's private data directory is temporary (it holds the environment
and the extra variables, which may carry secrets) and is removed after the
run; only the artifacts (job events, stdout, status) are kept, in the
report directory. Extra variables given as key=value or YAML reach Ansible
through a file in that temporary directory, never through argv, so the
artifacts' `command` holds only a path; of the environment it records, only
the names are kept.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import stat
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sparkfleet import ansible_config as _config
from sparkfleet.ansible_config import AnsibleConfig
from sparkfleet.collection_home import ANSIBLE_CFG, COLLECTIONS_DIR, PROJECT_DIR, collection_module
from sparkfleet.events import Fleet
from sparkfleet.processes import end_run
from sparkfleet.progress import Progress

# Ctrl-C, kill's default and a closed terminal end a run the same way: its processes first, then the rest.
CANCEL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def ansible_config(cwd: Path | None = None) -> AnsibleConfig:
    """The Ansible configuration a run started in cwd (default: here) uses, and what sparkfleet adds."""
    return _config.resolve(cwd or Path.cwd(), os.environ, ANSIBLE_CFG, COLLECTIONS_DIR)


EXIT_OK = 0
EXIT_FAILED_HOSTS = 2
EXIT_UNREACHABLE = 3
EXIT_BAD_INPUT = 4
EXIT_BUSY = 5
EXIT_CANCELLED = 130


@dataclass
class RunOutcome:
    status: str
    rc: int
    failed: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)  # Ansible's own error lines, when it stopped on bad input
    nothing_targeted: bool = False  # the run ended well having done nothing: no host matched

    @property
    def bad_input(self) -> bool:
        """ansible-playbook stopped on an error of its own - 1 error (an inventory it cannot parse, a vault it
        cannot open), 4 parser error, 5 bad options - with no host failed or unreachable."""
        return self.nothing_targeted or (
            self.status != "canceled" and self.rc in (1, 4, 5) and not self.failed and not self.unreachable)

    def exit_code(self) -> int:
        if self.status == "canceled":
            return EXIT_CANCELLED
        if self.bad_input:
            return EXIT_BAD_INPUT
        if self.unreachable:
            return EXIT_UNREACHABLE
        if self.failed or self.status != "successful" or self.rc != 0:
            return EXIT_FAILED_HOSTS
        return EXIT_OK


def outcome_from_stats(status: str, rc: int, stats: dict | None) -> RunOutcome:
    stats = stats or {}
    return RunOutcome(status=status, rc=rc, failed=set(stats.get("failures", {})),
                      unreachable=set(stats.get("dark", {})))


@dataclass
class AnsibleOptions:
    """The ansible-playbook options sparkfleet passes through, with Ansible's own meaning."""

    limit: str | None = None
    check: bool = False
    diff: bool = False
    tags: str | None = None
    skip_tags: str | None = None
    user: str | None = None
    connection: str | None = None
    become: bool = False
    ask_become_pass: bool = False
    ask_vault_pass: bool = False
    vault_ids: list[str] = field(default_factory=list)
    vault_password_file: str | None = None
    private_key: str | None = None
    forks: int | None = None
    verbose: int = 0

    @classmethod
    def from_args(cls, args, tags: str | None = None) -> AnsibleOptions:
        """From parsed command-line options; `tags` is the command's own default."""
        known = {name: getattr(args, name) for name in cls.__dataclass_fields__ if getattr(args, name, None)}
        return cls(**{**known, "tags": getattr(args, "tags", None) or tags})

    def argv(self, base: Path | None = None) -> list[str]:
        """The options for ansible-playbook; with `base`, the files they name made absolute from there
        (ansible-runner starts ansible-playbook in the collection's directory, not the user's)."""
        def path(value: str | None) -> str | None:
            return value and (str(base / Path(value).expanduser()) if base else value)

        def vault_id(value: str) -> str:
            label, at, source = value.rpartition("@")
            return value if not base or source == "prompt" else f"{label}{at}{path(source)}"

        cmd: list[str] = []
        for flag, value in (("--limit", self.limit), ("--tags", self.tags), ("--skip-tags", self.skip_tags),
                            ("--user", self.user), ("--connection", self.connection),
                            ("--vault-password-file", path(self.vault_password_file)),
                            ("--private-key", path(self.private_key)), ("--forks", self.forks)):
            if value:
                cmd += [flag, str(value)]
        for flag, on in (("--check", self.check), ("--diff", self.diff), ("--become", self.become),
                         ("--ask-become-pass", self.ask_become_pass), ("--ask-vault-pass", self.ask_vault_pass)):
            if on:
                cmd.append(flag)
        cmd += [word for value in self.vault_ids for word in ("--vault-id", vault_id(value))]
        if self.verbose:
            cmd.append("-" + "v" * self.verbose)
        return cmd

    def prompts(self) -> list[tuple[str, str]]:
        """(what to ask the user, the regex of ansible-playbook's own prompt) for each password it will ask."""
        asked = []
        if self.ask_become_pass:
            asked.append(("BECOME password: ", r"BECOME password.*:\s*$"))
        if self.ask_vault_pass:
            asked.append(("Vault password: ", r"Vault password:\s*$"))
        for vault_id in self.vault_ids:
            label, _, source = vault_id.rpartition("@")
            if source == "prompt":
                asked.append((f"Vault password ({label or 'default'}): ",
                               rf"Vault password \({re.escape(label or 'default')}\):\s*$"))
        return asked


def extra_vars_files(values: list[str], directory: Path) -> list[str]:
    """-e values as Ansible takes them, each inline one moved into a file (no secret in argv)."""
    args = []
    for index, value in enumerate(values or []):
        if value.startswith("@"):
            source = Path(value[1:]).expanduser()
            if not source.is_file():
                raise ValueError(f"extra-variables file {value[1:]} not found; expected -e @FILE to name a "
                                 "YAML or JSON file")
            args += ["--extra-vars", f"@{source.absolute()}"]
            continue
        stripped = value.strip()
        if stripped.startswith(("{", "[")) or (":" in stripped.split("=", 1)[0] and "=" not in stripped):
            try:
                data = yaml.safe_load(stripped)
            except yaml.YAMLError as exc:
                where = getattr(exc, "problem_mark", None)
                raise ValueError(f"extra variables '{stripped[:80]}' are not valid YAML/JSON"
                                 + (f" (line {where.line + 1}, column {where.column + 1}: {exc.problem})" if where
                                    else "") + "; expected key=value, YAML/JSON or @file") from None
        else:
            data = {}
            for word in shlex.split(stripped):
                key, sep, val = word.partition("=")
                if not sep or not key:
                    raise ValueError(f"extra variable '{word}' is not key=value, YAML/JSON or @file")
                data[key] = val
        path = directory / f"extra-vars-{index}.json"
        path.write_text(json.dumps(data))
        path.chmod(0o600)
        args += ["--extra-vars", f"@{path}"]
    return args


@contextlib.contextmanager
def private_files():
    """What sparkfleet itself writes (reports and artifacts, the inventory's .sparkfleet/) is its user's alone,
    whatever the umask; the processes it starts keep the user's umask (a venv on a Spark driven locally is for
    every user)."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


class InventoryBusy(Exception):
    """Another sparkfleet run holds the inventory; str() names it."""


@contextlib.contextmanager
def inventory_lock(inventory: str, command: str):
    """Hold <inventory>/.sparkfleet/run.lock for the run, so two runs never write the image lock or the hosts'
    records at once; a second run is refused at once, naming the one that holds it. The directory is the one the
    roles keep the lock and the records in (module_utils/common/_inventory.py); a host list (a,b,) has none to lock."""
    inventories = collection_module("common._inventory")
    try:
        directory = Path(inventories.directory([inventory])) / ".sparkfleet"
    except inventories.NoInventoryDirectory as exc:
        if not exc.host_list:
            raise
        yield  # a host list: no lock, no records
        return
    path = directory / "run.lock"
    trusted = collection_module("common._trusted")
    with private_files():
        # Another user's .sparkfleet/ (or a run.lock linked to a root file) is refused, never followed or truncated.
        trusted.make_dir(str(directory), 0o700, "the inventory's .sparkfleet folder")
        handle = os.fdopen(trusted.open_file(str(path), os.O_RDWR | os.O_CREAT, 0o600, "the run lock"), "r+")
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another run"
            raise InventoryBusy(f"{holder} holds inventory {inventory} ({path}); wait for it to finish and run "
                                "again. Nothing was changed.") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"sparkfleet {command} (pid {os.getpid()}, since "
                     f"{datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()})")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def ansible_errors(stdout: Path, inventory: str | None = None) -> list[str]:
    """Why Ansible stopped: its error lines from a run's stdout ('[ERROR]: ...' in ansible-core 2.19, 'ERROR! ...'
    before), each file:line:column it named ('Origin: ...'), and the inventory's variable file that does not parse
    (Ansible 2.19 names none for a broken group_vars file)."""
    try:
        text = stdout.read_text(errors="replace")
    except OSError:
        text = ""
    lines = [line.strip() for line in text.splitlines()]
    errors = [line for line in lines if line.startswith(("[ERROR]", "ERROR!"))]
    errors += dict.fromkeys(line for line in lines if line.startswith("Origin: ") and re.search(r":\d+:\d+$", line))
    return errors + (broken_variable_files(Path(inventory)) if inventory and "," not in inventory else [])


class _AnyTagLoader(yaml.SafeLoader):
    """YAML as Ansible reads variable files: its own tags (!vault, !unsafe) are values, not errors."""


_AnyTagLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def broken_variable_files(inventory: Path) -> list[str]:
    """'file:line:column: problem' for each group_vars/host_vars file of the inventory that is not valid YAML."""
    base = (inventory if inventory.is_dir() else inventory.parent).absolute()
    found = []
    for folder in ("group_vars", "host_vars"):
        for path in sorted((base / folder).rglob("*")) if (base / folder).is_dir() else []:
            if not path.is_file() or path.suffix not in ("", ".yml", ".yaml", ".json"):
                continue
            try:
                text = path.read_text(errors="replace")
                if not text.startswith("$ANSIBLE_VAULT"):
                    yaml.load(text, Loader=_AnyTagLoader)  # a SafeLoader
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
                found.append(f"{where}: {getattr(exc, 'problem', None) or exc}")
            except OSError:
                continue
    return found


def scrub_artifacts(artifacts: Path) -> None:
    """Keep the names of the environment ansible-runner records in each run's `command` artifact, not the
    values: the controller's environment may hold secrets (an NGC_API_KEY, cloud credentials, GITHUB_TOKEN).
    And make what ansible-runner and ansible-playbook wrote there under the user's umask (stdout, stderr, the
    fact cache) the user's alone, as the directory that holds them is."""
    for path in [artifacts, *artifacts.rglob("*")]:
        try:
            mode = path.lstat().st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                path.chmod(stat.S_IMODE(mode) & 0o700)
        except OSError:
            continue
    for path in artifacts.glob("*/command"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("env"), dict):
            data["env"] = sorted(data["env"])
            path.write_text(json.dumps(data))


def mitogen_refuses(core: str, loaders_source: str) -> str | None:
    """Why the installed Mitogen cannot run this ansible-core (None: it can), from the range its
    ansible_mitogen/loaders.py declares (ANSIBLE_VERSION_MIN, and ANSIBLE_VERSION_MAX where a release has one)."""
    have = tuple(int(part) for part in re.findall(r"\d+", core)[:2])
    bounds = {name: tuple(int(n) for n in value.split(","))
              for name, value in re.findall(r"^ANSIBLE_VERSION_(MIN|MAX)\s*=\s*\((\d+\s*,\s*\d+)\)", loaders_source,
                                            re.M)}
    low, high = bounds.get("MIN"), bounds.get("MAX")
    if (low and have < low) or (high and have > high):
        wanted = f"{'.'.join(map(str, low)) if low else '?'} to {'.'.join(map(str, high)) if high else 'newer'}"
        return (f"--fast: the installed Mitogen supports ansible-core {wanted}, and this is ansible-core {core}; "
                "leave --fast out, or install a Mitogen that supports it (pip install -U 'sparkfleet[fast]')")
    return None


def mitogen_env() -> dict[str, str]:
    """The environment that runs a playbook under Mitogen's strategy (`sparkfleet --fast`).

    Mitogen keeps one Python interpreter per host for the whole run instead of starting one per task: on a
    converged host, where nearly every task only checks, that is most of the time. It takes over connections
    named `ssh`, `local` and `docker` (not `community.docker.docker`); any other runs as without it.
    """
    try:
        import ansible_mitogen
    except ImportError as exc:
        raise ValueError("--fast runs Ansible under Mitogen, which is not installed next to sparkfleet; install "
                         "it with: pip install 'sparkfleet[fast]' (mitogen 0.3.x), or leave --fast out") from exc
    from ansible.release import __version__ as core

    loaders = Path(ansible_mitogen.__file__).parent / "loaders.py"
    refused = mitogen_refuses(core, loaders.read_text() if loaders.is_file() else "")
    if refused:
        raise ValueError(refused)
    strategies = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(strategies), "ANSIBLE_STRATEGY": "mitogen_linear"}


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

    def cmdline(self, private: Path) -> list[str]:
        # A host list (-i a,b,) goes to ansible-playbook as typed: given to ansible-runner, it becomes a file in
        # the private directory, and the inventory's directory (where the lock is written) a temporary one.
        hosts = ["--inventory", self.inventory] if "," in self.inventory else []
        if hosts and {h.strip() for h in self.inventory.split(",") if h.strip()} == {"localhost"}:
            # Named in the inventory, localhost is no longer Ansible's implicit one that runs the controller's
            # own Python; this run's is the one that has the collection's needs (the user's -e still wins).
            hosts += ["--extra-vars", json.dumps({"ansible_python_interpreter": sys.executable})]
        return hosts + self.options.argv(base=Path.cwd()) + extra_vars_files(self.extra_vars, private)

    def execute(self, fleet: Fleet) -> tuple[RunOutcome, dict]:
        import ansible_runner

        fast_env = mitogen_env() if self.fast else {}  # before anything is made: a missing Mitogen is bad input
        started = datetime.datetime.now(datetime.UTC)
        clock = time.monotonic()
        private = Path(tempfile.mkdtemp(prefix="sparkfleet-run-"))
        private.chmod(0o700)
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
            **fast_env,
        }
        for sig in CANCEL_SIGNALS:
            signal.signal(sig, on_signal)
        try:
            with progress:
                runner = ansible_runner.run(
                    private_data_dir=str(private),
                    project_dir=str(PROJECT_DIR),
                    playbook=str(PROJECT_DIR / self.playbook),
                    inventory=None if "," in self.inventory else str(Path(self.inventory).resolve()),
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
                outcome.errors = ansible_errors(artifacts / "run" / "stdout", self.inventory)
        except KeyboardInterrupt:
            end_run(os.getpid(), grace=1.0)
            outcome = RunOutcome(status="canceled", rc=EXIT_CANCELLED)
        finally:
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)
            shutil.rmtree(private, ignore_errors=True)
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
