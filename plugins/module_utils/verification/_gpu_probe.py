# Copyright: sparkfleet contributors
# Apache License 2.0
"""The GPU probe and the ordered diagnosis behind spark_gpu_verify.

PROBE is the self-contained program (the three _program_*probe*.py files
joined), run by the interpreter under test (on the host, or inside a container
started with the container-workflow flags). It prints one JSON object per line as it goes -- the environment
evidence first, then what torch says -- so a probe that hangs in torch still
leaves the evidence behind. diagnose() turns those lines into a verdict,
walking the user's hypotheses in their order.
"""

from __future__ import annotations

import inspect
import json
import re
import signal

from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import (
    _program_gpu_probe,
    _program_probe_base,
    _program_probe_frameworks,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._cuda_majors import (
    SONAME_TABLE,
    cuda_link,
    name_major,
)

# The program's parts in their order: SOURCE joins them, leaving out each part's import of the earlier parts' names
# (between its two marker lines: in one namespace they are defined already). PROBE is what the interpreter under test
# reads on stdin: SOURCE, kept for the process each framework runs in.
PARTS = (_program_probe_base, _program_probe_frameworks, _program_gpu_probe)
_PARTS_IMPORT = re.compile(r"^# program parts: begin\n.*?^# program parts: end\n", re.M | re.S)
SOURCE = "\n\n".join(_PARTS_IMPORT.sub("", inspect.getsource(part)) for part in PARTS)
PROBE = _program_gpu_probe.wrapper(SOURCE)
# Seconds of the module's timeout kept back from the program's own bound on its frameworks (starting the
# interpreter or the container, torch's part, reading the result).
MARGIN_SECONDS = 20
_INSTALL = {f.name: f.fix for f in _program_probe_frameworks.FRAMEWORKS}
_MODULES = {f.name: f.module for f in _program_probe_frameworks.FRAMEWORKS}
_MISSING = re.compile(r"(lib[A-Za-z0-9_+-]+\.so(?:\.\d+)*): cannot open shared object file")

RUNTIME_FLAGS = "runtime/flags"
VISIBILITY = "device visibility"
PERMISSIONS = "permissions"
STUCK = "stuck process"
ABI = "ABI mismatch"
NO_TORCH = "torch not importable"
NOT_SPARK_GPU = "not a Spark GPU"
FRAMEWORK = "a GPU framework failed"
UNKNOWN = "unexplained"


# The verdict of a probe run as the tests' CPU exercise (_program_probe_base.ON_CPU, which nothing on a host sets):
# never verified, whatever it computed - a host whose probe says it fails, naming it.
CPU_EXERCISE = "cpu exercise"
CPU_EXERCISE_SAID = ("a CPU exercise, the tests' own run of the probe without a GPU, which is never a verification "
                     "(this probe program was changed: reinstall the collection)")


def parse_probe_output(stdout: str) -> dict[str, dict]:
    """The probe's JSON lines by kind; lines that are not the probe's are ignored."""
    found: dict[str, dict] = {}
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "kind" in data:
            found[data.pop("kind")] = data
    return found


def cuda_major(version: str | None) -> int | None:
    match = re.match(r"^(\d+)\.", version or "")
    return int(match.group(1)) if match else None


def _visibility_problem(value: str | None) -> str | None:
    if value is None:
        return None
    stripped = value.strip()
    if stripped == "":
        return "CUDA_VISIBLE_DEVICES is set but empty, which hides every GPU"
    if stripped in {"-1", "NoDevFiles", "none", "void"}:
        return f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU"
    first = stripped.split(",")[0]
    if first.isdigit() and int(first) > 0:
        return (f"CUDA_VISIBLE_DEVICES={value!r} starts at device {first}; a DGX Spark has one GPU, "
                f"device 0")
    return None


def signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} (signal {number})"
    except ValueError:
        return f"signal {number}"


def killed_by(rc: int | None, container: bool) -> int | None:
    """The signal that ended the probe: a negative status from the interpreter itself,
    128+N from docker run (the status of a container whose process a signal ended)."""
    if rc is None:
        return None
    if rc < 0:
        return -rc
    if container and 128 < rc <= 128 + 64:
        return rc - 128
    return None


def _died_while(probe: dict[str, dict]) -> str:
    if "env" not in probe:
        return "starting, before it printed anything"
    if "torch" not in probe:
        return "importing torch"
    if "cuda" not in probe:
        return "asking torch for CUDA (torch.cuda.is_available())"
    if "device" not in probe and probe["cuda"].get("available"):
        return "running the first computation on the GPU (the first .cuda())"
    return f"finishing, after it printed {probe['cuda'].get('line')!r}"


def _wheels_for(soname: str, major: int) -> list[str]:
    link = cuda_link(soname)
    if link is None:
        return []
    return [source.wheel for row in SONAME_TABLE if (row.library, row.soname_major) == (link.library, link.major)
            for source in row.sources if source.cuda_major == major]


def framework_advice(result: dict, expected_cuda_major: int = 13) -> str | None:
    """The fix for a framework's result, from what the probe established, most specific first: a variable that
    forces the CPU, a shared object not found (by its soname), a build for another CUDA major (by the
    distribution's name), a CPU-only build, torch's own line, a hang, a crash, a failed import. The install
    advice only where the build is missing or wrong; otherwise the library's own words (error, stderr) lead."""
    if result.get("verdict") != "failed":
        return None
    name, cause, stage = result.get("name"), result.get("cause"), result.get("stage")
    install = _INSTALL.get(name, f"reinstall {name}")
    error = result.get("error") or ""
    if cause == "forced" and error.startswith("enable_cudasim is set in "):
        path = error[len("enable_cudasim is set in "):].split(":", 1)[0]
        return f"remove enable_cudasim from {path} (numba reads .numba_config.yaml in the folder it runs in)"
    if cause == "forced":
        variable = error.split("=", 1)[0]
        return (f"unset {variable} where {name} runs (the inventory's environment, a shell profile, the image's "
                f"ENV), or set it to name the GPU")
    found = _MISSING.findall(f"{error}\n{result.get('stderr') or ''}")
    if found:
        soname = found[-1]
        link = cuda_link(soname)
        if link and link.cuda_majors is not None and expected_cuda_major not in link.cuda_majors:
            majors = ", ".join(map(str, link.cuda_majors))
            return (f"{name} asks for {soname}, a CUDA {majors} library: it is a build for CUDA {majors}, and this "
                    f"system is CUDA {expected_cuda_major} - {install}")
        wheels = _wheels_for(soname, expected_cuda_major)
        provider = (f"install {' or '.join(wheels)} (CUDA {expected_cuda_major}'s {link.library})" if wheels else
                    "install the package that provides it, or use the NGC container that ships it")
        return f"{soname} is not found where {name} looks for it: {provider}"
    for distribution in result.get("distributions") or []:
        dist, _sep, version = distribution.partition(" ")
        major = name_major(dist, version)
        if major and major[0] != expected_cuda_major:
            return (f"{dist} {version} is a CUDA {major[0]} build (its name says {major[1]}) on a CUDA "
                    f"{expected_cuda_major} system: {install}")
    if cause == "cpu build":
        return f"{result.get('cpu_build')}: {install}"
    if cause == "numpy":
        removed = re.search(r"has no attribute '(\w+)'", error)
        have = result.get("numpy") or "?"
        below = ".".join(have.split(".")[:2]) if have != "?" else None
        release = next((d for d in result.get("distributions") or [] if d.partition(" ")[0] == name), name)
        pin = f' (pip install "numpy<{below}")' if below else ""
        return (f"{release} calls numpy.{removed.group(1) if removed else '?'}, which numpy {have} here no longer "
                f"has: install the numpy it was released for{pin}, or a {name} release made for numpy {have}")
    if cause == "torch":
        return "fix torch's GPU line first (above): this framework runs on torch's GPU"
    if cause == "timeout":
        return (f"{name} hung at {stage}: a stuck process may hold the GPU (nvidia-smi lists it), or {name} waits "
                f"on the driver; its last words are in its stderr")
    if cause == "signal":
        return (f"{name} crashed at {stage} with no Python error, the ABI symptom: run spark_abi_scan on this "
                f"environment (the verification does) for a wheel built for another CUDA major")
    if cause == "import":
        missing = re.search(r"No module named '([\w.]+)'", error)
        top = (_MODULES.get(name) or "").split(".")[0]
        if missing and missing.group(1).split(".")[0] != top:
            return (f"{name} imports {missing.group(1)}, which is not installed: install the package that provides it "
                    f"(pip check lists what each package needs and lacks)")
        return install
    if cause == "ptxas":
        return (f"set TRITON_PTXAS_PATH={_program_probe_base.SYSTEM_PTXAS} (the CUDA {expected_cuda_major} ptxas, "
                f"which knows sm_121) and retry")
    if stage == "device":
        built = [d for d in result.get("distributions") or [] if name_major(*(d.partition(" ")[::2]))]
        have = f"{', '.join(built)}, CUDA {expected_cuda_major}'s build, is installed and" if built else \
            f"{name} is installed and"
        return (f"{have} finds no usable GPU: fix what torch's line and nvidia-smi say first (the runtime, the "
                f"container's flags), not the packages")
    if cause == "answer":
        return (f"{name} reported a result that is not this run's answer (a probe that skips the work, or a library "
                f"that returns without computing): reinstall the collection, then {install}")
    if stage == "compute":
        return "the GPU computed a wrong value: check dmesg and nvidia-smi for GPU errors"
    return f"{name} failed at {stage} in its own words (its error and stderr): not a build sparkfleet can name"


# What each framework with a probe answers for the run's challenge (_program_gpu_probe: the sum of the squares of the
# run's values; bitsandbytes: an Adam step of the run's learning rate), recomputed here: every probe of the table
# answers, so a framework added with a probe is checked without another line.
def answer_problem(result: dict, challenge: int) -> str | None:
    """Why a result that says it worked did not answer this run's challenge (None: it did)."""
    value = result.get("value")
    if result.get("name") == "bitsandbytes":
        expected = _program_probe_base.bnb_answer(challenge)
        spread = abs(expected) * _program_probe_base.BNB_SPREAD
        what = (f"the sum of its Adam8bit step's moves at this run's learning rate "
                f"{_program_probe_base.bnb_lr(challenge)} and gradient ({expected:.4g} within {spread:.3g})")
    else:
        expected, spread = _program_probe_base.squares(challenge), 0.0
        what = f"the squares of this run's input {challenge + 1} .. {challenge + 64}, summed ({expected!r})"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value - expected) <= spread:
        return None
    return f"it answered {value!r} where the work gives {what}: the probe did not do the work it reports"


CHALLENGE_MAX = _program_probe_base.CHALLENGE_MAX
_ANSWERING = {f.name for f in _program_probe_frameworks.FRAMEWORKS if f.probe}


def frameworks_probed(probe: dict[str, dict], challenge: int | None = None) -> dict:
    """Which GPU frameworks the probe exercised and how each did (C(results), one per framework, in the probe's
    order), and which others it found installed but did not exercise (C(not_probed): imported only, or the probe
    ran without --frameworks; None when the interpreter could not list its distributions). C(hung) names the
    framework the probe was in when it stopped answering."""
    line = probe.get("frameworks") or {}
    installed = line.get("installed")
    results = [dict(data, name=kind.split(":", 1)[1]) for kind, data in probe.items() if kind.startswith("framework:")]
    for result in results:
        if challenge is not None and result["name"] in _ANSWERING:
            result["challenge"] = challenge
            wrong = answer_problem(result, challenge) if result.get("verdict") in ("ok", CPU_EXERCISE) else None
            if wrong:
                result.update(verdict="failed", stage="compute", cause="answer", error=wrong)
        result["fix"] = framework_advice(result)
    started = (probe.get("framework_start") or {}).get("name")
    ran = {r["name"] for r in results if r.get("verdict") in ("ok", "failed", CPU_EXERCISE)}
    return {"probed": ["torch", *sorted(ran)],
            "results": results,
            "hung": started if started and started not in {r["name"] for r in results} else None,
            "not_probed": [f for f in installed or [] if f.get("framework") not in ("torch", *ran)]
            if installed is not None else None}


def framework_line(result: dict) -> str:
    """'jax 0.8.1 on NVIDIA H200: ok (0.9 s)', 'triton: failed at compile - ...'."""
    where = f" on {result['device']}" if result.get("device") else ""
    head = f"{result.get('name')} {result.get('version') or ''}".strip() + where
    if result.get("verdict") == "ok":
        extra = f", {result['ptxas']}" if result.get("ptxas") and "TRITON_PTXAS_PATH" in result["ptxas"] else ""
        return f"{head}: ok ({result.get('seconds')} s{extra})"
    if result.get("verdict") == "not exercised":
        return f"{head}: not exercised ({result.get('error')})"
    if result.get("verdict") == CPU_EXERCISE:
        return f"{head}: {CPU_EXERCISE_SAID}"
    return f"{head}: failed at {result.get('stage')} - {result.get('error')}"


# --- the diagnosis: the user's hypotheses, in order, one function each -------------------------------------------
# Each takes the case (what the probe found, see diagnose) and returns {hypothesis, evidence, fix} when it holds,
# else None; the first that holds is the diagnosis.


def _torch_works_but_not_on_a_spark_gpu(case: dict) -> dict | None:
    """torch works, on a GPU that is not a Spark's GB10 (compute capability 12.1)"""
    cap = case["capability"]
    if case["spark"] and cap != (12, 1):
        return {"hypothesis": NOT_SPARK_GPU,
                "evidence": f"device {case['device'].get('name')} has compute capability {cap}, a DGX Spark's GB10 "
                            f"has (12, 1)",
                "fix": "check that this host is a DGX Spark and that the right device is visible"}
    return None


def _torch_works_but_a_framework_hung(case: dict) -> dict | None:
    """torch works; the probe hung in another GPU framework"""
    hung, timeout = case["frameworks"]["hung"], case["timeout"]
    if hung and case["timed_out"]:
        return {"hypothesis": STUCK,
                "evidence": f"torch is fine; the probe hung while probing {hung}"
                            + (f" (killed after {timeout} s)" if timeout else ""),
                "fix": f"a stuck process may hold the GPU, or {hung} waits on it: reopen the shell or restart the "
                       "container, then check nvidia-smi for leftover processes"}
    return None


def _torch_works_but_a_framework_failed(case: dict) -> dict | None:
    """torch works; another GPU framework failed or ran on the CPU"""
    broken = [r for r in case["frameworks"]["results"] if r.get("verdict") in ("failed", CPU_EXERCISE)]
    if broken:
        return {"hypothesis": FRAMEWORK,
                "evidence": "torch is fine; " + "; ".join(framework_line(r) for r in broken),
                "fix": "; ".join(f"{r['name']}: {r.get('fix')}" for r in broken)}
    return None


def _the_container_did_not_start(case: dict) -> dict | None:
    """1. runtime/flags: the container did not start"""
    if case["launch_error"] is None:
        return None
    return {"hypothesis": RUNTIME_FLAGS, "evidence": f"the container did not start: {case['launch_error'].strip()}",
            "fix": "register the nvidia runtime with Docker (role spark_container_runtime) and start the container "
                   "with --runtime=nvidia --gpus all"}


def _nvidia_smi_fails(case: dict) -> dict | None:
    """1. runtime/flags: nvidia-smi is missing or fails"""
    env, where = case["env"], case["where"]
    smi = env.get("nvidia_smi") or {}
    if not env or (smi.get("found") and smi.get("rc") == 0):
        return None
    evidence = (f"nvidia-smi is not present {where}" if not smi.get("found")
                else f"nvidia-smi {where} failed (rc {smi.get('rc')}): {smi.get('output')}")
    fix = ("start the container with --runtime=nvidia --gpus all (the launchers do); without them the "
           "container sees no GPU" if case["container"] else
           "the driver or its device nodes are not working on the host: check 'nvidia-smi' and the DGX OS "
           "driver (updated through OTA only); leave the Python packages alone until it works")
    return {"hypothesis": RUNTIME_FLAGS, "evidence": evidence, "fix": fix}


def _cuda_visible_devices_hides_the_gpu(case: dict) -> dict | None:
    """2. CUDA_VISIBLE_DEVICES hides the GPU"""
    visibility = _visibility_problem(case["env"].get("cuda_visible_devices"))
    if visibility:
        return {"hypothesis": VISIBILITY, "evidence": visibility, "fix": "unset CUDA_VISIBLE_DEVICES (or set it to 0)"}
    return None


def _no_device_nodes(case: dict) -> dict | None:
    """3. permissions: no /dev/nvidia* device nodes"""
    if case["env"] and not case["env"].get("devices"):
        return {"hypothesis": PERMISSIONS, "evidence": f"no /dev/nvidia* device nodes {case['where']}",
                "fix": "the device nodes must exist and be passed into containers (--gpus all)"}
    return None


def _device_nodes_denied(case: dict) -> dict | None:
    """3. permissions: the user cannot open /dev/nvidia*"""
    denied = [d for d in case["env"].get("devices") or [] if not d.get("access")]
    if not denied:
        return None
    listing = ", ".join(f"{d['path']} ({d['mode']})" for d in denied)
    return {"hypothesis": PERMISSIONS, "evidence": f"uid {case['env'].get('uid')} cannot open {listing}",
            "fix": "give the user read/write access to /dev/nvidia* (DGX OS: the video group)"}


def _killed_by_a_signal(case: dict) -> dict | None:
    """5. ABI: the probe died of a signal (a segfault on the first .cuda()) once 1-3 are ruled out"""
    if case["signal_number"] is None:
        return None
    torch, expected = case["torch"], case["expected"]
    built = (f"torch {torch.get('version')} is built for CUDA {torch.get('cuda')}" if torch.get("version")
             else "torch had not answered yet")
    return {"hypothesis": ABI,
            "evidence": f"the probe was killed by {signal_name(case['signal_number'])} while "
                        f"{_died_while(case['probe'])} {case['where']}; {built}",
            "fix": f"a crash with no Python error is the ABI symptom: a wheel built for another CUDA major loaded "
                   f"beside CUDA {expected}. Run spark_abi_scan on this environment (the verification does; it names "
                   f"the wheel) and reinstall that wheel from the cu130 index (https://download.pytorch.org/whl/"
                   f"cu130); nvidia-smi, visibility and permissions are fine"}


def _the_probe_hung(case: dict) -> dict | None:
    """4. a stuck process: the probe hung"""
    if not case["timed_out"]:
        return None
    probe, timeout = case["probe"], case["timeout"]
    stage = ("importing torch" if "torch" not in probe else
             "asking torch for CUDA" if "cuda" not in probe else "querying the device")
    killed = f" (killed after {timeout} s)" if timeout else ""
    return {"hypothesis": STUCK, "evidence": f"the probe hung while {stage}{killed}",
            "fix": "a stuck process holds the GPU: reopen the shell or restart the container, then check for "
                   "leftover processes in nvidia-smi"}


def _torch_does_not_import(case: dict) -> dict | None:
    """5. ABI (a CUDA library missing) or torch not importable"""
    torch, expected = case["torch"], case["expected"]
    if not torch or torch.get("imported"):
        return None
    error = torch.get("error", "")
    if re.search(r"libcu\w*\.so\.\d+|undefined symbol|libnvrtc|libnvJitLink", error):
        return {"hypothesis": ABI, "evidence": f"torch does not import: {error}",
                "fix": f"a wheel needs a CUDA library this system does not have: install torch from the cu130 index "
                       f"(https://download.pytorch.org/whl/cu130) and run spark_abi_scan for other wheels built "
                       f"for CUDA != {expected}"}
    return {"hypothesis": NO_TORCH, "evidence": f"torch does not import: {error}",
            "fix": "use the NGC PyTorch container, or build the pinned venv (role spark_venv)"}


def _torch_built_for_another_cuda(case: dict) -> dict | None:
    """5. ABI: torch.version.cuda is not 13.x"""
    torch, expected = case["torch"], case["expected"]
    if not torch or case["major"] == expected:
        return None
    built = f"CUDA {torch.get('cuda')}" if torch.get("cuda") else "no CUDA (a CPU-only build)"
    return {"hypothesis": ABI,
            "evidence": f"torch {torch.get('version')} is built for {built}, expected CUDA {expected}.x",
            "fix": "reinstall torch from the cu130 index (https://download.pytorch.org/whl/cu130); the ABI is "
                   "confirmed as the cause (nvidia-smi, visibility and permissions are fine)"}


def _a_computation_failed(case: dict) -> dict | None:
    """unexplained: the device answers, a computation on it failed"""
    device = case["device"]
    if device and not device.get("compute"):
        return {"hypothesis": UNKNOWN,
                "evidence": f"the device answers but a computation on it failed: {device.get('compute_error')}",
                "fix": "check dmesg and nvidia-smi for GPU errors"}
    return None


def _unexplained(case: dict) -> dict | None:
    """unexplained: everything the document names is fine"""
    torch = case["torch"]
    return {"hypothesis": UNKNOWN,
            "evidence": f"torch.cuda.is_available() is {torch.get('available')} with nvidia-smi, visibility, "
                        f"permissions and the CUDA build all fine ({torch.get('available_error') or 'no error'})",
            "fix": "check 'dmesg' and 'nvidia-smi -q' on the host"}


# When torch computes on the GPU: what can still fail the verdict, in order.
WHEN_TORCH_WORKS = (_torch_works_but_not_on_a_spark_gpu, _torch_works_but_a_framework_hung,
                    _torch_works_but_a_framework_failed)
# When it does not: the user's hypotheses in the document's order (spark-environment-setup.md, "Verification":
# 1. nvidia-smi fails (runtime/flags), 2. CUDA_VISIBLE_DEVICES, 3. /dev/nvidia* permissions, 4. a stuck process,
# 5. torch.version.cuda not 13.x (ABI)); a probe a signal ended is the ABI's crash once 1-3 are ruled out, and a
# hang says nothing of the ABI. The last always holds.
HYPOTHESES = (_the_container_did_not_start, _nvidia_smi_fails, _cuda_visible_devices_hides_the_gpu, _no_device_nodes,
              _device_nodes_denied, _killed_by_a_signal, _the_probe_hung, _torch_does_not_import,
              _torch_built_for_another_cuda, _a_computation_failed, _unexplained)


def diagnose(probe: dict[str, dict], *, launch_error: str | None = None, timed_out: bool = False,
             expected_cuda_major: int = 13, spark: bool = True, container: bool = False,
             signal_number: int | None = None, timeout: int | None = None, challenge: int | None = None) -> dict:
    """Verdict and, when not ok, the first of the user's hypotheses that holds (HYPOTHESES, in order; a wheel
    reinstall is only ever suggested under the ABI's). A probe a signal ended is never a pass and never
    "unexplained"."""
    torch = {**probe.get("torch", {}), **probe.get("cuda", {})}
    device = probe.get("device", {})
    result = {
        "verdict": "failed",
        "line": torch.get("line"),
        "torch_version": torch.get("version"),
        "torch_cuda": torch.get("cuda"),
        "available": torch.get("available"),
        "device": device or None,
        "hypothesis": None,
        "evidence": None,
        "fix": None,
        "notes": [],
        "frameworks": frameworks_probed(probe, challenge),
    }
    frameworks = result["frameworks"]
    others = frameworks["not_probed"]
    if frameworks["results"]:
        result["notes"].append("frameworks: " + "; ".join(framework_line(r) for r in frameworks["results"]))
    if others and not (probe.get("frameworks") or {}).get("exercised"):
        result["notes"].append("probed torch only; installed, not probed: " + ", ".join(
            f"{f['framework']} ({', '.join(f['distributions'])})" for f in others))
    case = {"probe": probe, "env": probe.get("env", {}), "torch": torch, "device": device,
            "where": "inside the container" if container else "on the host", "container": container,
            "launch_error": launch_error, "timed_out": timed_out, "expected": expected_cuda_major, "spark": spark,
            "signal_number": signal_number, "timeout": timeout, "frameworks": frameworks,
            "capability": tuple(device.get("capability") or ()) or None, "major": cuda_major(torch.get("cuda"))}
    works = (torch.get("available") and case["major"] == expected_cuda_major and device.get("compute", False)
             and signal_number is None)
    if works and not spark:
        result["notes"].append(f"compute capability {case['capability']}: not a Spark ({device.get('name')})")
    for hypothesis in WHEN_TORCH_WORKS if works else HYPOTHESES:
        found = hypothesis(case)
        if found:
            return {**result, **found}
    return {**result, "verdict": "ok"}
