# Copyright: sparkfleet contributors
# Apache License 2.0
"""The GPU probe: a program of its own, run by the Python interpreter under test.

spark_gpu_verify sends its source to that interpreter on stdin (on the
host, or inside a container started with the container-workflow flags),
inside a two-line wrapper that keeps the source in SPARKFLEET_PROBE_SOURCE
(_gpu_probe.PROBE). The source is three files joined in order
(_gpu_probe.SOURCE): _program_probe_base.py (the challenge, how a
framework's process reports), _program_probe_frameworks.py (each
framework's probe, FRAMEWORKS) and this one (the processes, the deadline,
main). It needs nothing but the standard library and prints one
JSON object per line as it goes -- the environment evidence first, then what
torch says, then, with --frameworks, each other GPU framework installed
(FRAMEWORKS) -- so a probe that hangs still leaves the evidence behind
(_gpu_probe.diagnose reads the lines).

Each framework runs in a process of its own (this program again, given the
same source on stdin and --framework NAME), with a hard deadline: killed, not
asked, when it passes it, so a call stuck in C is bounded too. That process
says which stage it reached as it goes; what it printed on stderr (the
library's own words: "Unable to load cuPTI", a missing libcublasLt.so.13) is
kept. The program reports facts (stage, error, stderr, what forced the CPU);
_gpu_probe.framework_advice turns them into the fix.

Written for any Python 3 an image may carry: no f-strings, no annotations.
"""

import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time

# The program's earlier parts (_gpu_probe.SOURCE joins the parts into one program and leaves out the lines from
# here to the end marker: there, these names are already defined).
# program parts: begin
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._program_probe_base import (
    CHALLENGE,
    ON_CPU,
    Failed,
    emit,
    forced_to_cpu,
    squares,
    stage,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._program_probe_frameworks import (
    CPU_BUILDS,
    FRAMEWORKS,
    GPU_FRAMEWORKS,
    IMPORTED_ONLY,
)

# program parts: end


# Seconds one framework's process may take before it is killed; all of them together stay within --seconds (the
# module's timeout less its margin). A framework left without MIN_SECONDS is not started, and says why.
FRAMEWORK_SECONDS = 90
MIN_SECONDS = 10

# How much of a framework's own stderr its result keeps (the last lines: where the library said why).
STDERR_LINES = 12
STDERR_CHARS = 1500


def installed_frameworks():
    """[{framework, distributions: ["name version"]}] installed beside torch; None when this Python cannot list
    its distributions (no importlib.metadata before 3.8)."""
    import re
    try:
        from importlib import metadata
    except ImportError:
        return None
    found = {}
    for dist in metadata.distributions():
        try:
            name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
            version = dist.version
        except Exception:  # a broken dist-info: not this probe's business
            continue
        for framework, pattern in GPU_FRAMEWORKS:
            if re.match(pattern, name):
                found.setdefault(framework, set()).add("%s %s" % (name, version))
    return [{"framework": f, "distributions": sorted(found[f])} for f, _p in GPU_FRAMEWORKS if f in found]


def cpu_build(name, distributions):
    """The sentence saying `name` is installed only as its CPU build, or None."""
    import re
    if name not in CPU_BUILDS:
        return None
    pattern, sentence = CPU_BUILDS[name]
    names = [d.split(" ", 1)[0] for d in distributions or []]
    return None if any(re.match(pattern, n) for n in names) else sentence


def run_one(name, distributions):
    """In a framework's own process: its forcing variables, its import, its probe; one result line, whatever
    happens short of a kill (the parent reports those)."""
    import importlib
    entry = next(e for e in FRAMEWORKS if e.name == name)
    module, probe = entry.module, entry.probe
    result = {"name": name, "verdict": "ok", "stage": None, "error": None, "cause": None}
    try:
        stage("environment")
        forced = forced_to_cpu(name, os.environ)
        if forced:
            raise Failed("environment", forced, "forced")
        stage("import")
        try:
            imported = importlib.import_module(module)
            result["version"] = getattr(imported, "__version__", None)
        except Exception as exc:
            raise Failed("import", "%s: %s" % (type(exc).__name__, str(exc)[-600:]), "import") from exc
        if probe is None:
            result.update(verdict="not exercised", stage="import", error=IMPORTED_ONLY)
        else:
            found = probe()
            result.update(found)
            if "value" in found and name != "bitsandbytes" and found["value"] != squares(CHALLENGE):
                raise Failed("compute", "the GPU computed %r, expected %r"
                             % (found.get("value"), squares(CHALLENGE)))
    except Failed as exc:
        result.update(verdict="failed", stage=exc.stage, error=" ".join(str(exc).split()), cause=exc.cause)
    except BaseException as exc:  # the library's own words, at the stage it reached (the parent knows which)
        result.update(verdict="failed", stage=None,
                      error="%s: %s" % (type(exc).__name__, " ".join(str(exc).split())[-600:]))
    # A release written for an older numpy, calling what a newer one removed (numba-cuda 0.30.4 registers
    # numpy.row_stack, gone in numpy 2.5, at its first compile), at its import or later: named with the numpy it met.
    if result["verdict"] == "failed" and "module 'numpy' has no attribute" in (result["error"] or "") \
            and "numpy" in sys.modules:
        result.update(cause="numpy", numpy=getattr(sys.modules["numpy"], "__version__", None))
    if result["verdict"] == "failed" and result["cause"] in (None, "cpu"):
        sentence = cpu_build(name, distributions)
        if sentence:
            result["cause"], result["cpu_build"] = "cpu build", sentence
    if ON_CPU and result["verdict"] == "ok":
        result.update(verdict="cpu exercise", cause="cpu exercise")
    emit("result", **result)


def _tail(text):
    import re
    text = re.sub(r"\x1b\[[0-9;]*m", "", text or "")
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-STDERR_LINES:])[-STDERR_CHARS:] or None


def _json_lines(text):
    """This program's own lines among what a framework printed on stdout (a line of its own that starts with "{"
    is not one)."""
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                found.append(data)
    return found


def _decode(data):
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else (data or "")


def own_source():
    """The program's whole source, which its wrapper keeps (_gpu_probe.PROBE), for a framework's process."""
    source = globals().get("SPARKFLEET_PROBE_SOURCE")
    if source is None:  # this file alone is one part of three
        raise SystemExit("the GPU probe runs as _gpu_probe.PROBE, its three parts joined inside the wrapper that "
                         "keeps their source; this file alone is not the program")
    return source


def wrapper(source):
    """What the interpreter under test reads on stdin: the program, keeping its own source for its children."""
    return ("SPARKFLEET_PROBE_SOURCE = %r\nexec(compile(SPARKFLEET_PROBE_SOURCE, '<sparkfleet gpu probe>', "
            "'exec'))\n" % source)


def become_subreaper():
    """Linux's PR_SET_CHILD_SUBREAPER on this process: a framework's grandchild that leaves its session (setsid)
    is reparented here, not to init, so the deadline still finds it (_descendants). False where it cannot be."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except Exception:  # not Linux, no libc to ask: the process group alone is killed
        return False


def _descendants(pid):
    """Every process below `pid`, by /proc's parent links, whatever its session or group."""
    parents = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    found, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(parents.get(child, []))
    return found


def _kill_all(child):
    """The framework's process group, then every process still below this one (one that left the group with
    setsid, reparented here as its subreaper): nothing a framework started outlives its deadline."""
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGKILL)
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def probe_framework(name, distributions, seconds):
    """One framework in a process of its own, killed (its whole process group, and whatever left it) after
    `seconds`."""
    emit("framework_start", name=name)
    started = time.time()
    argv = [sys.executable, "-", "--framework", name, "--distributions", json.dumps(distributions or []),
            "--challenge", str(CHALLENGE)]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                             stderr=subprocess.PIPE, start_new_session=True)
    killed = False
    try:
        out, err = child.communicate(wrapper(own_source()).encode(), timeout=seconds)
    except subprocess.TimeoutExpired:
        killed = True
        _kill_all(child)
        try:  # what it said before the deadline (communicate keeps it): its stages and its stderr
            out, err = child.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a process beyond our reach still holds the pipes
            child.kill()
            out, err = b"", b""
    lines = _json_lines(_decode(out))
    reached = [line["stage"] for line in lines if line.get("kind") == "stage"]
    results = [line for line in lines if line.get("kind") == "result"]
    result = results[-1] if results else {"name": name, "verdict": "failed", "cause": None}
    result.pop("kind", None)
    where = reached[-1] if reached else "start"
    if killed:
        result.update(verdict="failed", stage=where, cause="timeout",
                      error="timed out after %d s at %s (killed)" % (seconds, where))
    elif not results:
        if child.returncode is not None and child.returncode < 0:
            try:
                signame = signal.Signals(-child.returncode).name
            except ValueError:
                signame = "signal %d" % -child.returncode
            result.update(stage=where, cause="signal", signal=-child.returncode,
                          error="killed by %s at %s" % (signame, where))
        else:
            result.update(stage=where, error="exited %s at %s without a result" % (child.returncode, where))
    if result.get("stage") is None and result.get("verdict") == "failed":
        result["stage"] = where
    result["stderr"] = _tail(_decode(err))
    result["distributions"] = distributions or []
    result["seconds"] = round(time.time() - started, 2)
    emit("framework:" + name, **result)


def probe_frameworks(installed, deadline):
    """Every GPU framework installed, each in its own process, all within `deadline` (time.time())."""
    by_name = dict((f["framework"], f["distributions"]) for f in installed or [])
    for name in [f.name for f in FRAMEWORKS]:
        if name not in by_name:
            continue
        left = int(deadline - time.time())
        if left < MIN_SECONDS:
            emit("framework:" + name, name=name, verdict="not exercised", stage="start", cause="no time",
                 error="not started: the probe's time (the module's timeout) was spent before it",
                 distributions=by_name[name], seconds=0)
            continue
        probe_framework(name, by_name[name], min(FRAMEWORK_SECONDS, left))


def _option(name, default=None):
    argv = sys.argv[1:]
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else default


def main():
    started = time.time()
    globals()["CHALLENGE"] = int(_option("--challenge", "0"))  # the run's input, read by every probe
    if "--framework" in sys.argv[1:]:
        run_one(_option("--framework"), json.loads(_option("--distributions", "[]")))
        return
    seconds = float(_option("--seconds", 170))
    become_subreaper()
    smi = {"found": False}
    for cand in ("nvidia-smi", "/usr/bin/nvidia-smi"):
        try:
            proc = subprocess.run([cand, "-L"], capture_output=True, text=True, timeout=20, check=False)  # pylint: disable=ansible-bad-function
        except FileNotFoundError:
            continue
        except subprocess.TimeoutExpired:
            smi = {"found": True, "rc": None, "output": "nvidia-smi did not answer within 20 s"}
            break
        smi = {"found": True, "rc": proc.returncode, "output": (proc.stdout + proc.stderr).strip()[-2000:]}
        break
    devices = []
    for path in sorted(glob.glob("/dev/nvidia*")):
        if os.path.isdir(path):
            continue
        devices.append({"path": path, "access": os.access(path, os.R_OK | os.W_OK),
                        "mode": oct(os.stat(path).st_mode & 0o777)})
    emit("env", python=sys.version.split()[0], executable=sys.executable, uid=os.getuid(),
         cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"), nvidia_smi=smi, devices=devices)
    installed = installed_frameworks()
    exercise = "--frameworks" in sys.argv[1:]
    emit("frameworks", probed=["torch"] + ([f["framework"] for f in installed or []] if exercise else []),
         installed=installed, exercised=exercise)
    try:
        import torch
    except Exception as exc:
        emit("torch", imported=False, error="%s: %s" % (type(exc).__name__, exc))
        torch = None
    if torch is None:  # the other frameworks still say how they do (outside the except: no chained traceback)
        if exercise:
            probe_frameworks(installed, started + seconds)
        return
    emit("torch", imported=True, version=str(torch.__version__), cuda=torch.version.cuda)
    info = {}
    try:
        info["available"] = bool(torch.cuda.is_available())
    except Exception as exc:
        info["available"] = False
        info["available_error"] = "%s: %s" % (type(exc).__name__, exc)
    info["line"] = "%s %s" % (info["available"], torch.version.cuda)
    emit("cuda", **info)
    if info["available"]:
        result = {"device_count": torch.cuda.device_count(), "name": torch.cuda.get_device_name(0),
                  "capability": list(torch.cuda.get_device_capability(0)),
                  "arch_list": list(torch.cuda.get_arch_list())}
        try:
            x = torch.arange(1, 65, device="cuda", dtype=torch.float32)
            result["compute"] = float((x * x).sum().item()) == 89440.0
        except Exception as exc:
            result["compute"] = False
            result["compute_error"] = "%s: %s" % (type(exc).__name__, exc)
        emit("device", **result)
    if exercise:
        probe_frameworks(installed, started + seconds)


if __name__ == "__main__":
    main()
