"""Attacks from another user's folder (issue 46, the third review): root trusts no folder another user can write.

Each test performs the attack as it was reproduced - what another user (uid 4242, a login on the box) leaves in a
folder root then uses: a link for a file root creates or truncates, a file of theirs root replaces, a group_vars
file, a torch.py - and checks that root refused before touching anything (the link's target intact, nothing
loaded or run), saying which folder, whose it is and what to do. sparkfleet's rule and its helper:
plugins/module_utils/common/_trusted.py; its Python isolation: plugins/module_utils/common/_isolated.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from pty_screen import piped

from conftest import BIN, REPO, ansible_env, run_module

OTHER_UID = 4242  # a user with a login on the box, not the one running sparkfleet
ROOTS_FILE = "root's file: 28 bytes of it.\n"


@pytest.fixture
def victim(tmp_path):
    """A root-owned file elsewhere, which a planted link points at."""
    path = tmp_path / "victim" / "precious.conf"
    path.parent.mkdir()
    path.write_text(ROOTS_FILE)
    path.chmod(0o644)
    return path


def shared_folder(tmp_path, name: str = "shared", mode: int = 0o1777):
    folder = tmp_path / name
    folder.mkdir()
    folder.chmod(mode)
    return folder


def planted(path, **kwargs) -> None:
    """Made another user's: what they could have made there themselves."""
    os.chown(path, OTHER_UID, OTHER_UID, follow_symlinks=False)


def inventory_file(folder, name: str = "inv.yml") -> None:
    (folder / name).write_text("all:\n  children:\n    sparks:\n      hosts:\n        spark-1:\n"
                               "          ansible_connection: community.docker.docker\n")


def test_finding_1_a_run_lock_linked_to_a_root_file_in_a_shared_inventory_folder_is_refused(tmp_path, victim):
    """Finding 1: in a world-writable sticky folder holding the inventory, another user made .sparkfleet/ with
    run.lock linked to a root file; root's `sparkfleet doctor -i /shared/inv.yml` truncated it to 0 bytes."""
    shared = shared_folder(tmp_path)
    inventory_file(shared)
    lock = shared / ".sparkfleet"
    lock.mkdir()
    (lock / "run.lock").symlink_to(victim)
    planted(lock / "run.lock")
    planted(lock)
    proc = piped(["doctor", "-i", str(shared / "inv.yml"), "--plain", "--report-dir", "rd"], tmp_path)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert victim.read_text() == ROOTS_FILE
    said = " ".join(proc.stderr.split())
    assert f"the inventory's folder {shared} (root (uid 0), mode 1777) can be written by other users" in said, said
    # The same in a folder of root's own whose .sparkfleet/ another user made: refused at the lock.
    inventory = shared_folder(tmp_path, "inv", 0o755)
    inventory_file(inventory, "hosts.yml")
    (inventory / ".sparkfleet").mkdir(mode=0o700)
    (inventory / ".sparkfleet" / "run.lock").symlink_to(victim)
    proc = piped(["doctor", "-i", str(inventory), "--plain", "--report-dir", "rd2"], tmp_path)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"the run lock {inventory}/.sparkfleet/run.lock is a symbolic link (to {victim})" in " ".join(
        proc.stderr.split())
    planted(inventory / ".sparkfleet")
    proc = piped(["doctor", "-i", str(inventory), "--plain", "--report-dir", "rd3"], tmp_path)
    assert proc.returncode == 4
    assert f"the inventory's .sparkfleet folder {inventory}/.sparkfleet belongs to uid {OTHER_UID}" in " ".join(
        proc.stderr.split()), proc.stderr
    assert victim.read_text() == ROOTS_FILE
    assert json.loads((tmp_path / "rd3" / "report.json").read_text())["exit_code"] == 4, "the refusal's report"


def test_finding_1_group_vars_another_user_put_beside_the_inventory_are_never_loaded(tmp_path):
    """Finding 1: Ansible loads group_vars found beside the inventory, so another user's group_vars/all.yml in a
    shared folder would reach root's run (an interpreter of theirs, a registry of theirs)."""
    shared = shared_folder(tmp_path)
    (shared / "inv.yml").write_text("all:\n  children:\n    sparks:\n      hosts:\n        spark-1:\n"
                                    "          ansible_connection: local\n")  # root's run would start it here
    marker = tmp_path / "their-interpreter-ran"
    evil = shared / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\nexec python3 \"$@\"\n")
    evil.chmod(0o755)
    (shared / "group_vars").mkdir()
    (shared / "group_vars" / "all.yml").write_text(f"ansible_python_interpreter: {evil}\n")
    for path in (evil, shared / "group_vars", shared / "group_vars" / "all.yml"):
        planted(path)
    proc = piped(["verify", "-i", str(shared / "inv.yml"), "--plain"], tmp_path)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "the inventory, or a folder on its way, can be changed by another user (nothing was run)" in proc.stderr
    assert f"the inventory's folder {shared} (root (uid 0), mode 1777)" in " ".join(proc.stderr.split())
    assert not marker.exists()
    # In a folder of root's own, their group_vars beside it (a folder root once let them make): refused by name.
    shared.chmod(0o755)
    proc = piped(["verify", "-i", str(shared / "inv.yml"), "--plain"], tmp_path)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"the inventory's folder {shared}/group_vars belongs to uid {OTHER_UID}" in " ".join(proc.stderr.split())
    assert not marker.exists()


def test_finding_1_a_hosts_record_another_user_made_is_replaced_as_root_s_own_and_theirs_is_refused(tmp_path):
    """Finding 1: a pre-made .sparkfleet/hosts/spark-1.json (mode 0666, the other user's) kept its owner and mode
    after root's spark_state wrote it: the other user could then edit the history the next run trusts."""
    hosts = tmp_path / "inv" / ".sparkfleet" / "hosts"
    hosts.mkdir(parents=True, mode=0o700)
    record = hosts / "spark-1.json"
    record.write_text("{}")
    record.chmod(0o666)
    planted(record)
    content = {"verification": {"verdict": "ok"}}
    result = run_module("spark_state", {"path": str(record), "content": content})
    assert not result["failed"], result.get("msg")
    info = record.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode) & 0o022) == (0, 0), (info.st_uid, oct(info.st_mode))
    assert json.loads(record.read_text())["verification"] == content["verification"]
    # A records folder another user owns: refused, their file left as it is, nothing written.
    planted(hosts)
    record.write_text("theirs")
    planted(record)
    result = run_module("spark_state", {"path": str(record), "content": content})
    assert result["failed"] and f"belongs to uid {OTHER_UID}" in result["msg"], result.get("msg")
    assert record.read_text() == "theirs"


def test_finding_2_the_wheel_caches_lock_linked_to_a_root_file_is_refused_even_under_check(tmp_path, victim):
    """Finding 2: with spark_venv_wheelhouse_cache made by another user beforehand, its .lock linked to a root file,
    the module in check mode left the target at 0 bytes."""
    matrix = {"schema": 1, "name": "m", "last_verified": "2026-12-01", "target": {"arch": "aarch64", "python": "3.12",
                                                                      "glibc": "2.39", "cuda": "13.0"},
              "steps": [{"id": "stack", "packages": ["six==1.16.0"], "index_url": "http://127.0.0.1:9/simple"}]}
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import check, fingerprint

    lock = {"lock_version": 1, "matrix": "m", "fingerprint": fingerprint(check(matrix), []), "steps": {"stack": [
        {"name": "six", "version": "1.16.0", "sha256": "a" * 64, "wheel": "six-1.16.0-py2.py3-none-any.whl"}]}}
    cache = tmp_path / "wheels"
    cache.mkdir(mode=0o755)
    (cache / ".lock").symlink_to(victim)
    planted(cache / ".lock")
    planted(cache)
    for flags in (("--check",), ()):
        result = run_module("spark_wheelhouse", {"lock": lock, "matrix": matrix, "cache": str(cache)}, *flags)
        assert result["failed"] and f"the wheel cache {cache} belongs to uid {OTHER_UID}" in result["msg"], result
        assert victim.read_text() == ROOTS_FILE
    # In check mode a cache not made yet stays not made.
    fresh = tmp_path / "fresh-cache"
    result = run_module("spark_wheelhouse", {"lock": lock, "matrix": matrix, "cache": str(fresh)}, "--check")
    assert not fresh.exists(), result


PLANTED_TORCH = "import os\nopen({marker!r}, 'w').write(str(os.getuid()))\nraise ImportError('planted')\n"


@pytest.mark.parametrize("module, args", [
    ("spark_gpu_verify", {"python": sys.executable, "spark": False, "timeout": 60}),
    ("spark_smoke_train", {"python": sys.executable, "device": "cpu", "timeout": 60}),
])
def test_finding_3_a_torch_py_in_the_working_folder_or_on_pythonpath_never_runs_as_root(tmp_path, module, args):
    """Finding 3: a torch.py written into a shared folder ran as root when spark_gpu_verify (and spark_smoke_train)
    was run from there: Python puts the folder it starts in first on sys.path for `python -`. PYTHONPATH from the
    caller's environment reached it the same way."""
    shared = shared_folder(tmp_path)
    marker = tmp_path / "planted-torch-ran"
    for name in ("torch.py", "transformers.py"):
        (shared / name).write_text(PLANTED_TORCH.format(marker=str(marker)))
        planted(shared / name)
    elsewhere = shared_folder(tmp_path, "pythonpath")
    (elsewhere / "torch.py").write_text(PLANTED_TORCH.format(marker=str(marker)))
    proc = subprocess.run([str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m",
                           f"sparkfleet.spark.{module}", "-a", json.dumps(args),
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          cwd=shared, capture_output=True, text=True, check=False,
                          env=ansible_env(PYTHONPATH=str(elsewhere), ANSIBLE_CONFIG=str(REPO / "ansible.cfg")))
    assert "localhost" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not marker.exists(), f"the planted torch.py ran as uid {marker.read_text()}"


def test_finding_3_a_launcher_mounts_no_working_folder_another_user_can_write(tmp_path, fake_bin):
    """Finding 3: the launchers `mkdir -p "$PWD/finetuning"` and mount it as the container's working directory,
    first on its Python's path: run from a shared folder, another user's files there would run in the container."""
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.sparkfleet.spark.plugins.module_utils.images._launchers import script

    calls = tmp_path / "docker-calls"
    fake_bin("docker", f'echo "$@" >> {calls}\n')
    launcher = tmp_path / "spark-ngc"
    launcher.write_text(script({"launcher": "spark-ngc", "ref": "r/n@sha256:" + "a" * 64, "registry": "r",
                                "repository": "n", "tag": "t", "resolved_at": "now"}, "finetuning", {}, []))
    launcher.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    shared = shared_folder(tmp_path)
    (shared / "finetuning").mkdir()
    planted(shared / "finetuning")
    theirs = subprocess.run([str(launcher), "true"], cwd=shared, env=env, capture_output=True, text=True, check=False)
    assert theirs.returncode == 126 and f"uid {OTHER_UID}" in theirs.stderr, theirs.stderr
    (shared / "finetuning").chmod(0o777)
    os.chown(shared / "finetuning", 0, 0)
    open_to_all = subprocess.run([str(launcher), "true"], cwd=shared, env=env, capture_output=True, text=True,
                                 check=False)
    assert open_to_all.returncode == 126 and "mode 777" in open_to_all.stderr, open_to_all.stderr
    (shared / "link").mkdir()
    (shared / "link" / "finetuning").symlink_to(tmp_path)
    linked = subprocess.run([str(launcher), "true"], cwd=shared / "link", env=env, capture_output=True, text=True,
                            check=False)
    assert linked.returncode == 126 and "is a symbolic link" in linked.stderr
    assert not calls.exists(), "docker never ran"
    mine = shared_folder(tmp_path, "mine", 0o755)
    ok = subprocess.run([str(launcher), "true"], cwd=mine, env=env, capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and f"--volume {mine}/finetuning:/workspace/finetuning" in calls.read_text()


def test_finding_4_the_doctors_redaction_removes_host_names_users_and_addresses_in_every_form():
    """Finding 4: a typical ssh failure (`alice@spark7.corp.example.com: Permission denied`) passed scrub(redact())
    whole: an ansible_host given as a DNS name and the ssh user reached report.json, report.md and JUnit."""
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.sparkfleet.spark.plugins.module_utils.host._doctor import scrub

    messages = ["Failed to connect to the host via ssh: alice@spark7.corp.example.com: Permission denied "
                "(publickey,password).",
                "ssh: connect to host spark7.corp.example.com port 22: Connection timed out",
                "Connection to spark7.corp.example.com port 22 timed out",
                "ssh: Could not resolve hostname spark9.lab.internal: Name or service not known",
                "Data could not be sent to remote host \"spark7.corp.example.com\". Make sure this host can be "
                "reached over ssh: alice@spark7.corp.example.com: Permission denied",
                "cannot reach https://bob:hunter2@mirror.corp.example.com:8443/simple/ (timed out)",
                "ssh: connect to host 203.0.113.77 port 22: No route to host"]
    cleaned = scrub({"unreachable": messages})["unreachable"]
    for private in ("alice", "spark7", "corp.example.com", "spark9.lab.internal", "bob", "hunter2", "203.0.113.77",
                    "mirror."):
        assert not any(private in line for line in cleaned), (private, cleaned)
    assert cleaned[0] == "Failed to connect to the host via ssh: <user>@<host>: Permission denied (publickey,password)."
    kept = "cannot reach https://pypi.org/simple/torch; nvcr.io/nvidia/pytorch:25.11-py3; torch 2.13.0 at 127.0.0.1"
    assert scrub(kept) == kept, "public services, versions and the loopback stay"


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="a Python another user can run")
def test_suspicion_5a_a_loopback_index_another_user_bound_is_refused_before_pip_runs(tmp_path):
    """Suspected, proved: a loopback index is trusted without the hash lock, and any user can bind a free loopback
    port while the owner's mirror is down: root's pip would install their wheels. Now the listener's owner is read
    (/proc/net/tcp) and a stranger's refused before anything is built."""
    import socket
    import time

    import yaml

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    theirs = subprocess.Popen(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups",
                               "/usr/bin/python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        matrix = yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text())
        overrides = {step["index_url"]: f"http://127.0.0.1:{port}/simple" for step in matrix["steps"]}
        result = run_module("spark_venv", {"matrix": matrix, "root": str(tmp_path / "venvs"),
                                           "link": str(tmp_path / "venv"), "index_mirrors": overrides,
                                           "today": "2026-12-04"}, "--check")
    finally:
        theirs.kill()
    assert result["failed"], result
    assert f"127.0.0.1:{port}/simple on this host's loopback is served by uid {OTHER_UID}, not by root" in result["msg"]
    assert not (tmp_path / "venvs").exists()


def test_suspicion_5e_a_root_file_hard_linked_into_a_users_home_is_refused(tmp_path, victim):
    """Suspected, proved where fs.protected_hardlinks is 0: a root-owned regular file that is a hard link from a
    user's path (their ~/.ssh/authorized_keys made a second name of a root file) passed _user_files' checks."""
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _user_files as user_files

    home = tmp_path / "home" / "alice"
    (home / ".ssh").mkdir(parents=True)
    for path in (home, home / ".ssh"):
        planted(path)
    os.link(victim, home / ".ssh" / "authorized_keys")  # what the user could make with protected_hardlinks=0
    with pytest.raises(user_files.UnsafeFile, match="a hard link"):
        user_files.read(str(home), ".ssh/authorized_keys", OTHER_UID)
    with pytest.raises(user_files.UnsafeFile, match="a hard link"):
        user_files.write(str(home), ".ssh/authorized_keys", "ssh-ed25519 AAAA theirs\n", OTHER_UID, OTHER_UID, 0o600)
    assert victim.read_text() == ROOTS_FILE


def test_suspicion_5f_an_indexs_upload_time_is_checked_before_it_is_shown_or_written():
    """Suspected, proved: matrix propose took the index's upload-time as it came: an escape sequence reached the
    proposal (the screen, the matrix written) and a number crashed it."""
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.sparkfleet.spark.plugins.modules.spark_matrix_propose import release_day

    def files(*times):
        return [{"filename": "trl-1.10.0-py3-none-any.whl", "upload-time": t} for t in times]

    assert release_day(files("2026-11-30T10:00:00Z", "2026-11-29T08:00:00Z"), "trl", "1.10.0") == "2026-11-29"
    assert release_day(files("\x1b]0;owned\x07\x1b[2J", 1733000000, None, ["x"]), "trl", "1.10.0") is None
    assert release_day("not a list", "trl", "1.10.0") is None


def test_suspicion_5g_the_owners_proxy_reaches_the_controllers_wheel_fetch(tmp_path):
    """Suspected, proved (a function bug): spark_wheelhouse never received spark_venv_pip_env, so a proxy or CA set
    there did not reach the controller's fetch of the lock's wheels. A proxy of the test's own records the request."""
    from fake_http import FakeHTTP

    server = FakeHTTP(lambda _request: (502, {}, b"bad gateway"))  # a proxy that records what it is asked
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import check, fingerprint

    matrix = {"schema": 1, "name": "m", "last_verified": "2026-12-01",
              "target": {"arch": "aarch64", "python": "3.12", "glibc": "2.39"},
              "steps": [{"id": "stack", "packages": ["six==1.16.0"], "index_url": "http://index.invalid/simple"}]}
    lock = {"lock_version": 1, "matrix": "m", "fingerprint": fingerprint(check(matrix), []), "steps": {"stack": [
        {"name": "six", "version": "1.16.0", "sha256": "a" * 64, "wheel": "six-1.16.0-py2.py3-none-any.whl"}]}}
    try:
        result = run_module("spark_wheelhouse", {"lock": lock, "matrix": matrix, "cache": str(tmp_path / "cache"),
                                                 "timeout": 5,
                                                 "pip_env": {"HTTP_PROXY": server.url}})
    finally:
        server.close()
    asked = [r["target"] for r in server.seen]
    assert result["failed"], "the index is not there"
    assert any(path.startswith("http://index.invalid/simple/six") for path in asked), asked


def test_suspicion_5h_an_inventory_given_as_a_link_is_judged_by_the_folder_ansible_reads_too(tmp_path):
    """Issue 56, item 5: the folder check took the link's own folder (absolute()), while the run hands Ansible the
    resolved path, whose group_vars Ansible loads. Proved (another user's group_vars beside the link's target ran
    their interpreter), fixed: both folders are judged."""
    shared = shared_folder(tmp_path)
    inventory_file(shared)
    marker = tmp_path / "their-interpreter-ran"
    evil = shared / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\nexec python3 \"$@\"\n")
    evil.chmod(0o755)
    (shared / "group_vars").mkdir()
    (shared / "group_vars" / "all.yml").write_text(f"ansible_python_interpreter: {evil}\n")
    for path in (evil, shared / "group_vars", shared / "group_vars" / "all.yml"):
        planted(path)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    (mine / "inv.yml").symlink_to(shared / "inv.yml")
    proc = piped(["verify", "-i", str(mine / "inv.yml"), "--plain"], tmp_path)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"{shared}" in " ".join(proc.stderr.split()) and not marker.exists()


def test_suspicion_5i_an_inventory_folder_whose_name_holds_a_comma_is_no_host_list_and_is_judged(tmp_path):
    """Issue 56, item 5: a comma anywhere in -i skipped the folder check (taken for a host list); Ansible takes a
    value naming an existing path as that path. Proved, fixed: a folder others can write is refused."""
    shared = shared_folder(tmp_path, "lab,shared", 0o777)
    inventory_file(shared, "hosts.yml")
    proc = piped(["verify", "-i", str(shared), "--plain"], tmp_path)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "the inventory, or a folder on its way, can be changed by another user (nothing was run)" in proc.stderr
    assert f"{shared}" in " ".join(proc.stderr.split())


PLANTED_SITECUSTOMIZE = """import os, sys
with open({marker!r}, "a") as f:
    f.write("%s\\n" % (os.path.basename(sys.argv[0]) or "-"))
"""


def test_issue_56_the_shells_pythonpath_and_an_untrusted_ca_never_reach_ansible_or_a_module(tmp_path):
    """Issue 56, item 5: under a local connection a module's own interpreter (and ansible-playbook) took the shell's
    PYTHONPATH: a sitecustomize.py there ran in each, as root. sparkfleet, started with that environment, loaded it
    itself (the shell's boundary, SECURITY.md); the run's processes no longer do, and the warning says what was left
    out. A CA bundle another user owns is left out too; the machine's own is kept."""
    home = shared_folder(tmp_path, "home", 0o755)
    elsewhere = shared_folder(tmp_path, "pythonpath")
    marker = tmp_path / "sitecustomize-ran"
    (elsewhere / "sitecustomize.py").write_text(PLANTED_SITECUSTOMIZE.format(marker=str(marker)))
    planted(elsewhere / "sitecustomize.py")
    theirs = shared_folder(tmp_path, "theirs", 0o755)
    (theirs / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    planted(theirs / "ca.pem")
    planted(theirs)
    proc = piped(["doctor", "--plain"], home, PYTHONPATH=str(elsewhere), REQUESTS_CA_BUNDLE=str(theirs / "ca.pem"),
                 SSL_CERT_FILE="/etc/ssl/certs/ca-certificates.crt")
    assert proc.returncode in (0, 2), proc.stdout[-3000:] + proc.stderr[-3000:]
    started = marker.read_text().split()
    assert started == ["sparkfleet"], f"the planted sitecustomize.py ran in {started}"
    data = json.loads((home / "reports" / "latest" / "report.json").read_text())
    left_out = [w for w in data["warnings"] if w.startswith("left out of the run's environment: ")]
    assert [w.split(": ", 1)[1].split(" (")[0] for w in left_out] == [
        "PYTHONPATH", f"REQUESTS_CA_BUNDLE={theirs / 'ca.pem'}"], left_out
    assert f"{theirs / 'ca.pem'} is inside {theirs}, which belongs to uid {OTHER_UID}" in left_out[1]
    assert "warning: left out of the run's environment: PYTHONPATH" in proc.stdout


def test_issue_56_a_trust_file_is_passed_on_only_where_root_or_the_user_alone_may_write_it(tmp_path):
    from sparkfleet.run_environment import for_run, untrusted

    mine = shared_folder(tmp_path, "mine", 0o755)
    (mine / "ca.pem").write_text("x")
    (mine / "ca.pem").chmod(0o644)
    assert untrusted(str(mine / "ca.pem")) is None
    (mine / "open.pem").write_text("x")
    (mine / "open.pem").chmod(0o666)
    assert f"the file {mine / 'open.pem'} (root (uid 0), mode 0666) can be written by other users" in untrusted(
        str(mine / "open.pem"))
    (mine / "link.pem").symlink_to(mine / "ca.pem")
    assert untrusted(str(mine / "link.pem")) is None, "root's link to root's file, each judged (issue 70)"
    (mine / "their-link.pem").symlink_to(mine / "ca.pem")
    planted(mine / "their-link.pem")
    assert f"through the link {mine / 'their-link.pem'}" in untrusted(str(mine / "their-link.pem"))
    shared = shared_folder(tmp_path)
    (shared / "ca.pem").write_text("x")
    planted(shared / "ca.pem")
    assert f"the file {shared / 'ca.pem'} belongs to uid {OTHER_UID}" in untrusted(str(shared / "ca.pem"))
    assert "can be written by other users" in untrusted(str(shared)), "a CA folder others can add to"
    environ = {"NETRC": str(shared / "ca.pem"), "SSL_CERT_FILE": str(mine / "ca.pem"), "PYTHONWARNINGS": "error",
               "PATH": "/usr/bin"}
    said = for_run(environ)
    assert environ == {"SSL_CERT_FILE": str(mine / "ca.pem"), "PATH": "/usr/bin"}
    assert [line.split(" (")[0] for line in said] == ["PYTHONWARNINGS", f"NETRC={shared / 'ca.pem'}"]


def theirs_listening(argv: list[str], port: int, log, cwd=None) -> subprocess.Popen:
    """Another user's process (uid OTHER_UID) listening on 127.0.0.1:`port`, its output in `log`, once it answers."""
    import socket
    import time

    with open(log, "w") as out:
        theirs = subprocess.Popen(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups",
                                   *argv], cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as client:
            if client.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    return theirs


def test_issue_56_a_loopback_registry_another_user_serves_is_asked_nothing_and_gets_no_credential(tmp_path):
    """Issue 56, item 5: a plain-http registry on the loopback is trusted as the owner's own (its digests become
    the lock's, its credentials go in the clear), but any local user can bind a free loopback port while the
    owner's registry is down. A server another user runs there gets no request at all."""
    import socket

    from ansible_collections.sparkfleet.spark.plugins.module_utils.images._registry import (
        Registry,
        RegistryError,
        resolve_tag,
    )

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    served = shared_folder(tmp_path, "theirs", 0o755)
    planted(served)
    log = tmp_path / "their-server.log"
    theirs = theirs_listening(["/usr/bin/python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"], port,
                              log, cwd=served)
    try:
        host = f"127.0.0.1:{port}"
        registry = Registry(host, host, credentials={host: {"username": "fleet", "password": "planted-9f1c"}},
                            retries=1)
        with pytest.raises(RegistryError) as refused:
            resolve_tag(registry, "nvidia/pytorch", "25.11-py3")
        assert f"{host} on this machine's loopback is served by uid {OTHER_UID}, not by root or you" in str(
            refused.value)
        assert registry.requests == 0
    finally:
        theirs.terminate()
        theirs.wait(timeout=10)
    assert "GET" not in log.read_text() and "HEAD" not in log.read_text(), log.read_text()


def test_issue_56_a_loopback_registry_another_user_took_on_the_host_gets_no_login(tmp_path):
    """The host's side of the same (issue 56, item 5: `docker login` on the host had no listener check): the
    registry given credentials is 127.0.0.1:PORT on the host, where another user listens. The run stops before
    the login, naming the uid, the port and what to do; their listener received nothing. (This machine is the
    host, by a local connection: tests/integration/thishost.py.)"""
    import socket

    from thishost import inventory, sparkfleet

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "their-listener.log"
    listener = ("import socket, sys\ns = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(8)\n"
                "while True:\n    c, _ = s.accept(); c.settimeout(5)\n"
                "    try:\n        sys.stdout.write(repr(c.recv(65536)) + '\\n'); sys.stdout.flush()\n"
                "    except OSError:\n        pass\n    c.close()\n")
    theirs = theirs_listening(["/usr/bin/python3", "-c", listener, str(port)], port, log)
    try:
        host = f"127.0.0.1:{port}"
        inv = inventory(tmp_path, host, spark_images_registry_credentials={
            host: {"username": "fleet", "password": "planted-71ab"}},
            spark_images_docker_config=str(tmp_path / "docker" / "config.json"))
        proc, report = sparkfleet(inv, tmp_path / "report", "provision", "-t", "spark_preflight,spark_images_login")
    finally:
        theirs.terminate()
        theirs.wait(timeout=10)
    screen = " ".join(proc.stdout.split())
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert (f"{host} is on the host's loopback, and its port is served by uid {OTHER_UID}, not root" in screen
            and "Nothing was sent there" in screen), screen[-3000:]
    assert "planted-71ab" not in proc.stdout + json.dumps(report)
    assert not [line for line in log.read_text().splitlines() if line != "b''"], log.read_text()
    assert not (tmp_path / "docker" / "config.json").exists(), "no login was made"
