# Copyright: sparkfleet contributors
# Apache License 2.0
"""The GPU probe: a program of its own, run by the Python interpreter under test.

spark_gpu_verify sends this file's source to that interpreter on stdin (on
the host, or inside a container started with the container-workflow flags).
It needs nothing but the standard library and prints one JSON object per line
as it goes -- the environment evidence first, then what torch says, then, with
--frameworks, each other GPU framework installed (FRAMEWORKS: its own smallest
real GPU operation, bounded in time) -- so a probe that hangs still leaves the
evidence behind (_gpu_probe.diagnose reads the lines).

Written for any Python 3 an image may carry: no f-strings, no annotations.
"""

import glob
import json
import math
import os
import subprocess
import sys

# The ptxas the source document names for Triton on a Spark (TRITON_PTXAS_PATH), tried when Triton's own fails.
SYSTEM_PTXAS = "/usr/local/cuda/bin/ptxas"
# Seconds each framework's probe may take before it counts as hung (SIGALRM; the module's timeout bounds the rest).
FRAMEWORK_SECONDS = 90
# The value every probe computes on the GPU: the sum of the squares of 1..64.
SQUARES = 89440.0


class Failed(Exception):
    """A framework's probe failed at a stage, with the library's own words (str) and what to do (fix)."""

    def __init__(self, stage, error, fix=None):
        Exception.__init__(self, error)
        self.stage = stage
        self.fix = fix


def _cpu_only(name, found):
    return Failed("device", "%s runs on the CPU: %s" % (name, found),
                  "install %s's CUDA %s build (its cu13 wheels: a CUDA 12 build falls back to the CPU on a CUDA 13 "
                  "driver) or use the NGC container that ships it" % (name, "13"))


def probe_jax():
    import jax
    import jax.numpy as jnp
    devices = jax.devices()
    gpus = [d for d in devices if d.platform in ("gpu", "cuda", "rocm")]
    if not gpus:
        raise _cpu_only("jax", "jax.devices() is %s" % ", ".join(str(d) for d in devices))
    x = jax.device_put(jnp.arange(1, 65, dtype=jnp.float32), gpus[0])
    y = jax.jit(lambda v: (v * v).sum())(x)
    placed = sorted(str(d) for d in y.devices()) if hasattr(y, "devices") else [str(y.device())]
    if any("cpu" in p.lower() for p in placed):
        raise _cpu_only("jax", "the jitted result is on %s" % ", ".join(placed))
    return {"version": jax.__version__, "device": getattr(gpus[0], "device_kind", str(gpus[0])),
            "value": float(y), "where": placed}


def probe_cupy():
    import cupy
    count = cupy.cuda.runtime.getDeviceCount()
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    square = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x * x", "sparkfleet_square")  # compiled by NVRTC
    value = float(square(cupy.arange(1, 65, dtype=cupy.float32)).sum())
    return {"version": cupy.__version__, "device": name.decode() if isinstance(name, bytes) else str(name),
            "devices": count, "value": value}


def probe_numba_cuda():
    import contextlib
    import io

    from numba import cuda
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said):
            found = cuda.detect()
    except Exception as exc:  # numba's CudaSupportError: no driver reachable from this interpreter
        raise Failed("device", "%s: %s" % (type(exc).__name__, " ".join(str(exc).split())[-400:]),
                     "numba finds no CUDA driver here: check nvidia-smi (the runtime and the container's flags) "
                     "before the packages") from exc
    if not found or not cuda.is_available():
        raise Failed("device", "numba.cuda.detect() found no CUDA device: %s" % said.getvalue().strip()[-300:],
                     "install numba-cuda's CUDA 13 build (numba-cuda[cu13]) and check nvidia-smi")
    import numpy

    @cuda.jit
    def square(a, out):
        i = cuda.grid(1)
        if i < a.size:
            out[i] = a[i] * a[i]

    host = numpy.arange(1, 65, dtype=numpy.float32)
    device_in = cuda.to_device(host)
    device_out = cuda.device_array_like(device_in)
    square[1, 64](device_in, device_out)
    import numba_cuda
    return {"version": getattr(numba_cuda, "__version__", "?"), "device": cuda.get_current_device().name.decode()
            if isinstance(cuda.get_current_device().name, bytes) else str(cuda.get_current_device().name),
            "value": float(device_out.copy_to_host().sum())}


TRITON_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def square(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * x, mask=mask)
"""


def _triton_square(attempt):
    """Compile and run the kernel once, from a module of its own (Triton reads a kernel's source file)."""
    import importlib
    import tempfile

    import torch
    folder = tempfile.mkdtemp(prefix="sparkfleet-triton-")
    name = "sparkfleet_triton_square_%d" % attempt
    with open(os.path.join(folder, name + ".py"), "w") as handle:
        handle.write(TRITON_KERNEL)
    sys.path.insert(0, folder)
    try:
        kernel = importlib.import_module(name)
    finally:
        sys.path.remove(folder)
    x = torch.arange(1, 65, device="cuda", dtype=torch.float32)
    out = torch.empty_like(x)
    kernel.square[(1,)](x, out, 64, BLOCK=64)
    torch.cuda.synchronize()
    return float(out.sum().item())


def probe_triton():
    import torch
    import triton
    if not torch.cuda.is_available():
        raise Failed("device", "torch sees no GPU, so Triton has none to compile for",
                     "fix torch's GPU line first (above)")
    ptxas = "Triton's own ptxas"
    try:
        value = _triton_square(1)
    except Exception as exc:  # the source document's rule: once more with the system's ptxas
        if "ptxas" not in str(exc).lower() or os.environ.get("TRITON_PTXAS_PATH") or not os.path.exists(
                SYSTEM_PTXAS):
            raise Failed("compile", "%s: %s" % (type(exc).__name__, str(exc)[-600:]),
                         "set TRITON_PTXAS_PATH=%s (the CUDA 13 ptxas, which knows sm_121) and retry"
                         % SYSTEM_PTXAS) from exc
        os.environ["TRITON_PTXAS_PATH"] = SYSTEM_PTXAS
        ptxas = "TRITON_PTXAS_PATH=%s (Triton's own failed: %s)" % (SYSTEM_PTXAS, str(exc).strip()[-200:])
        value = _triton_square(2)
    return {"version": triton.__version__, "device": torch.cuda.get_device_name(0), "value": value, "ptxas": ptxas}


def probe_bitsandbytes():
    import bitsandbytes
    import torch
    if not torch.cuda.is_available():
        raise Failed("device", "torch sees no GPU, so bitsandbytes' optimizer would run on the CPU",
                     "fix torch's GPU line first (above)")
    # bitsandbytes' own check: an 8-bit optimizer step on the GPU must change the parameter (4096 values: the
    # smallest tensor that gets 8-bit state).
    weight = torch.nn.Parameter(torch.ones(4096, device="cuda"))
    optimizer = bitsandbytes.optim.Adam8bit([weight], lr=0.1)
    weight.grad = torch.ones_like(weight)
    before = weight.detach().clone()
    optimizer.step()
    torch.cuda.synchronize()
    moved = float((before - weight.detach()).abs().max().item())
    if math.isnan(moved) or moved <= 0:
        raise Failed("step", "an Adam8bit step on the GPU left the parameter unchanged",
                     "reinstall bitsandbytes from a build for CUDA 13 (0.49.2 or later works out of the box)")
    return {"version": bitsandbytes.__version__, "device": torch.cuda.get_device_name(0), "moved": moved}


def probe_cuda_python():
    try:
        from cuda.bindings import runtime
    except ImportError:
        from cuda import cudart as runtime
    error, count = runtime.cudaGetDeviceCount()
    if int(error) != 0 or count < 1:
        raise Failed("device", "cudaGetDeviceCount() returned %s, %s device(s)" % (error, count),
                     "check nvidia-smi, then install cuda-bindings for CUDA 13")
    error, version = runtime.cudaRuntimeGetVersion()
    if int(error) != 0:
        raise Failed("runtime", "cudaRuntimeGetVersion() returned %s" % error, "install cuda-bindings for CUDA 13")
    return {"version": "runtime %d.%d" % (version // 1000, version % 1000 // 10), "devices": count}


def probe_onnxruntime_gpu():
    import onnxruntime
    providers = onnxruntime.get_available_providers()
    if "CUDAExecutionProvider" not in providers:
        raise _cpu_only("onnxruntime", "its providers are %s" % ", ".join(providers))
    try:
        from onnx import TensorProto, helper
    except ImportError:
        raise Failed("not exercised", "onnx is not installed, so no graph could be built to run", None) from None
    graph = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["y"])], "square",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    used = session.get_providers()
    if used[:1] != ["CUDAExecutionProvider"]:
        raise _cpu_only("onnxruntime", "the session runs on %s" % ", ".join(used))
    import numpy
    (out,) = session.run(None, {"x": numpy.arange(1, 65, dtype=numpy.float32)})
    return {"version": onnxruntime.__version__, "device": used[0], "value": float(out.sum())}


# The GPU frameworks: (name, the distributions that bring it (PEP 503 names, as a pattern), the module to import,
# its probe (None: imported only, with why), the fix when it does not import). Torch's own probe is main().
# Adding a framework is one entry here, one probe function and its test.
FRAMEWORKS = (
    ("jax", r"^jax-cuda\d+-(plugin|pjrt)$", "jax", probe_jax, "install jax[cuda13]"),
    ("cupy", r"^cupy(-cuda\d+x?)?$", "cupy", probe_cupy, "install cupy-cuda13x"),
    ("cuda-python", r"^cuda-(bindings|python|core)$", "cuda", probe_cuda_python, "install cuda-python for CUDA 13"),
    ("numba-cuda", r"^numba-cuda$", "numba.cuda", probe_numba_cuda, "install numba-cuda[cu13]"),
    ("onnxruntime-gpu", r"^onnxruntime-gpu$", "onnxruntime", probe_onnxruntime_gpu,
     "install onnxruntime-gpu for CUDA 13"),
    ("triton", r"^triton$", "triton", probe_triton, "use the triton that comes with torch's cu130 wheels"),
    ("bitsandbytes", r"^bitsandbytes$", "bitsandbytes", probe_bitsandbytes, "install bitsandbytes 0.49.2 or later"),
    ("tensorflow", r"^(tensorflow|tensorflow-gpu|tf-nightly)$", "tensorflow", None, "not for this platform's CUDA 13"),
    ("tensorrt", r"^tensorrt(-cu\d+)?$", "tensorrt", None, "use the NGC container that ships it"),
    ("paddlepaddle-gpu", r"^paddlepaddle-gpu$", "paddle", None, "not for this platform's CUDA 13"),
    ("mxnet", r"^mxnet-cu\d+$", "mxnet", None, "not for this platform's CUDA 13"),
    ("flash-attn", r"^flash-attn$", "flash_attn", None, "skip the pip build: the NGC container bundles a working one"),
    ("xformers", r"^xformers$", "xformers", None, "build it from source with TORCH_CUDA_ARCH_LIST=12.1"),
    ("vllm", r"^vllm$", "vllm", None, "use vLLM's nightly wheels"),
)
# Why a framework of FRAMEWORKS without a probe is only imported.
IMPORTED_ONLY = "imported only: its smallest GPU operation needs a model or an engine sparkfleet does not build"
GPU_FRAMEWORKS = tuple((name, pattern) for name, pattern, _module, _probe, _fix in FRAMEWORKS)


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


def _on_alarm(signum, frame):
    raise Failed("hung", "did not finish within %d s" % FRAMEWORK_SECONDS,
                 "a stuck process may hold the GPU: reopen the shell or restart the container")


def probe_framework(name, module, probe, fix):
    """One framework: imported, then its probe, bounded in time; one line out, whatever happens."""
    import importlib
    import signal
    import time
    emit("framework_start", name=name)
    started = time.time()
    result = {"name": name, "verdict": "ok", "stage": None, "error": None, "fix": None}
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(FRAMEWORK_SECONDS)
    try:
        try:
            imported = importlib.import_module(module)
            result["version"] = getattr(imported, "__version__", None)
        except Exception as exc:
            raise Failed("import", "%s: %s" % (type(exc).__name__, str(exc)[-600:]), fix) from exc
        if probe is None:
            result.update(verdict="not exercised", stage="import", error=IMPORTED_ONLY)
        else:
            found = probe()
            result.update(found)
            if "value" in found and found["value"] != SQUARES:  # those that compute: the sum of the squares
                raise Failed("compute", "the GPU computed %r, expected %r" % (found.get("value"), SQUARES),
                             "check dmesg and nvidia-smi for GPU errors")
    except Failed as exc:
        verdict = "not exercised" if exc.stage == "not exercised" else "failed"
        result.update(verdict=verdict, stage=exc.stage, error=str(exc), fix=exc.fix)
    except Exception as exc:  # the library's own words, at the stage it reached
        result.update(verdict="failed", stage="run", error="%s: %s" % (type(exc).__name__, str(exc)[-600:]), fix=fix)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    result["seconds"] = round(time.time() - started, 2)
    emit("framework:" + name, **result)


def probe_frameworks(installed):
    """Every GPU framework installed, each with its own probe, in this one interpreter."""
    names = set(f["framework"] for f in installed or [])
    for name, _pattern, module, probe, fix in FRAMEWORKS:
        if name in names:
            probe_framework(name, module, probe, fix)


def emit(kind, **data):
    data["kind"] = kind
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()  # each line out at once: a probe stuck in torch leaves the evidence


def main():
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
            probe_frameworks(installed)
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
        probe_frameworks(installed)


if __name__ == "__main__":
    main()
