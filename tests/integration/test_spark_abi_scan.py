"""spark_abi_scan on real ELF files installed by pip into real venvs.

1. Wheels built here: gcc links small shared objects against stub libraries
   whose SONAME is libcudart.so.12 or libcudart.so.13 (the stand-ins for
   NVIDIA's runtime, at the vendor boundary), packed as wheels and installed
   with pip. The scanner must attribute each to its distribution.
2. Real wheels from PyPI, installed by pip for the Spark (aarch64) and for
   x86_64: bitsandbytes 0.49.2 (builds for CUDA 11.8 .. 13.0, one loaded at
   run time), cupy-cuda12x (links CUDA 12 without shipping it), NVIDIA's
   CUDA 12 runtime; the real CUDA 13 torch 2.14.1 with its CUDA 13 wheels
   from this machine's wheel store; wheels repaired by the real auditwheel
   (a vendored, renamed runtime). readelf -dW is the ground truth.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import wheels
from pyindex import build_wheel

from conftest import BIN, run_module


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


# Real wheels. readelf -dW is the ground truth in each test (wheels.readelf_cuda).


def _site(spec: str, target: dict) -> Path:
    try:
        return wheels.pypi_site(spec, target)
    except wheels.Unavailable as exc:
        pytest.fail(f"{spec} for {target['arch']} could not be fetched from PyPI: {exc}")


def _scan(path: Path, **args) -> dict:
    result = run_module("spark_abi_scan", {"path": str(path), **args})
    assert not result["failed"], result.get("msg")
    return result


@pytest.mark.network
@pytest.mark.parametrize("target", [wheels.SPARK, wheels.X86_64], ids=lambda t: t["arch"])
def test_real_bitsandbytes_ships_variants_not_a_mismatch(target):
    """bitsandbytes 0.49.2 ships libbitsandbytes_cuda118.so .. _cuda130.so and loads the one torch's CUDA names."""
    site = _site("bitsandbytes==0.49.2", target)
    truth = wheels.readelf_cuda(site)
    builds = {re.search(r"_cuda(\d+)\.so$", path).group(1): wheels.cudart_major(t["needed"])
              for path, t in truth.items() if re.search(r"libbitsandbytes_cuda\d+\.so$", path)}
    assert builds["130"] == 13 and builds["128"] == 12 and builds["118"] == 11, builds

    result = _scan(site)
    assert result["verdict"] == "ok", result["findings"]
    assert result["findings"] == []
    [variants] = result["variants"]
    assert variants["distribution"] == "bitsandbytes" and variants["version"] == "0.49.2"
    assert variants["family"] == "bitsandbytes/libbitsandbytes_cuda{}.so"
    assert {v: majors for v, majors in variants["builds"].items()} == {v: [m] for v, m in builds.items()}
    assert variants["majors"] == sorted(set(builds.values())) == [11, 12, 13]
    assert variants["serves"] == "bitsandbytes/libbitsandbytes_cuda130.so"
    assert variants["forced_by"] is None


@pytest.mark.network
def test_real_bitsandbytes_forced_to_a_cuda12_build_is_a_finding():
    site = _site("bitsandbytes==0.49.2", wheels.SPARK)
    needed = wheels.readelf_cuda(site)["bitsandbytes/libbitsandbytes_cuda128.so"]["needed"]
    assert wheels.cudart_major(needed) == 12

    result = _scan(site, environment={"BNB_CUDA_VERSION": "128"})
    assert result["verdict"] == "mismatch"
    [finding] = result["findings"]
    assert finding.startswith("bitsandbytes 0.49.2: BNB_CUDA_VERSION=128 forces "
                              "bitsandbytes/libbitsandbytes_cuda128.so, which links libcudart.so.12")
    assert finding.endswith("(expected 13); unset BNB_CUDA_VERSION")
    assert all(name in finding for name in needed)
    assert result["variants"][0]["forced_by"] == "BNB_CUDA_VERSION=128"

    missing = _scan(site, environment={"BNB_CUDA_VERSION": "127"})
    assert missing["findings"] == [
        "bitsandbytes 0.49.2: BNB_CUDA_VERSION=127 asks for bitsandbytes/libbitsandbytes_cuda127.so, which it "
        "does not ship (builds: 118, 120, 121, 122, 123, 124, 125, 126, 128, 129, 130); unset BNB_CUDA_VERSION"]


@pytest.mark.network
def test_real_bitsandbytes_has_no_build_for_a_later_cuda():
    site = _site("bitsandbytes==0.49.2", wheels.SPARK)
    [finding] = _scan(site, expected_cuda_major=14)["findings"]
    assert finding.startswith("bitsandbytes 0.49.2: no build for CUDA 14 among its variants "
                              "bitsandbytes/libbitsandbytes_cuda{118,120,121,122,123,124,125,126,128,129,130}.so")


# Sonames whose major is not the CUDA major, as the CUDA toolkit's wheels ship them (the scanner's
# SONAME_TABLE is tested against the wheels themselves in test_cuda_soname_table.py): what a CUDA 13 scan
# must say of each, written here from NVIDIA's wheels (cuda-toolkit 12.9.1 pins nvidia-cufft-cu12 11.4.1.4,
# which ships libcufft.so.11; 13.0.3 pins nvidia-cufft 12.0.0.61, libcufft.so.12; and so on).
NOT_TRACKING_IN_CUDA13 = {
    "libcufft.so.11": "(CUDA 12)",  # CUDA 13 ships libcufft.so.12
    "libcusolver.so.11": "(CUDA 11, 12)",  # CUDA 13 ships libcusolver.so.12
    "libcurand.so.10": None,  # CUDA 11, 12 and 13 all ship libcurand.so.10
    "libcusparse.so.12": None,  # CUDA 12 and 13 both ship libcusparse.so.12
    "libcudnn.so.9": None,  # nvidia-cudnn-cu12 and -cu13 9.x
    "libnccl.so.2": None,
    "libcufile.so.0": None,
    "libnvshmem_host.so.3": None,
    "libcusparseLt.so.0": None,
}


@pytest.mark.network
def test_real_wheel_that_links_cuda12_without_shipping_it():
    """cupy-cuda12x for the Spark links CUDA 12's libraries and ships none: one finding per library that is
    CUDA 12's, by its soname (libcublas.so.12) or through the table (libcufft.so.11 is CUDA 12's cuFFT)."""
    site = _site("cupy-cuda12x==14.2.0", wheels.SPARK)
    truth = wheels.readelf_cuda(site)
    linked12 = sorted({n for t in truth.values() for n in t["needed"] if re.search(r"\.so\.12", n)})
    assert linked12 == ["libcublas.so.12", "libnvrtc.so.12"]
    assert not [t["soname"] for t in truth.values() if t["soname"]], "cupy ships no CUDA library"
    others = sorted({n for needed in wheels.readelf_needed(site).values() for n in needed
                     if re.match(r"^lib(cufft|cusolver|curand|cusparse)\.so", n)})
    assert others == ["libcufft.so.11", "libcurand.so.10", "libcusolver.so.11", "libcusparse.so.12"]

    result = _scan(site)
    assert result["verdict"] == "mismatch"
    expected = [f"cupy-cuda12x 14.2.0: links {n} (expected 13)" for n in linked12]
    expected += [f"cupy-cuda12x 14.2.0: links {n} {NOT_TRACKING_IN_CUDA13[n]} (expected 13)" for n in others
                 if NOT_TRACKING_IN_CUDA13[n]]
    assert sorted(result["findings"]) == sorted(expected)
    [cupy] = result["distributions"]
    assert cupy["provides"] == [] and cupy["variants"] == []
    assert cupy["judged_by"] == "dt_needed"
    assert {e["evidence"] for e in result["findings_by_evidence"]} == {"dt_needed"}
    rand = next(link for link in cupy["links"] if link["soname"] == "libcurand.so.10")
    assert rand["cuda_majors"] == [11, 12, 13] and rand["tracks_cuda_major"] is False


@pytest.mark.network
def test_real_dlopen_wheel_for_cuda12_is_a_finding_by_its_strings():
    """cuda-bindings 12.8.0 links no CUDA library (readelf) and opens libcudart.so.12 and libnvrtc.so.12 with
    dlopen, by names in its .rodata: a finding in a CUDA 13 environment, by the strings evidence."""
    site = _site("cuda-bindings==12.8.0", wheels.SPARK)
    assert wheels.readelf_cuda(site) == {}, "cuda-bindings 12.8.0 has no CUDA DT_NEEDED or DT_SONAME"
    [runtime] = wheels.named_in_file(site, b"libcudart.so.12")
    nvrtc = wheels.named_in_file(site, b"libnvrtc.so.12")
    assert runtime.endswith("cyruntime.cpython-312-aarch64-linux-gnu.so") and nvrtc

    result = _scan(site)
    assert result["verdict"] == "mismatch"
    assert result["findings"] == [
        f"cuda-bindings 12.8.0: loads libcudart.so.12 at run time, by name ({runtime}) (expected 13)",
        f"cuda-bindings 12.8.0: loads libnvrtc.so.12 at run time, by name ({nvrtc[0]}) (expected 13)"]
    assert [e["evidence"] for e in result["findings_by_evidence"]] == ["strings", "strings"]
    [dist] = result["distributions"]
    assert dist["judged_by"] == "strings" and dist["links"] == []
    assert result["strings"]["rodata_bytes_read"] > 0 and result["strings"]["not_read_to_the_end"] == []


@pytest.mark.network
def test_real_dlopen_wheel_for_cuda13_is_clean():
    """Its CUDA 13 sibling, cuda-bindings 13.0.0, names libcudart.so.13 the same way: clean, and no note."""
    site = _site("cuda-bindings==13.0.0", wheels.SPARK)
    assert wheels.readelf_cuda(site) == {}
    assert wheels.named_in_file(site, b"libcudart.so.13") and not wheels.named_in_file(site, b"libcudart.so.12")

    result = _scan(site)
    assert result["verdict"] == "ok" and result["findings"] == [] and result["notes"] == []
    [dist] = result["distributions"]
    assert dist["judged_by"] == "strings"
    assert {"kind": "strings", "cuda_majors": [13]}.items() <= next(
        e for e in dist["evidence"] if e["kind"] == "strings").items()


JAX = "jax-cuda{major}-plugin==0.12.0.1"


@pytest.mark.network
def test_real_jax_plugin_for_cuda12_alone_is_only_a_note():
    """jax-cuda12-plugin builds CUDA's sonames at run time (readelf: no CUDA DT_NEEDED; no soname string) and
    asks for NVIDIA's CUDA 12 wheels only behind its with-cuda extra: installed alone, only its name says CUDA
    12 -- a note, not a finding."""
    site = _site(JAX.format(major=12), wheels.SPARK)
    assert wheels.readelf_cuda(site) == {}
    assert not wheels.named_in_file(site, b"libcudart.so.12")
    requires = wheels.requires_dist(site, "jax-cuda12-plugin")
    assert any(r.startswith("nvidia-cuda-runtime-cu12") and 'extra == "with-cuda"' in r for r in requires)

    result = _scan(site)
    assert result["verdict"] == "ok" and result["findings"] == []
    assert result["notes"] == [
        "jax-cuda12-plugin 0.12.0.1: its name or version says CUDA 12 (cuda12), not 13 (nothing in its files or "
        "requirements says which CUDA it loads)"]
    [dist] = result["distributions"]
    assert dist["judged_by"] is None
    uncounted = [e for e in dist["evidence"] if e["kind"] == "requires_dist"]
    assert uncounted and not any(e["counted"] for e in uncounted)


@pytest.mark.network
def test_real_jax_plugin_for_cuda12_with_its_cuda12_wheels_is_a_finding():
    """The same plugin beside NVIDIA's CUDA 12 runtime (pip install 'jax[cuda12]' brings it): its Requires-Dist
    on nvidia-cuda-runtime-cu12 counts, the extra's wheel being installed."""
    site = _site(f"{JAX.format(major=12)} nvidia-cuda-runtime-cu12==12.8.90", wheels.SPARK)
    result = _scan(site)
    assert result["verdict"] == "mismatch"
    assert result["findings"] == [
        "jax-cuda12-plugin 0.12.0.1: requires nvidia-cuda-runtime-cu12 (CUDA 12; installed 12.8.90) (expected 13)",
        "nvidia-cuda-runtime-cu12 12.8.90: provides libcudart.so.12 (expected 13)"]
    assert [e["evidence"] for e in result["findings_by_evidence"]] == ["requires_dist", "dt_soname"]
    assert result["cuda_wheels"] == [{"name": "nvidia-cuda-runtime-cu12", "version": "12.8.90", "cuda_major": 12}]


@pytest.mark.network
def test_real_jax_plugin_for_cuda13_with_its_cuda13_wheels_is_clean():
    site = _site(f"{JAX.format(major=13)} nvidia-cuda-runtime==13.0.96", wheels.SPARK)
    assert any(r.startswith("nvidia-cuda-runtime>=13") for r in wheels.requires_dist(site, "jax-cuda13-plugin"))
    result = _scan(site)
    assert result["verdict"] == "ok" and result["findings"] == [] and result["notes"] == []
    by_name = {d["name"]: d for d in result["distributions"]}
    assert by_name["jax-cuda13-plugin"]["judged_by"] == "requires_dist"
    assert by_name["nvidia-cuda-runtime"]["judged_by"] == "dt_soname"
    assert result["cuda_wheels"] == [{"name": "nvidia-cuda-runtime", "version": "13.0.96", "cuda_major": 13}]


@pytest.mark.network
def test_the_gpu_verification_names_the_frameworks_it_did_not_probe():
    """Without --frameworks the probe runs torch only: the real jax-cuda13-plugin and cuda-bindings on its path are
    listed as installed and not probed, in the result and in the note the verification line carries. With it (the
    default) each is probed and judged here, where there is no GPU: jax's plugin without jax does not import, and
    cuda-bindings finds no driver."""
    site = _site("jax-cuda13-plugin==0.12.0.1 cuda-bindings==13.0.0", wheels.X86_64)
    args = {"python": sys.executable, "spark": False, "timeout": 120, "environment": {"PYTHONPATH": str(site)}}
    result = run_module("spark_gpu_verify", {**args, "frameworks": False})
    assert result["frameworks"] == {"probed": ["torch"], "results": [], "hung": None, "not_probed": [
        {"framework": "jax", "distributions": ["jax-cuda13-plugin 0.12.0.1"]},
        {"framework": "cuda-python", "distributions": ["cuda-bindings 13.0.0"]}]}
    assert ("probed torch only; installed, not probed: jax (jax-cuda13-plugin 0.12.0.1), cuda-python "
            "(cuda-bindings 13.0.0)") in result["notes"]
    assert result["verdict"] == "failed"  # no GPU here: the frameworks are listed whatever the verdict
    probed = {r["name"]: r for r in run_module("spark_gpu_verify", args)["frameworks"]["results"]}
    assert (probed["jax"]["verdict"], probed["jax"]["stage"]) == ("failed", "import")
    assert (probed["cuda-python"]["verdict"], probed["cuda-python"]["stage"]) == ("failed", "device")


@pytest.fixture(scope="module")
def vendored(tmp_path_factory) -> dict[str, Path]:
    """Wheels repaired by the real auditwheel: it copies the CUDA runtime the extension links
    into vendorer.libs/ as libcudart-<hash>.so.12.8.90 and patches DT_NEEDED to that name.
    The runtime itself is a gcc-built stub with NVIDIA's soname and file name (the vendor boundary).
    """
    work = tmp_path_factory.mktemp("vendored")
    stub = work / "stub"
    stub.mkdir()
    (work / "rt.c").write_text("int cudaRuntimeGetVersion(int *v) { *v = 12080; return 0; }\n")
    (work / "k.c").write_text("extern int cudaRuntimeGetVersion(int *v);\n"
                              "int kernel(void) { int v; return cudaRuntimeGetVersion(&v); }\n")
    gcc("-shared", "-fPIC", "-Wl,-soname,libcudart.so.12", "-o", str(stub / "libcudart.so.12.8.90"),
        str(work / "rt.c"))
    (stub / "libcudart.so.12").symlink_to("libcudart.so.12.8.90")
    gcc("-shared", "-fPIC", "-o", str(work / "_ext.so"), str(work / "k.c"), f"-L{stub}", "-Wl,--no-as-needed",
        "-l:libcudart.so.12")
    raw = build_wheel(work / "raw", "vendorer", "1.0.0", {"vendorer/_ext.so": (work / "_ext.so").read_bytes(),
                                                          "vendorer/__init__.py": b""},
                      tag="py3-none-linux_x86_64")
    subprocess.run([str(BIN / "auditwheel"), "repair", "--plat", "auto", "-w", str(work / "repaired"), str(raw)],
                   check=True, capture_output=True, env={**os.environ, "LD_LIBRARY_PATH": str(stub),
                                                         "PATH": f"{BIN}:{os.environ['PATH']}"})
    [repaired] = (work / "repaired").glob("*.whl")
    sites = {}
    for case in ("linked", "dlopened"):
        site = work / case
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--isolated", "--no-deps", "--target",
                        str(site), str(repaired)], check=True, capture_output=True)
        sites[case] = site
    # Like a wheel that opens its private runtime with dlopen(): nothing links it.
    [vendored_name] = [p.name for p in (sites["dlopened"] / "vendorer.libs").iterdir()]
    subprocess.run([str(BIN / "patchelf"), "--remove-needed", vendored_name,
                    str(sites["dlopened"] / "vendorer" / "_ext.so")], check=True, capture_output=True)
    return sites


def test_auditwheel_vendored_runtime_is_judged_by_its_real_name(vendored):
    site = vendored["linked"]
    truth = wheels.readelf_cuda(site)
    [elf_name] = truth["vendorer/_ext.so"]["needed"]
    assert re.fullmatch(r"libcudart-[0-9a-f]{8}\.so\.12\.8\.90", elf_name)
    assert truth[f"vendorer.libs/{elf_name}"]["soname"] == elf_name

    result = _scan(site)
    assert result["findings"] == [
        f"vendorer 1.0.0: links libcudart.so.12.8.90 (vendored as {elf_name}) (expected 13)",
        f"vendorer 1.0.0: provides libcudart.so.12.8.90 (vendored as {elf_name}) (expected 13)",
    ]
    [dist] = result["distributions"]
    assert dist["links"] == [{"library": "cudart", "soname": "libcudart.so.12.8.90", "major": 12,
                              "tracks_cuda_major": True, "vendored_as": elf_name}]
    assert dist["cuda_majors"] == [12]


def test_auditwheel_vendored_runtime_nothing_links_is_a_bundle(vendored):
    site = vendored["dlopened"]
    truth = wheels.readelf_cuda(site)
    assert "vendorer/_ext.so" not in truth, "patchelf left the extension linking the runtime"

    result = _scan(site)
    assert result["verdict"] == "ok"
    [dist] = result["distributions"]
    [elf_name] = [t["soname"] for t in truth.values()]
    assert dist["bundles"] == [f"vendorer 1.0.0: provides libcudart.so.12.8.90 (vendored as {elf_name}) "
                               f"privately, linked by nothing here"]


@pytest.fixture(scope="module")
def cuda13_venv() -> Path:
    try:
        return wheels.cuda13_venv()
    except wheels.Unavailable as exc:
        pytest.skip(f"this machine's wheel store does not have the real CUDA 13 torch and its wheels: {exc}")


@pytest.mark.network
@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64",
                    reason="the wheel store holds x86_64 CUDA 13 torch wheels")
def test_real_cuda13_torch_with_real_bitsandbytes_is_ok(cuda13_venv):
    """What the source document promises: bitsandbytes works out of the box beside a CUDA 13 torch."""
    result = _scan(cuda13_venv)
    site = Path(result["site_packages"][0])
    truth = wheels.readelf_cuda(site)
    reported = {link.get("vendored_as", link["soname"]) for d in result["distributions"]
                for link in d["links"] + d["provides"]}
    assert {n for t in truth.values() for n in [*t["needed"], t["soname"]] if n} <= reported
    torch_majors = {wheels.cudart_major(t["needed"]) for p, t in truth.items() if p.startswith("torch/")}
    assert torch_majors - {None} == {13}

    assert result["verdict"] == "ok", result["findings"]
    by_name = {d["name"]: d for d in result["distributions"]}
    assert by_name["torch"]["cuda_majors"] == [13]
    # torch links sonames that do not follow the CUDA major (readelf); each is judged clean through the table
    linked = {n for p, needed in wheels.readelf_needed(site).items() if p.startswith("torch/") for n in needed}
    not_tracking = sorted(n for n in linked if n in NOT_TRACKING_IN_CUDA13)
    assert {"libcurand.so.10", "libcudnn.so.9"} <= set(not_tracking), not_tracking
    torch_links = {link["soname"]: link for link in by_name["torch"]["links"]}
    for soname in not_tracking:
        assert NOT_TRACKING_IN_CUDA13[soname] is None, soname
        assert 13 in torch_links[soname]["cuda_majors"], torch_links[soname]
    assert by_name["torch"]["judged_by"] == "dt_needed" and by_name["torch"]["notes"] == []
    assert result["notes"] == []
    assert by_name["nvidia-cuda-runtime"]["provides"][0]["soname"].startswith("libcudart.so.13")
    [variants] = result["variants"]
    assert variants["serves"] == "bitsandbytes/libbitsandbytes_cuda130.so"
    assert result["unreadable"] == []


@pytest.mark.network
def test_a_cuda12_runtime_left_in_nvidias_folder_is_a_finding():
    """nvidia-cuda-runtime-cu12 puts libcudart.so.12 where every wheel's RPATH looks: always a finding."""
    site = _site("nvidia-cuda-runtime-cu12==12.8.90", wheels.SPARK)
    truth = wheels.readelf_cuda(site)
    assert truth["nvidia/cuda_runtime/lib/libcudart.so.12"]["soname"] == "libcudart.so.12"
    assert _scan(site)["findings"] == [
        "nvidia-cuda-runtime-cu12 12.8.90: provides libcudart.so.12 (expected 13)"]


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
