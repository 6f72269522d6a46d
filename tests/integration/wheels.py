"""Real wheels for the ABI tests and the scan benchmark, fetched once and kept in the test store (testbed/store.py:
outside the clone, reused by every clone of this machine, each entry built under a lock and stamped with what it
was built from).

- `pypi_site(spec, platform)`: the wheel from real PyPI (cached under
  the store's tests/wheels), installed by pip for that platform into its own
  site-packages directory (`pip install --target`), as pip lays it out on a
  Spark (aarch64) or on x86_64: real files, real dist-info RECORD.
- `cuda13_venv()`: a venv holding the real torch 2.14.1 (a CUDA 13 build)
  with the NVIDIA CUDA 13 wheels it loads, from this machine's wheel store,
  plus the real bitsandbytes 0.49.2 for this machine: what a bare-pip
  Spark venv holds, on x86_64.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import store
import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._pip_commands import platform_tags

REPO = Path(__file__).resolve().parents[2]
CACHE = store.ROOT / "tests"
WHEELS = CACHE / "wheels"
# The matrix's target (a Spark: cp312, aarch64, DGX OS's glibc) and the same Python on x86_64.
SPARK = yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text())["target"]
X86_64 = {**SPARK, "arch": "x86_64"}
# torch 2.14.1's CUDA 13 dependencies that bitsandbytes' cuda130 build links
# (libcudart.so.13, libcublas(Lt).so.13, libnvJitLink.so.13, libcusparse.so.12),
# pinned to what torch 2.14.1 asks for, so the machine's wheel store serves them.
CUDA13_VENV = ["torch==2.14.1", "nvidia-cuda-runtime==13.0.96", "nvidia-cublas==13.1.1.3",
               "nvidia-nvjitlink==13.4.92", "nvidia-cusparse==12.6.3.3"]


class Unavailable(Exception):
    """pip could not get the wheels; str() says why (for pytest.skip)."""


def _pip(*args: str, python: str = sys.executable) -> None:
    proc = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise Unavailable(f"pip {' '.join(args[:2])} failed: {(proc.stderr or proc.stdout).strip()[-600:]}")


def _platform_args(target: dict) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", target["python"]]
    for tag in platform_tags(target):
        args += ["--platform", tag]
    return args


def pypi_site(spec: str, target: dict) -> Path:
    """`spec` (one or more requirements, space-separated) from real PyPI installed for `target` into a
    site-packages dir of its own (cached); no dependencies but those named."""
    name = re.sub(r"[^A-Za-z0-9.]+", "_", spec)
    want = store.stamp(spec, target, code=__file__)
    with store.locked(f"tests/sites/{name}-{target['arch']}") as site:
        if store.current(site, want):
            return site
        shutil.rmtree(site, ignore_errors=True)
        with store.locked("tests/wheels"):
            WHEELS.mkdir(parents=True, exist_ok=True)
            # --isolated: real PyPI only, whatever this machine's pip configuration adds.
            _pip("download", "--isolated", "--no-deps", *_platform_args(target), "-d", str(WHEELS), *spec.split())
            _pip("install", "--isolated", "--no-deps", "--no-index", "--find-links", str(WHEELS),
                 "--ignore-requires-python", *_platform_args(target), "--target", str(site), *spec.split())
        store.done(site, want)
        return site


def cuda13_venv() -> Path:
    """The real CUDA 13 torch and its CUDA 13 wheels (wheel store), and the real bitsandbytes 0.49.2 (PyPI)."""
    want = store.stamp(*CUDA13_VENV, "bitsandbytes==0.49.2", store.interpreter(sys.executable), code=__file__)
    with store.locked("tests/cuda13-venv") as env:
        if store.current(env, want):
            return env
        venv.create(env, with_pip=True, clear=True)
        python = str(env / "bin" / "python")
        _pip("install", "-q", "--no-deps", *CUDA13_VENV, python=python)
        with store.locked("tests/wheels"):
            WHEELS.mkdir(parents=True, exist_ok=True)
            _pip("download", "--isolated", "--no-deps", "--only-binary=:all:", "-d", str(WHEELS),
                 "bitsandbytes==0.49.2", python=python)
        _pip("install", "-q", "--isolated", "--no-deps", "--no-index", "--find-links", str(WHEELS),
             "bitsandbytes==0.49.2", python=python)
        store.done(env, want)
        return env


def readelf_cuda(root: Path) -> dict[str, dict[str, list[str] | str | None]]:
    """The ground truth: `readelf -dW` of every shared object under root -> its CUDA NEEDED and SONAME."""
    cuda = re.compile(r"^lib(cudart|cublas|cublasLt|nvrtc|nvJitLink|cupti)(-[0-9a-f]{8})?\.so\.\d")
    truth = {}
    for so in sorted(root.rglob("*.so*")):
        if so.is_symlink() or not so.is_file():
            continue
        out = subprocess.run(["readelf", "-dW", str(so)], capture_output=True, text=True, check=False).stdout
        needed = [n for n in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out) if cuda.match(n)]
        soname = next(iter(re.findall(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", out)), None)
        soname = soname if soname and cuda.match(soname) else None
        if needed or soname:
            truth[str(so.relative_to(root))] = {"needed": needed, "soname": soname}
    return truth


def readelf_needed(root: Path) -> dict[str, list[str]]:
    """`readelf -dW` of every shared object under root -> all its NEEDED entries (CUDA or not)."""
    truth = {}
    for so in sorted(root.rglob("*.so*")):
        if so.is_symlink() or not so.is_file():
            continue
        out = subprocess.run(["readelf", "-dW", str(so)], capture_output=True, text=True, check=False).stdout
        truth[str(so.relative_to(root))] = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    return truth


def named_in_file(root: Path, literal: bytes) -> list[str]:
    """The shared objects under root whose bytes hold `literal` as a C string (followed by NUL): what
    `strings` shows, read independently of the scanner's ELF reader."""
    return sorted(str(so.relative_to(root)) for so in root.rglob("*.so*")
                  if so.is_file() and not so.is_symlink() and literal + b"\0" in so.read_bytes())


def requires_dist(root: Path, name: str) -> list[str]:
    """The Requires-Dist lines of `name`'s METADATA under root."""
    [meta] = [p for p in root.glob("*.dist-info/METADATA")
              if re.search(rf"^Name: {re.escape(name)}$", p.read_text(), re.M | re.I)]
    return re.findall(r"^Requires-Dist: (.*)$", meta.read_text(), re.M)


def cudart_major(names: list[str]) -> int | None:
    """The CUDA major of the libcudart in a NEEDED list (libcudart.so.11.0 -> 11)."""
    for name in names:
        match = re.match(r"^libcudart(?:-[0-9a-f]{8})?\.so\.(\d+)", name)
        if match:
            return int(match.group(1))
    return None


# The stack the smoke step trains with, as the issue that asked for it checked it on the CPU: torch 2.13 (the
# machine's CPU build, for Debian's Python 3.11), the matrix's transformers and peft, and an old torchao (NGC's
# 0.13) that the test then upgrades as the bare-pip sequence's third step does.
SMOKE_STACK = ["torch==2.13.0", "transformers==5.13.1", "peft==0.19.1", "torchao==0.13.0"]


def _py311_venv(name: str, *installs: list[str]) -> Path:
    """A venv of Debian's Python 3.11 in the store's tests/<name>, each list of `installs` one pip install (a list
    starting with --no-deps installs without dependencies), built once and kept while the lists stay the same."""
    python3_11 = Path("/usr/bin/python3.11")
    if not python3_11.exists():
        raise Unavailable("Debian's /usr/bin/python3.11 is not here (the torch CPU wheel in store is for cp311)")
    want = store.stamp(list(installs), store.interpreter(str(python3_11)), code=__file__)
    with store.locked(f"tests/{name}") as env:
        if store.current(env, want):
            return env
        subprocess.run([str(python3_11), "-m", "venv", "--clear", str(env)], check=True, capture_output=True)
        for requirements in installs:
            _pip("install", "-q", *requirements, python=str(env / "bin" / "python"))
        store.done(env, want)
        return env


def smoke_venv() -> Path:
    """SMOKE_STACK (real wheels: the machine's store, then PyPI)."""
    return _py311_venv("smoke-venv", SMOKE_STACK)


def install(env: Path, *requirements: str) -> None:
    _pip("install", "-q", *requirements, python=str(env / "bin" / "python"))


def uninstall(env: Path, *names: str) -> None:
    _pip("uninstall", "-y", "-q", *names, python=str(env / "bin" / "python"))


# GPU frameworks as a user's venv may hold them on a machine where none can run on a GPU: jax with its CUDA 12
# plugin (a build for the wrong CUDA major: jax falls back to the CPU), numba-cuda, cuda-python and cupy-cuda13x
# (CUDA 13 builds; here without a driver), onnxruntime-gpu (its CUDA provider cannot find libcublasLt.so.13) with
# onnx 1.23.2 (whose default IR version, 14, onnxruntime 1.31.1 refuses). Real wheels, for Debian's Python 3.11
# like the smoke venv.
FRAMEWORKS_STACK = ["jax==0.10.2", "jaxlib==0.10.2", "numpy", "ml_dtypes", "opt_einsum", "scipy", "numba-cuda==0.30.4",
                    "cupy-cuda13x==14.2.0", "onnxruntime-gpu==1.31.1", "onnx==1.23.2"]
FRAMEWORKS_NO_DEPS = ["jax-cuda12-plugin==0.10.2"]  # its pjrt (465 MB) left out: jax cannot load it either way
# The CPU-only builds of frameworks that have GPU builds, and a build for CUDA 12: jax and jaxlib without a CUDA
# plugin, onnxruntime (not -gpu), cupy-cuda12x.
CPU_BUILDS_STACK = ["jax==0.10.2", "jaxlib==0.10.2", "onnxruntime==1.31.1", "cupy-cuda12x==14.2.0"]
# Triton and bitsandbytes beside torch (the machine's CPU build of 2.13.0, for Debian's Python 3.11): torch sees no
# GPU, and says so to both.
TORCH_FRAMEWORKS = ["torch==2.13.0", "triton==3.8.0", "bitsandbytes==0.49.2"]


def frameworks_venv() -> Path:
    return _py311_venv("frameworks-venv", FRAMEWORKS_STACK, ["--no-deps", *FRAMEWORKS_NO_DEPS])


# The smoke step's stack as a package index of real wheels (this machine's: Debian's Python 3.11, x86_64), for
# `sparkfleet matrix propose` on a canary driven locally: two releases of torchao (the old one that peft refuses,
# and 0.17.0), one of everything else. A "cpu" tree stands for download.pytorch.org/whl/cpu, which serves torch
# and its dependencies (plain pages only, as there).
SMOKE_INDEX = ["torch==2.13.0", "transformers==5.13.1", "peft==0.19.1", "torchao==0.17.0"]
SMOKE_INDEX_NO_DEPS = ["torchao==0.13.0"]


def smoke_index() -> Path:
    """SMOKE_INDEX and SMOKE_INDEX_NO_DEPS with every dependency (pip download: the machine's store, then PyPI)
    and the matrix's installer (uv),
    laid out as the test bed's index lays out its stand-ins (testbed/pyindex.py: PEP 503 pages, PEP 658 metadata,
    PEP 691 JSON for the PyPI tree); built once and kept in the store's tests/smoke-index."""
    from pyindex import installer_pin, installer_wheels, simple_pages

    python = str(smoke_venv() / "bin" / "python")
    want = store.stamp(SMOKE_INDEX, SMOKE_INDEX_NO_DEPS, installer_pin(), code=__file__)
    with store.locked("tests/smoke-index") as root:
        if store.current(root, want):
            return root
        shutil.rmtree(root, ignore_errors=True)
        flat = CACHE / "smoke-index-wheels"
        _pip("download", "-q", "-d", str(flat), *SMOKE_INDEX, python=python)
        _pip("download", "-q", "--no-deps", "-d", str(flat), *SMOKE_INDEX_NO_DEPS, python=python)
        for wheel in sorted(flat.glob("*.whl")):
            project = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
            for tree in ("pypi", "cpu") if project != "torchao" else ("pypi",):
                (root / tree / project).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(wheel, root / tree / project / wheel.name)
        for wheel in installer_wheels():  # the matrix's installer (uv), as the test bed's index has it
            (root / "pypi" / "uv").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(wheel, root / "pypi" / "uv" / wheel.name)
        simple_pages(root)
        store.done(root, want)
        return root


def cpu_builds_venv() -> Path:
    """CPU_BUILDS_STACK (real wheels from PyPI), for Debian's Python 3.11."""
    return _py311_venv("cpu-builds-venv", CPU_BUILDS_STACK)


def torch_frameworks_venv() -> Path:
    """TORCH_FRAMEWORKS (torch from the machine's store, the others from PyPI)."""
    return _py311_venv("torch-frameworks-venv", TORCH_FRAMEWORKS)


# Unsloth as the matrix's no-deps step installs it: unsloth and unsloth_zoo without their dependencies.
UNSLOTH = ["unsloth==2026.10.9", "unsloth_zoo==2026.10.9"]


def unsloth_site() -> Path:
    """UNSLOTH installed --no-deps into a folder of its own (cached), given to a venv through PYTHONPATH."""
    return _target_site("unsloth-2026.10.9-no-deps", UNSLOTH)


# What Unsloth 2026.10.9 imports that the smoke venv lacks (its no-deps step leaves them out): with them it imports
# on a machine without a GPU, and its CPU fallback is reached.
UNSLOTH_IMPORTS = ["requests==2.34.2", "urllib3==2.8.0"]


def unsloth_imports_site() -> Path:
    """UNSLOTH_IMPORTS --target'ed into a folder of its own (cached), beside unsloth_site() on PYTHONPATH."""
    return _target_site("unsloth-imports", UNSLOTH_IMPORTS)


def triton_site() -> Path:
    """Triton 3.8.0 (this machine's wheel store, cp311) --target'ed into a folder of its own, for the smoke venv
    through PYTHONPATH (the smoke venv's torch is the CPU build, which does not bring it)."""
    return _target_site("triton-3.8.0-cp311", ["triton==3.8.0"])


def _target_site(name: str, requirements: list[str]) -> Path:
    """`requirements` installed --no-deps by the smoke venv's pip into the store's tests/sites/<name>."""
    python = str(smoke_venv() / "bin" / "python")
    want = store.stamp(requirements, store.interpreter(python), code=__file__)
    with store.locked(f"tests/sites/{name}") as site:
        if store.current(site, want):
            return site
        shutil.rmtree(site, ignore_errors=True)
        _pip("install", "-q", "--no-deps", "--target", str(site), *requirements, python=python)
        store.done(site, want)
        return site
