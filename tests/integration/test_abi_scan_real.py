"""spark_abi_scan on real ELF files installed by pip into real venvs.

1. Wheels built here: gcc links small shared objects against stub libraries
   whose SONAME is libcudart.so.12 or libcudart.so.13 (the stand-ins for
   NVIDIA's runtime, at the vendor boundary), packed as wheels and installed
   with pip. The scanner must attribute each to its distribution.
2. Real wheels: torch 2.14.1 (a CUDA 13 build), NVIDIA's CUDA 12 and 13
   runtime wheels, installed with pip; readelf -d is the ground truth.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from pyindex import build_wheel

from conftest import REPO, run_module

CACHE = REPO / ".cache" / "tests"


def gcc(*args: str) -> None:
    subprocess.run(["gcc", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def built_venv(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("abi")
    runtime = work / "cudart.c"
    runtime.write_text("int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }\n")
    user = work / "kernel.c"
    user.write_text("extern int cudaRuntimeGetVersion(int *v);\n"
                    "int kernel(void) { int v; return cudaRuntimeGetVersion(&v); }\n")
    for major in (12, 13):
        stub = work / f"stub{major}"
        stub.mkdir()
        gcc("-shared", "-fPIC", f"-Wl,-soname,libcudart.so.{major}", "-o", str(stub / f"libcudart.so.{major}"),
            str(runtime))
    cupti = work / "cupti.c"
    cupti.write_text("int cuptiGetVersion(unsigned *v) { *v = 24; return 0; }\n")
    gcc("-shared", "-fPIC", "-Wl,-soname,libcupti.so.12", "-o", str(work / "libcupti.so.12"), str(cupti))

    def consumer(major: int, name: str) -> bytes:
        out = work / f"{name}-cu{major}.so"
        gcc("-shared", "-fPIC", "-o", str(out), str(user), f"-L{work / f'stub{major}'}", "-Wl,--no-as-needed",
            f"-l:libcudart.so.{major}")
        return out.read_bytes()

    wheels = [
        build_wheel(work, "bitsandbytes", "0.49.2", {"bitsandbytes/libbitsandbytes_cuda.so": consumer(12, "bnb"),
                                                     "bitsandbytes/__init__.py": b""}),
        build_wheel(work, "goodkernels", "1.0.0", {"goodkernels/_C.so": consumer(13, "good"),
                                                   "goodkernels/__init__.py": b""}),
        # Where NVIDIA's CUDA wheels put their libraries: the shared nvidia/ folder other wheels' RPATHs reach.
        build_wheel(work, "cudart-cu12-leftover", "12.4.127",
                    {"nvidia/cuda_runtime/lib/libcudart.so.12": (work / "stub12" / "libcudart.so.12").read_bytes()}),
        # A private copy that something here links (bitsandbytes asks for libcudart.so.12): flagged.
        build_wheel(work, "vendored", "0.1.0",
                    {"vendored/lib/libcudart.so.12": (work / "stub12" / "libcudart.so.12").read_bytes()}),
        # Like triton 3.6.0 (torch 2.11's): only libcupti.so.12, private, opened by its profiler alone.
        build_wheel(work, "tritonlike", "3.6.0",
                    {"tritonlike/backends/nvidia/lib/cupti/libcupti.so.12": (work / "libcupti.so.12").read_bytes()}),
        # Like triton, which ships libcupti.so.12 and libcupti.so.13 and picks one at run time.
        build_wheel(work, "bundler", "3.8.0",
                    {"bundler/lib/old/libcudart.so.12": (work / "stub12" / "libcudart.so.12").read_bytes(),
                     "bundler/lib/new/libcudart.so.13": (work / "stub13" / "libcudart.so.13").read_bytes()}),
        build_wheel(work, "purepython", "2.0", {"purepython/__init__.py": b"", "purepython/broken.so": b"\x7fELF\x02"}),
    ]
    env = work / "venv"
    venv.create(env, with_pip=True)
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    *map(str, wheels)], check=True, capture_output=True)
    return env


def test_per_distribution_report_of_gcc_built_wheels(built_venv):
    result = run_module("spark_abi_scan", {"path": str(built_venv)})
    assert result["verdict"] == "mismatch"
    assert result["findings"] == [
        "bitsandbytes 0.49.2: links libcudart.so.12 (expected 13)",
        "cudart-cu12-leftover 12.4.127: provides libcudart.so.12 (expected 13)",
        "vendored 0.1.0: provides libcudart.so.12 (expected 13)",
    ]
    by_name = {d["name"]: d for d in result["distributions"]}
    assert by_name["tritonlike"]["mismatches"] == []
    assert by_name["tritonlike"]["bundles"] == [
        "tritonlike 3.6.0: provides libcupti.so.12 privately, linked by nothing here"]
    assert by_name["goodkernels"]["cuda_majors"] == [13]
    assert by_name["goodkernels"]["mismatches"] == []
    assert by_name["bundler"]["mismatches"] == []
    assert by_name["bundler"]["bundles"] == ["bundler 3.8.0: provides libcudart.so.12 beside libcudart.so.13"]
    assert by_name["bitsandbytes"]["links"] == [
        {"library": "cudart", "soname": "libcudart.so.12", "major": 12, "tracks_cuda_major": True}]
    assert "purepython" not in by_name
    assert [s["reason"] for s in result["unreadable"]] == ["truncated: 5 bytes, an ELF header needs 64"]
    assert result["unreadable"][0]["path"].endswith("purepython/broken.so")


def test_expecting_cuda_12_flips_the_findings(built_venv):
    result = run_module("spark_abi_scan", {"path": str(built_venv), "expected_cuda_major": 12})
    assert result["findings"] == ["goodkernels 1.0.0: links libcudart.so.13 (expected 12)"]
    assert {d["name"]: d["bundles"] for d in result["distributions"]}["bundler"] == [
        "bundler 3.8.0: provides libcudart.so.13 beside libcudart.so.12"]


def test_scanning_through_the_interpreter_finds_the_same(built_venv):
    by_path = run_module("spark_abi_scan", {"path": str(built_venv)})
    by_python = run_module("spark_abi_scan", {"python": str(built_venv / "bin" / "python")})
    assert by_python["findings"] == by_path["findings"]
    assert by_python["site_packages"] == by_path["site_packages"]


def test_a_directory_that_is_no_environment_is_refused(tmp_path):
    result = run_module("spark_abi_scan", {"path": str(tmp_path)})
    assert result["failed"] is True
    assert "neither a virtual environment" in result["msg"]


REAL_WHEELS = ["torch==2.14.1", "nvidia-cuda-runtime-cu12==12.8.90", "nvidia-cuda-runtime>=13,<14"]


@pytest.fixture(scope="module")
def real_venv() -> Path:
    """torch 2.14.1 (CUDA 13, from this machine's wheel store) and NVIDIA's runtime wheels, without deps."""
    env = CACHE / "abi-real-venv"
    stamp = env / ".installed"
    if not (stamp.exists() and stamp.read_text() == repr(REAL_WHEELS)):
        venv.create(env, with_pip=True, clear=True)
        subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", *REAL_WHEELS],
                       check=True, capture_output=True)
        stamp.write_text(repr(REAL_WHEELS))
    return env


@pytest.mark.skipif(sys.platform != "linux", reason="ELF only")
def test_real_wheels_against_readelf(real_venv):
    result = run_module("spark_abi_scan", {"path": str(real_venv)})
    site = Path(result["site_packages"][0])
    truth: dict[str, set[str]] = {}
    for so in site.rglob("*.so*"):
        if so.is_symlink() or not so.is_file():
            continue
        out = subprocess.run(["readelf", "-dW", str(so)], capture_output=True, text=True, check=False).stdout
        for soname in re.findall(r"\((?:NEEDED|SONAME)\)\s+\S+ \S+: \[(lib(?:cudart|cublas|cublasLt|nvrtc)\.so\.\d+)\]",
                                 out):
            truth.setdefault(str(so), set()).add(soname)
    assert truth, "readelf found no CUDA linkage at all in the real wheels"
    reported = {link["soname"] for d in result["distributions"] for link in d["links"] + d["provides"]}
    assert set().union(*truth.values()) <= reported
    by_name = {d["name"]: d for d in result["distributions"]}
    assert by_name["torch"]["cuda_majors"] == [13]
    assert by_name["torch"]["mismatches"] == []
    assert result["findings"] == ["nvidia-cuda-runtime-cu12 12.8.90: provides libcudart.so.12 (expected 13)"]
    assert result["unreadable"] == []


@pytest.mark.testbed
def test_inside_an_image(built_venv, tmp_path):
    """The same wheels inside an aarch64 image, scanned by the image's own python3 in a container."""
    site = next(built_venv.glob("lib/python3*/site-packages"))
    context = tmp_path / "context"
    (context / "pkgs").mkdir(parents=True)
    for entry in site.iterdir():
        if entry.name.startswith(("bitsandbytes", "goodkernels", "cudart", "nvidia")):
            subprocess.run(["cp", "-a", str(entry), str(context / "pkgs")], check=True)
    (context / "Dockerfile").write_text("FROM sparkfleet/host-plain:latest\n"
                                        "COPY pkgs/ /usr/local/lib/python3.11/dist-packages/\n")
    tag = "sparkfleet-test/abi-scan:latest"
    subprocess.run(["docker", "build", "-q", "--platform", "linux/arm64", "-t", tag, str(context)], check=True,
                   capture_output=True, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    try:
        result = run_module("spark_abi_scan", {"image": tag})
    finally:
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, check=False)
    assert result["findings"] == [
        "bitsandbytes 0.49.2: links libcudart.so.12 (expected 13)",
        "cudart-cu12-leftover 12.4.127: provides libcudart.so.12 (expected 13)",
    ]
    assert "/usr/local/lib/python3.11/dist-packages" in result["site_packages"]
    assert result["system"]["cuda_home"]["exists"] is False
