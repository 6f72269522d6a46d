"""Stand-in for torch at the hardware boundary (see ../README.md). Not real torch."""

import ctypes as _ctypes
import json as _json
import os as _os
import time as _time
import types as _types

# Packed as a wheel by testbed/pyindex.py, the package carries its own defaults
# (version, CUDA); SPARKFLEET_FAKE_TORCH overrides them.
_STANDIN = _os.path.join(_os.path.dirname(__file__), "_standin.json")
_CONF = {}
if _os.path.exists(_STANDIN):
    with open(_STANDIN) as _f:
        _CONF.update(_json.load(_f))
_CONF.update(_json.loads(_os.environ.get("SPARKFLEET_FAKE_TORCH", "{}")))



def _crash(stage):
    """A real segfault (a read of address 0 in native code), as a wheel linked against another CUDA gives."""
    if _CONF.get("crash") == stage:
        _ctypes.string_at(0)


_crash("import")
if _CONF.get("hang") == "import":
    while True:
        _time.sleep(3600)
if _CONF.get("import_error"):
    raise ImportError(_CONF["import_error"])

__version__ = _CONF.get("version", "2.9.0")
version = _types.SimpleNamespace(cuda=_CONF.get("cuda", "13.0"))
float32 = "float32"


class _Tensor:
    def __init__(self, values, device):
        self.values = list(values)
        self.device = device

    def __mul__(self, other):
        return _Tensor([a * b for a, b in zip(self.values, other.values, strict=True)], self.device)

    def sum(self):
        total = sum(self.values)
        if self.device == "cuda" and "compute_result" in _CONF:
            total = _CONF["compute_result"]
        return _Tensor([total], self.device)

    def item(self):
        return self.values[0]


def arange(start, end, device="cpu", dtype=None):
    if device == "cuda" and not cuda.is_available():
        raise RuntimeError("No CUDA GPUs are available")
    if device == "cuda":
        _crash("compute")
    return _Tensor([float(v) for v in range(start, end)], device)


def _is_available():
    if _CONF.get("hang") == "available":
        while True:
            _time.sleep(3600)
    return bool(_CONF.get("available", True)) and version.cuda is not None


cuda = _types.SimpleNamespace(
    is_available=_is_available,
    device_count=lambda: 1 if _is_available() else 0,
    get_device_name=lambda index=0: _CONF.get("name", "NVIDIA GB10"),
    get_device_capability=lambda index=0: tuple(_CONF.get("capability", [12, 1])),
    get_arch_list=lambda: list(_CONF.get("arch_list", ["sm_120", "sm_121"])) if _is_available() else [],
)
