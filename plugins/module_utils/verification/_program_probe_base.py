# Copyright: sparkfleet contributors
# Apache License 2.0
"""The GPU probe program's first part: the run's challenge, how a framework's process reports (emit,
stage, Failed), the tests' CPU exercise switch and what forces a framework onto the CPU.

The program is this file, _program_probe_frameworks.py and _program_gpu_probe.py, in that order, as one source
(_gpu_probe.SOURCE); its story is told in _program_gpu_probe.py. Written for any Python 3 an image may carry.
"""


import json
import sys

# The ptxas the source document names for Triton on a Spark (TRITON_PTXAS_PATH), tried when Triton's own fails.
SYSTEM_PTXAS = "/usr/local/cuda/bin/ptxas"

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


def emit(kind, **data):
    data["kind"] = kind
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()  # each line out at once: a probe stuck in torch leaves the evidence
