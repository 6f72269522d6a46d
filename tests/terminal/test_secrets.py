"""Secrets stay put, whatever ends the run: `sparkfleet pin` at a pty against a real htpasswd registry, with a
registry password in a real ansible-vault file, the vault's password in a file, an NGC API key and a GitHub token
in the environment and an inline -e value; run to its end, then cancelled with Ctrl-C, SIGTERM and SIGHUP (the
terminal closed).

Every planted secret (as given, and as Docker and HTTP Basic encode it) is looked for in every file the run
leaves (the report, runner artifacts, job events, the lock, the inventory's records), in what the screen showed
(at -vvv), and in the argv of every process of the run, read from /proc while it runs.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import inert_load
from oci_push import push
from pty_screen import Screen, SilentRegistry, started
from registries import Registry

from conftest import BIN, SHOW_INVOCATION

pytestmark = pytest.mark.testbed

PASSWORD = "planted-registry-password-" + uuid.uuid4().hex[:8]
VAULT_PASSWORD = "planted-vault-password-" + uuid.uuid4().hex[:8]
NGC_KEY = "nvapi-planted-" + uuid.uuid4().hex
GITHUB_TOKEN = "ghp_planted" + uuid.uuid4().hex
INLINE = "planted-inline-" + uuid.uuid4().hex[:8]
PLANTED = [PASSWORD, VAULT_PASSWORD, NGC_KEY, GITHUB_TOKEN, INLINE,
           base64.b64encode(f"fleet:{PASSWORD}".encode()).decode()]


class ArgvWatch:
    """Every command line of the processes that carry the run's mark, read from /proc every 50 ms."""

    def __init__(self, mark: str):
        self.mark, self.seen, self.stop = mark.encode(), set(), threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        while not self.stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    if self.mark in (entry / "environ").read_bytes():
                        self.seen.add((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                except OSError:
                    continue
            time.sleep(0.05)

    def done(self) -> set[str]:
        self.stop.set()
        self.thread.join()
        return self.seen


def inventory(root: Path, registry: str) -> tuple[Path, Path]:
    inv = root / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  children:\n    sparks:\n      hosts: {}\n")
    (inv / "group_vars" / "all" / "main.yml").write_text(yaml.safe_dump({
        "spark_images_registry_replacements": {"nvcr.io": registry, "docker.io": registry},
        "spark_images_catalog": [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch",
                                  "tags": ["25.11-py3"], "launcher": "spark-ngc"}]}))
    vault = inv / "group_vars" / "all" / "vault.yml"
    vault.write_text(yaml.safe_dump({"spark_images_registry_credentials": {
        registry: {"username": "fleet", "password": PASSWORD}}}))
    password_file = root / "vault-pass"
    password_file.write_text(VAULT_PASSWORD)
    subprocess.run([str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(password_file), str(vault)],
                   check=True, capture_output=True)
    return inv, password_file


def leaks(root: Path, screen: str, argv: set[str], own: set[Path]) -> list[str]:
    found = [f"{p}" for p in root.rglob("*") if p.is_file() and p not in own
             and any(s.encode() in p.read_bytes() for s in PLANTED)]
    found += [f"screen: {s}" for s in PLANTED if s in screen]
    # What the user typed (sparkfleet's own command line) is theirs; every process sparkfleet starts is checked.
    found += [f"argv: {a}" for a in argv if any(s in a for s in PLANTED) and "bin/sparkfleet pin " not in a]
    return found


def run_pin(root: Path, registry: str, cancel: str | None = None) -> tuple[Screen, set[str], Path]:
    _inventory, password_file = inventory(root, registry)
    mark = f"sparkfleet-secrets-{uuid.uuid4().hex}"
    watch = ArgvWatch(mark)
    screen = Screen(["pin", "-i", "inv", "--vault-password-file", str(password_file), "-e",
                     f"note={INLINE}", "-vvv"], root, SPARKFLEET_TEST_RUN=mark, NGC_API_KEY=NGC_KEY,
                    GITHUB_TOKEN=GITHUB_TOKEN, **SHOW_INVOCATION)
    if cancel:
        started(mark)
        if cancel in ("SIGTERM", "SIGHUP"):
            os.kill(screen.child.pid, getattr(signal, cancel))
        else:
            screen.child.sendintr()
    screen.wait()
    return screen, watch.done(), password_file


@pytest.fixture
def registry(tmp_path):
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text(subprocess.run(["htpasswd", "-Bbn", "fleet", PASSWORD], capture_output=True, text=True,
                                       check=True).stdout)
    served = Registry(tmp_path, free_port(), {"htpasswd": {"realm": "sparkfleet", "path": str(htpasswd)}})
    push(served.url, "nvidia/pytorch:25.11-py3", ["amd64", "arm64"], user="fleet", password=PASSWORD)
    yield served
    served.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_run_to_its_end_leaves_no_secret_anywhere(tmp_path, registry):
    root = tmp_path / "work"
    root.mkdir()
    screen, argv, password_file = run_pin(root, registry.host)
    assert screen.rc == 0, screen.text[-3000:]
    lock = inert_load((root / "inv" / "group_vars" / "all" / "spark_images_lock.yml").read_text())
    assert lock["spark_images_lock"]["ngc"]["registry"] == registry.host, "the vaulted credential was used"
    assert any("ansible-playbook" in a for a in argv), "the run's processes were watched"
    own = {password_file, root / "inv" / "group_vars" / "all" / "vault.yml"}
    assert leaks(root, screen.raw, argv, own) == []
    events = list((root / "reports" / "latest" / "artifacts" / "run" / "job_events").glob("*.json"))
    assert any(b'"invocation"' in e.read_bytes() for e in events), "the modules' arguments were there to search"
    command = json.loads((root / "reports" / "latest" / "artifacts" / "run" / "command").read_text())
    assert "NGC_API_KEY" in command["env"] and isinstance(command["env"], list), "names kept, values dropped"


@pytest.mark.parametrize("cancel", ["SIGTERM", "SIGHUP", "ctrl-c"])
def test_a_cancelled_run_leaves_no_secret_anywhere(tmp_path, cancel):
    silent = SilentRegistry()
    try:
        root = tmp_path / "work"
        root.mkdir()
        screen, argv, password_file = run_pin(root, silent.address, cancel=cancel)
    finally:
        silent.close()
    assert screen.rc == 130, screen.text[-3000:]
    own = {password_file, root / "inv" / "group_vars" / "all" / "vault.yml"}
    assert leaks(root, screen.raw, argv, own) == []
    command = json.loads((root / "reports" / "latest" / "artifacts" / "run" / "command").read_text())
    assert isinstance(command["env"], list), "the environment's values were dropped whatever ended the run"


INDEX_TOKEN = "planted-index-token-" + uuid.uuid4().hex[:8]


def test_a_vaulted_index_token_leaves_no_trace_of_a_matrix_check_at_vvv(tmp_path, pyindex):
    """`sparkfleet matrix check` at a pty and at -vvv, its index overrides (with a token in their URLs, as a
    private mirror wants) in a real ansible-vault file: the token reaches the index and nothing else - no file
    the run leaves, not the screen, not the argv of pip or any other process of the run."""
    root = tmp_path / "work"
    inv = root / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(json.dumps({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}))
    vault = inv / "group_vars" / "all" / "vault.yml"
    vault.write_text(yaml.safe_dump({"spark_venv_index_mirrors": {
        up: mine.replace("http://", f"http://ci:{INDEX_TOKEN}@", 1) for up, mine in pyindex.overrides.items()}}))
    password_file = root / "vault-pass"
    password_file.write_text(VAULT_PASSWORD)
    subprocess.run([str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(password_file), str(vault)],
                   check=True, capture_output=True)
    mark = f"sparkfleet-secrets-{uuid.uuid4().hex}"
    watch = ArgvWatch(mark)
    screen = Screen(["matrix", "check", "-i", "inv", "--vault-password-file", str(password_file), "-vvv"], root,
                    timeout=600, SPARKFLEET_TEST_RUN=mark, NGC_API_KEY=NGC_KEY, GITHUB_TOKEN=GITHUB_TOKEN,
                    **SHOW_INVOCATION).wait()
    argv = watch.done()
    assert screen.rc == 0, screen.text[-3000:]
    assert {request.split("/")[1] for request in pyindex.requests} == {"pypi", "cu130"}, "the vaulted URLs were used"
    assert any(" -m pip install --dry-run" in a for a in argv), "pip's processes were watched"
    assert any(" pip compile " in a for a in argv), "uv's processes (each step resolved for the Spark) were watched"
    planted = [INDEX_TOKEN, VAULT_PASSWORD, NGC_KEY, GITHUB_TOKEN]
    found = [f"{p}" for p in root.rglob("*") if p.is_file() and p not in (password_file, vault)
             and any(s.encode() in p.read_bytes() for s in planted)]
    found += [f"screen: {s}" for s in planted if s in screen.raw]
    found += [f"argv: {a}" for a in argv if any(s in a for s in planted)]
    assert found == []
