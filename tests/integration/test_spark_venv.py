"""spark_venv: the bare-pip sequence run with real pip into real venvs, against the test bed's index.

The index holds stand-in wheels under the real names and pins
(testbed/pyindex.py), built so that each rule of the sequence is observable.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from indexes import here

from conftest import BIN, REPO, SHOW_INVOCATION, run_module

MATRIX = yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text())


def arguments(home: Path, pyindex):
    """Arguments shared by every call: where the venvs live (home/venvs), the link (home/venv), the index."""
    def args(matrix=None, **extra):
        return {"matrix": matrix or MATRIX, "root": str(home / "venvs"), "link": str(home / "venv"),
                "python": sys.executable, "index_mirrors": pyindex.overrides, **extra}
    return args


@pytest.fixture
def place(tmp_path, pyindex):
    """A fresh place of the test's own: nothing built, nothing active."""
    return arguments(tmp_path, pyindex)


@pytest.fixture(scope="module")
def first_build(tmp_path_factory, pyindex):
    """The shipped matrix built once, on a fresh place, from an index that had served nothing: the result, the
    wheels the index served for it, and the venvs' folder as the build left it (the venv built, not active; pip's
    and uv's caches; the installer) kept aside for `built`."""
    home = tmp_path_factory.mktemp("first-build")
    pyindex.requests.clear()
    result = run_module("spark_venv", arguments(home, pyindex)())
    fetched = pyindex.wheels_fetched()
    kept = tmp_path_factory.mktemp("first-build-kept") / "venvs"
    if (home / "venvs").exists():
        shutil.copytree(home / "venvs", kept, symlinks=True)
    return {"home": home, "result": result, "fetched": fetched, "kept": kept}


@pytest.fixture
def built(first_build, pyindex):
    """The place just after the first build, for a test that starts from a built venv: its folder put back as the
    build left it (a venv cannot move, so in the same place; what an earlier test changed there is gone), the link
    removed. Returns (the arguments on that place, the build's result, the place)."""
    home = first_build["home"]
    assert not first_build["result"]["failed"], first_build["result"].get("msg")
    shutil.rmtree(home / "venvs", ignore_errors=True)
    (home / "venv").unlink(missing_ok=True)
    shutil.copytree(first_build["kept"], home / "venvs", symlinks=True)
    return arguments(home, pyindex), first_build["result"], home


def changed_matrix(**step_packages) -> dict:
    matrix = copy.deepcopy(MATRIX)
    for step in matrix["steps"]:
        if step["id"] in step_packages:
            step["packages"] = step_packages[step["id"]]
    return matrix


def probe(python: str) -> dict:
    # The venv's torch is the test bed's double (the GPU boundary): the frameworks over it are not exercised, as
    # on a simulated host (roles/spark_venv/tasks/activate.yml).
    return run_module("spark_gpu_verify", {"python": python, "timeout": 60, "frameworks": False})


def test_the_sequence_builds_a_venv_that_imports_and_reports_cuda_13(first_build, pyindex):
    built, tmp_path = first_build["result"], first_build["home"]
    assert not built["failed"], built.get("msg")
    assert built["changed"] is True and built["action"] == "build"
    assert [s["id"] for s in built["steps"]] == ["torch", "stack", "unsloth", "torchao", "unsloth_deps", "uv"]
    assert [s["rc"] for s in built["steps"]] == [0] * 6
    pypi = f"--index-url {pyindex.url}/pypi"
    # uv (the matrix's installer step, the real program) ran the steps; pip installed uv beside the venvs.
    assert built["steps"][2]["command"].startswith(f"uv pip install {pypi} --no-deps ")
    assert built["steps"][3]["command"] == f'uv pip install {pypi} -U "torchao==0.17.0"'
    # Unsloth's own dependencies, which its --no-deps step leaves out, with every pin of the matrix held.
    assert built["steps"][4]["command"].startswith(f"uv pip install {pypi} --constraint ")
    assert built["steps"][5]["command"] == f'pip install {pypi} --no-deps "uv==0.13.9"'
    assert (tmp_path / "venvs" / ".installer" / "uv-0.13.9" / "bin" / "uv").is_file()
    assert "uv" not in built["packages"], "the installer is not in the venv"
    path = Path(built["path"])
    assert path.parent == tmp_path / "venvs" and path.name == f"unsloth-2026.7.2-{built['fingerprint'][:12]}"
    # --no-deps kept the matrix's transformers although unsloth's metadata asks for transformers<=5.5.0 (an
    # accepted deviation), and the cu130 torch.
    assert built["packages"]["transformers"] == "5.13.1" and built["packages"]["torch"] == "2.10.0+cu130"
    assert built["packages"]["torchao"] == "0.17.0"
    assert built["packages"]["torchvision"] == "0.25.0+cu130" and built["packages"]["tyro"] == "1.0.17"
    assert all(i["ok"] for i in built["imports"]), built["imports"]
    # The venv's own pip check (real pip, on the stand-ins' declared requirements, the real ones where this index
    # serves the package): Unsloth's transformers and trl ranges remain, each accepted by the matrix; nothing else.
    assert built["dependencies"]["unaccepted"] == [], built["dependencies"]
    assert sorted(line.split(" declares ")[0] + " " + line.split(" declares ")[1].split("<")[0].split("!")[0]
                  for line in built["dependencies"]["accepted"]) == [
        "unsloth 2026.7.2 transformers", "unsloth 2026.7.2 trl", "unsloth-zoo 2026.7.2 transformers",
        "unsloth-zoo 2026.7.2 trl"], built["dependencies"]
    # torch came from the cu130 pyindex, the rest from the PyPI stand-in; no wheel was fetched twice.
    fetched = first_build["fetched"]
    assert "torch-2.10.0+cu130-py3-none-any.whl" in [f.replace("%2B", "+") for f in fetched]
    assert len(fetched) == len(set(fetched))
    activate = (path / "bin" / "activate").read_text()
    assert "export HF_XET_HIGH_PERFORMANCE='1'" in activate
    assert "export TRITON_PTXAS_PATH='/usr/local/cuda/bin/ptxas'" in activate
    assert "HF_HUB_ENABLE_HF_TRANSFER" not in activate
    # Built, not active: the link appears only once the caller verified the venv.
    assert not (tmp_path / "venv").exists()
    verdict = probe(str(path / "bin" / "python"))
    assert (verdict["verdict"], verdict["line"]) == ("ok", "True 13.0")


def test_without_no_deps_the_installer_re_resolves_unsloths_tree_against_the_matrixs_pins(place, tmp_path):
    """The user's rule, with what the real unsloth 2026.7.2 declares (transformers<=5.5.0, trl<=0.24.0): without
    --no-deps the step re-resolves its tree and cannot keep the matrix's transformers and trl; the half-built venv
    is removed (issue 48: the declared closure names the same pair as accepted deviations)."""
    matrix = copy.deepcopy(MATRIX)
    matrix["steps"][2]["args"] = []
    built = run_module("spark_venv", place(matrix))
    assert built["failed"] and built["failed_step"] == "unsloth", built.get("msg")
    assert "No solution found" in built["msg"] and "transformers" in built["msg"], built["msg"]
    assert not Path(built["path"]).exists()


def test_a_step_without_no_deps_that_asks_for_another_torch_replaces_the_cu130_one_and_verification_catches_it(
        place):
    """The trap --no-deps avoids: a package whose tree asks for another torch (axolotl 0.9.0's torch==2.9.1, a
    test-bed construction), installed with its dependencies, takes PyPI's CUDA 12 torch in place of the cu130 one;
    the install succeeds, and the GPU line says so."""
    matrix = copy.deepcopy(MATRIX)
    matrix["steps"].insert(3, {"id": "extra", "why": "a package with its dependencies", "index_url":
                               matrix["steps"][2]["index_url"], "packages": ["axolotl==0.9.0"]})
    # The matrix's held step (Unsloth's dependencies, every pin a constraint) is the first to see that torch moved:
    # it cannot hold torch==2.10.0, and the build stops there.
    held = run_module("spark_venv", place(matrix))
    assert held["failed"] and held["failed_step"] == "unsloth_deps", held.get("msg")
    assert "torch==2.10.0" in held["msg"] and not Path(held["path"]).exists()
    # Without it, the install succeeds and only the GPU line tells.
    matrix["steps"] = [s for s in matrix["steps"] if s["id"] != "unsloth_deps"]
    built = run_module("spark_venv", place(matrix))
    assert not built["failed"], built.get("msg")
    assert built["packages"]["torch"] == "2.9.1"  # re-resolved from PyPI: the trap --no-deps avoids
    verdict = probe(str(Path(built["path"]) / "bin" / "python"))
    # (The diagnosis of such a line is spark_gpu_verify's, tested there; this machine has no nvidia-smi.)
    assert verdict["verdict"] == "failed" and verdict["line"] == "True 12.8"


def test_torchao_must_come_last(place, tmp_path):
    """With a stack whose trl pulls an old torchao (trl 1.8.1, a test-bed construction standing for NGC's torchao
    0.13.0+git), torchao run before the stack leaves the old one, and peft refuses it at import."""
    matrix = changed_matrix(stack=["transformers==5.13.1", "peft==0.19.1", "hf_transfer==0.1.9", "datasets==4.3.0",
                                   "trl==1.8.1"])
    steps = {s["id"]: s for s in matrix["steps"]}
    matrix["steps"] = [steps["torch"], steps["torchao"], steps["stack"], steps["unsloth"]]
    built = run_module("spark_venv", place(matrix))
    assert built["failed"] is True
    assert built["failed_step"] == "imports"
    assert ("peft: ImportError: Found an incompatible version of torchao. Found version 0.13.0, but only versions "
            "above 0.16.0 are supported") in built["msg"]
    assert not Path(built["path"]).exists(), "the half-built venv is removed"
    assert "no venv was active" in built["msg"]


def test_rerun_runs_no_pip_change_builds_beside_and_switches_after_verification(built, pyindex):
    place, first, tmp_path = built
    switched = run_module("spark_venv", place(state="active", path=first["path"],
                                              verification={"line": "True 13.0"}))
    assert switched["changed"] is True and switched["action"] == "switch"
    link = tmp_path / "venv"
    assert os.readlink(link) == first["path"]

    pyindex.requests.clear()
    again = run_module("spark_venv", place())
    assert (again["changed"], again["action"]) == (False, "none"), again.get("contents_drift")
    assert pyindex.requests == [], "a converged re-run asks the index nothing"
    assert "rc" not in again["steps"][0], "no pip ran"
    assert run_module("spark_venv", place(state="active", path=first["path"]))["changed"] is False

    newer = changed_matrix(stack=["transformers==5.13.1", "peft==0.19.1", "hf_transfer==0.1.9", "datasets==4.3.0",
                                  "trl==1.9.0"])
    pyindex.requests.clear()
    second = run_module("spark_venv", place(newer))
    assert second["action"] == "build" and second["path"] != first["path"]
    assert second["packages"]["trl"] == "1.9.0"
    # One wheel cache for all builds: only the changed pin's wheel is fetched from the pyindex.
    assert pyindex.wheels_fetched() == ["trl-1.9.0-py3-none-any.whl"]
    assert os.readlink(link) == first["path"], "the new venv is not active before it is verified"
    assert second["active"]["path"] == first["path"]

    moved = run_module("spark_venv", place(newer, state="active", path=second["path"]))
    assert moved["previous"] == first["path"] and os.readlink(link) == second["path"]
    assert Path(first["path"]).exists(), "the previous venv is kept (keep: 1)"
    marker = json.loads((Path(second["path"]) / "sparkfleet-venv.json").read_text())
    assert marker["status"] == "verified" and marker["previous"] == first["path"]

    # A third matrix: once it is active, the oldest of the three goes.
    third = run_module("spark_venv", place(MATRIX | {"name": "renamed"}))
    run_module("spark_venv", place(MATRIX | {"name": "renamed"}, state="active", path=third["path"]))
    assert not Path(first["path"]).exists() and Path(second["path"]).exists()


def test_a_failing_step_leaves_the_active_venv_and_says_which_step_with_pips_error(built):
    place, first, tmp_path = built
    run_module("spark_venv", place(state="active", path=first["path"]))
    broken = changed_matrix(stack=["transformers==5.13.1", "trl==9.9.9"])
    result = run_module("spark_venv", place(broken))
    assert result["failed"] is True and result["failed_step"] == "stack"
    assert "step stack failed" in result["msg"]
    assert "there is no version of trl==9.9.9" in result["msg"], "uv's own words"
    assert "Using Python" not in result["msg"]
    assert f"the active venv {first['path']} is untouched" in result["msg"]
    assert os.readlink(tmp_path / "venv") == first["path"]
    assert not Path(result["path"]).exists()


def test_an_index_token_never_reaches_pips_argv_or_the_result(place, pyindex, tmp_path):
    """An index URL with credentials (a private mirror): pip gets it in its environment, which only its owner
    and root can read; its argv (ps, /proc/PID/cmdline: every user of the host) and the result never hold it."""
    token = "planted-index-token-81c4"
    overrides = {up: mine.replace("http://", f"http://ci:{token}@", 1) for up, mine in pyindex.overrides.items()}
    seen, stop = set(), threading.Event()
    # Issue 46, suspicion 5b: an installer another user left where root looks for one made before was run as root
    # (reused if executable, no owner check). It is made anew, never run.
    marker = tmp_path / "their-uv-ran"
    theirs = tmp_path / "venvs" / ".installer" / "uv-0.13.9" / "bin" / "uv"
    theirs.parent.mkdir(parents=True)
    theirs.write_text(f"#!/bin/sh\ntouch {marker}\n")
    theirs.chmod(0o755)
    for path in (theirs, theirs.parent, theirs.parent.parent):
        os.chown(path, 4242, 4242)

    def watch():
        while not stop.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    seen.add(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                except OSError:
                    continue
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # -vvv with the invocation shown: the result as callbacks show it then, the module_args (the overrides) too.
        built = run_module("spark_venv", place(index_mirrors=overrides), "-vvv", **SHOW_INVOCATION)
    finally:
        stop.set()
        watcher.join()
    assert not built["failed"], built.get("msg")
    assert any(" -m pip install " in line for line in seen), "the watcher saw pip run"
    # The test's own `ansible localhost -m spark_venv -a '{...}'` carries the module's arguments on its command line;
    # in a playbook they travel in the module's payload. Every other process, pip's above all, must not hold it.
    others = [line for line in seen if token in line and f"{BIN}/ansible localhost " not in line]
    assert not others, "no process's argv held the token"
    shown = json.dumps({k: v for k, v in built.items() if k != "_stdout"})
    assert "invocation" in built, "the module's arguments were shown"
    assert token not in shown and f"--index-url http://ci:***@{pyindex.url.split('//')[1]}/pypi" in shown
    assert not marker.exists() and theirs.stat().st_uid == 0, "their installer was replaced, never run"
    # Suspicion 5c, refuted: pip's and uv's caches keep what the index served, not its URL's credentials; they are
    # root's alone anyway (0700), as what was downloaded is nobody else's to read.
    for cache in (".pip-cache", ".uv-cache"):
        folder = tmp_path / "venvs" / cache
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, cache
        assert [p for p in folder.rglob("*") if p.is_file() and token.encode() in p.read_bytes()] == []


def test_pip_env_masks_its_secrets_and_no_short_value_of_its_own_in_the_result(place):
    """A fleet's pip environment with a timeout of 30 masked every "30" of the result: the venv's path (its
    fingerprint held one) came back as ...-********8c27..., and the next task acted on a path that is not there.
    Secrets (a proxy's password, a token's value) are masked; a timeout is not."""
    planned = run_module("spark_venv", place(), "--check")
    piece = Path(planned["path"]).name.rsplit("-", 1)[1][:2]  # two characters of the path, as "30" was
    env = {"PIP_DEFAULT_TIMEOUT": piece, "HTTPS_PROXY": "http://fleet:proxy-pass-5e1@127.0.0.1:3128",
           "ARTIFACTORY_TOKEN": "planted-token-7f2"}
    result = run_module("spark_venv", place(pip_env=env), "--check")
    assert result["path"] == planned["path"], "the path came back whole"
    shown = json.dumps(result)
    assert "proxy-pass-5e1" not in shown and "planted-token-7f2" not in shown


def test_check_mode_reports_the_build_and_creates_nothing(place, tmp_path):
    result = run_module("spark_venv", place(), "--check")
    assert (result["changed"], result["action"]) == (True, "build")
    assert [s["command"].split(" --index-url ")[0] for s in result["steps"]] == ["uv pip install"] * 5 + [
        "pip install"]
    assert not (tmp_path / "venvs").exists() and not (tmp_path / "venv").exists()


def test_a_plain_http_index_off_the_loopback_is_refused_unless_named(place, pyindex, tmp_path):
    """Issue 34, suspected and proved: a plain-http mirror was trusted (PIP_TRUSTED_HOST) with no TLS and, by
    default, no hash lock: anyone on the path could swap a wheel. It is refused before anything is made, unless
    the user names it as Docker's insecure registries are named; the loopback's (the test bed's) stay accepted."""
    mirror = {step["index_url"]: "http://wheels.lan:8080/simple" for step in MATRIX["steps"]}
    refused = run_module("spark_venv", place(index_mirrors=mirror), "--check")
    assert refused["failed"]
    assert refused["msg"].startswith("http://wheels.lan:8080/simple is plain http (no TLS: anyone on the path can "
                                     "swap a wheel); use https, or name wheels.lan:8080 in spark_venv_insecure_indexes")
    assert refused["msg"].count("wheels.lan:8080/simple is plain http") == 1, "each index said once"
    assert not (tmp_path / "venvs").exists()
    named = run_module("spark_venv", place(index_mirrors=mirror, insecure_indexes=["wheels.lan:8080"]), "--check")
    assert named["failed"] and "without the hash lock" in named["msg"], "a mirror's wheels were taken unlocked"
    locked = run_module("spark_venv", place(index_mirrors=mirror, insecure_indexes=["wheels.lan:8080"],
                                            lock=_lock(pyindex)), "--check")
    assert not locked["failed"] and locked["action"] == "build", locked.get("msg")


def test_a_mirror_off_the_loopback_is_used_only_with_the_hash_lock(place, pyindex, tmp_path):
    """Issue 34: a venv built from any index other than the matrix's own uses the hash lock. A mirror can serve
    other bytes under a pinned name and version; without the lock pip would take them. Refused before anything is
    made, naming the mirror (its token masked) and the command that writes the lock; the loopback's index (the
    owner's own, as the test bed's) builds without one (test_the_sequence_builds_...)."""
    mirror = {"https://pypi.org/simple": "https://ci:s3cr3t@wheels.example.lan/simple"}
    refused = run_module("spark_venv", place(index_mirrors={**pyindex.overrides, **mirror}), "--check")
    assert refused["failed"]
    assert refused["msg"].startswith("the venv would be built from a mirror (https://pypi.org/simple -> "
                                     "https://ci:***@wheels.example.lan/simple) without the hash lock")
    assert "sparkfleet matrix lock -i INVENTORY" in refused["msg"] and refused["msg"].endswith("Nothing was changed.")
    assert "s3cr3t" not in json.dumps(refused)
    assert not (tmp_path / "venvs").exists() and not (tmp_path / "venv").exists()


def test_the_hosts_pip_configuration_cannot_change_the_sequence(place, tmp_path):
    bad = tmp_path / "constraints.txt"
    bad.write_text("torch==2.9.1\n")
    result = run_module("spark_venv", place(), PIP_CONSTRAINT=str(bad), PIP_INDEX_URL="http://127.0.0.1:9/none",
                        UV_CONSTRAINT=str(bad), UV_DEFAULT_INDEX="http://127.0.0.1:9/none", UV_OFFLINE="1")
    assert not result["failed"], result.get("msg")
    assert result["packages"]["torch"] == "2.10.0+cu130"


def site_files(venv: Path) -> set[str]:
    """Every file the steps put into the venv's site-packages, bytecode included; what names the installer
    (dist-info INSTALLER, RECORD, which lists the bytecode pip compiled) left out."""
    (site,) = venv.glob("lib/python*/site-packages")
    return {str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()
            and p.name not in ("INSTALLER", "RECORD", "REQUESTED") and not p.relative_to(site).parts[0].startswith(
                ("pip", "_virtualenv", "_distutils_hack", "distutils-precedence"))}


def test_uv_and_pip_build_the_same_venv_and_the_installer_is_made_once_beside_the_venvs(built, pyindex):
    """Issue 38: uv is used because it builds the same venv (bench/pip_vs_uv.py measures it faster). The matrix
    without its installer step is the same sequence by pip."""
    place, uv_built, tmp_path = built
    by_pip = {**MATRIX, "name": "by-pip", "steps": [s for s in MATRIX["steps"] if not s.get("installer")]}
    pip_built = run_module("spark_venv", place(by_pip))
    assert not pip_built["failed"] and not uv_built["failed"], (pip_built.get("msg"), uv_built.get("msg"))
    assert {s["command"].split(" install")[0] for s in pip_built["steps"]} == {"pip"}
    assert pip_built["packages"] == uv_built["packages"]
    assert site_files(Path(pip_built["path"])) == site_files(Path(uv_built["path"]))
    assert any(name.endswith(".pyc") for name in site_files(Path(uv_built["path"]))), "bytecode compiled as pip does"
    assert pip_built["imports"] == uv_built["imports"]

    pyindex.requests.clear()
    again = run_module("spark_venv", place(MATRIX | {"name": "renamed"}))
    assert again["steps"][-1]["reused"] == str(tmp_path / "venvs" / ".installer" / "uv-0.13.9")
    assert not [r for r in pyindex.requests if "/uv" in r], "the installer was not fetched again"
    assert sorted(p.name for p in (tmp_path / "venvs" / ".installer").iterdir()) == ["uv-0.13.9"]


def test_an_installer_that_cannot_be_installed_fails_its_step_and_leaves_nothing_half_made(built):
    place, first, tmp_path = built
    run_module("spark_venv", place(state="active", path=first["path"]))
    broken = changed_matrix(uv=["uv==9.9.9"])
    result = run_module("spark_venv", place(broken))
    assert result["failed"] is True and result["failed_step"] == "uv", result.get("msg")
    assert "uv==9.9.9" in result["msg"] and "the installer, into" in result["msg"]
    assert f"the active venv {first['path']} is untouched" in result["msg"]
    assert sorted(p.name for p in (tmp_path / "venvs" / ".installer").iterdir()) == ["uv-0.13.9"]
    assert not Path(result["path"]).exists()


def test_extra_packages_follow_the_matrix_policy(place, pyindex, tmp_path):
    refused = run_module("spark_venv", place(extra_packages=["flash-attn", "transformer_engine"]))
    assert refused["failed"] is True
    assert ("flash-attn: refused on Spark: skip the pip build on Spark; the NGC PyTorch container bundles a working "
            "build") in refused["msg"]
    assert "transformer_engine: refused on Spark: TransformerEngine / NVFP4 training is container only" in refused[
        "msg"]
    assert not (tmp_path / "venvs").exists(), "refused before anything was built"

    pinned = run_module("spark_venv", place(extra_packages=["torch"]))
    assert "torch: already pinned by the matrix (torch==2.10.0)" in pinned["msg"]

    planned = run_module("spark_venv", place(extra_packages=["xformers", "vllm", "llamafactory"]), "--check")
    says = {e["requirement"]: e["says"] for e in planned["extras"]}
    assert says["xformers"].startswith("xformers: built from source with TORCH_CUDA_ARCH_LIST=12.1")
    assert says["vllm"] == ("vllm: from https://wheels.vllm.ai/nightly only, then its dependencies from the matrix's "
                            "index (nightly wheels only)")
    assert says["llamafactory"] == "llamafactory: installed, but fragile on Spark; check upstream issues first"
    commands = {s["id"]: s["command"] for s in planned["steps"]}
    assert commands["extra:xformers"].startswith("TORCH_CUDA_ARCH_LIST=12.1 uv pip install ")
    assert "--no-binary xformers" in commands["extra:xformers"]
    # vllm alone from its own index, its dependencies from the matrix's: never one pip command over both.
    assert commands["extra:vllm"].startswith("uv pip install --index-url https://wheels.vllm.ai/nightly --no-deps ")
    assert commands["extra:vllm:dependencies"].startswith(f"uv pip install --index-url {pyindex.url}/pypi ")
    assert not any("--extra-index-url" in c for c in commands.values())

    # An extra that wants another torch cannot move the matrix's pin: pip refuses, the venv is not kept.
    moved = run_module("spark_venv", place(extra_packages=["axolotl"]))
    assert moved["failed"] is True and moved["failed_step"] == "extra:axolotl"
    assert "all versions of axolotl depend on torch==2.9.1 and torch==2.10.0" in moved["msg"], "uv's own words"
    assert "unsatisfiable.." not in moved["msg"]


def test_an_invalid_matrix_is_refused_with_every_problem(place):
    matrix = copy.deepcopy(MATRIX)
    matrix["steps"][1]["packages"] = ["transformers>=5", "peft==0.19.1"]
    matrix["steps"][2]["args"] = ["--no-deps", "--user"]
    matrix["last_verified"] = "14/07/2026"
    result = run_module("spark_venv", place(matrix))
    assert result["failed"] is True
    assert "last_verified is '14/07/2026'; expected a date as YYYY-MM-DD" in result["msg"]
    assert "step 2 (stack): 'transformers>=5' is not an exact pin; every matrix package is NAME==VERSION" in result[
        "msg"]
    assert "step 3 (unsloth): args are ['--no-deps', '--user']" in result["msg"]
    assert result["msg"].endswith("Nothing was changed.")


def _lock(pyindex, matrix: dict = MATRIX) -> dict:
    """The hash lock as `sparkfleet matrix lock` writes it, from the matrix check against the test bed's index."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._hash_lock import lock_from_sequence

    checked = run_module("spark_matrix_check", {"matrix": matrix, "index_mirrors": pyindex.overrides})
    assert not checked["failed"], checked.get("msg")
    return lock_from_sequence(matrix, checked["sequence"])


# A lock installed on this machine is this machine's: the installer's wheel (uv) is one per architecture.
HERE = here(MATRIX)


def test_require_hashes_installs_the_locked_set_and_refuses_a_wheel_swapped_on_the_index(own_index, tmp_path):
    """The attack: after the lock was reviewed, the index serves other bytes under the same name and version,
    with a link hash that matches them (a compromised mirror). Without the lock pip takes them; with it the
    build fails on the hash and the active venv stays. The index is the test's own: it swaps a wheel."""
    from pyindex import build_wheel, simple_pages

    pyindex, place = own_index, arguments(tmp_path, own_index)
    lock = _lock(pyindex, HERE)
    built = run_module("spark_venv", place(HERE, lock=lock))
    assert not built["failed"], built.get("msg")
    assert all("--require-hashes --no-deps -r" in s["command"] for s in built["steps"]), built["steps"]
    run_module("spark_venv", place(state="active", path=built["path"]))

    project = pyindex.root / "pypi" / "transformers"
    [wheel] = project.glob("transformers-5.13.1-*.whl")
    wheel.unlink()
    build_wheel(project, "transformers", "5.13.1", {"transformers/__init__.py": b"import os  # swapped\n"})
    simple_pages(pyindex.root)
    fresh = {"root": str(tmp_path / "other-venvs"), "link": str(tmp_path / "venv")}  # no pip cache of the old bytes
    unlocked = run_module("spark_venv", place(**fresh))
    assert not unlocked["failed"], "pip took the swapped wheel without the lock"
    # another host's first build from the same lock (the link is its own: nothing active there yet)
    refused = run_module("spark_venv", place(HERE, lock=lock, root=str(tmp_path / "third"), link=str(tmp_path / "v3")))
    assert refused["failed"] is True and refused["failed_step"] == "stack", refused.get("msg")
    assert "Hash mismatch for `transformers==5.13.1`" in refused["msg"] and "Resolved " not in refused["msg"]
    assert not Path(refused["path"]).exists(), "the half-built venv stays"
    assert os.path.realpath(tmp_path / "venv") == built["path"], "the active venv moved"


def test_a_lock_for_another_matrix_is_refused_before_anything_is_built(place, pyindex, tmp_path):
    lock = _lock(pyindex)
    result = run_module("spark_venv", place(changed_matrix(torchao=["torchao==0.13.0"]), lock=lock))
    assert result["failed"] is True
    assert "the lock was written for another matrix" in result["msg"] and "Nothing was changed" in result["msg"]
    assert not (tmp_path / "venvs").exists()


@pytest.fixture
def own_index(tmp_path):
    """An index of the test's own, for a test that changes what it serves (a wheel swapped) or counts every wheel
    it serves from the first request on."""
    from indexes import Index

    served = Index(tmp_path / "own-index")
    yield served
    served.close()


def test_a_fleet_fetches_each_locked_wheel_once_and_a_host_cut_off_from_the_indexes_still_builds(place, own_index,
                                                                                                  tmp_path):
    """Issue 38: a venv built across N hosts fetched every wheel N times from the indexes (a pip cache per host).
    spark_wheelhouse fetches each wheel of the hash lock once into the controller's cache, the hosts after the
    first take them from it, and each host installs from its copy with --no-index (--require-hashes kept): a host
    whose indexes are unreachable builds all the same."""
    import shutil

    lock = _lock(own_index, HERE)
    wheels = {e["wheel"].replace("%2B", "+") for step in lock["steps"].values() for e in step}  # a wheel two
    # steps hold (torch: its own, and as the stack's dependency) is one file
    cache = tmp_path / "controller-cache"

    def wheels_served() -> list[str]:
        return [r.rsplit("/", 1)[-1] for r in own_index.requests if r.endswith(".whl")]

    before = len(wheels_served())
    hosts = [run_module("spark_wheelhouse", {"lock": lock, "matrix": HERE, "index_mirrors": own_index.overrides,
                                             "cache": str(cache)}) for _host in range(3)]
    assert not any(h["failed"] for h in hosts), hosts[0].get("msg")
    assert sorted(hosts[0]["fetched"]) == sorted(wheels)
    assert hosts[0]["bytes_fetched"] > 0 and hosts[0]["changed"] is True
    assert [(h["fetched"], h["changed"]) for h in hosts[1:]] == [([], False), ([], False)], "fetched once"
    served = wheels_served()[before:]
    assert sorted(served) == sorted(w.replace("+", "%2B") for w in wheels), "each wheel crossed once"
    house = tmp_path / "wheelhouse"
    house.mkdir()
    for path in hosts[2]["files"]:
        shutil.copy(path, house)
    dead = {upstream: "http://127.0.0.1:9/simple" for upstream in own_index.overrides}  # nothing listens on port 9
    built = run_module("spark_venv", place(HERE, lock=lock, wheelhouse=str(house), index_mirrors=dead,
                                           root=str(tmp_path / "cut-off"), link=str(tmp_path / "cut-off-venv")))
    assert not built["failed"], built.get("msg")
    assert all(s["command"].split(" install ", 1)[1].startswith(f"--no-index --find-links {house} --require-hashes")
               for s in built["steps"]), built["steps"]
    assert built["steps"][-1]["command"].startswith("pip install "), "pip installs uv, from the wheelhouse too"
    assert all(i["ok"] for i in built["imports"]) and built["packages"]["trl"] == "1.8.0"
    assert len(wheels_served()) == before + len(wheels), "the build asked no index"
    refused = run_module("spark_venv", place(wheelhouse=str(house)), "--check")
    assert refused["failed"] and "without the hash lock" in refused["msg"]


def test_a_fleets_venvs_from_the_lock_take_each_wheel_from_the_index_once(own_index, tmp_path):
    """Issue 38, the role as site.yml runs it: the index serves each wheel of the lock once for the hosts that use
    the controller's wheelhouse (before: once per host); every host's venv is built and active, and a second run
    changes nothing. Issue 35: the third host differs in every venv option a fleet can vary (host_vars) and is
    built by its own: its wheels from the index itself, its age limit strict, its pip environment and timeouts."""
    from indexes import venv_fleet

    own = {"venv-host-3": {"spark_venv_wheelhouse": False, "spark_venv_keep": 2, "spark_venv_max_age_days": 3650,
                           "spark_venv_strict_age": True, "spark_venv_pip_env": {"PIP_DEFAULT_TIMEOUT": "30"},
                           "spark_venv_verify_timeout": 240, "spark_venv_policy": "report",
                           "spark_venv_wheelhouse_cache": str(tmp_path / "unused-cache")}}
    proc, served = venv_fleet(tmp_path, own_index, hosts=3, wheelhouse=True, own=own)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert served["wheels"] == 2 * served["distinct"] > 0, "once for hosts 1 and 2, once for host 3"
    for n in (1, 2, 3):
        assert (tmp_path / f"host-{n}" / "venv" / "bin" / "python").exists()
    for n in (1, 2):
        assert sorted(p.name for p in (tmp_path / f"host-{n}" / "venvs" / ".wheelhouse").glob("*.whl")) == sorted(
            p.name for p in (tmp_path / "controller-cache").glob("*/*.whl"))
    assert not (tmp_path / "host-3" / "venvs" / ".wheelhouse").exists() and not (tmp_path / "unused-cache").exists()
    # Issue 49: the hosts got the lock's wheels in one archive (one transfer, not a task per wheel), made once.
    import tarfile

    [bundle] = (tmp_path / "controller-cache" / "bundles").glob("*.tar")
    with tarfile.open(bundle) as archive:
        wheels = sorted(p.name for p in (tmp_path / "controller-cache").glob("*/*.whl"))
        assert sorted(archive.getnames()[:-1]) == wheels
        assert archive.getnames()[-1] == f"{bundle.name}.done", "last: there only once every wheel was unpacked"
    for n in (1, 2):
        assert (tmp_path / f"host-{n}" / "venvs" / ".wheelhouse" / f"{bundle.name}.done").is_file()
    assert "Copy the lock's wheels to the host in one archive" in proc.stdout
    again, served_again = venv_fleet(tmp_path, own_index, hosts=3, wheelhouse=True, own=own)
    assert again.returncode == 0 and served_again["wheels"] == 0, again.stdout[-3000:]
    assert "changed=0" in again.stdout and "changed=1" not in again.stdout, again.stdout[-3000:]


@pytest.mark.parametrize(("edit", "said"), [
    # trl 1.10.0 declares datasets>=4.7.0 (as the real trl 1.8.0 does on PyPI): the stack step does not resolve.
    (lambda m: m["steps"][1]["packages"].__setitem__(4, "trl==1.10.0"),
     "its steps do not resolve on its indexes: step stack: Because trl>=1.10.0 depends on datasets>=4.7.0 and you "
     "require datasets==4.3.0"),
    # Unsloth's transformers and trl ranges, no longer accepted: the closure has what the matrix does not accept.
    (lambda m: m.pop("accepted"),
     "its packages declare what it does not accept: unsloth 2026.7.2 declares transformers<=5.5.0"),
], ids=["steps-do-not-resolve", "closure-not-accepted"])
def test_a_matrix_that_cannot_be_built_is_refused_before_any_wheel_is_fetched(own_index, tmp_path, edit, said):
    """Issue 48: the role, built from the indexes (no lock), asks first whether the matrix can be built - its
    steps resolved and its declared closure judged, on the controller - and refuses it before the first download,
    naming the conflict and the way forward; nothing is built, nothing is active."""
    from indexes import venv_fleet

    proc, served = venv_fleet(tmp_path, own_index, hosts=1, wheelhouse=False, locked=False, edit=edit)
    assert proc.returncode == 2, proc.stdout[-4000:]
    assert said in proc.stdout, proc.stdout[-4000:]
    assert "Nothing was downloaded or built and the active venv is untouched" in proc.stdout
    assert "sparkfleet matrix propose -i INVENTORY --canary HOST" in proc.stdout
    assert served["wheels"] == 0, "no wheel was fetched"
    venvs = tmp_path / "host-1" / "venvs"
    assert not venvs.exists() or not [p for p in venvs.iterdir() if not p.name.startswith(".")]
    assert not (tmp_path / "host-1" / "venv").exists()


def test_a_changed_venv_is_drift_named_per_package_and_a_provision_builds_it_anew_beside_it(built, pyindex):
    """Issue 58, item 1: `pip uninstall -y peft` in the active venv left provision `converged` and verify
    `successful`: only the venv's marker and link were compared. What is installed is compared now, with the
    matrix's pins and with what the build installed: a package removed, one upgraded, one added."""
    place, first, tmp_path = built
    run_module("spark_venv", place(state="active", path=first["path"], verification={"line": "True 13.0"}))
    pip = [first["path"] + "/bin/python", "-m", "pip", "--disable-pip-version-check", "-q"]
    import subprocess

    subprocess.run([*pip, "uninstall", "-y", "peft"], check=True, capture_output=True)
    subprocess.run([*pip, "install", "--no-deps", "--index-url", f"{pyindex.url}/pypi/", "trl==1.9.0"],
                   check=True, capture_output=True)
    read = run_module("spark_venv", place(), "--check")
    assert read["contents_drift"] == ["peft: missing; the matrix pins 0.19.1", "trl 1.9.0: the matrix pins 1.8.0"]
    assert (read["action"], read["path"]) == ("build", first["path"] + "-2"), "built beside, never over it"
    assert not Path(first["path"] + "-2").exists(), "check mode made nothing"

    again = run_module("spark_venv", place())
    assert again["action"] == "build" and again["packages"]["peft"] == "0.19.1"
    assert os.readlink(tmp_path / "venv") == first["path"], "the changed venv is active until the new is verified"
    run_module("spark_venv", place(state="active", path=again["path"], verification={"line": "True 13.0"}))
    assert os.readlink(tmp_path / "venv") == again["path"] and Path(first["path"]).exists(), "the old one is kept"
    assert run_module("spark_venv", place())["action"] == "none", "converged again"
