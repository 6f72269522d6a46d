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
