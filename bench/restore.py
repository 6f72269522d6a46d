"""A restore beside doing it by hand: a freshly reinstalled lab host taken to the same end state by
`sparkfleet provision -l HOST` (the restore) and by the shortest hand-written sequence from the same local sources,
timed as interleaved pairs (bench/pairs.py), on an emulated and a native host.

    .venv/bin/python bench/restore.py [--kinds emulated,native] [--pairs 5] [--out bench/results/restore.json]

The hand sequence is NVIDIA's install guide with the pins the source document asks for, as an owner types it into
a root shell on the host: the toolkit's signing key and repository (the test bed's apt repository), `apt-get
update` of that repository's list, the four toolkit packages at the pinned version and held, `nvidia-ctk runtime
configure`, Docker restarted, each image pulled by the lock's digest, each launcher written (the same text sparkfleet
writes). What
sparkfleet does beyond it (preflight, the checks, the state and the controller's record, the verification) is the
difference; where its time goes is the restore's task times (the runner's job events, as bench/profile.py reads
them). Both end states are compared: the toolkit's packages and holds, Docker's runtimes, the images by digest
and the launchers, byte for byte.

With --venv, the bare-pip venv too, on the first host (LAB_VENV_HOST=1): the repository's stack matrix retargeted at
the host's own Python, architecture and glibc (the test bed's stand-in wheels are pure Python, so the same pins
install on a native host), its hash lock written by `sparkfleet matrix lock`, and the lock's wheels in a wheelhouse
of this run's own on the controller, filled by the first provision (not timed), as a fleet's first host fills it.
The hand sequence then copies those wheels to the host (`docker cp`, as an owner would scp them), makes the
installer's venv and installs uv into it from them with pip, makes the venv, installs the lock's whole set into it
with uv (`--no-index --find-links --require-hashes --no-deps`, one call) and points the link at it; both end states
also compare the venv's installed distributions, by name and version.

A reinstall is the lab host destroyed with its Docker volume and created again (bench/profile.py's), done before
each timed half and not timed. Not a test: read the ratios and their spread, not the seconds. Needs the test bed
(make testbed).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleet import KINDS, commit  # bench/, the folder of this script
from pairs import PAIRS, interleaved

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "collections"))  # the collection's own helpers (the hash lock's)
BIN = REPO / ".venv" / "bin"
APT = "http://127.0.0.1:5080"


def task_times(report_dir: Path) -> dict[str, float]:
    """bench/profile.py's (loaded by its path: the standard library has a `profile` of its own)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_profile", Path(__file__).with_name("profile.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.task_times(report_dir)


def sh(*argv: str, env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), cwd=REPO, capture_output=True, text=True, input=stdin,
                          env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **(env or {})})
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def toolkit() -> tuple[list[str], str]:
    """The toolkit's packages and pinned version, from the role (one place)."""
    import yaml

    packages = yaml.safe_load((REPO / "roles" / "spark_container_runtime" / "vars" / "main.yml").read_text())
    defaults = yaml.safe_load((REPO / "roles" / "spark_container_runtime" / "defaults" / "main.yml").read_text())
    return packages["__spark_container_runtime_packages"], defaults["spark_container_runtime_toolkit_version"]


def hand_script(images: list[dict], launchers: dict[str, str]) -> str:
    """What an owner types: NVIDIA's guide, pinned, then the lock's digests and the launchers."""
    packages, version = toolkit()
    keyring = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
    lines = [
        "set -eu",
        "python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1]).read())'"
        f" {APT}/gpgkey | gpg --batch --yes --dearmor -o {keyring}",
        f"echo 'deb [signed-by={keyring}] {APT}/stable/deb/$(ARCH) /' > "
        "/etc/apt/sources.list.d/nvidia-container-toolkit.list",
        # the list of the repository just added, alone: the other lists are not this work's (a full refresh fetches
        # Debian's whole archive index for the lab host, which is no local source)
        "apt-get update -qq -o Dir::Etc::SourceList=/etc/apt/sources.list.d/nvidia-container-toolkit.list"
        " -o Dir::Etc::SourceParts=- -o APT::Get::List-Cleanup=0",
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        + " ".join(f"{p}={version}" for p in packages) + " >/dev/null",
        "apt-mark hold " + " ".join(packages) + " >/dev/null",
        "nvidia-ctk runtime configure --runtime=docker 2>/dev/null",
        "systemctl restart docker",
        *[f"docker pull -q {shlex.quote(image['ref'])} >/dev/null" for image in images],
    ]
    for path, text in launchers.items():
        lines.append(f"cat > {shlex.quote(path)} <<'SPARKFLEET_EOF'\n{text}SPARKFLEET_EOF")
        lines.append(f"chmod 755 {shlex.quote(path)}")
    return "\n".join(lines) + "\n"


DISTRIBUTIONS = ("import importlib.metadata as m, json; print(json.dumps(sorted("
                 "{d.metadata['Name'].lower().replace('_', '-'): d.version for d in m.distributions()}.items())))")


def venv_places() -> tuple[str, str]:
    """The venvs' root and the active venv's link, from the role's defaults (one place)."""
    import yaml

    defaults = yaml.safe_load((REPO / "roles" / "spark_venv" / "defaults" / "main.yml").read_text())
    return defaults["spark_venv_root"], defaults["spark_venv_link"]


def venv_setup(host: str, inventory: Path, inv: list[str], work: Path) -> None:
    """The venv's inputs on the controller: the stack matrix retargeted at the host's Python, architecture and
    glibc, a wheelhouse cache of this run's own, and the hash lock `sparkfleet matrix lock` writes, which the venv
    is built from (spark_venv_require_hashes: the test bed's index is on the loopback, which alone would not ask
    for it): its wheels fetched once into the controller's cache and sent to the host in one archive."""
    import yaml

    python, arch, glibc = sh("docker", "exec", host, "python3", "-c", "import platform, sys; print('%d.%d' % "
                             "sys.version_info[:2], platform.machine(), platform.libc_ver()[1])").stdout.split()
    matrix = yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text())
    matrix["target"] = {"python": python, "arch": arch, "glibc": glibc}
    (work / "matrix-venv.yml").write_text(yaml.safe_dump(matrix, sort_keys=False))
    (inventory / "group_vars" / "all" / "venv.yml").write_text(yaml.safe_dump({
        "spark_venv_matrix_file": str(work / "matrix-venv.yml"), "spark_venv_require_hashes": True,
        "spark_venv_wheelhouse_cache": str(work / "controller-cache")}))
    sh(str(BIN / "sparkfleet"), "matrix", "lock", *inv, "--plain", "--report-dir", str(work / "reports" / "lock"))


def venv_hand(inventory: Path, work: Path, wheels: Path) -> str:
    """What an owner types for the venv, with the lock's wheels and two requirements files (uv.txt: the installer;
    venv.txt: the lock's whole set, each package as the last step that installs it has it) in `wheels`, which the
    hand sequence copies to /root/wheels: uv installed by pip into a venv of its own, the set in one uv call, hashes
    required, and the link pointed at the new venv. The lock is read back as spark_venv reads it (validate_lock):
    what reaches the requirements files is checked first."""
    import yaml
    from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._hash_lock import (
        hashed_requirements,
        validate_lock,
    )

    lock = yaml.safe_load((inventory / "group_vars" / "all" / "spark_venv_lock.yml").read_text())["spark_venv_lock"]
    matrix = yaml.safe_load((work / "matrix-venv.yml").read_text())
    problems = validate_lock(lock, matrix)
    if problems:
        sys.exit("the hash lock sparkfleet matrix lock wrote is refused: " + "; ".join(problems))
    final: dict[str, dict] = {}
    tool: list[dict] = []
    for step in matrix["steps"]:
        for entry in lock["steps"][step["id"]]:
            if step.get("installer"):
                tool.append(entry)
            else:
                final[entry["name"]] = entry
    (wheels / "uv.txt").write_text(hashed_requirements(tool))
    (wheels / "venv.txt").write_text(hashed_requirements(list(final.values())))
    root, link = venv_places()
    uv, venv, here = f"{root}/.by-hand-uv", f"{root}/by-hand", "/root/wheels"
    return "\n".join([
        f"mkdir -p {root}",
        f"python3 -m venv {uv}",
        f"{uv}/bin/pip install -q --no-index --find-links {here} --require-hashes --no-deps -r {here}/uv.txt",
        f"python3 -m venv {venv}",
        f"{uv}/bin/uv pip install -q --python {venv}/bin/python --no-index --find-links {here} --require-hashes "
        f"--no-deps -r {here}/venv.txt",
        f"ln -sfn {venv} {link}",
    ]) + "\n"


def end_state(host: str, images: list[dict], launchers: dict[str, str], venv: bool = False) -> dict:
    """What both ways must leave: the toolkit's packages (version and hold), Docker's runtimes, the images by
    digest, the launchers' text; with the venv, the distributions installed in the venv the link names."""
    packages, _version = toolkit()
    query = sh("docker", "exec", host, "dpkg-query", "--show",
               "--showformat=${Package} ${Version} ${db:Status-Abbrev}\n", *packages).stdout
    runtimes = json.loads(sh("docker", "exec", host, "docker", "info", "--format", "{{json .Runtimes}}").stdout)
    digests = sorted(sh("docker", "exec", host, "docker", "image", "ls", "--digests", "--format",
                        "{{.Repository}}@{{.Digest}}").stdout.split())
    return {"packages": sorted(query.split("\n")), "runtimes": sorted(runtimes),
            "images": [d for d in digests if any(d == i["ref"] for i in images)],
            "launchers": {path: sh("docker", "exec", host, "cat", path).stdout for path in launchers},
            **({"venv": json.loads(sh("docker", "exec", host, f"{venv_places()[1]}/bin/python", "-c",
                                      DISTRIBUTIONS).stdout)} if venv else {})}


def measure(kind: str, pairs: int, work: Path, fast: bool = False, venv: bool = False) -> dict:
    spec = KINDS[kind]
    prefix = f"sparkfleet-restore{'-native' if kind == 'native' else ''}"
    host = f"{prefix}-1"
    inventory = work / f"inventory-{kind}"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    shutil.copy(REPO / "inventory" / "lab" / "group_vars" / "all" / "main.yml", inventory / "group_vars" / "all")
    env = {"LAB_PREFIX": prefix, "LAB_INVENTORY": str(inventory), "LAB_VENV_HOST": "1" if venv else "0",
           "LAB_ARCH": spec["arch"]}
    inv = ["-i", str(inventory), *spec["extra"]]

    def reinstall():
        sh("docker", "rm", "-f", host)
        sh("docker", "volume", "rm", "-f", f"{host}-docker")
        sh("testbed/lab.sh", "up", "1", env=env)

    runs: list[Path] = []

    def restore():
        report_dir = work / "reports" / f"{kind}-{len(runs)}"
        runs.append(report_dir)
        proc = subprocess.run([str(BIN / "sparkfleet"), "provision", *(["--fast"] if fast else []), *inv,
                               "--limit", host, "--plain",
                               "--report-dir", str(report_dir)], cwd=REPO, capture_output=True, text=True,
                              check=False)
        data = json.loads((report_dir / "report.json").read_text())
        if proc.returncode != 0 or data["hosts"][host]["history"] != "restored":
            sys.exit(f"the restore of {host} did not end restored (exit {proc.returncode}):\n{proc.stdout[-4000:]}")

    try:
        sh("testbed/lab.sh", "up", "1", env=env)
        if venv:
            venv_setup(host, inventory, inv, work)
        sh(str(BIN / "sparkfleet"), "pin", *inv, "--plain", "--report-dir", str(work / "reports" / f"{kind}-pin"))
        first = work / "reports" / f"{kind}-first"
        sh(str(BIN / "sparkfleet"), "provision", *inv, "--plain", "--report-dir", str(first))
        pinned = json.loads((first / "report.json").read_text())["hosts"][host]["images"]
        images = [{"name": i["name"], "ref": i["ref"]} for i in pinned]
        paths = [line.split(None, 1)[0] for line in sh("docker", "exec", host, "sh", "-c",
                                                       "ls /usr/local/bin/spark-*").stdout.split()]
        launchers = {path: sh("docker", "exec", host, "cat", path).stdout for path in paths}
        wheels = work / "wheels"
        if venv:  # the lock's wheels, as the first provision left them in the controller's cache
            wheels.mkdir(exist_ok=True)
            for wheel in (work / "controller-cache").glob("*/*.whl"):
                shutil.copy2(wheel, wheels / wheel.name)
            if not any(wheels.iterdir()):
                sys.exit(f"the first provision left no wheel in {work / 'controller-cache'}")
        script = hand_script(images, launchers) + (venv_hand(inventory, work, wheels) if venv else "")
        expected = end_state(host, images, launchers, venv)

        def hand():
            if venv:
                sh("docker", "cp", f"{wheels}/.", f"{host}:/root/wheels")
            sh("docker", "exec", "-i", host, "sh", "-s", stdin=script)

        states = []

        def checked(way, name):
            def run():
                way()
                states.append((name, end_state(host, images, launchers, venv)))
            return run

        found = interleaved(checked(hand, "hand"), checked(restore, "restore"), pairs,
                            f"{kind} restore{' with the venv' if venv else ''}", before=reinstall)
        wrong = [name for name, state in states if state != expected]
        if wrong:
            sys.exit(f"the end state differs after {', '.join(wrong)}: {json.dumps(states, indent=1)[-4000:]}")
        spent: dict[str, float] = {}
        for report_dir in runs:
            for task, seconds in task_times(report_dir).items():
                spent[task] = spent.get(task, 0.0) + seconds / len(runs)
        total = sum(spent.values()) or 1.0
        return {"host": {"emulated": "aarch64 under qemu-user", "native": "x86_64, native"}[kind],
                "images": [i["name"] for i in images], "venv": venv,
                **({"venv_packages": len(expected["venv"])} if venv else {}), **found,
                "restore_longest_tasks": [{"task": t, "s": round(s, 1), "share": round(s / total, 3)}
                                          for t, s in sorted(spent.items(), key=lambda kv: -kv[1])[:10]]}
    finally:
        subprocess.run(["testbed/lab.sh", "down"], cwd=REPO, env={**os.environ, **env}, capture_output=True,
                       check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="emulated,native")
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "restore.json")
    parser.add_argument("--fast", action="store_true",
                        help="restore with `sparkfleet provision --fast` (Mitogen); kept as KIND-fast in --out, "
                             "beside the plain figures already there")
    parser.add_argument("--venv", action="store_true",
                        help="the venv too, on both sides; kept as KIND-venv in --out, beside the figures there")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkfleet-restore-"))
    results: dict = {"run": commit(), "baseline": "the hand sequence", "measured": "sparkfleet provision -l HOST"}
    try:
        for script in (["testbed/aptrepo.sh", "start"], ["testbed/registry.sh", "start"],
                       ["testbed/pyindex.sh", "start"], ["testbed/standins.sh"]):
            sh(*script)
        suffix = "".join(part for part, on in (("-fast", args.fast), ("-venv", args.venv)) if on)
        started = time.monotonic()
        for kind in (k for k in args.kinds.split(",") if k):
            key = f"{kind}{suffix}"
            results[key] = measure(kind, args.pairs, work, args.fast, args.venv)
            print(f"{key}: restore / hand {results[key]['ratio']} {results[key]['spread']}", flush=True)
        results["took_s"] = round(time.monotonic() - started)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if suffix and args.out.exists():  # beside the plain figures: each kind keeps its own run's commit
            earlier = json.loads(args.out.read_text())
            results = {**earlier, **{k: {**v, "run": results["run"]} for k, v in results.items()
                                     if k.endswith(suffix)}}
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps({k: v for k, v in results.items()}, indent=2)[-3000:])
        print(f"written to {args.out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
