# Copyright: sparkfleet contributors
# Apache License 2.0
"""The GPU probe: a program of its own, run by the Python interpreter under test.

spark_gpu_verify sends this file's source to that interpreter on stdin (on
the host, or inside a container started with the container-workflow flags).
It needs nothing but the standard library and prints one JSON object per line
as it goes -- the environment evidence first, then what torch says -- so a
probe that hangs in torch still leaves the evidence behind
(_gpu_probe.diagnose reads the lines).

Written for any Python 3 an image may carry: no f-strings, no annotations.
"""

import glob
import json
import os
import subprocess
import sys

# GPU frameworks other than torch, by the distributions that bring them (PEP 503 names, as patterns). The probe
# exercises torch alone; it lists these when installed, so that "verified" never silently covers them.
GPU_FRAMEWORKS = (
    ("jax", r"^jax-cuda\d+-(plugin|pjrt)$"),
    ("tensorflow", r"^(tensorflow|tensorflow-gpu|tf-nightly)$"),
    ("cupy", r"^cupy(-cuda\d+x?)?$"),
    ("cuda-python", r"^cuda-(bindings|python|core)$"),
    ("numba-cuda", r"^numba-cuda$"),
    ("onnxruntime-gpu", r"^onnxruntime-gpu$"),
    ("tensorrt", r"^tensorrt(-cu\d+)?$"),
    ("paddlepaddle-gpu", r"^paddlepaddle-gpu$"),
    ("mxnet", r"^mxnet-cu\d+$"),
    ("triton", r"^triton$"),
    ("bitsandbytes", r"^bitsandbytes$"),
    ("flash-attn", r"^flash-attn$"),
    ("xformers", r"^xformers$"),
    ("vllm", r"^vllm$"),
)


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
    emit("frameworks", probed=["torch"], installed=installed_frameworks())
    try:
        import torch
    except Exception as exc:
        emit("torch", imported=False, error="%s: %s" % (type(exc).__name__, exc))
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


if __name__ == "__main__":
    main()
