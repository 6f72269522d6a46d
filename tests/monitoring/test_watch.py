"""Issue 59: `sparkfleet watch` - the units it writes (checked by systemd's own `systemd-analyze verify`), one cycle
run as the timer runs it (a real verify of an inventory whose host cannot be reached: its metrics say so), a host
removed from the inventory gone from the next file and a new one there after one cycle, status and remove. This
machine runs no systemd (install says so): the timer itself runs under a real one in the test bed's engine host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BIN


def sparkfleet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PATH=f"{BIN}:{env['PATH']}", NO_COLOR="1")
    return subprocess.run([str(BIN / "sparkfleet"), *args], cwd=cwd, capture_output=True, text=True, env=env,
                          check=False, timeout=300)


def _inventory(root: Path, *hosts: str) -> Path:
    inventory = root / "inv"
    inventory.mkdir(exist_ok=True)
    lines = ["all:", "  children:", "    sparks:", "      hosts:"]
    for host in hosts:  # nothing listens on port 9: unreachable at once
        lines += [f"        {host}:", "          ansible_host: 127.0.0.1", "          ansible_port: 9"]
    (inventory / "hosts.yml").write_text("\n".join(lines) + "\n")
    return inventory


@pytest.fixture
def place(tmp_path):
    root = tmp_path / "watch"
    root.mkdir(mode=0o755)
    return root


def test_install_writes_units_systemd_accepts_with_the_hardening_and_refuses_what_a_unit_cannot_hold(place):
    _inventory(place, "spark-01")
    units = place / "units"
    args = ["watch", "install", "-i", "inv", "--unit-dir", str(units), "--textfile-dir", str(place / "tf"),
            "--state-dir", str(place / "state"), "--interval", "15min"]
    done = sparkfleet(*args, cwd=place)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "systemd does not run this machine: nothing was started" in done.stdout
    service = (units / "sparkfleet-watch.service").read_text()
    timer = (units / "sparkfleet-watch.timer").read_text()
    assert f"ExecStart={BIN / 'sparkfleet'} watch run -i {place / 'inv'} --textfile-dir {place / 'tf'}" in service
    # PrivateTmp= hides /tmp from the service: left off, and said, where what it runs or writes lies there
    hidden = [str(p) for p in (BIN / "sparkfleet", place / "inv", place / "tf", place / "state")
              if str(p).startswith(("/tmp/", "/var/tmp/"))]
    private_tmp = f"# PrivateTmp= left off: it would hide {', '.join(hidden)} from the service" if hidden else \
        "PrivateTmp=yes"
    for line in ("Type=oneshot", "ProtectSystem=strict", private_tmp, "NoNewPrivileges=yes",
                 "RuntimeDirectory=sparkfleet-watch", "Environment=TMPDIR=%t/sparkfleet-watch",
                 f"ReadWritePaths={place / 'tf'} {place / 'state'} -{place / 'inv' / '.sparkfleet'}"):
        assert line in service.splitlines(), line
    assert "OnUnitActiveSec=15min" in timer.splitlines() and "WantedBy=timers.target" in timer
    checked = subprocess.run([shutil.which("systemd-analyze") or "systemd-analyze", "verify",
                              str(units / "sparkfleet-watch.service"), str(units / "sparkfleet-watch.timer")],
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0 and not checked.stderr.strip(), checked.stderr
    assert oct((place / "state").stat().st_mode & 0o777) == "0o700"
    for wrong, said in ((["--interval", "5 minutes; rm"], "--interval is '5 minutes; rm'; expected a span"),
                        (["--interval", "30s"], "1 minute or more"),
                        (["--textfile-dir", str(place / "text files")], "--textfile-dir is")):
        refused = sparkfleet(*args, *wrong, cwd=place)
        assert refused.returncode == 4 and said in refused.stderr, refused.stderr


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
def test_the_timer_under_a_real_systemd_runs_the_cycle_in_its_sandbox_and_remove_takes_it_away():
    """Issue 59: the units under a real systemd (PID 1 of the test bed's sparkfleet/host-engine, native x86_64, this
    checkout and its Python mounted read-only where they are here). `watch install` enables the timer; the service
    the timer starts, run now, verifies in its sandbox (ProtectSystem=strict) and writes the metrics: the hosts
    nothing answers for are `up` 0, exit 3. Before, that run failed under the real sandbox: the inventory's
    .sparkfleet folder, missing when the unit started, stayed read-only, and the run lock could not be made
    (a traceback, no metrics). `watch remove` disables the timer and takes the units away."""
    from host_container import started

    repo = BIN.parent.parent
    python_home = Path(os.path.realpath(BIN / "python")).parents[1]
    if str(python_home).startswith("/usr"):
        pytest.skip(f"the venv's Python lives in {python_home}, which the container has its own of")
    with started("sparkfleet/host-engine:latest", "sparkfleet-watch",
                 mounts=(f"{repo}:{repo}:ro", f"{python_home}:{python_home}:ro")) as name:
        _watch_under_systemd(name)


def _watch_under_systemd(name: str) -> None:
    """The engine host's systemd: install, the service in its sandbox, status, remove."""

    def inside(script: str) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "exec", name, "sh", "-c", script], capture_output=True, text=True,
                              check=False, timeout=300)

    hosts = "".join(f"        {h}:\n          ansible_host: 127.0.0.1\n          ansible_port: 9\n"
                    for h in ("spark-01", "spark-02"))
    prepared = inside("mkdir -p /srv/inv && chmod 755 /srv /srv/inv && printf '%s' "
                      f"'all:\n  children:\n    sparks:\n      hosts:\n{hosts}' > /srv/inv/hosts.yml")
    assert prepared.returncode == 0, prepared.stderr
    sparkfleet = f"{BIN / 'sparkfleet'}"
    textfiles = "/var/lib/prometheus/node-exporter"
    installed = inside(f"cd /srv && {sparkfleet} watch install -i /srv/inv --textfile-dir {textfiles} "
                       "--state-dir /var/lib/sparkfleet-watch --interval 15min")
    assert installed.returncode == 0 and "started: sparkfleet-watch.timer" in installed.stdout, \
        installed.stdout + installed.stderr
    assert inside("systemctl is-enabled sparkfleet-watch.timer").stdout.strip() == "enabled"
    assert "sparkfleet-watch.timer" in inside("systemctl list-timers --all --no-pager").stdout
    started = inside("systemctl start sparkfleet-watch.service")
    journal = inside("journalctl -u sparkfleet-watch.service --no-pager").stdout
    assert started.returncode == 0, journal[-3000:]
    shown = dict(line.split("=", 1) for line in inside(
        "systemctl show sparkfleet-watch.service -p Result -p ProtectSystem -p NoNewPrivileges").stdout.split())
    assert shown == {"Result": "success", "ProtectSystem": "strict", "NoNewPrivileges": "yes"}, shown
    written = inside(f"cat {textfiles}/sparkfleet.prom").stdout
    assert 'sparkfleet_run_exit_code{command="verify"} 3.0' in written, written[-2000:]
    assert 'sparkfleet_host_up{host="spark-01",simulated="false"} 0.0' in written
    report = json.loads(inside("cat /var/lib/sparkfleet-watch/run/report.json").stdout)
    assert report["exit_code"] == 3 and "Traceback" not in journal
    assert inside("test -e /run/sparkfleet-watch").returncode != 0, "the run's temporary folder goes with it"
    status = inside(f"{sparkfleet} watch status --textfile-dir {textfiles}").stdout
    assert "sparkfleet-watch.timer" in status and "spark-01: NOT reached" in status, status
    removed = inside(f"{sparkfleet} watch remove --textfile-dir {textfiles}")
    assert removed.returncode == 0 and "/etc/systemd/system/sparkfleet-watch.timer" in removed.stdout
    assert inside("systemctl is-enabled sparkfleet-watch.timer").stdout.strip() in ("", "not-found")


def test_a_sparkfleet_under_tmp_keeps_its_tmp_for_the_service():
    """A checkout or venv under /tmp (a clean clone there): PrivateTmp=yes hid the sparkfleet the service runs
    ("Unable to locate executable", status 203/EXEC under the real systemd). Elsewhere the sandbox keeps it."""
    from pathlib import Path

    from sparkfleet import watch

    away = watch.units(Path("/opt/sf/.venv/bin/sparkfleet"), Path("/srv/inv"), Path("/var/lib/tf"),
                       Path("/var/lib/sfw"), "15min")["sparkfleet-watch.service"]
    assert "PrivateTmp=yes" in away.splitlines()
    under = watch.units(Path("/tmp/clone/.venv/bin/sparkfleet"), Path("/srv/inv"), Path("/var/lib/tf"),
                        Path("/var/tmp/sfw"), "15min")["sparkfleet-watch.service"]
    assert "PrivateTmp=yes" not in under and ("# PrivateTmp= left off: it would hide /tmp/clone/.venv/bin/sparkfleet, "
                                              "/var/tmp/sfw from the service") in under.splitlines()
