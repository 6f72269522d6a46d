# Copyright: sparkfleet contributors
# Apache License 2.0
"""The GPU probe program's second part: each framework's probe and FRAMEWORKS, the table of them.

Each probe runs in a framework's own process (_program_gpu_probe.run_one), computes the run's challenge on the
GPU and returns what it found, or raises Failed at the stage it reached. Adding one: CONTRIBUTING.md, "To add
…", a GPU framework probe. Written for any Python 3 an image may carry: no f-strings, no annotations.
"""


import collections
import contextlib
import os
import sys

# The program's earlier parts (_gpu_probe.SOURCE joins the parts into one program and leaves out the lines from
# here to the end marker: there, these names are already defined).
# program parts: begin
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._program_probe_base import (
    BNB_SIZE,
    CHALLENGE,
    ON_CPU,
    SYSTEM_PTXAS,
    Failed,
    bnb_lr,
    bnb_signs,
    challenge_values,
    stage,
)

# program parts: end


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
