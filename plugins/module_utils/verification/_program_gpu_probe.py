# Copyright: sparkfleet contributors
# Apache License 2.0
"""The GPU probe: a program of its own, run by the Python interpreter under test.

spark_gpu_verify sends this file's source to that interpreter on stdin (on
the host, or inside a container started with the container-workflow flags),
inside a two-line wrapper that keeps the source in SPARKFLEET_PROBE_SOURCE
(_gpu_probe.PROBE). It needs nothing but the standard library and prints one
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

import collections
import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time

# The ptxas the source document names for Triton on a Spark (TRITON_PTXAS_PATH), tried when Triton's own fails.
SYSTEM_PTXAS = "/usr/local/cuda/bin/ptxas"
# Seconds one framework's process may take before it is killed; all of them together stay within --seconds (the
# module's timeout less its margin). A framework left without MIN_SECONDS is not started, and says why.
FRAMEWORK_SECONDS = 90
MIN_SECONDS = 10
# The challenge: each run's input, chosen by the module at random (--challenge K, 1 to CHALLENGE_MAX). Every probe
# that computes squares the 64 values K+1 .. K+64 on the GPU and sums them (squares(K); exact in float32 up to
# CHALLENGE_MAX), bitsandbytes steps with the learning rate bnb_lr(K): the module recomputes each answer itself
# (_gpu_probe.answer_problem), so a probe that reports without doing the work - a constant, a no-op - fails.
CHALLENGE_MAX = 200
CHALLENGE = 0  # set from --challenge by main() and run_one()


def squares(k):
    """The sum of the squares of k+1 .. k+64: what every probe that computes must answer for challenge k."""
    return float(sum((i + k) * (i + k) for i in range(1, 65)))


def bnb_lr(k):
    """bitsandbytes' learning rate for challenge k (an Adam step moves each value by about it)."""
    return k / 1000.0


BNB_SIZE = 4096  # the smallest tensor that gets 8-bit state


def bnb_signs(k):
    """The gradient's signs for challenge k: +1 where i*k is a multiple of 3, else -1 (a pattern per run)."""
    return [1.0 if (i * k) % 3 == 0 else -1.0 for i in range(BNB_SIZE)]


def bnb_answer(k):
    """What bitsandbytes answers for challenge k: the sum of the parameter's moves, each about the learning rate
    in its gradient's direction (the 8-bit state may change a move by a few percent: the judge allows BNB_SPREAD)."""
    return bnb_lr(k) * sum(bnb_signs(k))


BNB_SPREAD = 0.1


def challenge_values():
    """The 64 input values of this run: K+1 .. K+64."""
    return [float(i + CHALLENGE) for i in range(1, 65)]


# How much of a framework's own stderr its result keeps (the last lines: where the library said why).
STDERR_LINES = 12
STDERR_CHARS = 1500


class Failed(Exception):
    """A framework's probe failed at a stage, with the library's own words (str); `cause` what the program
    established (a variable that forces the CPU, a CPU-only build), for the advice."""

    def __init__(self, stage, error, cause=None):
        Exception.__init__(self, error)
        self.stage = stage
        self.cause = cause


def stage(name):
    """Where a framework's process is: the parent reports the last one when it has to kill it."""
    emit("stage", stage=name)


# A CPU exercise, for the tests alone: each probe's own code - its model, its kernel, its session - runs where its
# framework can run without a GPU (jax's CPU backend, onnxruntime's CPU provider, numba's simulator, Triton's
# interpreter on torch's CPU tensors), so a bug in a probe (an ONNX IR version onnxruntime refuses) is caught on a
# machine without one. Nothing on a host can switch it on - no variable, file or argument is read for it: a test
# runs this program's source with the line below changed (tests/integration/test_framework_probes.py,
# cpu_exercise()). It relaxes the device requirement and nothing else, and its results' verdict is "cpu exercise",
# which no judge counts as verified.
ON_CPU = False

# What makes a framework run on the CPU although a GPU is there, read before it is imported: each a failure that
# names the variable, never a pass (Triton's interpreter copies CUDA tensors to the host and gets the right sum).
FORCING = {
    "triton": (("TRITON_INTERPRET", "Triton's interpreter runs every kernel on the CPU"),),
    "numba-cuda": (("NUMBA_ENABLE_CUDASIM", "numba's CUDA simulator runs every kernel on the CPU"),),
    "jax": (("JAX_PLATFORMS", "jax uses only the platforms it names"),
            ("JAX_PLATFORM_NAME", "jax uses only the platform it names")),
}
_FALSE = ("", "0", "false", "no", "off")


def forced_to_cpu(name, environ):
    """Why `name` would run on the CPU in this environment (a sentence naming the variable), or None."""
    if ON_CPU:
        return None
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles", "void"):
        return "CUDA_VISIBLE_DEVICES=%r hides every GPU" % visible
    for variable, effect in FORCING.get(name, ()):
        value = environ.get(variable)
        if value is None or value.strip().lower() in _FALSE:
            continue
        if variable.startswith("JAX_") and any(p in value.lower() for p in ("cuda", "gpu")):
            continue
        return "%s=%s is set: %s" % (variable, value, effect)
    return None


def probe_jax():
    # Without preallocation (jax takes 75% of the GPU's memory by default: the Spark's memory is the system's).
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    import jax
    import jax.numpy as jnp
    stage("device")
    devices = jax.devices()
    gpus = [d for d in devices if d.platform in ("gpu", "cuda", "rocm")] or (devices if ON_CPU else [])
    if not gpus:
        raise Failed("device", "jax runs on the CPU: jax.devices() is %s" % ", ".join(str(d) for d in devices),
                     "cpu")
    stage("run")
    x = jax.device_put(jnp.asarray(challenge_values(), dtype=jnp.float32), gpus[0])
    y = jax.jit(lambda v: (v * v).sum())(x)
    placed = sorted(str(d) for d in y.devices()) if hasattr(y, "devices") else [str(y.device())]
    if any("cpu" in p.lower() for p in placed) and not ON_CPU:
        raise Failed("device", "jax runs on the CPU: the jitted result is on %s" % ", ".join(placed), "cpu")
    found = {"version": jax.__version__, "device": getattr(gpus[0], "device_kind", str(gpus[0])),
             "value": float(y), "where": placed}
    try:
        stats = gpus[0].memory_stats() or {}
    except Exception:  # not every backend keeps them
        stats = {}
    if "peak_bytes_in_use" in stats:
        found["peak_bytes"] = int(stats["peak_bytes_in_use"])
    return found


def probe_cupy():
    import cupy
    stage("device")
    count = cupy.cuda.runtime.getDeviceCount()
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    stage("compile")
    square = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x * x", "sparkfleet_square")  # compiled by NVRTC
    stage("run")
    value = float(square(cupy.asarray(challenge_values(), dtype=cupy.float32)).sum())
    return {"version": cupy.__version__, "device": name.decode() if isinstance(name, bytes) else str(name),
            "devices": count, "value": value}


numba_cuda = None  # numba.cuda, once probe_numba_cuda imported it


def _numba_square(a, out):
    i = numba_cuda.grid(1)
    if i < a.size:
        out[i] = a[i] * a[i]


def probe_numba_cuda():
    import contextlib
    import io

    from numba import cuda
    from numba.core import config as numba_config
    if getattr(numba_config, "ENABLE_CUDASIM", 0) and not ON_CPU:
        # Not the variable (checked before the import): numba's config file, read from the folder it runs in.
        raise Failed("environment", "enable_cudasim is set in %s: numba's CUDA simulator runs every kernel on the CPU"
                     % os.path.abspath(".numba_config.yaml"), "forced")
    stage("device")
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        found = cuda.detect()  # numba's own errors (no driver: CudaSupportError) are the failure, in its words
    if not cuda.is_available() or not (found or ON_CPU):  # the simulator's detect() answers None
        raise Failed("device", "numba.cuda.detect() found no CUDA device: %s" % said.getvalue().strip()[-300:])
    import numpy

    stage("compile")
    globals()["numba_cuda"] = cuda  # the kernel's `numba_cuda` is a global, as numba (and its simulator) read it
    # With its signature the kernel compiles here, not at its first launch: a compile that fails is named so.
    square = cuda.jit("void(float32[:], float32[:])")(_numba_square)
    host = numpy.asarray(challenge_values(), dtype=numpy.float32)
    device_in = cuda.to_device(host)
    device_out = cuda.device_array_like(device_in)
    stage("run")
    square[1, 64](device_in, device_out)
    import numba_cuda
    name = getattr(cuda.get_current_device(), "name", "the CUDA simulator")
    return {"version": getattr(numba_cuda, "__version__", "?"),
            "device": name.decode() if isinstance(name, bytes) else str(name),
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
    x = torch.tensor(challenge_values(), device="cpu" if ON_CPU else "cuda", dtype=torch.float32)
    out = torch.empty_like(x)
    kernel.square[(1,)](x, out, 64, BLOCK=64)
    if not ON_CPU:
        torch.cuda.synchronize()
    return float(out.sum().item())


def probe_triton():
    import torch
    import triton
    stage("device")
    if not torch.cuda.is_available() and not ON_CPU:
        raise Failed("device", "torch sees no GPU, so Triton has none to compile for", "torch")
    ptxas = "Triton's own ptxas"
    stage("compile")
    try:
        value = _triton_square(1)
    except Exception as exc:  # the source document's rule: once more with the system's ptxas
        if "ptxas" not in str(exc).lower() or os.environ.get("TRITON_PTXAS_PATH") or not os.path.exists(
                SYSTEM_PTXAS):
            raise Failed("compile", "%s: %s" % (type(exc).__name__, str(exc)[-600:]), "ptxas"
                         if "ptxas" in str(exc).lower() else None) from exc
        os.environ["TRITON_PTXAS_PATH"] = SYSTEM_PTXAS
        ptxas = "TRITON_PTXAS_PATH=%s (Triton's own failed: %s)" % (SYSTEM_PTXAS, str(exc).strip()[-200:])
        value = _triton_square(2)
    return {"version": triton.__version__, "device": "cpu" if ON_CPU else torch.cuda.get_device_name(0),
            "value": value, "ptxas": ptxas}


# An Adam step's first move is the learning rate (m/sqrt(v) is 1 for a constant gradient): the 8-bit state may
# change it by a few percent, not by an order of magnitude, never to infinity or NaN. The rate is the challenge's.
BNB_MOVE = (0.5, 1.5)  # the move, as a multiple of the learning rate


def probe_bitsandbytes():
    import bitsandbytes
    import torch
    stage("device")
    if not torch.cuda.is_available():
        raise Failed("device", "torch sees no GPU, so bitsandbytes' optimizer would run on the CPU", "torch")
    # bitsandbytes' own check: an 8-bit optimizer step on the GPU, with the run's learning rate and gradient
    # signs, must move each value by about the learning rate against its gradient.
    stage("step")
    weight = torch.nn.Parameter(torch.ones(BNB_SIZE, device="cuda"))
    lr = bnb_lr(CHALLENGE)
    optimizer = bitsandbytes.optim.Adam8bit([weight], lr=lr)
    signs = torch.tensor(bnb_signs(CHALLENGE), device="cuda")
    weight.grad = signs.clone()
    before = weight.detach().clone()
    optimizer.step()
    torch.cuda.synchronize()
    moved = before - weight.detach()  # each about lr * its gradient's sign
    if not bool(torch.isfinite(weight.detach()).all()):
        raise Failed("step", "an Adam8bit step on the GPU left non-finite values in the parameter")
    along = moved * signs
    low, high = float(along.min().item()), float(along.max().item())
    if low < BNB_MOVE[0] * lr or high > BNB_MOVE[1] * lr:
        raise Failed("step", "an Adam8bit step (lr %s) moved the parameter by %.4g to %.4g against its gradient, "
                             "expected %.4g to %.4g" % (lr, low, high, BNB_MOVE[0] * lr, BNB_MOVE[1] * lr))
    return {"version": bitsandbytes.__version__, "device": torch.cuda.get_device_name(0), "moved": high,
            "value": float(moved.sum().item())}


def _cuda_call(what, result):
    """cuda.bindings returns (error, values...); an error is the failure, in the runtime's own name."""
    error, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if int(error) != 0:
        raise Failed("run", "%s returned %s" % (what, getattr(error, "name", error)))
    return rest[0] if len(rest) == 1 else rest


def probe_cuda_python():
    import ctypes
    try:
        from cuda.bindings import runtime
    except ImportError:
        from cuda import cudart as runtime
    stage("device")
    error, count = runtime.cudaGetDeviceCount()
    if int(error) != 0:
        raise Failed("device", "cudaGetDeviceCount() returned %s" % getattr(error, "name", error))
    if count < 1:
        raise Failed("device", "cudaGetDeviceCount() found no device")
    version = _cuda_call("cudaRuntimeGetVersion()", runtime.cudaRuntimeGetVersion())
    # Real work: the squares copied to the device and back through a device buffer of its own.
    stage("run")
    values = [v * v for v in challenge_values()]
    host = (ctypes.c_float * 64)(*values)
    back = (ctypes.c_float * 64)()
    size = ctypes.sizeof(host)
    pointer = _cuda_call("cudaMalloc(%d)" % size, runtime.cudaMalloc(size))
    try:
        _cuda_call("cudaMemcpy to the device", runtime.cudaMemcpy(
            pointer, ctypes.addressof(host), size, runtime.cudaMemcpyKind.cudaMemcpyHostToDevice))
        _cuda_call("cudaMemcpy from the device", runtime.cudaMemcpy(
            ctypes.addressof(back), pointer, size, runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost))
    finally:
        runtime.cudaFree(pointer)
    name = ""
    try:
        name = _cuda_call("cudaGetDeviceProperties(0)", runtime.cudaGetDeviceProperties(0)).name
        name = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)
    except Exception:  # the name is for the line only
        pass
    return {"version": "runtime %d.%d" % (version // 1000, version % 1000 // 10), "devices": count,
            "device": name or None, "value": float(sum(back))}


def _varint(number):
    out = bytearray()
    while True:
        low = number & 0x7F
        number >>= 7
        if number:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number, value):
    """One protobuf field: an int (varint) or bytes/str (length-delimited)."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    if not isinstance(value, bytes):
        value = value.encode()
    return _varint(number << 3 | 2) + _varint(len(value)) + value


ONNX_IR_VERSION = 7  # IR 7 with opset 13: what every onnxruntime since 1.7 reads (onnx's own default, 14 in
ONNX_OPSET = 13      # onnx 1.23, is refused by onnxruntime 1.31: "max supported IR version: 13")


def onnx_square_model():
    """The serialized ONNX model y = x * x over 64 floats, written without the onnx package (onnxruntime-gpu does
    not depend on it): ModelProto{ir_version, graph{node Mul, input x, output y}, opset_import}."""
    def tensor_value(name):
        dim = _field(1, _field(1, 64))                      # TensorShapeProto.dim { dim_value: 64 }
        tensor = _field(1, 1) + _field(2, dim)              # TypeProto.Tensor { elem_type: FLOAT, shape }
        return _field(1, name) + _field(2, _field(1, tensor))  # ValueInfoProto { name, type { tensor_type } }
    node = _field(1, "x") + _field(1, "x") + _field(2, "y") + _field(4, "Mul")
    graph = _field(1, node) + _field(2, "square") + _field(11, tensor_value("x")) + _field(12, tensor_value("y"))
    opset = _field(1, "") + _field(2, ONNX_OPSET)
    return _field(1, ONNX_IR_VERSION) + _field(7, graph) + _field(8, opset)


def probe_onnxruntime():
    import onnxruntime
    stage("device")
    providers = onnxruntime.get_available_providers()
    if "CUDAExecutionProvider" not in providers and not ON_CPU:
        raise Failed("device", "onnxruntime %s runs on the CPU: its providers are %s"
                     % (onnxruntime.__version__, ", ".join(providers)), "cpu")
    # NVIDIA's wheels (nvidia-cublas, nvidia-cudnn-cu13, ...) keep their libraries under site-packages/nvidia/,
    # where the dynamic loader does not look: onnxruntime documents preload_dlls() (1.21 and later) to load them
    # first, as an owner's code does. Without it the first library of those wheels is named missing, though it is
    # installed; with it, the library really missing is.
    preload = getattr(onnxruntime, "preload_dlls", None)
    if preload is not None and not ON_CPU:
        stage("preload")
        with contextlib.suppress(Exception):  # what it could not load, the session below names
            preload(cuda=True, cudnn=True)
    # The providers above are a list compiled in: only a session shows whether the CUDA provider loads (its
    # libraries are found) and is used.
    stage("run")
    provider = "CPUExecutionProvider" if ON_CPU else "CUDAExecutionProvider"
    session = onnxruntime.InferenceSession(onnx_square_model(), providers=[provider])
    used = session.get_providers()
    if used[:1] != [provider]:
        raise Failed("device", "onnxruntime %s's CUDA provider did not load: the session runs on %s"
                     % (onnxruntime.__version__, ", ".join(used)))
    import array
    try:
        import numpy
        feed = numpy.asarray(challenge_values(), dtype=numpy.float32)
    except ImportError:
        feed = array.array("f", challenge_values())
    (out,) = session.run(None, {"x": feed})
    return {"version": onnxruntime.__version__, "device": used[0], "value": float(sum(float(v) for v in out))}


# A GPU framework: its name, the distributions that bring it (PEP 503 names, as a pattern), the module to import,
# its probe (None: imported only, with why) and what the probe does on the GPU in words (the documentation's, written
# from here by `make docs`), the install advice when its build is missing or wrong.
Framework = collections.namedtuple("Framework", ["name", "pattern", "module", "probe", "exercise", "fix"])
# The GPU frameworks. Torch's own probe is main(); CPU_BUILDS names the distributions that are a framework's
# CPU-only build. Adding one: CONTRIBUTING.md, "To add …", a GPU framework probe (the tests walk this table).
FRAMEWORKS = (
    Framework(name="jax", pattern=r"^(jax|jaxlib|jax-cuda\d+-(plugin|pjrt))$", module="jax", probe=probe_jax,
              exercise="a jitted operation placed on a GPU device, without preallocation, its peak memory reported",
              fix="install jax[cuda13]"),
    Framework(name="cupy", pattern=r"^cupy(-cuda\d+x?)?$", module="cupy", probe=probe_cupy,
              exercise="a kernel compiled by NVRTC",
              fix="install cupy-cuda13x"),
    Framework(name="cuda-python", pattern=r"^cuda-(bindings|python|core)$", module="cuda", probe=probe_cuda_python,
              exercise="a device buffer allocated, written and read back",
              fix="install cuda-python for CUDA 13"),
    Framework(name="numba-cuda", pattern=r"^numba-cuda$", module="numba.cuda", probe=probe_numba_cuda,
              exercise="numba's `cuda.detect` and a kernel compiled for the input's type",
              fix="install numba-cuda[cu13]"),
    Framework(name="onnxruntime", pattern=r"^onnxruntime(-gpu)?$", module="onnxruntime", probe=probe_onnxruntime,
              exercise=("a model the probe writes itself, IR 7, so that no `onnx` package is needed, run with the"
                        " CUDA provider actually used and NVIDIA's wheels' libraries preloaded"),
              fix="uninstall onnxruntime and install onnxruntime-gpu, its CUDA 13 build"),
    Framework(name="triton", pattern=r"^triton$", module="triton", probe=probe_triton,
              exercise=("a kernel JIT-compiled and run; when ptxas fails, once more with"
                        " `TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas`, saying which worked"),
              fix="use the triton that comes with torch's cu130 wheels"),
    Framework(name="bitsandbytes", pattern=r"^bitsandbytes$", module="bitsandbytes", probe=probe_bitsandbytes,
              exercise=("an 8-bit optimizer step on the GPU that must move the parameter by about its learning"
                        " rate, finite"),
              fix="install bitsandbytes 0.49.2 or later"),
    Framework(name="tensorflow", pattern=r"^(tensorflow|tensorflow-gpu|tf-nightly)$", module="tensorflow",
              probe=None, exercise=None,
              fix="not for this platform's CUDA 13"),
    Framework(name="tensorrt", pattern=r"^tensorrt(-cu\d+)?$", module="tensorrt", probe=None, exercise=None,
              fix="use the NGC container that ships it"),
    Framework(name="paddlepaddle-gpu", pattern=r"^paddlepaddle-gpu$", module="paddle", probe=None, exercise=None,
              fix="not for this platform's CUDA 13"),
    Framework(name="mxnet", pattern=r"^mxnet-cu\d+$", module="mxnet", probe=None, exercise=None,
              fix="not for this platform's CUDA 13"),
    Framework(name="flash-attn", pattern=r"^flash-attn$", module="flash_attn", probe=None, exercise=None,
              fix="skip the pip build: the NGC container bundles a working one"),
    Framework(name="xformers", pattern=r"^xformers$", module="xformers", probe=None, exercise=None,
              fix="build it from source with TORCH_CUDA_ARCH_LIST=12.1"),
    Framework(name="vllm", pattern=r"^vllm$", module="vllm", probe=None, exercise=None,
              fix="use vLLM's nightly wheels"),
)
# A framework installed only as its CPU build: (framework, what its GPU build brings that is missing, a sentence).
CPU_BUILDS = {
    "jax": (r"^jax-cuda\d+-(plugin|pjrt)$", "jax without a CUDA plugin (jax-cuda13-plugin) is its CPU-only build"),
    "onnxruntime": (r"^onnxruntime-gpu$", "onnxruntime (not onnxruntime-gpu) is its CPU-only build"),
}
# Why a framework of FRAMEWORKS without a probe is only imported.
IMPORTED_ONLY = "imported only: its smallest GPU operation needs a model or an engine sparkfleet does not build"
GPU_FRAMEWORKS = tuple((f.name, f.pattern) for f in FRAMEWORKS)


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
    source = globals().get("SPARKFLEET_PROBE_SOURCE")
    if source is None:  # run as a file (tests)
        with open(os.path.abspath(__file__)) as handle:
            source = handle.read()
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


def emit(kind, **data):
    data["kind"] = kind
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()  # each line out at once: a probe stuck in torch leaves the evidence


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
