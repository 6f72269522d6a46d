"""Every GPU framework installed is probed, with real wheels, on this machine without a GPU (issues 36 and 47).

Ground truth, as the real wheels behave here: jax 0.10.2 with its CUDA 12 plugin, and jax without any plugin, fall
back to the CPU (jax.devices() is [cpu:0]); numba-cuda finds no CUDA driver; cuda-python's cudaGetDeviceCount and
cupy-cuda13x answer cudaErrorInsufficientDriver; onnxruntime-gpu 1.31.1 lists its CUDA provider (a list compiled
in) but cannot load it (libcublasLt.so.13 is not here) and runs a session on the CPU; onnxruntime (not -gpu) has
no CUDA provider; triton and bitsandbytes beside torch 2.14.1's CUDA build find torch without a GPU. Each is
judged failed by its own probe, in a process of its own, with the fix that follows its cause.

A stub cannot pass: CASES has one case for every framework FRAMEWORKS probes (a new entry without one fails
test_every_probed_framework_has_a_case), each case fails on a probe replaced by one that reports success without
work (test_a_probe_replaced_by_a_stub_fails_its_case).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import time
from pathlib import Path

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import (
    _gpu_probe,
    _program_gpu_probe,
    _program_probe_base,
    _program_probe_frameworks,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._gpu_probe import (
    framework_line,
    frameworks_probed,
    parse_probe_output,
)

from conftest import run_module

pytestmark = pytest.mark.network


def _venv(kind: str):
    import wheels

    try:
        if kind == "frameworks":
            return wheels.frameworks_venv(), {}
        if kind == "cpu builds":
            return wheels.cpu_builds_venv(), {}
        return wheels.torch_frameworks_venv(), {}
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def venvs():
    return {}


def venv_of(venvs, kind: str):
    if kind not in venvs:
        venvs[kind] = _venv(kind)
    return venvs[kind]


def verify(env, extra=None, **args) -> dict:
    path, environment = env
    result = run_module("spark_gpu_verify", {"python": str(path / "bin" / "python"), "spark": False, "timeout": 300,
                                             "environment": {**environment, **(extra or {})}, **args})
    assert not result["failed"], result.get("msg")
    return result


# framework -> (its venv, stage, the start of its error, the start of its fix). What each does on this machine.
CASES = {
    "jax": ("frameworks", "device", "jax runs on the CPU: jax.devices() is cpu:0",
            "jax-cuda12-plugin 0.10.2 is a CUDA 12 build (its name says cuda12) on a CUDA 13 system: "
            "install jax[cuda13]"),
    "cupy": ("frameworks", "device", "CUDARuntimeError: cudaErrorInsufficientDriver",
             "cupy-cuda13x 14.2.0, CUDA 13's build, is installed and finds no usable GPU"),
    "cuda-python": ("frameworks", "device", "cudaGetDeviceCount() returned cudaErrorInsufficientDriver",
                    "cuda-bindings 13.5.0, CUDA 13's build, is installed and finds no usable GPU"),
    "numba-cuda": ("frameworks", "device", "CudaSupportError: Error at driver init: CUDA driver library cannot be "
                   "found.", "numba-cuda is installed and finds no usable GPU"),
    "onnxruntime": ("frameworks", "device", "onnxruntime 1.31.1's CUDA provider did not load: the session runs on "
                    "CPUExecutionProvider",
                    "libcublasLt.so.13 is not found where onnxruntime looks for it: install nvidia-cublas"),
    "triton": ("torch", "device", "torch sees no GPU, so Triton has none to compile for",
               "fix torch's GPU line first"),
    "bitsandbytes": ("torch", "device", "torch sees no GPU, so bitsandbytes' optimizer would run on the CPU",
                     "fix torch's GPU line first"),
}
PROBED = sorted(f.name for f in _program_probe_frameworks.FRAMEWORKS if f.probe)


def case_holds(name: str, result: dict) -> None:
    _kind, stage, error, fix = CASES[name]
    assert (result["verdict"], result["stage"]) == ("failed", stage), result
    assert result["error"].startswith(error), result["error"]
    assert result["fix"].startswith(fix), result["fix"]


@pytest.fixture(scope="module")
def results(venvs):
    """One verification per venv: every framework there in one run of the module."""
    found = {}
    for kind in sorted({kind for kind, *_ in CASES.values()} | {"cpu builds"}):
        result = verify(venv_of(venvs, kind))
        assert result["verdict"] == "failed"
        found[kind] = result
    return found


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_framework_is_judged_by_its_own_probe_with_the_fix_its_cause_calls_for(results, name):
    result = results[CASES[name][0]]
    by_name = {r["name"]: r for r in result["frameworks"]["results"]}
    case_holds(name, by_name[name])
    assert by_name[name]["seconds"] < 60


def test_the_library_s_own_stderr_is_kept_and_names_the_missing_library(results):
    onnx = next(r for r in results["frameworks"]["frameworks"]["results"] if r["name"] == "onnxruntime")
    assert "libcublasLt.so.13: cannot open shared object file" in onnx["stderr"]
    assert "\x1b[" not in onnx["stderr"], "the library's colours are left out"
    assert "IR version" not in onnx["error"], "the probe's model is one onnxruntime 1.31.1 reads"
    jax = next(r for r in results["frameworks"]["frameworks"]["results"] if r["name"] == "jax")
    assert "Could not find cuda drivers on your machine" in jax["stderr"]


def test_one_verification_names_every_framework_and_its_line(results):
    result = results["frameworks"]
    assert result["hypothesis"] == "runtime/flags", "no nvidia-smi here: the first hypothesis holds"
    assert result["frameworks"]["probed"] == ["torch", "cuda-python", "cupy", "jax", "numba-cuda", "onnxruntime"]
    assert result["probe"]["frameworks"]["exercised"] is True
    assert any(n.startswith("frameworks: jax 0.10.2: failed at device - jax runs on the CPU") for n in
               result["notes"]), result["notes"]


@pytest.mark.parametrize(("name", "fix"), [
    ("jax", "jax without a CUDA plugin (jax-cuda13-plugin) is its CPU-only build: install jax[cuda13]"),
    ("onnxruntime", "onnxruntime (not onnxruntime-gpu) is its CPU-only build: uninstall onnxruntime and install "
                    "onnxruntime-gpu, its CUDA 13 build"),
    ("cupy", "cupy-cuda12x 14.2.0 is a CUDA 12 build (its name says cuda12x) on a CUDA 13 system: install "
             "cupy-cuda13x"),
])
def test_a_cpu_only_build_or_a_cuda_12_build_is_named_as_the_cause(results, name, fix):
    by_name = {r["name"]: r for r in results["cpu builds"]["frameworks"]["results"]}
    assert by_name[name]["verdict"] == "failed"
    assert by_name[name]["fix"] == fix


# Each probe's own code run where its framework runs without a GPU: the tests' CPU exercise, reached by running the
# probe program's source with its ON_CPU line changed (nothing on a host can set it, issue 57 item 1): framework ->
# (venv, what else its CPU path needs).
ON_CPU = {
    "jax": ("cpu builds", {}),
    "onnxruntime": ("frameworks", {}),  # onnxruntime-gpu's own CPU provider runs the probe's model
    "numba-cuda": ("frameworks", {"NUMBA_ENABLE_CUDASIM": "1"}),
    "triton": ("torch", {"TRITON_INTERPRET": "1"}),
}
# Those whose work has no CPU path: cupy and cuda-python are CUDA itself; bitsandbytes 0.49.2's 8-bit optimizer
# asks for tensors on a GPU ("All input tensors need to be on the same GPU").
NO_CPU_PATH = {"cupy", "cuda-python", "bitsandbytes"}
_SWITCH = "\nON_CPU = False\n"
# This test run's input to the probes (the module draws one per run as well).
CHALLENGE = random.SystemRandom().randint(1, _program_probe_base.CHALLENGE_MAX)


def cpu_exercise(env, name: str) -> dict:
    """The probe of `name` run as the tests' CPU exercise: the program's own source, its ON_CPU line made True, run
    directly by the venv's Python (as the module runs it, one framework in a process)."""
    path, environment = env
    source = inspect_source()
    assert source.count(_SWITCH) == 1, "the probe program has one ON_CPU line, False"
    program = _program_gpu_probe.wrapper(source.replace(_SWITCH, "\nON_CPU = True\n"))
    run = subprocess.run([str(path / "bin" / "python"), "-", "--framework", name, "--distributions", "[]",
                          "--challenge", str(CHALLENGE)],
                         input=program, capture_output=True, text=True, timeout=300, check=False,
                         env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **environment})
    return parse_probe_output(run.stdout).get("result") or {"stderr": run.stderr[-2000:]}


def test_every_probe_runs_its_own_code_on_the_cpu_or_says_why_it_cannot():
    assert sorted(set(ON_CPU) | NO_CPU_PATH) == PROBED and not set(ON_CPU) & NO_CPU_PATH


@pytest.mark.parametrize("name", sorted(ON_CPU))
def test_each_probe_s_own_model_kernel_or_session_computes_its_value_on_the_cpu(venvs, name):
    """Issue 47: the production probe, its device requirement relaxed and nothing else, gets the squares' sum
    (a probe bug such as onnx's IR version 14 is caught here, without a GPU). Its verdict is the CPU exercise's,
    never ok (issue 57, item 1): a host whose probe said so would fail, naming it."""
    kind, variables = ON_CPU[name]
    path, environment = venv_of(venvs, kind)
    probed = cpu_exercise((path, {**environment, **variables}), name)
    assert (probed.get("verdict"), probed.get("value")) == ("cpu exercise", _program_probe_base.squares(CHALLENGE)), \
        probed
    judged = frameworks_probed({"framework:" + name: probed}, CHALLENGE)
    assert "never a verification" in framework_line(judged["results"][0])


def test_the_probe_reads_no_switch_of_the_cpu_exercise_from_a_host():
    """Issue 57, item 1: SPARKFLEET_PROBE_ON_CPU=1 was honoured wherever it came from (the controller's shell, the
    venv's environment, an image's ENV) and passed jax, numba-cuda, onnxruntime and triton on the CPU. The program
    reads no variable, file or argument for it now."""
    source = inspect_source()
    assert "SPARKFLEET_PROBE_ON_CPU" not in source
    assert re.findall(r"^ON_CPU = .*$", source, re.M) == ["ON_CPU = False"]


def inspect_source() -> str:

    return _gpu_probe.SOURCE


@pytest.mark.parametrize(("variables", "names"), [
    ({"TRITON_INTERPRET": "1", "SPARKFLEET_PROBE_ON_CPU": "1"},
     {"triton": "TRITON_INTERPRET=1 is set: Triton's interpreter runs every kernel on the CPU"}),
    ({"NUMBA_ENABLE_CUDASIM": "1", "JAX_PLATFORMS": "cpu", "SPARKFLEET_PROBE_ON_CPU": "1"},
     {"numba-cuda": "NUMBA_ENABLE_CUDASIM=1 is set: numba's CUDA simulator runs every kernel on the CPU",
      "jax": "JAX_PLATFORMS=cpu is set: jax uses only the platforms it names"}),
    ({"CUDA_VISIBLE_DEVICES": "-1"}, {"cupy": "CUDA_VISIBLE_DEVICES='-1' hides every GPU",
                                      "onnxruntime": "CUDA_VISIBLE_DEVICES='-1' hides every GPU"}),
])
def test_what_forces_the_cpu_is_named_as_the_cause(venvs, variables, names):
    kind = "torch" if "TRITON_INTERPRET" in variables else "frameworks"
    result = verify(venv_of(venvs, kind), variables)
    by_name = {r["name"]: r for r in result["frameworks"]["results"]}
    for name, error in names.items():
        assert (by_name[name]["verdict"], by_name[name]["stage"], by_name[name]["error"]) == (
            "failed", "environment", error)
        assert by_name[name]["fix"].startswith(f"unset {next(iter(error.split('=')))} where {name} runs")


def test_without_frameworks_they_are_listed_not_probed(venvs):
    result = verify(venv_of(venvs, "frameworks"), frameworks=False)
    assert result["frameworks"]["results"] == []
    assert [f["framework"] for f in result["frameworks"]["not_probed"]] == [
        "jax", "cupy", "cuda-python", "numba-cuda", "onnxruntime"]
    assert result["notes"][0].startswith("probed torch only; installed, not probed: jax (jax 0.10.2, "
                                         "jax-cuda12-plugin 0.10.2, jaxlib 0.10.2)")


def _stubbed(name: str) -> str:
    """The probe program with `name`'s probe replaced by one that reports success without work."""

    source = _gpu_probe.SOURCE
    answer = "bnb_answer(CHALLENGE)" if name == "bitsandbytes" else "squares(CHALLENGE)"  # the right one, not done
    stub = (f"\nFRAMEWORKS = tuple(f._replace(probe=lambda: {{'value': {answer}}}) if f.name == {name!r} else f\n"
            f"                   for f in FRAMEWORKS)\n")
    head, tail = source.split('\nif __name__ == "__main__":', 1)
    return _program_gpu_probe.wrapper(head + stub + '\nif __name__ == "__main__":' + tail)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_probe_replaced_by_a_stub_fails_its_case(venvs, name):
    kind = CASES[name][0]
    path, environment = venv_of(venvs, kind)
    proc = subprocess.run([str(path / "bin" / "python"), "-", "--frameworks", "--seconds", "120", "--challenge",
                           str(CHALLENGE)],
                          input=_stubbed(name).encode(), capture_output=True, check=False, cwd="/",
                          env={**os.environ, **environment}, timeout=300)
    by_name = {r["name"]: r for r in frameworks_probed(parse_probe_output(proc.stdout.decode()),
                                                       CHALLENGE)["results"]}
    assert by_name[name]["verdict"] == "ok", "the stub reports success"
    with pytest.raises(AssertionError):
        case_holds(name, by_name[name])


def test_the_probe_s_model_is_a_valid_onnx_model_that_onnxruntime_runs(venvs):
    """The model the probe writes without onnx: onnx reads and checks it, onnxruntime 1.31.1 runs it (on its CPU
    provider here) and it computes the squares' sum."""
    path, _ = venv_of(venvs, "frameworks")
    program = (
        "import sys, json, onnx, onnxruntime, numpy\n"
        "exec(compile(sys.stdin.read(), 'probe', 'exec'), g := {'__name__': 'probe'})\n"
        "model = onnx.load_from_string(g['onnx_square_model']())\n"
        "onnx.checker.check_model(model)\n"
        "s = onnxruntime.InferenceSession(g['onnx_square_model'](), providers=['CPUExecutionProvider'])\n"
        "(y,) = s.run(None, {'x': numpy.arange(1, 65, dtype=numpy.float32)})\n"
        "print(json.dumps({'ir': model.ir_version, 'opset': model.opset_import[0].version, 'sum': float(y.sum())}))\n")

    proc = subprocess.run([str(path / "bin" / "python"), "-c", program], input=_gpu_probe.SOURCE,
                          capture_output=True, text=True, check=False, cwd="/")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {"ir": 7, "opset": 13, "sum": 89440.0}


def _stand_in(tmp_path, body: str):
    """A venv holding a stand-in for cupy-cuda13x whose import runs `body` (the vendor's library cannot be made to
    hang on demand: this is where the test stands in for it, and says so)."""
    env = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3.11", "-m", "venv", "--without-pip", str(env)], check=True)
    [site] = env.glob("lib/python3*/site-packages")
    (site / "cupy").mkdir()
    (site / "cupy" / "__init__.py").write_text(body)
    (site / "cupy_cuda13x-14.2.0.dist-info").mkdir()
    (site / "cupy_cuda13x-14.2.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: cupy-cuda13x\nVersion: 14.2.0\n")
    return env, {}


# A call stuck in C that no signal reaches: the alarm the old probe relied on is blocked, as a driver call blocks it.
STUCK_IN_C = """import ctypes, signal, sys
sys.stderr.write("cupy stand-in: waiting on the driver\\n")
sys.stderr.flush()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGTERM, signal.SIGINT})
ctypes.CDLL(None).sleep(600)
"""


def test_a_framework_stuck_in_c_is_killed_at_its_deadline_with_its_last_words(tmp_path):
    env = _stand_in(tmp_path, STUCK_IN_C)
    started = time.monotonic()
    result = verify(env, timeout=35)  # 15 s for the frameworks (the module keeps 20 s of its 35)
    took = time.monotonic() - started
    [cupy] = result["frameworks"]["results"]
    assert not result["timed_out"], "the module's own timeout was never reached"
    assert (cupy["verdict"], cupy["stage"], cupy["cause"]) == ("failed", "import", "timeout")
    assert re.fullmatch(r"timed out after 1[45] s at import \(killed\)", cupy["error"]), cupy["error"]
    assert cupy["stderr"] == "cupy stand-in: waiting on the driver"
    assert 13 <= cupy["seconds"] < 20 and took < 35
    assert cupy["fix"].startswith("cupy hung at import: a stuck process may hold the GPU")
    left = subprocess.run(["pgrep", "-f", str(env[0])], capture_output=True, text=True, check=False).stdout
    assert left == "", "the framework's process was killed, not left behind"


def test_a_framework_the_timeout_leaves_no_time_for_is_not_started_and_says_so(tmp_path):
    env = _stand_in(tmp_path, "raise SystemExit('never imported')\n")
    result = verify(env, timeout=25)  # 5 s for the frameworks: below the 10 s one needs
    [cupy] = result["frameworks"]["results"]
    assert (cupy["verdict"], cupy["cause"]) == ("not exercised", "no time")
    assert cupy["error"] == "not started: the probe's time (the module's timeout) was spent before it"


def test_numba_s_simulator_switched_on_by_its_config_file_is_named_as_the_cause(venvs, tmp_path):
    """Issue 57, item 7: `enable_cudasim: 1` in a .numba_config.yaml of the folder numba runs in was not named (the
    self-contradicting 'found no CUDA device: Found 1 CUDA devices ... SIMULATOR'). numba reads the file only with
    PyYAML: the test venv's own is lent to the framework's venv."""
    import shutil

    import yaml

    path, environment = venv_of(venvs, "frameworks")
    lent = tmp_path / "site"
    shutil.copytree(Path(yaml.__file__).parent, lent / "yaml", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    work = tmp_path / "project"
    work.mkdir()
    (work / ".numba_config.yaml").write_text("enable_cudasim: 1\n")
    program = _program_gpu_probe.wrapper(inspect_source())
    run = subprocess.run([str(path / "bin" / "python"), "-", "--framework", "numba-cuda", "--distributions", "[]",
                          "--challenge", str(CHALLENGE)], input=program, capture_output=True, text=True, timeout=300,
                         check=False, cwd=work, env={"PATH": os.environ["PATH"], "PYTHONPATH": str(lent),
                                                    **environment})
    said = parse_probe_output(run.stdout)["result"]
    judged = frameworks_probed({"framework:numba-cuda": said}, CHALLENGE)["results"][0]
    assert (judged["verdict"], judged["stage"], judged["cause"]) == ("failed", "environment", "forced"), judged
    assert judged["error"] == (f"enable_cudasim is set in {work}/.numba_config.yaml: numba's CUDA simulator runs "
                               "every kernel on the CPU"), judged
    assert judged["fix"].startswith(f"remove enable_cudasim from {work}/.numba_config.yaml"), judged


def test_onnxruntime_preloads_nvidias_cuda13_wheels_and_names_the_library_really_missing(venvs, tmp_path):
    """Issue 57, item 4: with nvidia-cublas 13 installed beside onnxruntime-gpu (site-packages/nvidia/cu13/lib), the
    probe said "libcublasLt.so.13 is not found ... install nvidia-cublas": it never called onnxruntime's documented
    preload_dlls(), which loads NVIDIA's wheels' libraries from the site-packages onnxruntime is in. With it, the
    library missing is the real one: libcurand.so.10 (no nvidia-curand here). The real onnxruntime-gpu 1.31.1 and
    the real CUDA 13 wheels (cublas, cudart, nvJitLink, cusparse), side by side in one folder as pip lays them out."""
    import wheels

    path, environment = venv_of(venvs, "frameworks")
    try:
        cuda13 = wheels.cuda13_venv()
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))
    [onnxruntime] = path.glob("lib/python3*/site-packages/onnxruntime")
    [nvidia] = cuda13.glob("lib/python3*/site-packages/nvidia")
    assert (nvidia / "cu13" / "lib" / "libcublasLt.so.13").exists()
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "onnxruntime").symlink_to(onnxruntime)
    (site / "nvidia").symlink_to(nvidia)
    result = verify((path, environment), {"PYTHONPATH": str(site)})
    [onnx] = [r for r in result["frameworks"]["results"] if r["name"] == "onnxruntime"]
    assert (onnx["verdict"], onnx["stage"]) == ("failed", "device"), onnx
    assert "libcurand.so.10" in onnx["fix"] and "cublas" not in onnx["fix"], onnx["fix"]
    assert "libcublasLt.so.13: cannot open" not in onnx["stderr"], "cuBLAS came from the wheels: preloaded"
