"""Issue 59: `sparkfleet watch` - the units it writes (checked by systemd's own `systemd-analyze verify`), one cycle
run as the timer runs it (a real verify of an inventory whose host cannot be reached: its metrics say so), a host
removed from the inventory gone from the next file and a new one there after one cycle, status and remove. This
machine runs no systemd (install says so): the timer itself runs under a real one in the test bed's engine host.

Issue 70: the watch lives in root's own folders. Its paths are made under root's home (rooted_install.py), never
/tmp; the sparkfleet it installs is a wheel in a venv there, as an owner's `pip install` into /opt would be."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import rooted_install

from conftest import BIN

OTHER_UID = 4242  # a user with a login on the box, not the one running sparkfleet


def sparkfleet(*args: str, cwd: Path, python: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """The checkout's sparkfleet, or `python -m sparkfleet` of an installed one."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    environ.update(PATH=f"{BIN}:{environ['PATH']}", NO_COLOR="1", **env)
    argv = [str(python), "-m", "sparkfleet"] if python else [str(BIN / "sparkfleet")]
    return subprocess.run([*argv, *args], cwd=cwd, capture_output=True, text=True, env=environ, check=False,
                          timeout=300)


def _inventory(root: Path, *hosts: str) -> Path:
    inventory = root / "inv"
    inventory.mkdir(exist_ok=True)
    lines = ["all:", "  children:", "    sparks:", "      hosts:"]
    for host in hosts:  # nothing listens on port 9: unreachable at once
        lines += [f"        {host}:", "          ansible_host: 127.0.0.1", "          ansible_port: 9"]
    (inventory / "hosts.yml").write_text("\n".join(lines) + "\n")
    return inventory


@pytest.fixture(scope="module")
def rooted():
    made = rooted_install.install()
    yield made
    made.remove()


@pytest.fixture
def place():
    """A folder of root's own outside /tmp, for the inventory and the watch's folders."""
    root = rooted_install.rooted_folder("watch-")
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_install_writes_units_systemd_accepts_with_the_hardening_and_refuses_what_a_unit_cannot_hold(place, rooted):
    _inventory(place, "spark-01")
    units = place / "units"
    args = ["watch", "install", "-i", "inv", "--unit-dir", str(units), "--textfile-dir", str(place / "tf"),
            "--state-dir", str(place / "state"), "--interval", "15min"]
    done = sparkfleet(*args, cwd=place, python=rooted.python, SUDO_UID=str(OTHER_UID))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "systemd does not run this machine: nothing was started" in done.stdout
    service = (units / "sparkfleet-watch.service").read_text()
    timer = (units / "sparkfleet-watch.timer").read_text()
    # Issue 70: a root-owned interpreter and module, isolated; never a script path another user could replace.
    assert (f"ExecStart={rooted.python} -I -m sparkfleet watch run -i {place / 'inv'} --textfile-dir "
            f"{place / 'tf'}") in service
    for line in ("Type=oneshot", "ProtectSystem=strict", "PrivateTmp=yes", "NoNewPrivileges=yes",
                 "RuntimeDirectory=sparkfleet-watch", "Environment=TMPDIR=%t/sparkfleet-watch",
                 f"Environment=SUDO_UID={OTHER_UID}",
                 f"ReadWritePaths={place / 'tf'} {place / 'state'} -{place / 'inv' / '.sparkfleet'}"):
        assert line in service.splitlines(), line
    assert "OnUnitActiveSec=15min" in timer.splitlines() and "WantedBy=timers.target" in timer
    checked = subprocess.run([shutil.which("systemd-analyze") or "systemd-analyze", "verify",
                              str(units / "sparkfleet-watch.service"), str(units / "sparkfleet-watch.timer")],
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0 and not checked.stderr.strip(), checked.stderr
    assert oct((place / "state").stat().st_mode & 0o777) == "0o700"
    # A file inventory: its folder's .sparkfleet/ is made and writable in the sandbox too (issue 70, item 8).
    done = sparkfleet(*args[:3], str(place / "inv" / "hosts.yml"), *args[4:], cwd=place, python=rooted.python)
    assert done.returncode == 0, done.stderr
    assert f"ReadWritePaths={place / 'tf'} {place / 'state'} -{place / 'inv' / '.sparkfleet'}" in (
        units / "sparkfleet-watch.service").read_text().splitlines()
    for wrong, said in ((["--interval", "5 minutes; rm"], "--interval is '5 minutes; rm'; expected a span"),
                        (["--interval", "30s"], "1 minute or more"),
                        # issue 70, item 6: a trailing newline split the unit's lines (re.match with $)
                        (["--interval", "30min\n"], "--interval is '30min\\n'; expected a span"),
                        (["--textfile-dir", f"{place}/x\n"], "--textfile-dir is"),
                        (["--textfile-dir", str(place / "text files")], "--textfile-dir is")):
        refused = sparkfleet(*args, *wrong, cwd=place, python=rooted.python)
        assert refused.returncode == 4 and said in refused.stderr, refused.stderr


def test_install_refuses_every_path_a_reboot_or_another_user_could_hand_to_root(place, rooted, tmp_path):
    """Issue 70, finding 2: `watch install` from a sparkfleet under /tmp wrote a unit that, after a reboot emptied
    /tmp, ran whatever another user put at that path, as root; the unit turned PrivateTmp off for it. Each path the
    unit names is now refused in /tmp or /var/tmp, below a folder every user can write, or failing the trust rule;
    nothing is written."""
    _inventory(place, "spark-01")
    units = place / "units"
    base = ["--unit-dir", str(units), "--textfile-dir", str(place / "tf"), "--state-dir", str(place / "state")]
    # The interpreter of a venv under /tmp (a checkout there, or `pip install` into /tmp/w): refused.
    under_tmp = tmp_path / "w"
    subprocess.run([str(rooted.python), "-m", "venv", "--without-pip", str(under_tmp)], check=True)
    site = next((under_tmp / "lib").glob("python3*/site-packages"))
    purelib = next((rooted.folder / "venv" / "lib").glob("python3*/site-packages"))
    (site / "rooted.pth").write_text(f"{purelib}\n")
    refused = sparkfleet("watch", "install", "-i", "inv", *base, cwd=place, python=under_tmp / "bin" / "python")
    assert refused.returncode == 4, refused.stdout + refused.stderr
    said = " ".join(refused.stderr.split())
    assert f"sparkfleet's interpreter is {under_tmp}/bin/python, in /tmp: a reboot empties /tmp" in said, said
    assert not units.exists(), "nothing written"
    # A folder the unit writes or reads under /tmp, and one below a folder every user can write.
    for option, value, expected in (
            ("--textfile-dir", str(tmp_path / "tf"), f"--textfile-dir is {tmp_path / 'tf'}, in /tmp"),
            ("-i", str(tmp_path), f"the inventory is {tmp_path}, in /tmp")):
        args = ["watch", "install", "-i", "inv", *base]
        args[args.index(option) + 1] = value
        refused = sparkfleet(*args, cwd=place, python=rooted.python)
        assert refused.returncode == 4 and expected in " ".join(refused.stderr.split()), refused.stderr
    shared = place / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o1777)
    (shared / "tf").mkdir(mode=0o755)
    refused = sparkfleet("watch", "install", "-i", "inv", *base[:2], "--textfile-dir", str(shared / "tf"),
                         *base[4:], cwd=place, python=rooted.python)
    assert refused.returncode == 4, refused.stdout
    assert f"below {shared}, which every user can write to (mode 1777)" in " ".join(refused.stderr.split())
    # The inventory in a folder a group shares (the review's /srv/lab, setgid 2775): the whole path is judged.
    lab = place / "lab"
    lab.mkdir()
    os.chown(lab, 0, OTHER_UID)
    lab.chmod(0o2775)
    _inventory(lab, "spark-01")
    refused = sparkfleet("watch", "install", "-i", str(lab / "inv"), *base, cwd=place, python=rooted.python)
    assert refused.returncode == 4, refused.stdout
    assert f"the inventory {lab / 'inv'} is inside {lab} (root (uid 0), mode 2775), which other users can write" in \
        " ".join(refused.stderr.split())
    assert not units.exists(), "nothing written"


def test_a_cycle_writes_the_metrics_of_a_fleet_it_cannot_reach_and_follows_the_inventory(place):
    _inventory(place, "spark-01", "spark-02")
    common = ["--textfile-dir", str(place / "tf"), "--state-dir", str(place / "state")]
    first = sparkfleet("watch", "run", "-i", "inv", *common, cwd=place)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    metrics = (place / "tf" / "sparkfleet.prom").read_text()
    assert 'sparkfleet_host_up{host="spark-01",simulated="false"} 0.0' in metrics
    assert 'sparkfleet_run_exit_code{command="verify"} 3.0' in metrics, "unreachable: the verify's own exit code"
    assert subprocess.run(["promtool", "check", "metrics"], input=metrics, text=True, capture_output=True,
                          check=False).returncode == 0
    status = sparkfleet("watch", "status", "--textfile-dir", str(place / "tf"), cwd=place)
    assert status.returncode == 0 and "spark-01: NOT reached, verdict unknown, drift none" in status.stdout
    assert "last verify: ended " in status.stdout and ", exit 3, " in status.stdout
    _inventory(place, "spark-02", "spark-03")  # spark-01 left the inventory, spark-03 joined
    second = sparkfleet("watch", "run", "-i", "inv", *common, cwd=place)
    assert second.returncode == 0, second.stdout[-3000:]
    metrics = (place / "tf" / "sparkfleet.prom").read_text()
    assert 'host="spark-01"' not in metrics and 'host="spark-03"' in metrics
    removed = sparkfleet("watch", "remove", "--unit-dir", str(place / "units"), "--textfile-dir",
                         str(place / "tf"), cwd=place)
    assert removed.returncode == 0 and not (place / "tf" / "sparkfleet.prom").exists(), removed.stdout


def test_a_cycle_whose_verify_is_bad_input_still_says_so_as_a_metric(place):
    (place / "inv").mkdir()
    (place / "inv" / "hosts.yml").write_text("all:\n  hosts:\n    spark-01:\n      ansible_host: [\n")
    done = sparkfleet("watch", "run", "-i", "inv", "--textfile-dir", str(place / "tf"), "--state-dir",
                      str(place / "state"), cwd=place)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert 'sparkfleet_run_exit_code{command="verify"} 4.0' in (place / "tf" / "sparkfleet.prom").read_text()


@pytest.mark.testbed
def test_the_timer_under_a_real_systemd_runs_the_cycle_in_its_sandbox_and_remove_takes_it_away(rooted):
    """Issue 59: the units under a real systemd (PID 1 of the test bed's sparkfleet/host-engine, native x86_64, the
    installed sparkfleet and its Python mounted read-only where they are here). `watch install` enables the timer;
    the service the timer starts, run now, verifies in its sandbox (ProtectSystem=strict, PrivateTmp=yes) and writes
    the metrics: the hosts nothing answers for are `up` 0, exit 3. Before, that run failed under the real sandbox:
    the inventory's .sparkfleet folder, missing when the unit started, stayed read-only, and the run lock could not
    be made (a traceback, no metrics). Issue 70: the inventory is the operator's (uid 4242, who typed `sudo
    sparkfleet watch install`), and the service trusts it as the CLI did (exit 3, not 4); /tmp is the service's own.
    `watch remove` disables the timer and takes the units away."""
    from host_container import started

    python_home = Path(os.path.realpath(rooted.python)).parents[1]
    if str(python_home).startswith("/usr"):
        pytest.skip(f"the venv's Python lives in {python_home}, which the container has its own of")
    with started("sparkfleet/host-engine:latest", "sparkfleet-watch",
                 mounts=(f"{rooted.folder}:{rooted.folder}:ro", f"{python_home}:{python_home}:ro")) as name:
        _watch_under_systemd(name, rooted.python)


def _watch_under_systemd(name: str, python: Path) -> None:
    """The engine host's systemd: install, the service in its sandbox, status, remove."""

    def inside(script: str) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "exec", name, "sh", "-c", script], capture_output=True, text=True,
                              check=False, timeout=300)

    hosts = "".join(f"        {h}:\n          ansible_host: 127.0.0.1\n          ansible_port: 9\n"
                    for h in ("spark-01", "spark-02"))
    prepared = inside("mkdir -p /srv/inv && chmod 755 /srv /srv/inv && printf '%s' "
                      f"'all:\n  children:\n    sparks:\n      hosts:\n{hosts}' > /srv/inv/hosts.yml && "
                      f"chown -R {OTHER_UID}:{OTHER_UID} /srv/inv")
    assert prepared.returncode == 0, prepared.stderr
    sparkfleet = f"{python} -m sparkfleet"
    textfiles = "/var/lib/prometheus/node-exporter"
    installed = inside(f"cd /srv && SUDO_UID={OTHER_UID} {sparkfleet} watch install -i /srv/inv --textfile-dir "
                       f"{textfiles} --state-dir /var/lib/sparkfleet-watch --interval 15min")
    assert installed.returncode == 0 and "started: sparkfleet-watch.timer" in installed.stdout, \
        installed.stdout + installed.stderr
    assert inside("systemctl is-enabled sparkfleet-watch.timer").stdout.strip() == "enabled"
    assert "sparkfleet-watch.timer" in inside("systemctl list-timers --all --no-pager").stdout
    started = inside("systemctl start sparkfleet-watch.service")
    journal = inside("journalctl -u sparkfleet-watch.service --no-pager").stdout
    assert started.returncode == 0, journal[-3000:]
    shown = dict(line.split("=", 1) for line in inside(
        "systemctl show sparkfleet-watch.service -p Result -p ProtectSystem -p NoNewPrivileges -p PrivateTmp"
    ).stdout.split())
    assert shown == {"Result": "success", "ProtectSystem": "strict", "NoNewPrivileges": "yes", "PrivateTmp": "yes"}, \
        shown
    written = inside(f"cat {textfiles}/sparkfleet.prom").stdout
    assert 'sparkfleet_run_exit_code{command="verify"} 3.0' in written, written[-2000:] + journal[-3000:]
    assert 'sparkfleet_host_up{host="spark-01",simulated="false"} 0.0' in written
    report = json.loads(inside("cat /var/lib/sparkfleet-watch/run/report.json").stdout)
    assert report["exit_code"] == 3 and "Traceback" not in journal
    assert inside("test -e /run/sparkfleet-watch").returncode != 0, "the run's temporary folder goes with it"
    status = inside(f"{sparkfleet} watch status --textfile-dir {textfiles}").stdout
    assert "sparkfleet-watch.timer" in status and "spark-01: NOT reached" in status, status
    removed = inside(f"{sparkfleet} watch remove --textfile-dir {textfiles}")
    assert removed.returncode == 0 and "/etc/systemd/system/sparkfleet-watch.timer" in removed.stdout
    assert inside("systemctl is-enabled sparkfleet-watch.timer").stdout.strip() in ("", "not-found")


def test_a_cycle_the_run_lock_stops_writes_its_own_exit_code_and_time(place):
    """Issue 70, item 4: a cycle stopped by another run's lock republished the last report (exit 2 or 3 and its
    old time), so SparkVerifyRunFailing never saw the 5 docs/watching.md promises. Now the cycle's own 5, its own
    time, and no host (none was verified)."""
    _inventory(place, "spark-01")
    common = ["--textfile-dir", str(place / "tf"), "--state-dir", str(place / "state")]
    first = sparkfleet("watch", "run", "-i", "inv", *common, cwd=place)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    before = time.time()
    with open(place / "inv" / ".sparkfleet" / "run.lock", "r+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a provision running
        lock.write("sparkfleet provision (pid 1)")
        lock.flush()
        held = sparkfleet("watch", "run", "-i", "inv", *common, cwd=place)
    assert held.returncode == 0, held.stdout[-3000:] + held.stderr
    metrics = (place / "tf" / "sparkfleet.prom").read_text()
    assert 'sparkfleet_run_exit_code{command="verify"} 5.0' in metrics, metrics
    ended = next(float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith('sparkfleet_run_timestamp_seconds{command="verify"}'))
    assert ended >= int(before), (ended, before)
    assert 'host="spark-01"' not in metrics, "no host was verified in that cycle"
    status = sparkfleet("watch", "status", "--textfile-dir", str(place / "tf"), cwd=place)
    assert status.returncode == 0 and ", exit 5, " in status.stdout, status.stdout + status.stderr


def test_remove_takes_only_roots_files_through_the_folder_it_judged(place):
    """Issue 70, item 5: `watch remove` followed a linked folder and deleted root's own unit and metrics in the
    link's target. A linked or untrusted folder is now refused, naming it, and nothing is removed."""
    precious = place / "precious"
    precious.mkdir()
    for name in ("sparkfleet-watch.service", "sparkfleet.prom"):
        (precious / name).write_text("root's own\n")
    (place / "linked").symlink_to(precious)
    refused = sparkfleet("watch", "remove", "--unit-dir", str(place / "linked"), "--textfile-dir",
                         str(place / "linked"), cwd=place)
    assert refused.returncode == 4 and "is a symbolic link" in refused.stderr, refused.stdout + refused.stderr
    assert sorted(p.name for p in precious.iterdir()) == ["sparkfleet-watch.service", "sparkfleet.prom"]
    theirs = place / "theirs"
    theirs.mkdir()
    (theirs / "sparkfleet.prom").write_text("x")
    os.chown(theirs, OTHER_UID, OTHER_UID)
    refused = sparkfleet("watch", "remove", "--unit-dir", str(precious), "--textfile-dir", str(theirs), cwd=place)
    assert refused.returncode == 4 and f"belongs to uid {OTHER_UID}" in refused.stderr, refused.stderr
    done = sparkfleet("watch", "remove", "--unit-dir", str(precious), "--textfile-dir", str(precious), cwd=place)
    assert done.returncode == 0 and sorted(precious.iterdir()) == [], done.stdout + done.stderr


def test_status_and_report_metrics_refuse_a_file_they_did_not_write_without_a_traceback(place):
    """Issue 70, item 8: `watch status` crashed on a label holding a carriage return (read_text made it a line
    break), `report --metrics` on an integer too large for a float. Each is data: read as written, refused with
    exit 4 and the reason where it is not sparkfleet's."""
    tf = place / "tf"
    tf.mkdir()
    (tf / "sparkfleet.prom").write_text('sparkfleet_host_up{host="a\rb",simulated="false"} 1.0\n'
                                        'sparkfleet_run_timestamp_seconds{command="verify"} 1e400\n'
                                        'sparkfleet_run_duration_seconds{command="verify"} 1\n', newline="")
    status = sparkfleet("watch", "status", "--textfile-dir", str(tf), cwd=place)
    assert "Traceback" not in status.stderr and status.returncode == 4, status.stdout + status.stderr
    assert "is not one sparkfleet wrote" in status.stderr, status.stderr
    from sparkfleet import report as reports

    report = {"schema": reports.SCHEMA, "command": "verify", "duration_s": 10 ** 400, "exit_code": 0, "hosts": {}}
    (place / "report.json").write_text(json.dumps(report))
    made = sparkfleet("report", str(place / "report.json"), "--metrics", str(tf / "other.prom"), cwd=place)
    assert "Traceback" not in made.stderr and made.returncode == 4, made.stdout + made.stderr
    assert "the report is not one sparkfleet wrote (OverflowError" in made.stderr, made.stderr
    assert not (tf / "other.prom").exists()
    # Issue 70, finding 1: a textfile folder of root's below another user's home passed (only the last folder was
    # judged) and was swapped for a link to /root before the write. The folder above is judged now.
    home = place / "home"
    home.mkdir()
    (home / "tf").mkdir()
    os.chown(home, OTHER_UID, OTHER_UID)
    report["duration_s"] = 1
    (place / "report.json").write_text(json.dumps(report))
    made = sparkfleet("report", str(place / "report.json"), "--metrics", str(home / "tf" / "x.prom"), cwd=place)
    assert made.returncode == 4 and f"is inside {home}, which belongs to uid {OTHER_UID}" in " ".join(
        made.stderr.split()), made.stdout + made.stderr
    assert list((home / "tf").iterdir()) == []
