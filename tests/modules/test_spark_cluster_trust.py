"""spark_cluster_trust on this machine, as root, against a real unprivileged user who attacks it (issue 34,
findings 1, 5 and 6): links in the user's ~/.ssh to root's files, a FIFO for ~/.nccl.conf, a cluster renamed, a
node that left. Each attack was reproduced on the code before (slurp and blockinfile as root).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import run_module

USER = "sftrustuser"
PEER_KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPeerKeyPeerKeyPeerKeyPeerKeyPeerKeyPeerKey "
            "sparkfleet cluster lab: spark-02")
PEER_HOST = "spark-02,198.18.110.11 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyHostKeyHostKeyHostKeyHostKeyHostK"


@pytest.fixture
def user(tmp_path):
    subprocess.run(["userdel", "-r", USER], capture_output=True, check=False)
    # A home the user can reach (pytest's tmp_path is root's alone), as /home is
    base = Path(tempfile.mkdtemp(prefix="sparkfleet-home-", dir="/tmp"))
    base.chmod(0o755)
    home = base / USER
    subprocess.run(["useradd", "-m", "-d", str(home), "-s", "/bin/sh", USER], check=True, capture_output=True)
    entry = pwd.getpwnam(USER)
    host_keys = tmp_path / "etc-ssh"
    host_keys.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_keys / "ssh_host_ed25519_key")],
                   check=True)
    yield {"home": home, "uid": entry.pw_uid, "gid": entry.pw_gid, "host_keys": host_keys,
           "record": tmp_path / "var" / "cluster.json"}
    subprocess.run(["userdel", "-r", USER], capture_output=True, check=False)
    shutil.rmtree(base, ignore_errors=True)


def as_user(*argv: str) -> None:
    subprocess.run(["runuser", "-u", USER, "--", *argv], check=True, capture_output=True)


def trust(user: dict, **args) -> dict:
    return run_module("spark_cluster_trust", {"user": USER, "host_key_dir": str(user["host_keys"]),
                                              "record": str(user["record"]), **args})


def join(user: dict, cluster: str = "lab", *flags: str) -> dict:
    return run_module("spark_cluster_trust", {"user": USER, "cluster": cluster, "authorized_keys": PEER_KEY,
                                              "known_hosts": PEER_HOST, "record": str(user["record"])}, *flags)


def test_the_key_is_made_by_the_user_read_back_and_kept(user):
    first = trust(user, comment="nvidia@spark-01 (sparkfleet cluster lab)")
    assert not first["failed"], first.get("msg")
    assert first["changed"] and first["made_key"]
    assert first["public_key"].startswith("ssh-ed25519 ") and first["public_key"].endswith("(sparkfleet cluster lab)")
    assert first["host_key"] == (user["host_keys"] / "ssh_host_ed25519_key.pub").read_text().strip()
    private = user["home"] / ".ssh" / "id_ed25519"
    assert (private.stat().st_uid, oct(private.stat().st_mode & 0o777)) == (user["uid"], "0o600")
    assert (private.parent.stat().st_uid, oct(private.parent.stat().st_mode & 0o777)) == (user["uid"], "0o700")
    again = trust(user)
    assert not again["changed"] and again["public_key"] == first["public_key"]


def test_authorized_keys_linked_to_roots_is_refused_and_root_file_untouched(user, tmp_path):
    """The attack: ~/.ssh/authorized_keys -> /root/.ssh/authorized_keys got the other nodes' keys appended there."""
    roots = tmp_path / "root-authorized_keys"
    roots.write_text("ssh-ed25519 AAAA root's own\n")
    as_user("mkdir", "-m", "700", str(user["home"] / ".ssh"))
    as_user("ln", "-s", str(roots), str(user["home"] / ".ssh" / "authorized_keys"))
    result = join(user)
    assert result["failed"]
    assert f"{user['home']}/.ssh/authorized_keys is a symbolic link" in result["msg"]
    assert "Nothing was written" in result["msg"]
    assert roots.read_text() == "ssh-ed25519 AAAA root's own\n"
    assert not (user["home"] / ".ssh" / "known_hosts").exists(), "nothing written before the refusal either"
    assert not user["record"].exists()


def test_a_public_key_linked_to_a_root_only_file_is_refused_and_never_read(user, tmp_path):
    """The attack: ~/.ssh/id_ed25519.pub -> a root-only file printed its first characters in the failure."""
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRETHASH:19000:0:99999:7:::\n")
    secret.chmod(0o600)
    as_user("mkdir", "-m", "700", str(user["home"] / ".ssh"))
    as_user("touch", str(user["home"] / ".ssh" / "id_ed25519"))
    as_user("ln", "-s", str(secret), str(user["home"] / ".ssh" / "id_ed25519.pub"))
    result = trust(user)
    assert result["failed"] and "id_ed25519.pub is a symbolic link" in result["msg"]
    assert "SECRETHASH" not in json.dumps(result)


def test_a_dotssh_folder_linked_elsewhere_is_refused(user, tmp_path):
    elsewhere = tmp_path / "root-ssh"
    elsewhere.mkdir()
    as_user("ln", "-s", str(elsewhere), str(user["home"] / ".ssh"))
    result = join(user)
    assert result["failed"] and f"{user['home']}/.ssh is a symbolic link" in result["msg"]
    assert list(elsewhere.iterdir()) == []


def test_a_renamed_cluster_keeps_no_trust_and_leaving_takes_it_all_back(user):
    (user["home"] / ".ssh").mkdir(mode=0o700)
    os.chown(user["home"] / ".ssh", user["uid"], user["gid"])
    own = "ssh-ed25519 AAAA the user's own laptop\n"
    (user["home"] / ".ssh" / "authorized_keys").write_text(own)
    os.chown(user["home"] / ".ssh" / "authorized_keys", user["uid"], user["gid"])
    assert join(user, "lab")["changed"]
    check = join(user, "lab-renamed", "--check", "--diff")
    assert check["changed"] and "-# BEGIN sparkfleet cluster lab: " in check["_stdout"]
    assert "# BEGIN sparkfleet cluster lab:" in (user["home"] / ".ssh" / "authorized_keys").read_text(), \
        "check mode wrote nothing"
    renamed = join(user, "lab-renamed")
    assert renamed["changed"] and renamed["removed"] == ["lab"]
    keys = (user["home"] / ".ssh" / "authorized_keys").read_text()
    assert "# BEGIN sparkfleet cluster lab:" not in keys and keys.count(PEER_KEY) == 1 and keys.startswith(own)
    assert not join(user, "lab-renamed")["changed"], "a second run changes nothing"
    assert json.loads(user["record"].read_text()) == {"cluster": "lab-renamed", "user": USER}
    left = run_module("spark_cluster_trust", {"state": "absent", "record": str(user["record"])})
    assert left["changed"] and left["removed"] == ["lab-renamed"]
    assert (user["home"] / ".ssh" / "authorized_keys").read_text() == own
    assert "sparkfleet" not in (user["home"] / ".ssh" / "known_hosts").read_text()
    assert not user["record"].exists()
    never = run_module("spark_cluster_trust", {"state": "absent", "record": str(user["record"])})
    assert not never["failed"] and not never["changed"]


def test_a_fifo_for_the_users_nccl_conf_is_not_read_and_does_not_hang(user):
    """The attack: mkfifo ~/.nccl.conf hung cluster verify past 45 s (root read it with no bound)."""
    as_user("mkfifo", str(user["home"] / ".nccl.conf"))
    started = time.monotonic()
    facts = run_module("spark_cluster_facts", {"interfaces": ["lo"], "user": USER})
    assert time.monotonic() - started < 30
    assert not facts["failed"], facts.get("msg")
    assert f"{user['home']}/.nccl.conf is a FIFO" in facts["_stderr"] + json.dumps(facts.get("warnings"))
    assert str(Path(user["home"]) / ".nccl.conf") not in facts["nccl_conf"]["read"]
