"""The three jobs on a lab fleet of 3 emulated aarch64 hosts, end to end through the sparkfleet CLI.

Provision (a fresh fleet, with a registry password planted to prove it
reaches no report or runner artifact), a fleet refresh of the moving tag
(canary, then the rest), a refresh in which one host fails verification
(rolled back, the rollout stops, the lock says what the fleet moves to), and
the restore of a host destroyed and recreated (an OS reinstall). The hosts
are the lab's (testbed/lab.sh) under their own prefix and inventory, beside
any lab a developer runs.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import inert_load
from pty_screen import Screen

from conftest import BIN, REPO, SHOW_INVOCATION, own_checks_accept, record

pytestmark = pytest.mark.testbed
PREFIX = "sparkfleet-fleet"
HOSTS = [f"{PREFIX}-{n}" for n in (1, 2, 3)]
SECRET = "planted-registry-password-3f9c1e"
SCHEMA = json.loads((REPO / "src" / "sparkfleet" / "report-schema.json").read_text())
REGISTRY = "http://127.0.0.1:5000"


def sh(*argv: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=REPO, capture_output=True, text=True, check=check,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    inventory = root / "inventory"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    shutil.copy(REPO / "inventory" / "lab" / "group_vars" / "all" / "main.yml", inventory / "group_vars" / "all")
    env = {"LAB_PREFIX": PREFIX, "LAB_INVENTORY": str(inventory), "LAB_VENV_HOST": "0"}
    for script in (["testbed/aptrepo.sh", "start"], ["testbed/registry.sh", "start"], ["testbed/standins.sh"]):
        sh(*script)
    secrets = root / "secrets.yml"
    secrets.write_text(yaml.safe_dump({"spark_images_registry_credentials": {
        "127.0.0.1:5000": {"username": "fleet", "password": SECRET}}}))
    own_settings(root, inventory)
    # Fresh hosts: `up` restarts a stopped host of the same name with what it held (a run killed before its
    # teardown leaves them), and the tests start from a fleet never provisioned.
    sh("testbed/lab.sh", "down", env=env, check=False)
    try:
        up = sh("testbed/lab.sh", "up", "3", env=env, check=False)
        assert up.returncode == 0, up.stdout + up.stderr
        yield {"root": root, "inventory": inventory, "env": env, "secrets": secrets}
    finally:
        sh("testbed/lab.sh", "down", env=env, check=False)
        sh("testbed/standins.sh", check=False)  # the lab registry's tags back where they were


def own_settings(root: Path, inventory: Path) -> None:
    """The hosts differ in their settings as an owner's host_vars make them (issue 35): host 1 keeps the group's,
    hosts 2 and 3 have their own (tests/fleet/host_vars), each kept in host_vars/HOST/ beside what a test adds."""
    for source in sorted((Path(__file__).parent / "host_vars").glob("*.yml")):
        (inventory / "host_vars" / source.stem).mkdir(parents=True)
        shutil.copy(source, inventory / "host_vars" / source.stem / "settings.yml")
    # What names this machine's files: the test bed's key, pinned by its fingerprint; an advisories file of the
    # host's own, without the moving Unsloth tag's advisory, read strictly (spark_advisories_strict).
    key = sh("curl", "-fsS", "http://127.0.0.1:5080/gpgkey").stdout
    fingerprint = next(line.split(":")[9] for line in subprocess.run(
        ["gpg", "--show-keys", "--with-colons"], input=key, capture_output=True, text=True, check=True
    ).stdout.splitlines() if line.startswith("fpr:"))
    advisories = yaml.safe_load((REPO / "matrix" / "advisories.yml").read_text())
    advisories["advisories"] = [a for a in advisories["advisories"] if a["id"] != "unsloth-10491"]
    (root / "advisories-fleet-3.yml").write_text(yaml.safe_dump(advisories))
    (inventory / "host_vars" / HOSTS[2] / "testbed.yml").write_text(yaml.safe_dump({
        "spark_container_runtime_gpg_key_fingerprint": fingerprint,
        "spark_advisories_file": str(root / "advisories-fleet-3.yml")}))


LAUNCHER_DIRS = {HOSTS[2]: "/opt/sparkfleet/bin"}  # host_vars/sparkfleet-fleet-3.yml; the others keep the default
STATE_FILES = {HOSTS[2]: "/var/lib/sparkfleet/fleet-3-state.json"}
CATALOGS = {HOSTS[2]: {"unsloth"}}  # its own catalog; the others the group's (every image of the lock)


def own_images(host: str, pinned: dict) -> dict:
    """The lock's digests of the images the host's catalog names."""
    return {name: image["index_digest"] for name, image in pinned.items() if name in CATALOGS.get(host, pinned)}


def launcher(host: str, name: str = "spark-unsloth") -> str:
    return f"{LAUNCHER_DIRS.get(host, '/usr/local/bin')}/{name}"


def cat(host: str, path: str) -> str:
    return sh("docker", "exec", host, "cat", path).stdout


def cli(fleet, name: str, *args: str, pty: bool = False, **env: str) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """A sparkfleet command on the fleet, piped with --plain; or (pty) typed at an 80-column terminal from a
    directory of the user's own, its screen as the result's stdout; `env` added to the environment."""
    report_dir = fleet["root"] / "reports" / name
    argv = [*args, "-i", str(fleet["inventory"]), "--report-dir", str(report_dir)]
    if pty:
        home = fleet["root"] / "home"
        home.mkdir(exist_ok=True)
        screen = Screen(argv, home, columns=80, timeout=900, **env).wait()
        proc = subprocess.CompletedProcess(argv, screen.rc, screen.text, "")
        proc.raw = screen.raw
    else:
        proc = subprocess.run([str(BIN / "sparkfleet"), *argv, "--plain"], cwd=REPO, capture_output=True, text=True,
                              check=False, env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **env})
    data = json.loads((report_dir / "report.json").read_text())
    jsonschema.validate(data, SCHEMA)
    if name in RECORDED:
        record(report_dir, RECORDED[name])
    return proc, data, report_dir


# The runs whose events tests/cli reads (SPARKFLEET_RECORD_EVENTS=1 records them again): the fresh fleet's
# provision and the refresh in which the second host fails and is rolled back; make lab's provision is test_0's.
RECORDED = {"provision": "provision-fleet.jsonl", "refresh-fail": "refresh-rollback-fleet.jsonl"}


def lock(fleet) -> dict:
    path = fleet["inventory"] / "group_vars" / "all" / "spark_images_lock.yml"
    return inert_load(path.read_text())["spark_images_lock"]


def launcher_ref(host: str) -> str:
    text = cat(host, launcher(host))
    return next(w for w in text.split() if "unsloth/unsloth@sha256:" in w).strip("'")


def push_unsloth(seed: str) -> str:
    out = sh(str(REPO / ".venv" / "bin" / "python"), "testbed/oci_push.py", REGISTRY,
             "unsloth/unsloth:dgxspark-latest", "--list-type", "docker", "--seed", seed).stdout
    return json.loads(out)["digest"]


def test_0_the_readmes_make_lab_at_a_terminal_brings_up_and_provisions_a_lab(fleet):
    """The README's first command, `make lab`, typed at an 80-column terminal (one host, LAB_HOSTS=1, under a
    prefix and an inventory of the test's own, beside any lab of the developer's): the test bed is current, the
    host starts, pin's and provision's live display and summaries are drawn, the host is provisioned (simulated,
    never verified) and the reports line names files that are there. The lab's venv host is left out
    (LAB_VENV_HOST=0): the venv's converge on an emulated host is Molecule's venv scenario, which checks it; here
    it was built under emulation and never looked at."""
    env = {"LAB_PREFIX": "sparkfleet-makelab", "LAB_INVENTORY": str(fleet["root"] / "makelab"), "LAB_VENV_HOST": "0"}
    (Path(env["LAB_INVENTORY"]) / "group_vars" / "all").mkdir(parents=True)
    shutil.copy(REPO / "inventory" / "lab" / "group_vars" / "all" / "main.yml",
                Path(env["LAB_INVENTORY"]) / "group_vars" / "all")
    sh("testbed/lab.sh", "down", env=env, check=False)  # a host never provisioned (see the fleet fixture)
    try:
        screen = Screen(["lab", "LAB_HOSTS=1"], REPO, columns=80, timeout=1500, program="make", **env).wait()
    finally:
        sh("testbed/lab.sh", "down", env=env, check=False)
    assert screen.rc == 0 and "Traceback" not in screen.text, screen.text[-5000:]
    lines = screen.lines()
    assert any(line.startswith("sparkfleet pin: successful (exit 0") for line in lines), screen.text[-5000:]
    assert any("play: Provision DGX Spark hosts" in line for line in lines), "the live display was drawn"
    title = max(i for i, line in enumerate(lines) if line.startswith("sparkfleet provision: successful (exit 0"))
    end = next(i for i in range(title, len(lines)) if lines[i].startswith("reports: "))
    row = next(line for line in lines[title:end] if line.startswith("sparkfleet-makelab-1"))
    # at 80 columns, what it runs (each image's digest) before its history (issue 45, item 8), which is named
    assert "not verified" in row and re.search(r"ngc@[0-9a-f]{12}", row), "\n".join(lines[title:end])
    assert "history" in next(line for line in lines[title:end] if line.startswith("(left out at 80 columns"))
    assert all(len(line) <= 80 for line in lines[title:end]), "\n".join(lines[title:end])
    data = json.loads((REPO / lines[end].split()[1].rstrip(",")).read_text())
    assert data["hosts"]["sparkfleet-makelab-1"]["history"] == "fresh"
    jsonschema.validate(data, SCHEMA)
    record((REPO / lines[end].split()[1].rstrip(",")).parent, "provision-lab.jsonl")
    assert data["inventory"] == env["LAB_INVENTORY"] and list(data["hosts"]) == ["sparkfleet-makelab-1"]


def test_1_provision_a_fresh_fleet_without_leaking_the_registry_password(fleet):
    proc, pinned_report, _ = cli(fleet, "pin", "pin")
    assert proc.returncode == 0, proc.stdout[-3000:]
    # The moving Unsloth tag has an upstream advisory (matrix/advisories.yml): said, not refused.
    assert any(w.startswith("advisory unsloth-10491 affects image unsloth/unsloth:dgxspark-latest")
               for w in pinned_report["warnings"])
    assert "warning: advisory unsloth-10491" in proc.stdout
    # --diff: every file the run writes is shown, the place a password would leak first; and each result's
    # module arguments kept in the runner's events, as a user's inject_invocation would keep them.
    proc, data, report_dir = cli(fleet, "provision", "provision", "-e", f"@{fleet['secrets']}", "--diff",
                                 **SHOW_INVOCATION)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert any(line.startswith(f"{HOSTS[0]}: changed ") for line in proc.stdout.splitlines()), "the diffs shown"
    pinned = lock(fleet)
    assert sorted(data["hosts"]) == HOSTS
    for host in HOSTS:
        entry = data["hosts"][host]
        assert (entry["host_class"], entry["simulated"], entry["history"]) == ("spark", True, "fresh")
        assert entry["runtime"]["registered"] is True
        assert {i["name"]: i["ref"].rsplit("@", 1)[1] for i in entry["images"]} == own_images(host, pinned)
        assert entry["verification"]["verdict"] == "not verified"  # simulated: never a pass
        assert entry["counts"]["failed"] == 0
    # The summary table and the reports.
    assert "sparkfleet provision: successful (exit 0" in proc.stdout
    suite = ET.parse(report_dir / "report.junit.xml").getroot()
    cases = {(c.get("classname"), c.get("name")) for c in suite.iter("testcase")}
    assert {(f"sparkfleet.{h}", check) for h in HOSTS for check in ("run", "class", "runtime", "verification")} \
        <= cases
    assert "| sparkfleet-fleet-1 | spark (simulated) | fresh | registered |" in (report_dir / "report.md").read_text()
    assert_no_secret(proc, report_dir)


def test_1b_each_host_was_provisioned_with_its_own_settings(fleet):
    """Issue 35: hosts 2 and 3 have settings of their own (tests/fleet/host_vars), host 1 the group's. What each
    host got is read on the host: before, a check or a plan made once for the fleet gave every host the first
    host's, or failed the others."""
    def run(host: str, command: str) -> str:
        return sh("docker", "exec", host, "sh", "-c", command, check=False).stdout.strip()

    one, two, three = HOSTS
    toolkit = "dpkg-query -W -f '${Version}' nvidia-container-toolkit"
    assert (run(one, toolkit), run(two, toolkit), run(three, toolkit)) == ("1.18.0-1", "1.17.8-1", "1.18.0-1")
    daemon = {host: json.loads(cat(host, "/etc/docker/daemon.json")) for host in HOSTS}
    assert [daemon[h].get("default-runtime") for h in HOSTS] == [None, "nvidia", None]
    assert [bool(daemon[h].get("features", {}).get("cdi")) for h in HOSTS] == [False, False, True]
    assert [("docker" in run(h, "id -nG daemon").split()) for h in HOSTS] == [False, True, False]
    sources = {h: run(h, "cat /etc/apt/sources.list.d/*") for h in HOSTS}
    assert "localhost:5080" in sources[two] and "localhost:5080" not in sources[one] + sources[three]
    keyring = "/usr/share/keyrings/sparkfleet-fleet-3-nvidia.gpg"
    assert run(three, f"test -s {keyring} && echo yes") == "yes" and run(one, f"test -e {keyring} || echo no") == "no"
    # The images: host 2's run flags, environment, login file and record; host 3's catalog, mirror, launcher
    # folder and working directory.
    launchers = {h: cat(h, launcher(h)) for h in HOSTS}
    assert "--shm-size=8g" in launchers[two] and "HF_HOME=/srv/hf-cache" in launchers[two]
    assert not any("--shm-size=8g" in launchers[h] or "HF_HOME" in launchers[h] for h in (one, three))
    assert json.loads(run(two, "cat /var/lib/sparkfleet/fleet-2-pulled.json"))
    assert "127.0.0.1:5000" in json.loads(run(two, "cat /root/.docker-fleet-2/config.json"))["auths"]
    assert run(two, "stat -c %a /root/.docker-fleet-2/config.json") == "600"
    assert "localhost:5000/unsloth/unsloth@sha256:" in launchers[three]
    assert "127.0.0.1:5000/unsloth/unsloth@sha256:" in launchers[one]
    assert "/workspace/work" in launchers[three] and "/workspace/finetuning" in launchers[one]
    assert run(three, "ls /opt/sparkfleet/bin /usr/local/bin | grep spark- || true") == "spark-unsloth"
    # The verification's record where each host keeps it.
    assert json.loads(cat(three, STATE_FILES[three]))["verification"]["images"]
    assert run(three, "test -e /var/lib/sparkfleet/state.json || echo none") == "none"
    assert json.loads(cat(one, "/var/lib/sparkfleet/state.json"))["verification"]["images"]


def assert_no_secret(proc: subprocess.CompletedProcess, report_dir: Path) -> None:
    """The planted password reached no report, no runner artifact, not the output; looked for as given and as
    Docker's client configuration stores it (base64 of user:password)."""
    planted = [SECRET, base64.b64encode(f"fleet:{SECRET}".encode()).decode()]
    leaks = [str(p) for p in report_dir.rglob("*") if p.is_file()
             and any(s in p.read_text(errors="replace") for s in planted)]
    assert leaks == []
    assert not any(s in proc.stdout + proc.stderr for s in planted)
    assert any((report_dir / "artifacts" / "run" / "job_events").iterdir()), "the artifacts were kept"


def test_2_refresh_canary_first_then_the_rest(fleet):
    old = lock(fleet)["unsloth"]["index_digest"]
    new = push_unsloth("fleet-refresh-a")
    # At an 80-column terminal, as an owner checks before a rollout: the live display, then the summary.
    proc, data, report_dir = cli(fleet, "refresh-check", "refresh", "--check", pty=True)
    assert proc.returncode == 0 and "Traceback" not in proc.stdout, proc.stdout[-3000:]
    assert "play: " in proc.stdout, "the live display was drawn"
    assert "sparkfleet refresh: successful (exit 0" in proc.stdout
    flat = proc.stdout.replace("\n", "")
    assert "lock diff: " in proc.stdout and old in flat and new in flat, "the moved digest is on the screen"
    assert str(report_dir / "report.md") in proc.stdout
    assert {d["name"]: (d["old"], d["new"], d["changed"]) for d in data["refresh"]["diff"]}["unsloth"] == (
        old, new, True)
    assert lock(fleet)["unsloth"]["index_digest"] == old, "--check wrote nothing"
    assert all(launcher_ref(h).endswith(old) for h in HOSTS)
    # Issue 35, item 6: the title says nothing changed, and each host what it would move (not a table of ? and -).
    short = {d: d.removeprefix("sha256:")[:12] for d in (old, new)}
    assert "check mode: nothing changed" in flat
    for host in HOSTS:
        assert f"{host}: would move: unsloth {short[old]} -> {short[new]}" in proc.stdout, proc.stdout[-3000:]
    # Issue 58, item 6: --check read what would make each host's rollout fail (Docker's nvidia runtime): none here.
    assert all((data["hosts"][h]["runtime"] or {}).get("registered") for h in HOSTS), data["hosts"]
    assert not [w for w in data["warnings"] if "nvidia runtime" in w]

    # --limit (here: all three) must not skip the controller's resolution. The registry's credentials given
    # as at provision: the tag is resolved with them on the controller, and they are in nothing the run leaves.
    proc, data, report_dir = cli(fleet, "refresh", "refresh", "-e", '{"refresh_batches": [1, 1]}', "--limit",
                                 ",".join(HOSTS), "-e", f"@{fleet['secrets']}", **SHOW_INVOCATION)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert_no_secret(proc, report_dir)
    assert lock(fleet)["unsloth"]["index_digest"] == new
    # what the refresh wrote on the controller, named as pin names it (issue 45, item 9: no `wrote:` line)
    lock_file = fleet["inventory"] / "group_vars" / "all" / "spark_images_lock.yml"
    assert f"wrote: {lock_file} (Write the refreshed lock into the inventory)" in proc.stdout, proc.stdout[-3000:]
    assert own_checks_accept(fleet["inventory"]) == []
    assert all(launcher_ref(h).endswith(new) for h in HOSTS)
    assert f"{HOSTS[0]}: canary moved: unsloth {short[old]} -> {short[new]}" in proc.stdout
    assert f"{HOSTS[2]}: batch 3 moved: unsloth {short[old]} -> {short[new]}" in proc.stdout
    assert all(any(i["ref"].endswith(new) for i in data["hosts"][h]["images"]) for h in HOSTS)
    # Canary first: the first host finished its rollout before the second one started pulling.
    # (A "still: Pull by digest: the new digests (15 s)" line is the progress of a task already started, not a start.)
    # (Nor is a host's "changed: Pull by digest: the new digests" under the summary, which says what it changed.)
    starts = [line for line in proc.stdout.splitlines()
              if "Pull by digest: the new digests" in line and "still:" not in line and ": changed: " not in line]
    assert len(starts) == 3, starts

    # Issue 35, item 3: the refresh leaves each host exactly as a provision would. Before, the launchers said
    # "when pinned, None", the state file and the controller's record kept the old digest, and the next provision
    # changed 3 on every host (anyone alerting on changed != 0 was paged after every refresh).
    when = lock(fleet)["unsloth"]["resolved_at"]
    for host in HOSTS:
        script = cat(host, launcher(host))
        assert f"when pinned, {when})" in script and "None" not in script, script
        state = json.loads(cat(host, STATE_FILES.get(host, "/var/lib/sparkfleet/state.json")))
        record = json.loads((fleet["inventory"] / ".sparkfleet" / "hosts" / f"{host}.json").read_text())
        for kept in (state, record):
            refs = {i["name"]: i["ref"] for i in kept["verification"]["images"]}
            assert refs["unsloth"].endswith(new), refs
    # Host 3 prunes (spark_images_prune): the image its refresh replaced is gone, as a provision would have left
    # it; the others keep theirs (before, the provision below removed it and reported changed 1).
    def digests(host: str) -> list[str]:
        return sh("docker", "exec", host, "docker", "image", "ls", "--digests", "--format",
                  "{{.Digest}}").stdout.split()

    assert old in digests(HOSTS[0]) and old not in digests(HOSTS[2])
    # --fast (Mitogen) on the whole fleet, typed at an 80-column terminal: nothing to change after the refresh, and
    # the same outcome as the refresh's own run with the default strategy (each host's images and verification);
    # the screen a person reads - the live display, each host's row within 80 columns, the reports line.
    refreshed = data
    proc, fast, report_dir = cli(fleet, "provision-after-refresh", "provision", "--fast", pty=True)
    assert_the_screen_of_a_converged_fleet(proc, "provision", report_dir)
    for host in HOSTS:
        entry = fast["hosts"][host]
        assert entry["counts"]["changed"] == 0, (host, entry["counts"], proc.stdout[-3000:])
        assert entry["history"] == "converged"
        assert entry["images"] == refreshed["hosts"][host]["images"]
        assert entry["runtime"]["registered"] is True
        assert entry["verification"]["lines"] == refreshed["hosts"][host]["verification"]["lines"]


def test_3_a_host_that_fails_verification_is_rolled_back_and_the_rollout_stops(fleet):
    before = lock(fleet)["unsloth"]["index_digest"]
    broken = HOSTS[1]
    sh("docker", "exec", broken, "sh", "-c",
       'printf \'{"bridge": "sparkfleet0", "ip6tables": false, "iptables": false}\\n\' > /etc/docker/daemon.json'
       " && systemctl restart docker")
    new = push_unsloth("fleet-refresh-b")
    proc, data, _ = cli(fleet, "refresh-fail", "refresh", "-e", '{"refresh_batches": [1, 1]}')
    assert proc.returncode == 2, proc.stdout[-5000:]
    assert launcher_ref(HOSTS[0]).endswith(new), "the canary moved"
    assert launcher_ref(broken).endswith(before), "the failing host was rolled back"
    assert launcher_ref(HOSTS[2]).endswith(before), "the rollout stopped before the next batch"
    assert lock(fleet)["unsloth"]["index_digest"] == new, "the canary passed: the lock names the target"
    entry = data["hosts"][broken]
    assert "does not list the nvidia runtime" in entry["refresh_failure"]
    assert any(i["ref"].endswith(before) for i in entry["images"])
    assert any("rolled back to" in f["msg"] for f in entry["failures"])
    assert HOSTS[2] not in data["hosts"] or data["hosts"][HOSTS[2]]["counts"]["changed"] == 0


def test_4_restore_a_destroyed_host(fleet):
    lost = HOSTS[2]
    sh("docker", "rm", "-f", lost)
    sh("docker", "volume", "rm", "-f", f"{lost}-docker")
    up = sh("testbed/lab.sh", "up", "3", env=fleet["env"], check=False)
    assert up.returncode == 0, up.stdout + up.stderr
    # the new host alone gets the hardware doubles: the two running hosts have them, byte for byte
    assert f"installed the hardware doubles on {lost}\n" in up.stdout, up.stdout
    proc, data, _ = cli(fleet, "restore", "provision")
    assert proc.returncode == 0, proc.stdout[-5000:]
    pinned = lock(fleet)
    entry = data["hosts"][lost]
    assert entry["history"] == "restored"
    assert {i["name"]: i["ref"].rsplit("@", 1)[1] for i in entry["images"]} == own_images(lost, pinned)
    assert entry["runtime"]["registered"] is True
    assert entry["verification"]["verdict"] == "not verified" and entry["verification"]["lines"]
    assert data["hosts"][HOSTS[1]]["runtime"]["registered"] is True, "provision repaired the broken host"
    assert all(launcher_ref(h).endswith(pinned["unsloth"]["index_digest"]) for h in HOSTS)


def watch_cycle(fleet, name: str, textfiles: Path, pty: bool = False):
    """One watch cycle on the lab, as `sparkfleet watch run` makes it: the verify (typed at an 80-column terminal
    with pty), then its report as metrics in node_exporter's textfile folder; the verify's (process, report.json,
    report folder)."""
    proc, data, report_dir = cli(fleet, name, "verify", pty=pty)
    assert "Traceback" not in proc.stdout, proc.stdout[-3000:]
    written = sh(str(BIN / "sparkfleet"), "report", str(report_dir), "--metrics", str(textfiles / "sparkfleet.prom"))
    assert written.stdout.startswith("wrote: "), written.stdout + written.stderr
    return proc, data, report_dir


DRIFT_ALERTS = ("SparkDrift", "SparkVerifyFailing")
# Where the lab's stand-in nvidia-smi reads a GB10's answers (testbed/doubles/nvidia-smi/README.md).
LAB_HEALTH = "/usr/share/sparkfleet-lab/nvidia-smi/gb10/health.csv"
# A hot GB10's answer (hw_slowdown and hw_thermal_slowdown active, 94 C), as the stand-in reads it.
HOT = "0x0000000000000048, Active, Not Active, Not Active, Not Active, 94, [N/A]\n"


def test_4b_a_drifted_host_and_a_hot_host_each_raise_their_own_alert_in_prometheus_and_both_clear(fleet, tmp_path):
    """Issue 59, proved with the real parts, two faults at once on two hosts: host 1 drifted (its ngc launcher
    removed), host 2's GPU slowing down (the stand-in nvidia-smi's answer written as a hot GB10's would read). One
    watch cycle (`sparkfleet verify`, then `sparkfleet report --metrics` into node_exporter's textfile folder),
    Debian's node_exporter serving it and Debian's Prometheus scraping it with the shipped rules: Prometheus' API
    has SparkDrift and SparkVerifyFailing for host 1 alone and SparkThermalSlowdown for host 2's two reasons alone
    (each fault raises its own alert on its own host, and no other). `sparkfleet provision -l HOST` repairs host 1,
    host 2 cools, and the next cycle clears both. That cycle's verify, of the fleet converged again, is the one
    test_5 reads: typed at an 80-column terminal."""
    from prometheus_stack import running

    path = launcher(HOSTS[0], "spark-ngc")
    kept = {"launcher": cat(HOSTS[0], path), "health": cat(HOSTS[1], LAB_HEALTH)}
    textfiles = tmp_path / "textfile"
    textfiles.mkdir(mode=0o755)

    def cycle(name: str) -> dict:
        return watch_cycle(fleet, name, textfiles)[1]

    def health(text: str) -> None:
        subprocess.run(["docker", "exec", "-i", HOSTS[1], "sh", "-c", f"cat > {LAB_HEALTH}"], input=text, text=True,
                       check=True)

    sh("docker", "exec", HOSTS[0], "rm", path)
    health(HOT)
    try:
        data = cycle("watch-faults")
        assert data["exit_code"] == 2 and data["hosts"][HOSTS[0]]["verification"]["drift_items"][0]["kind"] == \
            "launcher", data["hosts"][HOSTS[0]]["verification"]
        assert data["hosts"][HOSTS[1]]["health"]["gpus"] == [{
            "index": 0, "temperature_c": 94, "memory_temperature_c": None,
            "clock_event_reasons": ["hw_slowdown", "hw_thermal_slowdown"]}], data["hosts"][HOSTS[1]]["health"]
        assert data["hosts"][HOSTS[0]]["health"]["gpus"][0]["clock_event_reasons"] == ["gpu_idle"]
        with running(textfiles, tmp_path) as stack:
            def raised():
                found = {(a["alertname"], a.get("host"), a.get("reason")) for a in stack.alerts()}
                drifted = {("SparkDrift", HOSTS[0]), ("SparkVerifyFailing", HOSTS[0])} <= {
                    (alert, host) for alert, host, _ in found}
                return found if drifted and ("SparkThermalSlowdown", HOSTS[1], "hw_thermal_slowdown") in found \
                    else None

            found = stack.wait_for("the drifted host's and the hot host's alerts in Prometheus", raised)
            # (The lab's hosts share this machine's memory, and the lab pins an image an advisory is about: those
            # alerts may be there for every host; the drift's are for the drifted host alone.)
            assert {host for alert, host, _ in found if alert in DRIFT_ALERTS} == {HOSTS[0]}, \
                f"drift alerts for another host: {found}"
            assert {(host, reason) for alert, host, reason in found if alert == "SparkThermalSlowdown"} == \
                {(HOSTS[1], "hw_slowdown"), (HOSTS[1], "hw_thermal_slowdown")}, found
            [series] = stack.query(f'sparkfleet_gpu_temperature_celsius{{host="{HOSTS[1]}"}}')
            assert series["value"][1] == "94", series
            repaired, _, _ = cli(fleet, "watch-repair", "provision", "--limit", HOSTS[0])
            assert repaired.returncode == 0, repaired.stdout[-3000:]
            # Issue 58, item 2: the repair is said on the screen, a line a change, under the host's name.
            assert f"{HOSTS[0]}: changed: Install a launcher per image that runs exactly the pinned digest" \
                in repaired.stdout, repaired.stdout[-3000:]
            health(kept["health"])
            clean = watch_cycle(fleet, "verify", textfiles, pty=True)
            assert clean[1]["hosts"][HOSTS[0]]["verification"]["drift"] == [], clean[0].stdout[-3000:]
            fleet["verify"] = clean
            stack.wait_for("the alerts cleared", lambda: not [
                a for a in stack.alerts()
                if a.get("host") and a["alertname"] in (*DRIFT_ALERTS, "SparkThermalSlowdown")])
    finally:
        restore = f"test -e {path} || {{ cat > {path} && chmod 755 {path}; }}"
        subprocess.run(["docker", "exec", "-i", HOSTS[0], "sh", "-c", restore], input=kept["launcher"], text=True,
                       check=True)
        health(kept["health"])


def assert_the_screen_of_a_converged_fleet(proc: subprocess.CompletedProcess, command: str, report_dir: Path):
    """What a person reads at the 80-column terminal: the live display, then each host's row whole with its
    verdict inside 80 columns, and the reports line naming report.md."""
    assert proc.returncode == 0 and "Traceback" not in proc.stdout, proc.stdout[-5000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("play: ") or " play: " in line for line in lines), "the live display was drawn"
    title = max(i for i, line in enumerate(lines) if line.startswith(f"sparkfleet {command}: successful (exit 0"))
    end = next(i for i in range(title, len(lines)) if lines[i].startswith("reports: "))
    assert all(len(line) <= 80 for line in lines[title:end]), "\n".join(lines[title:end])
    for host in HOSTS:
        assert any(line.startswith(host) and "not verified" in line for line in lines[title:end]), host
    assert str(report_dir / "report.md") in lines[end]


def test_5_verify_typed_at_an_80_column_terminal_changes_nothing_on_the_converged_fleet(fleet):
    """The README's `sparkfleet verify -i inventory`, typed at an 80-column terminal from a directory of the
    user's own: the live display, then each host's row whole with its verdict inside 80 columns, the reports
    line; the converged fleet unchanged. The verify is test_4b's last watch cycle, or its own where test_4b was not
    run."""
    proc, data, report_dir = fleet.get("verify") or cli(fleet, "verify", "verify", pty=True)
    assert_the_screen_of_a_converged_fleet(proc, "verify", report_dir)
    for host in HOSTS:
        entry = data["hosts"][host]
        assert entry["counts"]["changed"] == 0, (host, entry["counts"])
        assert entry["history"] == "converged"
        assert entry["verification"]["verdict"] == "not verified"  # simulated: never a pass


def test_5c_the_fleets_verify_shown_again_at_an_80_column_terminal(fleet, tmp_path):
    """`sparkfleet report DIR` at a pty of 80 columns, from a directory of the user's own: the fleet's summary as
    a person reads it - each host's row whole with its verdict, the table inside 80 columns (what it left out
    named), the reports line (paths unbroken, for copying)."""
    report_dir = fleet["root"] / "reports" / "verify"
    screen = Screen(["report", str(report_dir)], tmp_path, columns=80, timeout=120).wait()
    assert screen.rc == 0 and "Traceback" not in screen.text, screen.text[-3000:]
    lines = screen.lines()
    title = next(i for i, line in enumerate(lines) if line.startswith("sparkfleet verify: successful (exit 0"))
    end = next(i for i in range(title, len(lines)) if lines[i].startswith("reports: "))
    table = lines[title:end]
    assert all(len(line) <= 80 for line in table), "\n".join(table)
    for host in HOSTS:
        assert any(line.startswith(host) and "not verified" in line for line in table), "\n".join(table)
    assert "(left out at 80 columns: " in "\n".join(table)
    assert str(report_dir / "report.md") in lines[end]


def test_5d_the_readmes_provision_check_diff_limit_at_a_terminal_shows_the_change_and_makes_none(fleet):
    """The README's `sparkfleet provision -i inventory/mylab --check --diff --limit spark-01`, typed at an
    80-column terminal, after a launcher on that host was edited by hand: the screen names the change on that host
    alone with its diff (the edit removed), the table holds that host alone, and the edit is still there."""
    from test_at_a_terminal import readme_commands

    (argv,) = [a for a in readme_commands() if a[1:2] == ["provision"] and "--check" in a and "--limit" in a]
    at = argv.index("-i")
    args = [HOSTS[0] if word == "spark-01" else word for word in argv[1:at] + argv[at + 2:]]
    launcher = "/usr/local/bin/spark-unsloth"
    original = subprocess.run(["docker", "exec", HOSTS[0], "cat", launcher], capture_output=True, text=True,
                              check=True).stdout
    subprocess.run(["docker", "exec", HOSTS[0], "sh", "-c", f"echo '# edited by hand' >> {launcher}"], check=True)
    try:
        proc, data, report_dir = cli(fleet, "provision-check-diff", *args, pty=True)
        edited = subprocess.run(["docker", "exec", HOSTS[0], "cat", launcher], capture_output=True, text=True,
                                check=True).stdout
    finally:
        subprocess.run(["docker", "exec", "-i", HOSTS[0], "sh", "-c", f"cat > {launcher}"], input=original,
                       text=True, check=True)
    assert proc.returncode == 0 and "Traceback" not in proc.stdout, proc.stdout[-5000:]
    assert edited == original + "# edited by hand\n", "--check changed the host"
    lines = proc.stdout.splitlines()
    change = next(i for i, line in enumerate(lines) if line.startswith(f"{HOSTS[0]}: would change "))
    assert "-# edited by hand" in lines[change:], "\n".join(lines[change:change + 30])
    assert not any(line.startswith((f"{HOSTS[1]}: would change", f"{HOSTS[2]}: would change")) for line in lines)
    assert sorted(data["hosts"]) == [HOSTS[0]] and data["check"] is True
    assert any("-# edited by hand" in c["diff"] for c in data["hosts"][HOSTS[0]]["changes"])
    title = max(i for i, line in enumerate(lines) if line.startswith("sparkfleet provision: successful (exit 0"))
    end = next(i for i in range(title, len(lines)) if lines[i].startswith("reports: "))
    assert all(len(line) <= 80 for line in lines[title:end]) and str(report_dir / "report.md") in lines[end]


def test_5e_verify_names_each_drift_with_what_moves_it_and_changes_nothing(fleet):
    """Issue 45, item 1: after `pin` moved the unsloth digest, `verify` pulled it and rewrote the launchers on every
    host (changed 3 and 4, exit 0: the fleet rolled at once, no canary); it rewrote a hand-edited launcher and
    missed a removed nvidia runtime (converged, exit 0). Now, with all three at once - the lock moved (every host),
    a launcher edited by hand (host 2), the runtime removed from Docker (host 3) - verify fails each host naming
    each difference and the command that moves it, and changes nothing: no byte pulled, no file written."""
    lock_file = fleet["inventory"] / "group_vars" / "all" / "spark_images_lock.yml"
    kept = {"lock": lock_file.read_text(), "ngc": cat(HOSTS[1], launcher(HOSTS[1], "spark-ngc")),
            "daemon": cat(HOSTS[2], "/etc/docker/daemon.json")}
    old = lock(fleet)["unsloth"]["index_digest"]
    new = push_unsloth("fleet-verify-drift")
    pinned, _, _ = cli(fleet, "pin-drift", "pin")
    assert pinned.returncode == 0 and lock(fleet)["unsloth"]["index_digest"] == new, pinned.stdout[-3000:]
    assert own_checks_accept(fleet["inventory"]) == [], "what pin wrote, every later run accepts"
    sh("docker", "exec", HOSTS[1], "sh", "-c", f"echo '# edited by hand' >> {launcher(HOSTS[1], 'spark-ngc')}")
    sh("docker", "exec", HOSTS[2], "sh", "-c",
       'printf \'{"bridge": "sparkfleet0", "ip6tables": false, "iptables": false}\\n\' > /etc/docker/daemon.json'
       " && systemctl restart docker")

    def host_files() -> dict:
        return {h: [cat(h, launcher(h)), cat(h, STATE_FILES.get(h, "/var/lib/sparkfleet/state.json")),
                    sorted(sh("docker", "exec", h, "docker", "image", "ls", "--digests", "--format",
                              "{{.Digest}}").stdout.split())]  # (Docker lists them in no fixed order)
                for h in HOSTS}

    before = host_files(), {p.name: p.read_text() for p in (fleet["inventory"] / ".sparkfleet" / "hosts").iterdir()}
    try:
        proc, data, _ = cli(fleet, "verify-drift", "verify", pty=True)
        after = host_files(), {p.name: p.read_text()
                               for p in (fleet["inventory"] / ".sparkfleet" / "hosts").iterdir()}
    finally:
        lock_file.write_text(kept["lock"])
        subprocess.run(["docker", "exec", "-i", HOSTS[1], "sh", "-c", f"cat > {launcher(HOSTS[1], 'spark-ngc')}"],
                       input=kept["ngc"], text=True, check=True)
        subprocess.run(["docker", "exec", "-i", HOSTS[2], "sh", "-c",
                        "cat > /etc/docker/daemon.json && systemctl restart docker"], input=kept["daemon"], text=True,
                       check=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout, proc.stdout[-5000:]
    assert after == before, "verify changed a host or the controller's records"
    assert all(new not in images for _, _, images in after[0].values()), "the moved digest was not pulled"
    assert {h: data["hosts"][h]["counts"]["changed"] for h in HOSTS} == {h: 0 for h in HOSTS}
    short = {d: d.removeprefix("sha256:")[:12] for d in (old, new)}
    moved = f"image unsloth: runs sha256:{short[old]}, the lock says sha256:{short[new]} - `sparkfleet refresh`"
    drift = {h: data["hosts"][h]["verification"]["drift"] for h in HOSTS}
    assert all(any(d.startswith(moved) for d in drift[h]) for h in HOSTS), drift
    assert any(d.startswith(f"image ngc: its launcher {launcher(HOSTS[1], 'spark-ngc')} differs from the one "
                            "this sparkfleet writes") for d in drift[HOSTS[1]]), drift[HOSTS[1]]
    assert any(d.startswith("runtime: Docker does not list the nvidia runtime") and "`sparkfleet provision` "
               "registers it" in d for d in drift[HOSTS[2]]), drift[HOSTS[2]]
    assert len(drift[HOSTS[0]]) == 1, "host 1 differs in the lock alone"
    screen = " ".join(proc.stdout.split())
    # Each host's failure on the screen with each drift and the command that moves it; host 2 reports rather than
    # fails (its spark_verify_policy: report, tests/fleet/host_vars): its verdict says failed, report.md each line.
    for host in (HOSTS[0], HOSTS[2]):
        assert f"{host}: FAILED Fail a host whose verification failed: {host}: verification failed: " in screen
        assert all(" ".join(line.split())[:60] in screen for line in drift[host]), (host, screen[-5000:])
    assert data["hosts"][HOSTS[1]]["verification"]["verdict"] == "failed"
    assert data["hosts"][HOSTS[1]]["counts"]["failed"] == 0
    assert "`sparkfleet refresh` moves the fleet to the lock, canary first" in screen


def test_5g_a_lock_entry_renamed_is_bad_input_before_any_host_is_asked(fleet, tmp_path):
    """Issue 58, item 4, on the lab's own inventory: a lock entry renamed `unsloth` -> `unslot` was a failed run
    (exit 2, "has no entry 'unsloth'"). It is bad input (exit 4), the stray entry named with what it may have
    meant, and no host is asked (a derived image's mistyped base: tests/cli/test_variables.py)."""
    inventory = tmp_path / "inventory"
    shutil.copytree(fleet["inventory"], inventory, ignore=shutil.ignore_patterns(".sparkfleet"))
    lock_file = inventory / "group_vars" / "all" / "spark_images_lock.yml"
    text = lock_file.read_text()
    assert "\n  unsloth:\n" in text, text[:400]
    lock_file.write_text(text.replace("\n  unsloth:\n", "\n  unslot:\n"))
    before = {h: cat(h, launcher(h)) for h in HOSTS}
    proc = subprocess.run([str(BIN / "sparkfleet"), "provision", "-i", str(inventory), "--plain"], cwd=tmp_path,
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 4, said[-3000:]
    assert "the entry 'unslot' names no image of the catalog" in said and "unsloth" in said, said[-3000:]
    assert "play: " not in proc.stdout, "nothing ran"
    assert {h: cat(h, launcher(h)) for h in HOSTS} == before


def test_6_doctor_on_a_lab_host_holds_no_secret_and_no_hostname(fleet):
    proc, _, report_dir = cli(fleet, "doctor", "doctor", "--limit", HOSTS[0])
    assert proc.returncode == 0, proc.stdout[-3000:]
    text = (report_dir / "doctor.md").read_text()
    [report] = json.loads((report_dir / "doctor.json").read_text())
    assert text.startswith("## sparkfleet doctor: host-1")
    assert "| class | spark (simulated) |" in text
    assert "| GPU | NVIDIA GB10 (compute 12.1) |" in text
    assert "nvidia" in report["docker"]["runtimes"]
    toolkit = {p["name"]: p for p in report["toolkit"]}
    assert toolkit["nvidia-container-toolkit"]["held"] is True and toolkit["libnvidia-container1"]["version"]
    assert {i["name"] for i in report["images"] if i["present"]} == set(lock(fleet))
    assert text in proc.stdout.replace("\r", ""), "the Markdown is printed to paste"
    for leaked in (SECRET, HOSTS[0]):
        assert leaked not in text and leaked not in json.dumps(report)


def test_7_a_password_sudo_host_and_a_vaulted_registry_password_typed_at_the_terminal(fleet, tmp_path):
    """A fresh Spark's login user: not root, sudo asks for a password; the fleet's secrets are in a vault."""
    import pexpect

    host, sudo_password, vault_password = HOSTS[0], "sudo-password-2c9d", "vault-password-6b0e"
    sh("docker", "exec", host, "sh", "-c", "id nvidia >/dev/null 2>&1 || useradd -m -s /bin/sh -G sudo nvidia; "
       f"echo 'nvidia:{sudo_password}' | chpasswd")
    inventory = tmp_path / "inventory"
    shutil.copytree(fleet["inventory"], inventory)
    vault = inventory / "group_vars" / "all" / "vault.yml"
    vault.write_text(yaml.safe_dump({"spark_images_registry_credentials": {
        "127.0.0.1:5000": {"username": "fleet", "password": SECRET}}}))
    password_file = tmp_path / "vault-pass"
    password_file.write_text(vault_password)
    sh(str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(password_file), str(vault))
    password_file.unlink()
    report_dir = tmp_path / "report"
    child = pexpect.spawn(str(BIN / "sparkfleet"), ["verify", "-i", str(inventory), "--limit", host, "-u", "nvidia",
                                                    "-b", "-K", "--ask-vault-pass", "--plain", "--report-dir",
                                                    str(report_dir)],
                          cwd=str(REPO), env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
                          encoding="utf-8", timeout=900)
    child.expect("BECOME password: ")
    child.sendline(sudo_password)
    child.expect("Vault password: ")
    child.sendline(vault_password)
    child.expect(pexpect.EOF)
    child.close()
    output = child.before
    assert child.exitstatus == 0, output[-5000:]
    data = json.loads((report_dir / "report.json").read_text())
    assert data["hosts"][host]["counts"]["failed"] == 0 and data["hosts"][host]["history"] == "converged"
    secrets = (SECRET, sudo_password, vault_password)
    leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and p != vault
             and any(s.encode() in p.read_bytes() for s in secrets)]
    assert leaks == []
    assert not any(s in output for s in secrets)


@pytest.fixture
def gone(fleet):
    """Makes a lab host unreachable the way a powered-off Spark is: stopped, and seen through a connection failure.

    Over SSH a host that is gone is unreachable whatever the settings. community.docker.docker tells a stopped
    container apart only while it creates a temporary directory first: pipelined (ansible.cfg), it hands the module
    to `docker exec`, and Ansible reads docker's error as a module's failure. So the stopped host is reached without
    pipelining, and the refresh meets the connection failure a user's fleet would.
    """
    host_vars = fleet["inventory"] / "host_vars"
    stopped = []

    def stop(host: str) -> None:
        (host_vars / host).mkdir(parents=True, exist_ok=True)  # beside the host's own settings, if any
        (host_vars / host / "unreachable.yml").write_text("ansible_pipelining: false\n")
        sh("docker", "stop", host)
        stopped.append(host)

    def start(host: str) -> None:
        sh("docker", "start", host)
        (host_vars / host / "unreachable.yml").unlink()
        stopped.remove(host)

    yield stop, start
    for host in list(stopped):
        start(host)


def test_8_a_host_unreachable_during_a_refresh_stops_it_and_nothing_is_lost(fleet, gone):
    """A host that goes away (powered off, network lost) mid-rollout: exit 3, reported unreachable, no lock past
    what was verified, and the host, back, still runs the digest it had."""
    stop, start = gone
    before = lock(fleet)["unsloth"]["index_digest"]
    canary = HOSTS[0]
    stop(canary)
    try:
        new = push_unsloth("fleet-refresh-unreachable")
        proc, data, _ = cli(fleet, "refresh-canary-gone", "refresh", "-e", '{"refresh_batches": [1, 1]}')
        assert proc.returncode == 3, proc.stdout[-5000:]
        assert data["hosts"][canary]["reachable"] is False and data["hosts"][canary]["unreachable"]
        assert lock(fleet)["unsloth"]["index_digest"] == before, "nothing verified: the lock did not move"
        assert all(launcher_ref(h).endswith(before) for h in HOSTS[1:]), "the rollout stopped at the canary"
    finally:
        start(canary)
    last = HOSTS[2]
    stop(last)
    try:
        proc, data, _ = cli(fleet, "refresh-last-gone", "refresh", "-e", '{"refresh_batches": [1, 1]}')
        assert proc.returncode == 3, proc.stdout[-5000:]
        assert data["hosts"][last]["reachable"] is False
        assert lock(fleet)["unsloth"]["index_digest"] == new, "the canary verified the new digest"
        assert all(launcher_ref(h).endswith(new) for h in HOSTS[:2])
    finally:
        start(last)
    assert launcher_ref(last).endswith(before), "the unreachable host kept what it ran"
