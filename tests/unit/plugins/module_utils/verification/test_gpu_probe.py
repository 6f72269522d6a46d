"""The probe's exit status, read as the signal that ended it (pure)."""

from __future__ import annotations

import sys
import types

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._gpu_probe import (
    diagnose,
    framework_advice,
    killed_by,
    signal_name,
)


@pytest.mark.parametrize(("rc", "container", "signal"), [
    (-11, False, 11),   # the interpreter itself, ended by SIGSEGV
    (-6, True, 6),      # a launcher that exec'd into something a signal ended
    (139, True, 11),    # docker run: the container's process ended by SIGSEGV
    (139, False, None),  # an interpreter's own exit status 139 is just a status
    (125, True, None),  # docker run could not start the container
    (1, True, None),
    (0, False, None),
    (None, True, None),  # hung
])
def test_which_signal_ended_the_probe(rc, container, signal):
    assert killed_by(rc, container) == signal


def test_signal_names_are_the_ones_users_see():
    assert signal_name(11) == "SIGSEGV (signal 11)"
    assert signal_name(99) == "signal 99"


def _ok_probe(installed):
    return {"env": {"nvidia_smi": {"found": True, "rc": 0}, "devices": [{"path": "/dev/nvidia0", "access": True}]},
            "frameworks": {"probed": ["torch"], "installed": installed},
            "torch": {"imported": True, "version": "2.14.1", "cuda": "13.0"},
            "cuda": {"available": True, "line": "True 13.0"},
            "device": {"name": "NVIDIA GB10", "capability": [12, 1], "compute": True}}


def test_a_verified_line_says_which_frameworks_it_did_not_probe():
    jax = {"framework": "jax", "distributions": ["jax-cuda13-plugin 0.12.0.1"]}
    result = diagnose(_ok_probe([jax]))
    assert result["verdict"] == "ok"
    assert result["frameworks"] == {"probed": ["torch"], "results": [], "hung": None, "not_probed": [jax]}
    assert result["notes"] == ["probed torch only; installed, not probed: jax (jax-cuda13-plugin 0.12.0.1)"]


def test_torch_alone_adds_no_note_and_an_old_probe_says_it_cannot_tell():
    assert diagnose(_ok_probe([]))["notes"] == []
    old = _ok_probe([])
    del old["frameworks"]
    assert diagnose(old)["frameworks"] == {"probed": ["torch"], "results": [], "hung": None, "not_probed": None}


def _exercised(*results, installed=None):
    probe = _ok_probe(installed or [{"framework": r["name"], "distributions": [f"{r['name']} 1.0"]} for r in results])
    probe["frameworks"]["exercised"] = True
    for result in results:
        probe[f"framework:{result['name']}"] = {k: v for k, v in result.items() if k != "name"}
    return probe


JAX_ON_CPU = {"name": "jax", "verdict": "failed", "stage": "device", "error": "jax runs on the CPU: jax.devices() is "
              "cpu:0", "cause": "cpu build", "cpu_build": "jax without a CUDA plugin (jax-cuda13-plugin) is its "
              "CPU-only build", "distributions": ["jax 0.10.2", "jaxlib 0.10.2"], "seconds": 0.6}


def test_a_framework_on_the_cpu_fails_the_verdict_though_torch_is_fine():
    result = diagnose(_exercised(JAX_ON_CPU))
    assert (result["verdict"], result["hypothesis"]) == ("failed", "a GPU framework failed")
    assert result["evidence"] == "torch is fine; jax: failed at device - jax runs on the CPU: jax.devices() is cpu:0"
    assert result["fix"] == ("jax: jax without a CUDA plugin (jax-cuda13-plugin) is its CPU-only build: install "
                             "jax[cuda13]")
    assert result["line"] == "True 13.0", "torch's own line stays the user's line"


def test_every_framework_that_ran_is_named_with_how_it_did():
    triton = {"name": "triton", "verdict": "ok", "version": "3.6.0", "device": "NVIDIA GB10", "seconds": 2.1,
              "ptxas": "TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas (Triton's own failed: ptxas fatal)"}
    flash = {"name": "flash-attn", "verdict": "not exercised", "stage": "import", "error": "imported only"}
    result = diagnose(_exercised(triton, flash))
    assert result["verdict"] == "ok"
    assert result["frameworks"]["probed"] == ["torch", "triton"]
    assert [f["framework"] for f in result["frameworks"]["not_probed"]] == ["flash-attn"]
    assert result["notes"] == ["frameworks: triton 3.6.0 on NVIDIA GB10: ok (2.1 s, TRITON_PTXAS_PATH="
                               "/usr/local/cuda/bin/ptxas (Triton's own failed: ptxas fatal)); flash-attn: not "
                               "exercised (imported only)"]


def test_a_probe_that_hung_in_a_framework_names_it():
    probe = _exercised(installed=[{"framework": "cupy", "distributions": ["cupy-cuda13x 14.2.0"]}])
    probe["framework_start"] = {"name": "cupy"}
    result = diagnose(probe, timed_out=True)
    assert (result["verdict"], result["hypothesis"]) == ("failed", "stuck process")
    assert result["evidence"] == "torch is fine; the probe hung while probing cupy"
    assert result["frameworks"]["hung"] == "cupy"


def _failed(name, stage, error, cause=None, distributions=(), stderr=None, **extra):
    return {"name": name, "verdict": "failed", "stage": stage, "error": error, "cause": cause,
            "distributions": list(distributions), "stderr": stderr, **extra}


# Issue 47, item 4: the fix follows the cause, most specific first; the install advice only where the build is
# missing or wrong. Each case is what the real wheels printed on this machine (tests/integration) or a Spark would.
@pytest.mark.parametrize(("result", "fix"), [
    (_failed("triton", "environment", "TRITON_INTERPRET=1 is set: Triton's interpreter runs every kernel on the CPU",
             "forced", ["triton 3.8.0"]),
     "unset TRITON_INTERPRET where triton runs (the inventory's environment, a shell profile, the image's ENV), or "
     "set it to name the GPU"),
    (_failed("onnxruntime", "device", "onnxruntime 1.31.1's CUDA provider did not load: the session runs on "
             "CPUExecutionProvider", None, ["onnxruntime-gpu 1.31.1"],
             "Failed to load library libonnxruntime_providers_cuda.so with error: libcublasLt.so.13: cannot open "
             "shared object file: No such file or directory"),
     "libcublasLt.so.13 is not found where onnxruntime looks for it: install nvidia-cublas (CUDA 13's cublasLt)"),
    (_failed("cupy", "import", "ImportError: libcudart.so.12: cannot open shared object file: No such file or "
             "directory", "import", ["cupy 14.2.0"]),
     "cupy asks for libcudart.so.12, a CUDA 12 library: it is a build for CUDA 12, and this system is CUDA 13 - "
     "install cupy-cuda13x"),
    (_failed("cupy", "device", "CUDARuntimeError: cudaErrorInsufficientDriver", None, ["cupy-cuda12x 14.2.0"]),
     "cupy-cuda12x 14.2.0 is a CUDA 12 build (its name says cuda12x) on a CUDA 13 system: install cupy-cuda13x"),
    (_failed("cupy", "device", "CUDARuntimeError: cudaErrorNoDevice", None, ["cupy-cuda13x 14.2.0"]),
     "cupy-cuda13x 14.2.0, CUDA 13's build, is installed and finds no usable GPU: fix what torch's line and "
     "nvidia-smi say first (the runtime, the container's flags), not the packages"),
    (_failed("onnxruntime", "device", "onnxruntime 1.31.1 runs on the CPU: its providers are CPUExecutionProvider",
             "cpu build", ["onnxruntime 1.31.1"], cpu_build="onnxruntime (not onnxruntime-gpu) is its CPU-only build"),
     "onnxruntime (not onnxruntime-gpu) is its CPU-only build: uninstall onnxruntime and install onnxruntime-gpu, "
     "its CUDA 13 build"),
    (_failed("bitsandbytes", "device", "torch sees no GPU", "torch", ["bitsandbytes 0.49.2"]),
     "fix torch's GPU line first (above): this framework runs on torch's GPU"),
    (_failed("cupy", "run", "timed out after 90 s at run (killed)", "timeout", ["cupy-cuda13x 14.2.0"]),
     "cupy hung at run: a stuck process may hold the GPU (nvidia-smi lists it), or cupy waits on the driver; its "
     "last words are in its stderr"),
    (_failed("jax", "run", "killed by SIGSEGV at run", "signal", ["jax-cuda13-plugin 0.10.2"]),
     "jax crashed at run with no Python error, the ABI symptom: run spark_abi_scan on this environment (the "
     "verification does) for a wheel built for another CUDA major"),
    (_failed("numba-cuda", "import", "ModuleNotFoundError: No module named 'numba'", "import", ["numba-cuda 0.30.4"]),
     "install numba-cuda[cu13]"),
    (_failed("bitsandbytes", "import", "ModuleNotFoundError: No module named 'typing_extensions'", "import",
             ["bitsandbytes 0.49.2"]),
     "bitsandbytes imports typing_extensions, which is not installed: install the package that provides it (pip "
     "check lists what each package needs and lacks)"),
    (_failed("triton", "compile", "RuntimeError: ptxas fatal: sm_121a is not defined", "ptxas", ["triton 3.6.0"]),
     "set TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas (the CUDA 13 ptxas, which knows sm_121) and retry"),
    (_failed("cupy", "compute", "the GPU computed 0.0, expected 89440.0", None, ["cupy-cuda13x 14.2.0"]),
     "the GPU computed a wrong value: check dmesg and nvidia-smi for GPU errors"),
    # Seen on an H100 (CUDA 13 driver, the GPU suite, 2026-12-06): numba-cuda 0.30.4 registers numpy.row_stack at
    # its first compile, and numpy 2.5 removed it (numba 0.68 itself guards it; numba-cuda does not).
    (_failed("numba-cuda", "compile", "AttributeError: module 'numpy' has no attribute 'row_stack'", "numpy",
             ["numba-cuda 0.30.4"], numpy="2.5.2"),
     'numba-cuda 0.30.4 calls numpy.row_stack, which numpy 2.5.2 here no longer has: install the numpy it was '
     'released for (pip install "numpy<2.5"), or a numba-cuda release made for numpy 2.5.2'),
    (_failed("jax", "run", "XlaRuntimeError: INTERNAL: Failed to launch", None, ["jax-cuda13-plugin 0.10.2"]),
     "jax failed at run in its own words (its error and stderr): not a build sparkfleet can name"),
])
def test_the_fix_follows_the_cause(result, fix):
    assert framework_advice(result) == fix


def test_an_ok_or_unexercised_framework_has_no_fix():
    assert framework_advice({"name": "cupy", "verdict": "ok"}) is None
    assert framework_advice({"name": "vllm", "verdict": "not exercised", "stage": "import"}) is None


def test_the_install_advice_comes_only_where_the_build_is_missing_or_wrong():
    """A CUDA 13 build that fails after its import is never told to install itself (issue 47, item 4)."""
    for stage in ("device", "run", "compute", "compile"):
        fix = framework_advice(_failed("cupy", stage, "CUDARuntimeError: x", None, ["cupy-cuda13x 14.2.0"]))
        assert "install cupy-cuda13x" not in fix, fix


def test_a_framework_s_own_brace_lines_on_stdout_do_not_break_the_probe():
    """A library that prints `{...}` that is not JSON (a dict's repr) beside the probe's lines: skipped, not fatal."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._program_gpu_probe import _json_lines

    text = "\n".join(["{'device': 0}", '{"kind": "stage", "stage": "run"}', "[1, 2]",
                      '{"kind": "result", "verdict": "ok"}'])
    assert _json_lines(text) == [{"kind": "stage", "stage": "run"}, {"kind": "result", "verdict": "ok"}]


def test_the_hypotheses_are_one_function_each_in_the_documents_order():
    """diagnose walks HYPOTHESES in order (spark-environment-setup.md: 1. runtime/flags, 2. visibility,
    3. permissions, 4. a stuck process, 5. the ABI); a crash by a signal is the ABI's symptom and is named before a
    hang, then what the document does not name. Reordering them changes which diagnosis a user gets."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._gpu_probe import HYPOTHESES

    places = [h.__doc__.split("." if h.__doc__[0].isdigit() else ":", maxsplit=1)[0] for h in HYPOTHESES]
    assert places == ["1", "1", "2", "3", "3", "5", "4", "5", "5", "unexplained", "unexplained"]
    assert HYPOTHESES[-1]({"torch": {}})["hypothesis"] == "unexplained", "the last always holds"


# Issue 57, item 2: probes answer a challenge. Each framework with a probe in FRAMEWORKS has its work replaced, in
# the real probe program run by a real Python, by a constant (last round's fixed answer), a wrong answer and a
# no-op; the framework's import is made to succeed (json) so the stub, not a missing package, decides. Each is a
# failed framework once the judge has this run's challenge; a new entry with a probe is walked without a new line.
_STUBS = {
    "a constant": "{'value': 89440.0, 'moved': 0.1}",  # the sum of the squares of 1..64 and lr 0.1: the old answers
    "a wrong answer": "{'value': squares(CHALLENGE) + 1.0, 'moved': bnb_lr(CHALLENGE) * 3}",
    "a no-op": "{}",
}


def _stubbed_run(name: str, stub: str, challenge: int) -> dict:
    import json
    import subprocess
    import sys

    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import (
        _gpu_probe,
        _program_gpu_probe,
    )

    source = _gpu_probe.SOURCE
    swap = (f"\nFRAMEWORKS = tuple(f._replace(module='json', probe=lambda: {stub}) if f.name == {name!r} else f"
            f" for f in FRAMEWORKS)\n")
    head, tail = source.split('\nif __name__ == "__main__":', 1)
    program = _program_gpu_probe.wrapper(head + swap + '\nif __name__ == "__main__":' + tail)
    run = subprocess.run([sys.executable, "-", "--framework", name, "--distributions", json.dumps([]),
                          "--challenge", str(challenge)], input=program, capture_output=True, text=True, timeout=60,
                         check=False, env={"PATH": "/usr/bin:/bin"})
    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._gpu_probe import parse_probe_output

    return parse_probe_output(run.stdout)["result"]


@pytest.mark.parametrize("stub", sorted(_STUBS))
def test_a_probe_that_does_not_do_its_work_fails_whatever_it_reports(stub):
    import random

    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import (
        _program_probe_base,
        _program_probe_frameworks,
    )
    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._gpu_probe import frameworks_probed

    challenge = random.SystemRandom().randint(1, _program_probe_base.CHALLENGE_MAX)
    probed = [f.name for f in _program_probe_frameworks.FRAMEWORKS if f.probe]
    assert len(probed) >= 7, probed
    for name in probed:
        said = _stubbed_run(name, _STUBS[stub], challenge)
        judged = frameworks_probed({"framework:" + name: said}, challenge)["results"][0]
        assert (judged["verdict"], judged["stage"]) == ("failed", "compute"), (name, stub, said, judged)
        if stub == "a no-op":  # the program's own check sees no value: the judge's recomputation is what fails it
            assert said["verdict"] == "ok", (name, said)
            assert judged["cause"] == "answer" and "did not do the work it reports" in judged["error"], judged


def test_the_real_work_answers_every_challenge_exactly():
    """The answers are exact in float32 for every challenge the module draws (a GPU's sum is not rounded away)."""
    import struct

    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import (
        _program_probe_base,
    )

    for k in range(1, _program_probe_base.CHALLENGE_MAX + 1):
        total = 0.0
        for i in range(1, 65):
            total = struct.unpack("f", struct.pack("f", total + (i + k) * (i + k)))[0]
        assert total == _program_probe_base.squares(k), k


def test_a_framework_whose_child_leaves_its_session_is_killed_whole_at_its_deadline(tmp_path):
    """Issue 57, item 6: a framework that starts `setsid sleep` before it hangs was reported at stage start with no
    stderr, ran past its deadline, and left the child running. The real probe program, one framework's work
    replaced by that hang (its import made to succeed), its deadline 4 s."""
    import json
    import os
    import subprocess
    import sys
    import time

    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import (
        _gpu_probe,
        _program_gpu_probe,
    )
    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._gpu_probe import (
        frameworks_probed,
        parse_probe_output,
    )

    marker = f"{os.getpid()}.{time.monotonic_ns() % 1000}"
    hang = (f"\ndef _hang():\n    stage('run')\n    import subprocess, sys, time\n"
            f"    subprocess.Popen(['setsid', 'sleep', '{marker}'])\n"
            f"    sys.stderr.write('about to hang\\n')\n    sys.stderr.flush()\n    time.sleep(600)\n"
            f"FRAMEWORKS = tuple(f._replace(module='json', probe=_hang) if f.name == 'jax' else f"
            f" for f in FRAMEWORKS)\n"
            f"installed_frameworks = lambda: [{{'framework': 'jax', 'distributions': ['jax 0.10.2']}}]\n"
            f"FRAMEWORK_SECONDS = 4\n")
    source = _gpu_probe.SOURCE
    head, tail = source.split('\nif __name__ == "__main__":', 1)
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-", "--frameworks", "--seconds", "60", "--challenge", "7"],
                         input=_program_gpu_probe.wrapper(head + hang + '\nif __name__ == "__main__":' + tail),
                         capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
                         env={"PATH": os.environ["PATH"]})
    took = time.monotonic() - started
    (jax,) = frameworks_probed(parse_probe_output(run.stdout), 7)["results"]
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and marker in _cmdline(pid)]
    assert (jax["verdict"], jax["stage"], jax["cause"]) == ("failed", "run", "timeout"), json.dumps(jax)
    assert jax["error"] == "timed out after 4 s at run (killed)" and "about to hang" in (jax["stderr"] or ""), jax
    assert left == [], "the child that left the session still runs"
    assert took < 4 + 12, f"{took:.1f} s for a 4 s deadline"


def _cmdline(pid: str) -> str:
    from pathlib import Path

    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:  # ended meanwhile
        return ""


def test_a_release_that_calls_what_numpy_removed_is_named_with_the_numpy_it_met(monkeypatch, capsys):
    """Seen on an H100 (the GPU suite, 2026-12-06): numba-cuda 0.30.4 failed at its first compile with numpy 2.5.2's
    AttributeError. Its words are replayed here by a probe that raises them, beside a numpy that says its version
    (this machine's venv has no numpy; the words and the version are the H100's)."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _program_gpu_probe as probe

    def first_compile():
        raise AttributeError("module 'numpy' has no attribute 'row_stack'")

    numpy = types.ModuleType("numpy")
    numpy.__version__ = "2.5.2"
    monkeypatch.setitem(sys.modules, "numpy", numpy)
    monkeypatch.setattr(probe, "FRAMEWORKS", tuple(f._replace(module="json", probe=first_compile)
                                                   if f.name == "numba-cuda" else f for f in probe.FRAMEWORKS))
    probe.run_one("numba-cuda", ["numba-cuda 0.30.4"])
    result = [line for line in probe._json_lines(capsys.readouterr().out) if line.get("kind") == "result"][-1]
    assert (result["verdict"], result["cause"], result["numpy"]) == ("failed", "numpy", "2.5.2"), result
    assert framework_advice({**result, "distributions": ["numba-cuda 0.30.4"]}).startswith(
        'numba-cuda 0.30.4 calls numpy.row_stack, which numpy 2.5.2 here no longer has: install the numpy it was '
        'released for (pip install "numpy<2.5")')


def test_the_probe_program_is_its_parts_joined_each_name_defined_once_and_no_part_imports_another():
    """The program is three files sent as one source (_gpu_probe.SOURCE): each later part's import of the earlier
    parts' names is left out of it (on the interpreter under test no sparkfleet is importable), so a name defined
    in two parts would silently take the later one's meaning, and a name a part imports that an earlier part does
    not define would fail only on a host."""
    import ast
    import inspect

    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _gpu_probe

    assert "ansible_collections" not in _gpu_probe.SOURCE and "program parts" not in _gpu_probe.SOURCE
    defined_by = {}
    for part in _gpu_probe.PARTS:
        tree = ast.parse(inspect.getsource(part))
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ansible_collections"):
                earlier = node.module.rsplit(".", 1)[1]
                for alias in node.names:
                    assert defined_by.get(alias.name) == earlier, \
                        f"{part.__name__} imports {alias.name} from {earlier}, which does not define it"
                continue
            names = [t.id for n in ([node] if isinstance(node, (ast.Assign, ast.AnnAssign)) else [])
                     for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)]
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            for name in names:
                here = part.__name__.rsplit(".", 1)[1]
                assert defined_by.setdefault(name, here) == here, f"{name} is defined in {defined_by[name]} and {here}"
    assert {"FRAMEWORKS", "main", "squares", "emit"} <= set(defined_by)
