"""Where a restore and a hash-locked venv build spend their time, task by task, on one emulated lab host.

    .venv/bin/python bench/profile.py [--out bench/results/profile.json] [--top 12] [--before REV]

On a lab host of its own (prefix sparkfleet-profile, the venv enabled and built from the hash lock that
`sparkfleet matrix lock` writes, as a fleet with mirrors builds it), through the sparkfleet CLI as owners run it:

1. fresh: pin, then the first provision (the runtime, the images, the hash-locked venv build, verification);
2. converged: the same provision again (nothing to do) and `sparkfleet verify` (reads, changes nothing);
3. restore: the host destroyed and recreated (an OS reinstall: its Docker volume gone too), then provision
   (reported `restored`, the venv built again from the lock, every wheel from the controller's cache).

For each run: its wall time, and from the runner's job events each task's time summed over its hosts and items
(runner_on_ok / _failed / _skipped's duration), the longest first, with its share of the run. With --before REV
the same sequence runs first on REV (a git worktree of it: its CLI, roles and plugins, this checkout's test bed and
lab), then on this checkout, in one run: `before`, `after` and each run's ratio after/before. Not a test: the
machine is noisy; read where the time goes and the ratios, not the seconds. Needs the test bed (make testbed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
PREFIX = "sparkfleet-profile"
HOST = f"{PREFIX}-1"


def sh(*argv: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **(env or {})})
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def task_times(report_dir: Path) -> dict[str, float]:
    """Seconds per task (play | task), summed over hosts and loop items, from the run's job events."""
    spent: dict[str, float] = defaultdict(float)
    for path in report_dir.glob("artifacts/*/job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data") or {}
        if event.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"):
            spent[f"{data.get('play')} | {data.get('task')}"] += float(data.get("duration") or 0)
    return spent


def run(name: str, work: Path, *argv: str, top: int, env: dict | None = None) -> dict:
    """One sparkfleet command, timed, with where its time went."""
    report_dir = work / "reports" / name
    start = time.monotonic()
    proc = sh(str(BIN / "sparkfleet"), *argv, "--plain", "--report-dir", str(report_dir), check=False, env=env)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"sparkfleet {' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-4000:]}")
    data = json.loads((report_dir / "report.json").read_text())
    spent = task_times(report_dir)
    total = sum(spent.values()) or 1.0
    host = data["hosts"].get(HOST) or {}
    print(f"{name}: {wall:.1f} s", flush=True)
    return {"wall_s": round(wall, 1), "history": host.get("history"), "changed": (host.get("counts") or {}).get(
        "changed"), "tasks": len(spent), "task_seconds": round(sum(spent.values()), 1),
            "longest": [{"task": task, "s": round(s, 1), "share": round(s / total, 3)}
                        for task, s in sorted(spent.items(), key=lambda kv: -kv[1])[:top]]}


def commit() -> dict:
    head = sh("git", "rev-parse", "HEAD").stdout.strip()
    dirty = bool(sh("git", "status", "--porcelain", "--untracked-files=no").stdout.strip())
    return {"commit": head, "dirty": dirty, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def sequence(work: Path, top: int, cli_env: dict | None) -> dict:
    """pin, the first provision, a converged one, verify, then a restore of the destroyed host: each profiled."""
    inventory = work / "inventory"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    shutil.copy(REPO / "inventory" / "lab" / "group_vars" / "all" / "main.yml", inventory / "group_vars" / "all")
    with (inventory / "group_vars" / "all" / "main.yml").open("a") as handle:
        handle.write(f"\nspark_venv_require_hashes: true\nspark_venv_wheelhouse_cache: {work / 'wheels'}\n")
    env = {"LAB_PREFIX": PREFIX, "LAB_INVENTORY": str(inventory), "LAB_VENV_HOST": "1"}
    results: dict = {}
    try:
        sh("testbed/lab.sh", "up", "1", env=env)
        inv = ["-i", str(inventory)]
        for name, argv in (("matrix_lock", ("matrix", "lock")), ("pin", ("pin",)), ("fresh", ("provision",)),
                           ("converged", ("provision",)), ("verify", ("verify",))):
            results[name] = run(name.replace("_", "-"), work, *argv, *inv, top=top, env=cli_env)
        sh("docker", "rm", "-f", HOST)
        sh("docker", "volume", "rm", "-f", f"{HOST}-docker")
        sh("testbed/lab.sh", "up", "1", env=env)
        results["restore"] = run("restore", work, "provision", *inv, top=top, env=cli_env)
        conv = results["converged"]["wall_s"] or 1.0
        results["ratios_to_converged"] = {k: round(results[k]["wall_s"] / conv, 2)
                                          for k in ("fresh", "verify", "restore")}
    finally:
        subprocess.run(["testbed/lab.sh", "down"], cwd=REPO, env={**os.environ, **env}, capture_output=True,
                       check=False)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "profile.json")
    parser.add_argument("--top", type=int, default=12, help="how many of the longest tasks each run keeps")
    parser.add_argument("--before", metavar="REV", help="profile REV first, in the same run (a worktree of it)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkfleet-profile-"))
    results: dict = {"run": commit(), "host": "one emulated aarch64 lab host (qemu-user), the venv hash-locked"}
    try:
        for script in (["testbed/aptrepo.sh", "start"], ["testbed/registry.sh", "start"],
                       ["testbed/pyindex.sh", "start"], ["testbed/standins.sh"]):
            sh(*script)
        if args.before:
            tree = work / "before"
            sh("git", "worktree", "add", "--detach", str(tree), args.before)
            try:
                # REV's CLI (its src/ first on the path) runs REV's collection, its checkout's; the collections
                # it needs from PyPI come from this checkout's collections folder, after it.
                cli_env = {"PYTHONPATH": str(tree / "src"), "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections")}
                before = sequence(work / "run-before", args.top, cli_env)
                before["commit"] = sh("git", "rev-parse", args.before).stdout.strip()
            finally:
                sh("git", "worktree", "remove", "--force", str(tree), check=False)
            after = sequence(work / "run-after", args.top, None)
            results.update({"before": before, "after": after, "ratios_after_to_before": {
                k: round(after[k]["wall_s"] / (before[k]["wall_s"] or 1.0), 2)
                for k in ("matrix_lock", "pin", "fresh", "converged", "verify", "restore")}})
        else:
            results.update(sequence(work / "run", args.top, None))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps(results, indent=2))
        print(f"written to {args.out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
