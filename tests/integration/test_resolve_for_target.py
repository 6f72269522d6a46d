"""Issue 57, item 3: a step is resolved for the Spark (linux aarch64, CPython 3.12, glibc 2.39), not for the machine
sparkfleet runs on. pip's --platform chooses wheels for the target but evaluates every dependency's marker for the
controller: on x86_64, torch 2.10.0's aarch64 wheel would bring fifteen nvidia-*-cu12 wheels, cuda-bindings 12 and
triton, each marked platform_machine == "x86_64". Real PyPI and the real torch metadata; the emulated aarch64 lab
host's own pip as the reference."""

from __future__ import annotations

import copy
import json
import platform
import subprocess
import sys

import pytest
import store
import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _closure as closure
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _pip_dry_run as resolve
from ansible_collections.sparkfleet.spark.plugins.modules.spark_matrix_check import closure_steps

from conftest import REPO, run_module

MATRIX = yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text())
CACHE = store.ROOT / "tests" / "resolver"  # testbed/store.py: kept outside the clone
# What a CUDA 12 or x86_64-only dependency of torch is called: none may reach a Spark's resolution.
X86_ONLY = ("nvidia-", "cuda-bindings", "cuda-pathfinder", "triton")


def _torch_from_pypi(target: dict | None = None) -> dict:
    """The shipped matrix with its torch step from pypi.org (download.pytorch.org cannot be reached from here): the
    same torch 2.10.0 and torchvision 0.25.0, PyPI's aarch64 wheels and their real metadata."""
    matrix = copy.deepcopy(MATRIX)
    matrix["steps"][0]["index_url"] = "https://pypi.org/simple"
    if target:
        matrix["target"] = {**matrix["target"], **target}
    return matrix


def test_without_uv_a_controller_that_is_not_the_target_refuses_and_says_why(monkeypatch):
    """No uv (neither its wheel nor one on PATH): pip may resolve only on a machine that is the target; elsewhere the
    module fails before asking any index, naming what pip would get wrong and how to install uv."""
    monkeypatch.setitem(sys.modules, "uv", None)  # import uv fails
    monkeypatch.setattr(resolve.shutil, "which", lambda name: None)
    here = {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", "arch": platform.machine(), "glibc": "2.39"}
    assert resolve.resolver(here) is None, "this machine is the target: pip, run here, evaluates markers as it would"
    elsewhere = {**here, "arch": "riscv64" if platform.machine() == "aarch64" else "aarch64"}
    with pytest.raises(resolve.NotForTarget) as refused:
        resolve.resolver(elsewhere)
    said = str(refused.value)
    assert f"resolving for linux {elsewhere['arch']} CPython {here['python']} on this {platform.machine()}" in said
    assert "nvidia-*-cu12" in said and "-m pip install 'uv>=0.9,<1'" in said
    requirements = (REPO / "requirements.txt").read_text()
    assert "uv>=0.9,<1" in requirements, "the message names the range the collection asks for"


def test_a_failure_of_uv_is_told_as_missing_conflict_or_unreachable_with_no_credential():
    """uv's own words (as uv 0.13 writes them), sorted as pip's were, a token in a URL masked."""
    unreachable = resolve.failure("", "error: Request failed after 1 retry\n  cause: Failed to fetch: "
                                      "`https://ci:tok-9a@mirror.example/simple/torch/`\n  cause: dns error\n")
    assert unreachable == {"status": "unreachable",
                           "detail": "could not fetch https://***@mirror.example/simple/torch/: dns error"}
    missing = resolve.failure("", "error: No solution found when resolving dependencies:\n  cause: Because there is "
                                  "no version of torchao==0.99.0 and you require torchao==0.99.0, we can conclude "
                                  "that your requirements are unsatisfiable.\n")
    assert missing == {"status": "missing", "detail": "torchao==0.99.0: no wheel for this target"}
    pip_said = resolve.failure("", "ERROR: Could not find a version that satisfies the requirement trl==9.9.9 (from "
                                   "versions: 1.8.0, 1.9.0)\nERROR: No matching distribution found for trl==9.9.9\n")
    assert pip_said["status"] == "missing" and "1.8.0, 1.9.0" in pip_said["detail"], "pip's words still read"


@pytest.mark.network
def test_torch_on_real_pypi_resolves_for_the_spark_with_no_cuda12_or_x86_only_package(shipped_for_the_spark):
    """The torch step of the shipped matrix, resolved by spark_matrix_check against pypi.org's real metadata for the
    matrix's target: its resolution, its hash lock entries (what `sparkfleet matrix lock` writes) and the closure
    judged on it name no nvidia-*-cu12, cuda-bindings or triton wheel, and every wheel is aarch64's or pure."""
    matrix, result = shipped_for_the_spark
    step = result["sequence"][0]
    assert (step["step"], step["status"]) == ("torch", "resolves"), step
    names = [spec.split("==")[0] for spec in step["installs"]]
    assert {"torch", "torchvision", "numpy", "sympy"} <= set(names), names
    assert not [n for n in names if n.startswith(X86_ONLY)], step["installs"]
    assert not [e["wheel"] for e in step["locked"] if e["wheel"].startswith(X86_ONLY)]
    assert all(e["wheel"].endswith(("-none-any.whl", "_aarch64.whl")) for e in step["locked"]), step["locked"]
    assert all(len(e["sha256"]) == 64 for e in step["locked"]), "PyPI gives each wheel's sha256: the lock has it"
    torch = next(d for d in step["declared"] if d["name"] == "torch")
    assert any(r.startswith("nvidia-cublas-cu12") for r in torch["requires_dist"]), "torch declares them, for x86_64"
    judged = closure.judge(closure_steps(matrix, [step]), matrix["target"], matrix.get("accepted"))
    assert not [line for line in judged["lines"] if any(x in line for x in X86_ONLY)], judged["lines"]
    if platform.machine() == "x86_64":
        # What the old way (pip's --platform, markers evaluated here) makes of the same step: it asks for the x86_64
        # packages and, PyPI having no aarch64 wheel of them, cannot resolve at all.
        old = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
                              "--only-binary=:all:", "--python-version", "3.12", "--platform",
                              "manylinux_2_28_aarch64", "--target", str(CACHE / "unused"), "torch==2.10.0"],
                             capture_output=True, text=True, check=False)
        assert old.returncode != 0 and "nvidia-" in old.stderr + old.stdout, old.stderr[-800:]


@pytest.fixture(scope="module")
def shipped_for_the_spark() -> tuple[dict, dict]:
    """The shipped matrix, its torch step from pypi.org, resolved for the Spark once for the tests that read it (the
    torch step's resolution, and the closure on the set the steps end with): the matrix and the module's result."""
    matrix = _torch_from_pypi()
    return matrix, run_module("spark_matrix_check", {"matrix": matrix, "timeout": 60})


def _pip_wheel() -> str:
    """pip's own wheel (the version this venv runs), fetched once into the test store: run from the wheel on the lab
    host (`python3 pip.whl/pip`), as Debian's python3 has no pip."""
    import pip  # pylint: disable=import-outside-toplevel

    with store.locked("tests/resolver"):
        CACHE.mkdir(parents=True, exist_ok=True)
        wheel = CACHE / f"pip-{pip.__version__}-py3-none-any.whl"
        if not wheel.exists():  # pip download writes the wheel whole under its name only once it is complete
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                            "--dest", str(CACHE), f"pip=={pip.__version__}"], check=True, capture_output=True)
    return wheel.name


@pytest.mark.testbed
@pytest.mark.network
def test_the_same_set_as_pip_resolves_on_the_emulated_aarch64_lab_host_itself():
    """The reference: pip run natively on an aarch64 host (the lab's Spark image under qemu, Debian's CPython 3.11,
    glibc 2.36) resolving the torch step against pypi.org. The module, on this controller, resolving for that host's
    target, finds exactly the same packages at the same versions."""
    wheel = _pip_wheel()
    ca = "/etc/ssl/certs/ca-certificates.crt"  # this machine's trust (its proxy's CA), for pip in the container
    on_host = subprocess.run(
        ["docker", "run", "--rm", "--platform", "linux/arm64", "-v", f"{CACHE}:/w:ro", "-v", f"{ca}:/ca.crt:ro",
         "sparkfleet/host-spark:latest", "sh", "-c",
         f"uname -m >&2; python3 /w/{wheel}/pip install --cert /ca.crt --dry-run --quiet --report - "
         "--ignore-installed --only-binary=:all: --no-cache-dir --disable-pip-version-check "
         "torch==2.10.0 torchvision==0.25.0"],
        capture_output=True, text=True, timeout=600, check=False)
    assert on_host.returncode == 0 and on_host.stderr.startswith("aarch64"), on_host.stderr[-800:]
    native = sorted(f"{closure.normalize(i['metadata']['name'])}=={i['metadata']['version']}"
                    for i in json.loads(on_host.stdout)["install"])
    result = run_module("spark_matrix_check", {"matrix": _torch_from_pypi({"python": "3.11", "glibc": "2.36"}),
                                               "step": "torch", "timeout": 60})
    [step] = result["sequence"]
    assert step["status"] == "resolves", step
    assert sorted(step["installs"]) == native
    assert not [n for n in native if n.startswith(X86_ONLY)]


@pytest.mark.network
def test_the_closure_is_judged_on_the_set_the_steps_end_with_and_a_step_that_did_not_resolve_makes_it_provisional(
        shipped_for_the_spark):
    """Issue 57, item 5, against PyPI's real metadata, the torch step resolved for the Spark: with the shipped
    datasets 4.3.0 the stack step does not resolve (trl 1.8.0 asks for datasets>=4.7.0), so datasets' fsspec<=2025.9.0
    against the fsspec torch's step brings is provisional (pip, resolving the stack, would move fsspec; no step pins
    it) and fails nothing, while trl's datasets>=4.7.0 against the pinned datasets does. With datasets 4.7.0 every
    step resolves and the closure, judged on the set the steps end with, has no fsspec finding at all."""
    shipped, result = shipped_for_the_spark
    assert {s["step"]: s["status"] for s in result["sequence"]}["stack"] == "conflict"
    judged = closure.judge(closure_steps(shipped, result["sequence"]), shipped["target"], shipped.get("accepted"))
    fsspec = [line for line in judged["lines"] if "fsspec" in line]
    assert fsspec and all("(provisional: step stack, unsloth_deps did not resolve, and may move fsspec" in line
                          for line in fsspec), fsspec
    assert [f["text"] for f in judged["unaccepted"]] == [
        "trl 1.8.0 declares datasets>=4.7.0; step stack installs datasets 4.3.0"]
    raised = _torch_from_pypi()
    raised["steps"][1]["packages"][3] = "datasets==4.7.0"
    result = run_module("spark_matrix_check", {"matrix": raised, "timeout": 60})
    assert all(s["status"] == "resolves" for s in result["sequence"]), result["table"]
    judged = closure.judge(closure_steps(raised, result["sequence"]), raised["target"], raised.get("accepted"))
    assert not [line for line in judged["lines"] if "fsspec" in line], judged["lines"]
    assert not [line for line in judged["lines"] if line.startswith("MISSING")], judged["lines"]
