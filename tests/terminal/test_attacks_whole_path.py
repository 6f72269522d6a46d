"""Issue 70, the fifth review: root reads nothing another user can swap. Each test performs the attack as it was
reproduced and fails on the code before the fix; the rule is module_utils/common/_trusted.py's check_path (the
whole path, each link on it), the copy src/sparkfleet/inventory_copy.py's. The watch's findings are in
tests/monitoring/test_watch.py, the rule's own cases in tests/unit/.../test_trusted.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from pty_screen import SPARKFLEET, piped, user_env

OTHER_UID = 4242  # a user with a login on the box, in a group the operator shares


def _hosts(folder, host: str = "spark-1") -> None:
    (folder / "hosts.yml").write_text(f"all:\n  children:\n    sparks:\n      hosts:\n        {host}:\n"
                                      "          ansible_host: 127.0.0.1\n          ansible_port: 9\n")


SWAPPER = r"""
import os, sys, time
lab, marker, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
payload = "#!/bin/sh\ntouch %s\necho '{}'\n" % marker
end, n = time.monotonic() + seconds, 0
while time.monotonic() < end:
    inv = os.path.join(lab, "inv")
    try:
        if os.stat(inv).st_uid != os.getuid():  # root's inventory back (or first): swap it for theirs
            n += 1
            os.rename(inv, os.path.join(lab, "gone-%d" % n))
            os.mkdir(inv)
            with open(os.path.join(inv, "zz_dyn"), "w") as f:
                f.write(payload)
            os.chmod(os.path.join(inv, "zz_dyn"), 0o755)
    except OSError:
        pass
    time.sleep(0.002)
"""


def test_finding_1_a_poller_in_a_folder_a_group_shares_never_gets_its_inventory_run(tmp_path, request):
    """Finding 1, as reproduced: the inventory /srv/lab/inv (root's, 0755) inside /srv/lab (setgid 2775, a group
    the attacker is in); a poller of theirs renamed inv away and put a folder of its own there holding an executable
    zz_dyn, which Ansible's script plugin ran as root. The folder above is judged now: the run is refused before
    anything reads the inventory, naming /srv/lab, whichever inventory the poller left there."""
    reachable = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own folders are 0700: the poller could not reach lab
    reachable.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(reachable, ignore_errors=True))
    lab = reachable / "lab"
    lab.mkdir()
    os.chown(lab, 0, OTHER_UID)
    lab.chmod(0o2775)
    (lab / "inv").mkdir(mode=0o755)
    _hosts(lab / "inv")
    marker = lab / "pwned"
    poller = subprocess.Popen(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups",
                               "/usr/bin/python3", "-c", SWAPPER, str(lab), str(marker), "40"])
    try:
        for _ in range(3):
            proc = piped(["verify", "-i", str(lab / "inv"), "--plain", "--report-dir", str(tmp_path / "rd")],
                         tmp_path)
            said = " ".join(proc.stderr.split())
            assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
            assert "the inventory, or a folder on its way, can be changed by another user (nothing was run)" in said
            assert f"is inside {lab} (root (uid 0), mode 2775), which other users can write" in said or \
                f"belongs to uid {OTHER_UID}" in said, said
    finally:
        poller.kill()
        poller.wait()
    assert not marker.exists(), "their zz_dyn ran as root"
    assert any(p.name.startswith("gone-") for p in lab.iterdir()), "the poller swapped the inventory meanwhile"


def test_finding_1_ansible_reads_the_copy_judged_never_the_inventory_again_by_name(tmp_path):
    """Finding 1, the window itself: the inventory was judged once and Ansible read it again by path. Ansible is
    now given a copy made when it was judged: what is put in the inventory's folder after that (here by its owner,
    the moment the run's private folder appears, before ansible-playbook starts) is never read, and the copy goes
    with the run. What the run keeps with the inventory (the run lock) is still kept in the inventory's folder."""
    inventory = tmp_path / "inv"
    inventory.mkdir(mode=0o755)
    _hosts(inventory)
    scratch = tmp_path / "t"
    scratch.mkdir(mode=0o700)
    marker = tmp_path / "ran"
    run = subprocess.Popen([SPARKFLEET, "verify", "-i", str(inventory), "--plain", "--report-dir",
                            str(tmp_path / "rd")], cwd=tmp_path, env=user_env(TMPDIR=str(scratch)),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    copies = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None:
        copies += [p.name for p in scratch.glob("sf-inventory-*")]
        if any(scratch.glob("sparkfleet-run-*")):  # judged, copied, checked: the playbook starts now
            (inventory / "zz_dyn").write_text(f"#!/bin/sh\ntouch {marker}\necho '{{}}'\n")
            (inventory / "zz_dyn").chmod(0o755)
            _hosts(inventory, "their-host")
            break
        time.sleep(0.005)
    out, err = run.communicate(timeout=240)
    assert run.returncode == 3, out[-3000:] + err[-3000:]  # spark-1 unreachable: the run itself went on
    assert copies, "the run made its copy of the inventory in its temporary folder"
    assert not marker.exists(), "a file put in the inventory after it was judged was run"
    report = json.loads((tmp_path / "rd" / "report.json").read_text())
    assert sorted(report["hosts"]) == ["spark-1"], sorted(report["hosts"])
    assert report["inventory"] == str(inventory)
    assert sorted(p.name for p in scratch.iterdir()) == [], "the copy and the run's folders go with the run"
    assert (inventory / ".sparkfleet" / "run.lock").is_file()


def test_finding_3_a_temporary_directory_another_user_owns_holds_none_of_the_runs_folders(tmp_path):
    """Finding 3: with root's TMPDIR in a folder another user owns, they swapped the run's sf-* and
    sparkfleet-run-* folders for 0777 folders of their own, and Ansible's module payloads went there. Such a TMPDIR
    is refused by the trust rule now; root's run keeps its folders in /run/sparkfleet (root's alone) instead."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o777)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    inventory = tmp_path / "inv"
    inventory.mkdir(mode=0o755)
    _hosts(inventory)
    run = subprocess.Popen([SPARKFLEET, "verify", "-i", str(inventory), "--plain", "--report-dir",
                            str(tmp_path / "rd")], cwd=tmp_path, env=user_env(TMPDIR=str(theirs)),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    while run.poll() is None:  # what the run makes there while it goes (it removes its folders at the end)
        seen |= {p.name for p in theirs.iterdir()}
        time.sleep(0.01)
    out, err = run.communicate()
    assert run.returncode == 3, out[-3000:] + err[-3000:]
    assert seen == set(), f"the run made {sorted(seen)} in their folder"
    base = os.stat("/run/sparkfleet")
    assert (base.st_uid, oct(base.st_mode & 0o777)) == (0, "0o700")


def test_a_vault_password_script_another_user_can_change_never_runs(tmp_path):
    """The same rule for the files the options name: a --vault-password-file that is executable is run by
    Ansible, as root here. In a folder every user can write (no sticky bit), it is refused before anything runs."""
    inventory = tmp_path / "inv"
    inventory.mkdir(mode=0o755)
    _hosts(inventory)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    marker = tmp_path / "ran"
    script = shared / "vault-pass"
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho secret\n")
    script.chmod(0o755)
    proc = piped(["verify", "-i", str(inventory), "--plain", "--vault-password-file", str(script), "--report-dir",
                  str(tmp_path / "rd")], tmp_path)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    said = " ".join(proc.stderr.split())
    assert f"the vault password file {script} is inside {shared} (root (uid 0), mode 0777), which other users can " \
           "write without the sticky bit" in said, said
    assert not marker.exists()
