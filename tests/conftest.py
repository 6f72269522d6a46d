"""Shared test helpers: repository paths and a runner for real Ansible commands."""

from __future__ import annotations

import fcntl
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOUBLES = REPO / "testbed" / "doubles"
NVSMI = DOUBLES / "nvidia-smi"
BIN = Path(sys.executable).parent
# Tests import these helpers as `conftest`; under ansible-test's importer this file is loaded by another
# name, so it registers itself under that one too.
sys.modules.setdefault("conftest", sys.modules[__name__])
# The tests' other helpers beside this file (fake_http.py) import as top-level modules there too.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))

# Tests import module_utils the way modules do, from the collection sparkfleet.spark
# (ansible_collections.sparkfleet.spark.plugins.module_utils.<concept>._x): pyproject's
# pythonpath puts collections/ on sys.path, where ansible_collections/sparkfleet/spark
# links to this repository.
COLLECTION = "sparkfleet.spark"


# Under `pytest -n` (pytest-xdist, --dist loadfile, as make test runs it) each file runs in one worker, so its
# module fixtures (the fleet's lab, ansible-test's tree) are set up once. The files that pull into, build in or
# remove from this machine's own Docker engine take turns, a whole file at a time, through one lock: side by side,
# one could remove an image the other just pulled (the stand-ins have the same content, so the same ID).
THIS_MACHINES_DOCKER = {
    "test_spark_abi_scan.py", "test_blessed_local.py", "test_spark_image_build.py", "test_spark_image_pull.py",
    "test_spark_image_resolve.py", "test_mirror.py", "test_pin_playbook.py", "test_platform_boundary.py",
    "test_spark_cluster_facts.py",
    "test_refresh_abi.py", "test_registry_faults.py",
}


# The files that run longest, longest first, the fleet's before all (half an hour on CI's 2 cores, whole in one
# worker). make test passes --no-loadscope-reorder, so the workers take the files in this order: one worker starts
# the fleet at once and takes nothing more until its last tests, the other works through the rest. Left to its
# default order (the most tests first), xdist started the fleet some ten minutes in, and it ran last, alone.
LONGEST_FIRST = (
    "tests/fleet/test_fleet.py",
    "tests/collection/test_ansible_test.py",
    "tests/cluster/test_cluster_lab.py",
    "tests/integration/test_mirror.py",
    "tests/integration/test_spark_venv.py",
    "tests/integration/test_spark_matrix_propose.py",
    "tests/integration/test_spark_abi_scan.py",
    "tests/integration/test_spark_image_build.py",
    "tests/integration/test_spark_matrix_check.py",
    "tests/terminal/test_secrets.py",
    "tests/terminal/test_at_a_terminal.py",
)


def pytest_collection_modifyitems(items):
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONGEST_FIRST)))


# Where the time went (issue 37): each test file's wall time in its worker, from its first test's start to its
# last one's end, gathered where the reports meet (xdist's controller, or the one process) and written when the
# session ends to $SPARKFLEET_TIMINGS/pytest.json (make test sets it; bench/suite_timings.py makes the table CI's
# log ends with).
_FILE_SPANS: dict[str, dict] = {}
# Taken out of the environment: a `make lab` a test runs must not add its stages to this run's table.
_TIMINGS = os.environ.pop("SPARKFLEET_TIMINGS", None)


# And each test of these files on its own line (ansible-test's sanity, one test per ansible-core).
TIMED_ONE_BY_ONE = ("tests/collection/test_ansible_test.py",)
_TEST_SECONDS: dict[str, float] = {}


# No silent skip (issue 71): with SPARKFLEET_NO_SKIP=1 (make test sets it), a test that skips fails the run, saying
# which and why - a registry or index that does not answer must not leave the run green with its proof missing.
# The GPU suite alone may skip, on a machine without a GPU.
MAY_SKIP = ("tests/gpu/",)
_NO_SKIP = os.environ.pop("SPARKFLEET_NO_SKIP", "") == "1"
_SKIPPED: list[str] = []


def _cpu_seconds() -> float:
    """This process's CPU time and that of the children it waited for (every subprocess.run: ansible, pip, uv,
    docker's client), user and system. Not the emulated hosts' (qemu under Docker's daemon, no child of a test)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_CPU_MARK = [_cpu_seconds()]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's CPU-seconds (setup, with a module's fixtures; the call; teardown) carried in its report to
    where the reports meet, for each file's sum (bench/suite_timings.py holds it to the file's budget)."""
    outcome = yield
    now = _cpu_seconds()
    outcome.get_result().user_properties.append(("cpu_s", round(now - _CPU_MARK[0], 2)))
    _CPU_MARK[0] = now


def pytest_runtest_logreport(report):
    if report.skipped and not report.nodeid.startswith(MAY_SKIP):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPPED.append(f"{report.nodeid}: {reason}")
    if report.nodeid.split("::")[0] in TIMED_ONE_BY_ONE:
        _TEST_SECONDS[report.nodeid] = round(_TEST_SECONDS.get(report.nodeid, 0) + report.duration, 1)
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    span = _FILE_SPANS.setdefault(report.nodeid.split("::")[0], {
        "worker": getattr(gateway, "id", "main"), "start": report.start, "stop": report.stop})
    span["start"], span["stop"] = min(span["start"], report.start), max(span["stop"], report.stop)
    span["cpu_s"] = round(span.get("cpu_s", 0) + sum(v for k, v in report.user_properties if k == "cpu_s"), 2)


def pytest_sessionfinish(session):
    if _NO_SKIP and _SKIPPED and not os.environ.get("PYTEST_XDIST_WORKER"):
        print(f"\n{len(_SKIPPED)} test(s) skipped where make test allows none (only the GPU suite may skip); each is "
              "a proof missing from this run:\n  " + "\n  ".join(sorted(_SKIPPED)), file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not _TIMINGS or not _FILE_SPANS or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    folder = Path(_TIMINGS)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.json").write_text(json.dumps({
        "files": {path: {**span, "seconds": round(span["stop"] - span["start"], 1)}
                  for path, span in _FILE_SPANS.items()},
        "tests": _TEST_SECONDS}))


@pytest.fixture(scope="module", autouse=True)
def _this_machines_docker_in_turn(request):
    if Path(str(request.module.__file__)).name not in THIS_MACHINES_DOCKER:
        yield
        return
    path = REPO / ".cache" / "tests" / "this-machines-docker.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# What a secrets attack runs with on top of -vvv: each result's `invocation` (the module's arguments), which
# ansible-core 2.21 adds only when asked (inject_invocation, a user's ansible.cfg may set it) and earlier cores
# always added. Without it an attack at -vvv would never see the arguments it means to search.
SHOW_INVOCATION = {"ANSIBLE_INJECT_INVOCATION": "1"}


def ansible_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    })
    env.update(extra)
    return env


def bench_module(name: str):
    """A script of bench/ (not a package: each is run by its path) loaded as a module, for its pure parts."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def python_of(version: str) -> str | None:
    """The first python`version` that runs: pyenv's own builds, then PATH (a pyenv shim of a version not selected
    fails)."""
    import shutil

    candidates = [*map(str, sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))),
                  shutil.which(f"python{version}")]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def fqcn(module: str) -> str:
    """sparkfleet's own modules by their full name (sparkfleet.spark.spark_state); others as given."""
    return module if "." in module else f"{COLLECTION}.{module}"


def run_module(module: str, args: dict, *flags: str, python: str = sys.executable, **env: str) -> dict:
    """Run one module natively on localhost through real `ansible` and return its whole result.

    The tree callback keeps what the one-line output drops (the diff); the
    exit status says whether the module failed. `python`: the interpreter the module runs under (a wrapper that
    gives it a host folder of its own: own_records()).
    """
    with tempfile.TemporaryDirectory() as tree:
        proc = subprocess.run(
            [str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m", fqcn(module),
             "-a", json.dumps(args), *flags,
             "-e", f"ansible_python_interpreter={python}"],
            cwd=REPO, capture_output=True, text=True, check=False,
            env=ansible_env(ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.tree",
                            ANSIBLE_CALLBACK_TREE_DIR=tree, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", **env),
        )
        try:
            result = json.loads((Path(tree) / "localhost").read_text())
        except (OSError, ValueError):
            pytest.fail(f"ansible gave no result (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    result["failed"] = proc.returncode != 0
    result["_stdout"] = proc.stdout  # what the user sees, e.g. the --diff output
    result["_stderr"] = proc.stderr  # [WARNING] lines
    return result


# What spark_image_pull takes of one image (an entry of its option images); the rest holds for every image.
PULL_ENTRY = ("repository", "digest", "platforms", "size", "local_blessed")


def pull_one(args: dict, *flags: str) -> dict:
    """spark_image_pull of one image, as an entry of `images` (the module's one input shape; its single-image options
    are deprecated): the whole result with that entry's fields beside it (ref, pulled, repo_digests, msg)."""
    entry = {"name": "img", **{k: v for k, v in args.items() if k in PULL_ENTRY}}
    result = run_module("spark_image_pull", {**{k: v for k, v in args.items() if k not in PULL_ENTRY},
                                             "images": [entry]}, *flags)
    (image,) = result.get("images") or [{}]
    return {**result, **{k: v for k, v in image.items() if k != "failed"}}


def record(report_dir: Path, fixture: str) -> None:
    """SPARKFLEET_RECORD_EVENTS=1: a real run's events become tests/fixtures/events/<fixture>, trimmed (trim.py),
    for the CLI's tests to replay."""
    if os.environ.get("SPARKFLEET_RECORD_EVENTS") != "1":
        return
    import importlib.util

    spec = importlib.util.spec_from_file_location("trim", REPO / "tests" / "fixtures" / "events" / "trim.py")
    trim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trim)
    (events,) = report_dir.glob("artifacts/*/job_events")
    (REPO / "tests" / "fixtures" / "events" / fixture).write_text(trim.trimmed(events))


@pytest.fixture
def fake_bin(tmp_path: Path):
    """Write small executables (hardware doubles) into a temporary directory."""
    def make(name: str, script: str) -> Path:
        path = tmp_path / name
        path.write_text("#!/bin/sh\n" + script)
        path.chmod(0o755)
        return path
    return make


@pytest.fixture(scope="session")
def anon(tmp_path_factory):
    """An anonymous registry of the tests' own (Debian's docker-registry) on a free 127.0.0.1 port."""
    from registries import Registry, free_port

    registry = Registry(tmp_path_factory.mktemp("anon"), free_port())
    yield registry
    registry.stop()


@pytest.fixture(scope="module")
def pyindex(tmp_path_factory):
    """The test bed's stand-in package index (testbed/pyindex.py) on a free 127.0.0.1 port, requests recorded."""
    from indexes import Index

    served = Index(tmp_path_factory.mktemp("pyindex"))
    yield served
    served.close()


def own_checks_accept(inventory: Path) -> list[str]:
    """What sparkfleet's own checks before a run find in an inventory (issue 45, item 2: `matrix lock` wrote a
    variable they refused, exit 4 on every later command): its variables' names, types and image lock, as
    ansible-inventory lists them with sparkfleet's configuration. Empty: every command can run on it."""
    from sparkfleet import runner, variables

    config = runner.ansible_config(inventory if inventory.is_dir() else inventory.parent)
    values = variables.inventory_values(str(inventory), config.env)
    assert values, f"ansible-inventory listed no host of {inventory}"
    return (variables.unknown({source: set(named) for source, named in values.items()})
            + variables.mistyped(values) + variables.lock_problems(values, str(inventory)))
