"""Fleet benchmarks on the lab, one run, figures as ratios within that run.

    .venv/bin/python bench/fleet.py [--hosts 4] [--only noop|refresh] [--kinds emulated,native]
                                    [--pairs 5] [--native-hosts 4] [--out bench/results/fleet.json]

1. A converged re-run of site.yml (the default strategy, what users run, and
   under Mitogen, `sparkfleet --fast`) against a playbook that only gathers
   facts on the same host, on two kinds of host: the emulated aarch64 lab
   (sparkfleet/host-spark, a simulated Spark under qemu-user) and a native
   x86_64 host of the same recipe (sparkfleet/host-spark-amd64, provisioned
   through the override path, spark_preflight_require_spark=false), so that
   emulation cost and round trips are told apart. Then the floor: a play of
   as many task results as the converged run's that do nothing (set_fact,
   skipped tasks, one command) against the same facts-only play, what any
   play of that many tasks costs; the default strategy's converged run with
   1, 2 and 4 images in the catalog: its ratio and the task results per host (PLAY RECAP), which must not grow with the
   images and launchers; a verify of the converged host against the same
   play (what a watch timer runs every half hour); and the converged fleet of
   2 and 4 native hosts against one. Each comparison is timed as interleaved
   pairs (bench/pairs.py: the median ratio with its spread, none published
   where the spread is too wide), so that a busy minute moves one pair, not
   every ratio.
2. Wall time of a refresh (a moved tag) for 1, 2, 4 hosts, all in one batch
   after the canary, with both strategies; and the part after the canary
   (wall(N) - wall(1)) against wall(1).
3. Registry requests and bytes per refresh as hosts grow, with the hosts
   pulling through a pull-through mirror (127.0.0.1:5001) of the lab
   registry (127.0.0.1:5000, "upstream"): what upstream served vs what the
   mirror served.

Needs the test bed (make testbed). Uses its own labs (prefixes
sparkfleet-bench and sparkfleet-bench-native) and inventories, and puts the
lab registry's tags back at the end. Not a test: the machines are noisy;
read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from content_key import content_key  # bench/, the folder of this script
from pairs import PAIRS, interleaved

from sparkfleet.mitogen import mitogen_env

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
PREFIX = "sparkfleet-bench"
# The two kinds of host: LAB_ARCH for testbed/lab.sh, the lab prefix, and what the host needs beyond the lab.
KINDS = {
    "emulated": {"arch": "arm64", "prefix": PREFIX, "extra": []},
    "native": {"arch": "amd64", "prefix": f"{PREFIX}-native",
               "extra": ["-e", json.dumps({"spark_preflight_require_spark": False})]},
}
RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=\d+\s+"
                   r"failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)", re.MULTILINE)
# Catalogs of 1, 2 and 4 images from the lab registry's stand-ins (the fourth runs the first's digest under a
# launcher of its own: another image to the plan, no byte to pull).
IMAGES = [
    {"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3"],
     "launcher": "spark-ngc"},
    {"name": "unsloth", "registry": "docker.io", "repository": "unsloth/unsloth", "tags": ["dgxspark-latest"],
     "launcher": "spark-unsloth"},
    {"name": "ngc-previous", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.09-py3"],
     "launcher": "spark-ngc-previous"},
    {"name": "ngc-copy", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3"],
     "launcher": "spark-ngc-copy"},
]
LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<path>/v2/\S+) HTTP/[0-9.]+" (?P<status>\d+) (?P<bytes>\d+|-)')


def sh(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
                               "PATH": f"{BIN}:{os.environ['PATH']}", **(env or {})})
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def timed(*argv: str, env: dict | None = None) -> float:
    return timed_run(*argv, env=env)[0]


def timed_run(*argv: str, env: dict | None = None) -> tuple[float, str]:
    start = time.monotonic()
    proc = sh(*argv, env=env)
    return time.monotonic() - start, proc.stdout


def cpu_seconds(stat: str | None = None) -> float:
    """CPU time every core of this machine has worked since boot (/proc/stat's cpu line: user, nice, system, irq
    and softirq; not idle, iowait or the hypervisor's steal): taken around a run, the work the run made on this
    machine, the controller's and (the lab's hosts being containers here) the hosts' alike."""
    line = (stat if stat is not None else Path("/proc/stat").read_text()).split("\n", 1)[0]
    user, nice, system, _idle, _iowait, irq, softirq = (int(n) for n in line.split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def with_cpu(run, spent: list[float]):
    """`run`, its machine CPU-seconds appended to `spent`."""
    def counted():
        before = cpu_seconds()
        run()
        spent.append(cpu_seconds() - before)
    return counted


def recap(stdout: str, host: str) -> dict:
    """The PLAY RECAP counts of `host` (summed over plays)."""
    counts = {"ok": 0, "changed": 0, "failed": 0, "skipped": 0}
    for match in RECAP.finditer(stdout):
        if match["host"] == host:
            for key in counts:
                counts[key] += int(match[key])
    return counts


def commit() -> dict:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                capture_output=True, text=True).stdout.strip())
    return {"commit": head, "dirty": dirty, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "content_key": content_key()}


def registry_log(port: int) -> Path:
    """The access log of the registry serving `port` (whichever checkout's test bed started it)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"docker-registry", b"serve"] and argv[2].decode().endswith(f"registry-{port}/config.yml"):
            return Path(argv[2].decode()).parent.with_name(f"registry-{port}.log")
    sys.exit(f"no docker-registry of the test bed serves 127.0.0.1:{port}")


def log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def traffic(path: Path, since: int) -> dict:
    """Registry requests (excluding the /v2/ ping) and response bytes logged after offset `since`."""
    with path.open(errors="replace") as handle:
        handle.seek(since)
        text = handle.read()
    requests = blobs = size = 0
    for match in LINE.finditer(text):
        if match.group("path") == "/v2/":
            continue
        requests += 1
        blobs += "/blobs/" in match.group("path") and match.group("method") == "GET"
        size += int(match.group("bytes")) if match.group("bytes") != "-" else 0
    return {"requests": requests, "blob_gets": blobs, "bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--only", choices=("noop", "refresh"), help="one part of the benchmark")
    parser.add_argument("--pairs", type=int, default=PAIRS,
                        help=f"interleaved pairs per comparison (default {PAIRS}; bench/pairs.py)")
    parser.add_argument("--native-hosts", type=int, default=4,
                        help="native hosts of the converged part: the fleet of 1, 2 and 4 against one (default 4)")
    parser.add_argument("--kinds", default="emulated,native",
                        help="host kinds of the converged part, comma-separated (default: emulated,native)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "fleet.json",
                        help="where the figures go as JSON")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"--kinds names {', '.join(unknown)}; expected some of {', '.join(KINDS)}")
    fast = mitogen_env()
    work = Path(tempfile.mkdtemp(prefix="sparkfleet-bench-"))
    (work / "facts.yml").write_text("---\n- name: Facts only\n  hosts: sparks\n  gather_facts: true\n  tasks: []\n")
    results: dict = {"run": commit()}
    if args.only and args.out.is_file():  # one part again: the other part's figures stay, with the run they were
        earlier = json.loads(args.out.read_text())  # measured in
        for part in ("noop", "refresh"):
            if isinstance(earlier.get(part), dict) and "run" not in earlier[part]:
                earlier[part]["run"] = earlier.get("run")
        results = {**earlier, "run": commit()}
    labs: list[dict] = []
    try:
        for script in (["testbed/aptrepo.sh", "start"], ["testbed/registry.sh", "start"],
                       ["testbed/registry.sh", "start", "5001", "http://127.0.0.1:5000"], ["testbed/standins.sh"]):
            sh(*script)
        upstream_log, mirror_log = registry_log(5000), registry_log(5001)
        if args.only != "refresh":
            # The kinds not measured now keep their figures, each with the run it was measured in.
            results["noop"] = {**{kind: {**row, "run": row.get("run", results["noop"].get("run"))}
                                  for kind, row in results.get("noop", {}).items()
                                  if kind in KINDS and kind not in kinds},
                               "run": results["run"]}
            for kind in kinds:
                lab = lab_up(work, kind, args.native_hosts if kind == "native" else 1, labs)
                noop_part(results["noop"], kind, lab, work, fast, args.pairs)
                lab_down(lab)
        if args.only != "noop":
            lab = lab_up(work, "emulated", args.hosts, labs)
            refresh_part(results, lab["inv"], lab["hosts"], fast, upstream_log, mirror_log)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps(results, indent=2))
        print(f"written to {args.out}")
    finally:
        for lab in labs:
            lab_down(lab)
        subprocess.run(["testbed/registry.sh", "stop", "5001"], cwd=REPO, capture_output=True, check=False)
        subprocess.run(["testbed/standins.sh"], cwd=REPO, capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)


def lab_up(work: Path, kind: str, count: int, labs: list[dict]) -> dict:
    """A lab of `count` hosts of `kind`, its own inventory (the lab's group_vars, pulling through the mirror), pinned
    and converged (not timed, under Mitogen)."""
    spec = KINDS[kind]
    inventory = work / f"inventory-{kind}"
    (inventory / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "inventory" / "lab" / "group_vars" / "all" / "main.yml", inventory / "group_vars" / "all")
    with (inventory / "group_vars" / "all" / "main.yml").open("a") as handle:
        handle.write("\nspark_images_mirrors:\n  127.0.0.1:5000: 127.0.0.1:5001\n")
    env = {"LAB_PREFIX": spec["prefix"], "LAB_INVENTORY": str(inventory), "LAB_VENV_HOST": "0",
           "LAB_ARCH": spec["arch"]}
    lab = {"kind": kind, "env": env, "inv": ["-i", str(inventory), *spec["extra"]],
           "hosts": [f"{spec['prefix']}-{n}" for n in range(1, count + 1)]}
    labs.append(lab)
    sh("testbed/lab.sh", "up", str(count), env=env)
    sh(str(BIN / "ansible-playbook"), "playbooks/pin.yml", *lab["inv"])
    print(f"converging {count} {kind} host(s) (not timed, under Mitogen) ...", flush=True)
    sh(str(BIN / "ansible-playbook"), "site.yml", *lab["inv"], env=mitogen_env())
    return lab


def lab_down(lab: dict) -> None:
    subprocess.run(["testbed/lab.sh", "down"], cwd=REPO, env={**os.environ, **lab["env"]}, capture_output=True,
                   check=False)


def _converged(inv: list[str], limit: str, hosts: list[str], env: dict | None = None, extra: tuple = ()):
    """site.yml on `limit`, which must change nothing on any of `hosts` (a converged run); its PLAY RECAP counts."""
    out = sh(str(BIN / "ansible-playbook"), "site.yml", *inv, "--limit", limit, *extra, env=env).stdout
    for host in hosts:
        counts = recap(out, host)
        if counts["changed"]:
            sys.exit(f"the converged re-run of site.yml on {host} changed {counts['changed']} task(s); a converged "
                     f"run must change nothing:\n{out[-4000:]}")
    return recap(out, hosts[0])


def noop_part(results: dict, kind: str, lab: dict, work: Path, fast: dict, pairs: int) -> None:
    """Each comparison as interleaved pairs (bench/pairs.py): the converged site.yml (plain, and under Mitogen)
    and a verify against a facts-only play on one host; site.yml with 1, 2 and 4 images; and, with a lab of
    several hosts, the converged fleet of 1, 2 and 4 hosts against one host."""
    inv, host = lab["inv"], lab["hosts"][0]
    row = results[kind] = {"host": {"emulated": "aarch64 under qemu-user", "native": "x86_64, native"}[kind]}

    def facts():
        sh(str(BIN / "ansible-playbook"), str(work / "facts.yml"), *inv, "--limit", host)

    for label, env in (("plain", None), ("fast", fast)):
        counts = _converged(inv, host, [host], env)
        found = interleaved(facts, lambda env=env: _converged(inv, host, [host], env), pairs, f"{kind} {label}")
        row[label] = {**found, "task_results": sum(counts.values()), **counts}
        print(f"converged site.yml on the {kind} host ({label}): ratio {found['ratio']} {found['spread']}; {counts}",
              flush=True)
    # The floor: a play of as many task results as the converged site.yml's (its ok and skipped counts) that does
    # nothing - set_fact and skipped tasks, one command - on the same host: what any play of that many tasks costs
    # against a facts-only play, whatever its tasks do.
    plain = row["plain"]
    floor = work / "floor.yml"
    floor.write_text(json.dumps([{"name": "Floor", "hosts": "sparks", "gather_facts": False, "tasks": [
        *[{"name": f"Skipped {n}", "ansible.builtin.debug": {"msg": "-"}, "when": False}
          for n in range(plain["skipped"])],
        *[{"name": f"Kept {n}", "ansible.builtin.set_fact": {f"floor_{n}": n}} for n in range(plain["ok"] - 1)],
        {"name": "One command", "ansible.builtin.command": "true", "changed_when": False}]}]))
    row["floor"] = {**interleaved(facts, lambda: sh(str(BIN / "ansible-playbook"), str(floor), *inv, "--limit", host),
                                  pairs, f"{kind} floor"), "task_results": plain["task_results"]}
    print(f"a play of {plain['task_results']} trivial task results on the {kind} host: ratio {row['floor']['ratio']} "
          f"{row['floor']['spread']}", flush=True)
    row["verify"] = interleaved(facts, lambda: sh(str(BIN / "ansible-playbook"), "playbooks/verify.yml", *inv,
                                                  "--limit", host), pairs, f"{kind} verify")
    print(f"verify of the converged {kind} host: ratio {row['verify']['ratio']} {row['verify']['spread']}",
          flush=True)

    by_images = row["by_images"] = []
    for count in (1, 2, 4):
        catalog = work / f"catalog-{count}.yml"
        catalog.write_text(json.dumps({"spark_images_catalog": IMAGES[:count]}))
        extra = ("-e", f"@{catalog}")
        sh(str(BIN / "ansible-playbook"), "playbooks/pin.yml", *inv, *extra)
        sh(str(BIN / "ansible-playbook"), "site.yml", *inv, "--limit", host, *extra, env=fast)
        counts = _converged(inv, host, [host], extra=extra)
        found = interleaved(facts, lambda extra=extra: _converged(inv, host, [host], extra=extra), pairs,
                            f"{kind} {count} image(s)")
        by_images.append({"images": count, **found, "task_results": sum(counts.values()), **counts})
        print(f"converged site.yml with {count} image(s) ({kind}): ratio {found['ratio']} {found['spread']}, "
              f"{counts}", flush=True)
    # Back to the lab's own catalog for what follows, every host converged to it again (not timed).
    sh(str(BIN / "ansible-playbook"), "playbooks/pin.yml", *inv)
    sh(str(BIN / "ansible-playbook"), "site.yml", *inv, env=fast)

    if len(lab["hosts"]) > 1:
        by_hosts = row["by_hosts"] = []
        cores = os.cpu_count() or 1
        for count in (n for n in (2, 4) if n <= len(lab["hosts"])):
            hosts = lab["hosts"][:count]
            one_cpu: list[float] = []
            fleet_cpu: list[float] = []
            found = interleaved(with_cpu(lambda: _converged(inv, host, [host]), one_cpu),
                                with_cpu(lambda hosts=hosts: _converged(inv, ",".join(hosts), hosts), fleet_cpu),
                                pairs, f"{kind} {count} hosts")
            # The least wall time this machine's cores allow the fleet's run: its CPU-seconds spread over every
            # core, however well Ansible's forks overlapped. Against one host's wall time, the least ratio there
            # is here; where it is over the goal's 1.2x, no change to the run's waiting can reach the goal.
            fleet_cpu_s = statistics.median(fleet_cpu)
            cpu = {"cores": cores, "one_host_cpu_s": round(statistics.median(one_cpu), 1),
                   "fleet_cpu_s": round(fleet_cpu_s, 1),
                   "least_ratio": round(fleet_cpu_s / cores / found["baseline_s"], 2)}
            by_hosts.append({"hosts": count, **found, "cpu": cpu})
            print(f"converged site.yml on {count} {kind} hosts against one: ratio {found['ratio']} "
                  f"{found['spread']}; CPU {cpu['one_host_cpu_s']} s against {cpu['fleet_cpu_s']} s on {cores} "
                  f"cores, the least ratio they allow {cpu['least_ratio']}", flush=True)


def refresh_part(results: dict, inv: list[str], hosts: list[str], fast: dict, upstream_log: Path,
                 mirror_log: Path) -> None:
    results["refresh"] = {"run": commit()}
    counts = [n for n in (1, 2, 4) if n <= len(hosts)]
    for label, env in (("plain", None), ("fast", fast)):
        rows = results["refresh"][label] = []
        for index, count in enumerate(counts):
            seed = f"bench-{label}-{index}-{time.time_ns()}"
            sh(str(BIN / "python"), "testbed/oci_push.py", "http://127.0.0.1:5000",
               "unsloth/unsloth:dgxspark-latest", "--list-type", "docker", "--seed", seed)
            up0, mirror0 = log_size(upstream_log), log_size(mirror_log)
            wall = timed(str(BIN / "ansible-playbook"), "playbooks/refresh.yml", *inv, "--limit",
                         ",".join(hosts[:count]), "-e", json.dumps({"refresh_batches": [1, "100%"]}), env=env)
            row = {"hosts": count, "wall_s": round(wall, 1), "upstream": traffic(upstream_log, up0),
                   "mirror": traffic(mirror_log, mirror0)}
            rows.append(row)
            print(f"refresh of {count} host(s) ({label}): {wall:.1f} s; upstream {row['upstream']}; "
                  f"mirror {row['mirror']}", flush=True)
        first = rows[0]["wall_s"]
        for row in rows:
            row["wall_ratio_to_1_host"] = round(row["wall_s"] / first, 2)
            row["after_canary_ratio_to_1_host"] = round((row["wall_s"] - first) / first, 2)


if __name__ == "__main__":
    main()
