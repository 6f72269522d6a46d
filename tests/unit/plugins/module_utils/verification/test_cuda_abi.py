"""The ABI scan's pure logic: the soname table row by row, the evidence parsers, and the .rodata reader on
real ELF files built here by gcc (a C string literal given to dlopen lies in .rodata)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _cuda_majors as majors
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _dist_info as dist_info
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._elf import (
    ElfSkip,
    read_rodata_matches_path,
)

# Each row of SONAME_TABLE, and what it must say: written from NVIDIA's wheels (which soname each cuda-toolkit
# release's wheel ships), independently of the table.
EXPECTED_ROWS = {
    ("cudart", 11): (11,), ("cudart", 12): (12,), ("cudart", 13): (13,),
    ("cublas", 11): (11,), ("cublas", 12): (12,), ("cublas", 13): (13,),
    ("cublasLt", 12): (12,), ("cublasLt", 13): (13,),
    ("nvrtc", 11): (11,), ("nvrtc", 12): (12,), ("nvrtc", 13): (13,),
    ("nvJitLink", 12): (12,), ("nvJitLink", 13): (13,),
    ("cupti", 11): (11,), ("cupti", 12): (12,), ("cupti", 13): (13,),
    ("nvfatbin", 12): (12,), ("nvfatbin", 13): (13,),
    ("nvjpeg", 11): (11,), ("nvjpeg", 12): (12,), ("nvjpeg", 13): (13,),
    ("curand", 10): (11, 12, 13),
    ("cufft", 10): (11,), ("cufft", 11): (12,), ("cufft", 12): (13,),
    ("cufftw", 10): (11,), ("cufftw", 11): (12,), ("cufftw", 12): (13,),
    ("cusolver", 11): (11, 12), ("cusolver", 12): (13,),
    ("cusolverMg", 11): (11, 12), ("cusolverMg", 12): (13,),
    ("cusparse", 11): (11,), ("cusparse", 12): (12, 13),
    ("cufile", 0): (12, 13),
    ("nvToolsExt", 1): (11, 12),
    ("cudnn", 8): (11, 12), ("cudnn", 9): (11, 12, 13),
    ("nccl", 2): (11, 12, 13),
    ("cusparseLt", 0): (12, 13),
    ("nvshmem_host", 3): (12, 13),
    ("cutensor", 2): (11, 12, 13),
}


def test_the_table_has_exactly_the_expected_rows():
    assert sorted((r.library, r.soname_major) for r in majors.SONAME_TABLE) == sorted(EXPECTED_ROWS)
    assert len({(r.library, r.soname_major) for r in majors.SONAME_TABLE}) == len(majors.SONAME_TABLE), "a row twice"


@pytest.mark.parametrize(("library", "major"), sorted(EXPECTED_ROWS), ids=str)
def test_each_row_judges_its_soname(library, major):
    want = EXPECTED_ROWS[(library, major)]
    link = majors.cuda_link(f"lib{library}.so.{major}")
    assert link is not None and link.library == library and link.major == major
    assert link.cuda_majors == want
    assert link.excludes(13) is (13 not in want)
    assert link.conclusive(13) is (13 not in want or want == (13,))
    row = next(r for r in majors.SONAME_TABLE if (r.library, r.soname_major) == (library, major))
    assert row.sources, "every row names the wheels that show it"
    for source in row.sources:
        assert source.cuda_major in want
        assert re.search(r"CUDA \d+: (cuda-toolkit \d+\.\d+\.\d+ \[\w+\]|its -cu\d+ suffix)", source.describe())
        if not source.toolkit_extra:
            assert source.wheel.endswith(f"-cu{source.cuda_major}"), "without a toolkit pin, the suffix says"


def test_a_soname_without_a_row_is_not_judged_and_tracking_ones_follow_their_major():
    assert majors.cuda_link("libcufft.so.13").cuda_majors is None  # no wheel ships it yet: reported, not judged
    assert majors.cuda_link("libcufft.so.13").excludes(13) is False
    assert majors.cuda_link("libcudart.so.14").cuda_majors == (14,)  # the rule beyond the rows
    assert majors.cuda_link("libcuda.so.1").cuda_majors is None  # the driver serves every CUDA
    assert majors.cuda_link("libcudart-1a2b3c4d.so.12.8.90").cuda_majors == (12,)
    assert majors.cuda_link("libfoo.so.12") is None


def test_describe_names_the_cuda_of_a_soname_that_does_not_track_it():
    assert majors.cuda_link("libcufft.so.11").describe() == "libcufft.so.11 (CUDA 12)"
    assert majors.cuda_link("libcudart.so.12").describe() == "libcudart.so.12"


@pytest.mark.parametrize(("digits", "major"), [("12", 12), ("13", 13), ("11", 11), ("92", 9), ("118", 11),
                                               ("126", 12), ("130", 13), ("102", 10), ("1", None)])
def test_token_major(digits, major):
    assert majors.token_major(digits) == major


@pytest.mark.parametrize(("name", "version", "found"), [
    ("cupy-cuda12x", "14.2.0", (12, "cuda12x")),
    ("jax-cuda13-plugin", "0.12.0.1", (13, "cuda13")),
    ("jax_cuda12_pjrt", "0.12.0.1", (12, "cuda12")),
    ("torch", "2.5.1+cu124", (12, "+cu124")),
    ("torch", "2.14.1+cu130", (13, "+cu130")),
    ("torch", "2.14.1", None),  # NGC's torch: no +cu130 tag, and that alone is not a failure
    ("cuda-bindings", "12.8.0", (12, "version 12.8.0")),
    ("cuda-python", "13.4.4", (13, "version 13.4.4")),
    ("cucumber", "1.0", None),
    ("accuracy", "1.0", None),
])
def test_name_major(name, version, found):
    assert majors.name_major(name, version) == found


@pytest.mark.parametrize(("name", "version", "major"), [
    ("nvidia-cuda-runtime-cu12", "12.8.90", 12),
    ("nvidia_cudnn_cu13", "9.24.0.43", 13),
    ("cutensor-cu11", "2.2.0", 11),
    ("nvidia-cuda-runtime", "13.0.96", 13),  # a tracking library: the version's major
    ("nvidia-cuda-runtime", "14.0.1", 14),
    ("nvidia-curand", "10.4.0.35", 13),  # suffix-less curand is CUDA 13's (cuda-toolkit 13.0.3 [curand])
    ("nvidia-ml-py", "13.580.82", None),  # NVML's Python bindings: not a CUDA build
    ("cupy-cuda12x", "14.2.0", None),
])
def test_cuda_wheel_major(name, version, major):
    assert majors.cuda_wheel_major(name, version) == major


@pytest.mark.parametrize(("spec", "expected"), [
    ("==13.*", (13,)), ("==13.0.96", (13,)), ("~=13.0", (13,)), ("===12.8.90", (12,)),
    (">=12.9.1,<14.0.0", (12, 13)), ("<13,>=12.9.2", (12,)), (">=13.0.0,<13.5", (13,)), (">=13.0.2", None),
    ("", None), ("<=12.9", None), (">=12,<=12.9", (12,)),
])
def test_spec_majors(spec, expected):
    assert majors.spec_majors(spec) == expected


def test_cuda_requirements_count_what_an_extra_installed_and_read_installed_versions():
    requires = [
        'nvidia-cuda-runtime-cu12>=12.1.105; sys_platform == "linux" and extra == "with-cuda"',
        'nvidia-cublas>=13.0.0.19; extra == "with-cuda"',
        "cuda-toolkit[cublas,cudart]==13.*",
        "cuda-bindings<14.0.0,>=12.9.1",
        "numpy>=2",
        "jax-cuda12-pjrt==0.12.0.1",
    ]
    found = {r.name: r for r in majors.cuda_requirements(requires, {"nvidia-cublas": "13.1.1.3"})}
    assert sorted(found) == ["cuda-bindings", "cuda-toolkit", "nvidia-cublas", "nvidia-cuda-runtime-cu12"]
    assert found["nvidia-cuda-runtime-cu12"].cuda_majors == (12,) and found["nvidia-cuda-runtime-cu12"].conditional
    assert found["nvidia-cuda-runtime-cu12"].installed is None
    assert found["nvidia-cublas"].installed == "13.1.1.3" and found["nvidia-cublas"].cuda_majors == (13,)
    assert found["cuda-toolkit"].cuda_majors == (13,) and not found["cuda-toolkit"].conditional
    assert found["cuda-bindings"].cuda_majors == (12, 13)


def test_parse_metadata_reads_requires_dist_up_to_the_body():
    text = ("Metadata-Version: 2.1\nName: jax-cuda12-plugin\nVersion: 0.12.0.1\n"
            "Requires-Dist: jax-cuda12-pjrt==0.12.0.1\nRequires-Dist: nvidia-cublas-cu12; extra == 'with-cuda'\n"
            "\nRequires-Dist: not a header, the description\n")
    assert dist_info.parse_metadata(text) == ("jax-cuda12-plugin", "0.12.0.1", [
        "jax-cuda12-pjrt==0.12.0.1", "nvidia-cublas-cu12; extra == 'with-cuda'"])


# .rodata on real ELF files


def gcc_so(tmp_path: Path, name: str, source: str, *flags: str) -> Path:
    c = tmp_path / f"{name}.c"
    c.write_text(source)
    out = tmp_path / f"{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", "-o", str(out), str(c), *flags], check=True,
                   capture_output=True)
    return out


DLOPEN = """#include <dlfcn.h>
void *load(void) { void *h = dlopen("libcudart.so.12", 2); return h ? h : dlopen("libnvrtc.so.13.0", 2); }
const char *message(void) { return "could not load libcudnn.so.9, see libcufft.so.11's docs"; }
"""


def test_rodata_names_are_found_with_the_projects_reader(tmp_path):
    so = gcc_so(tmp_path, "loader", DLOPEN, "-ldl")
    found = read_rodata_matches_path(str(so), majors.SONAME_STRINGS, 1 << 20)
    assert found.matches == ["libcudart.so.12", "libnvrtc.so.13.0", "libcudnn.so.9", "libcufft.so.11"]
    assert found.sections >= 1 and not found.truncated
    assert found.bytes_read < so.stat().st_size  # .rodata only, not the whole file


def test_rodata_reading_stops_at_its_limit_and_says_so(tmp_path):
    big = "const char pad[300000] = {1};\n" + DLOPEN
    so = gcc_so(tmp_path, "big", big, "-ldl")
    cut = read_rodata_matches_path(str(so), majors.SONAME_STRINGS, 4096)
    assert cut.truncated and cut.bytes_read == 4096
    whole = read_rodata_matches_path(str(so), majors.SONAME_STRINGS, 1 << 20)
    assert not whole.truncated and "libcudart.so.12" in whole.matches


def test_a_name_across_a_chunk_boundary_is_found(tmp_path):
    """The reader takes 1 MiB chunks; a name placed to straddle the first boundary is still found."""
    def build(pad: int) -> tuple[Path, int]:
        source = (f"struct s {{ char pad[{pad}]; char name[16]; }};\n"
                  "const struct s blob = {{1}, \"libcudart.so.12\"};\n")
        so = gcc_so(tmp_path, f"cross{pad}", source)
        sections = subprocess.run(["readelf", "-SW", str(so)], capture_output=True, text=True, check=True).stdout
        offset = int(re.search(r"\.rodata\s+PROGBITS\s+\S+\s+(\S+)", sections).group(1), 16)
        return so, so.read_bytes().index(b"libcudart.so.12\0") - offset

    so, where = build(1 << 20)
    shift = where - (1 << 20)  # where the blob lies in .rodata
    so, where = build((1 << 20) - 6 - shift)
    assert where < 1 << 20 < where + len("libcudart.so.12"), "the name does not straddle the boundary"
    assert read_rodata_matches_path(str(so), majors.SONAME_STRINGS, 4 << 20).matches == ["libcudart.so.12"]


def test_a_file_without_a_section_table_has_no_strings(tmp_path):
    so = gcc_so(tmp_path, "loader", DLOPEN, "-ldl")
    data = bytearray(so.read_bytes())
    data[40:48] = bytes(8)  # e_shoff = 0: no section table (what sstrip leaves)
    stripped = tmp_path / "stripped.so"
    stripped.write_bytes(bytes(data))
    found = read_rodata_matches_path(str(stripped), majors.SONAME_STRINGS, 1 << 20)
    assert found.matches == [] and found.sections == 0


def test_a_section_table_past_the_end_is_a_reason_not_a_crash(tmp_path):
    so = gcc_so(tmp_path, "loader", DLOPEN, "-ldl")
    data = bytearray(so.read_bytes())
    data[40:48] = (len(data) + 4096).to_bytes(8, "little")
    broken = tmp_path / "broken.so"
    broken.write_bytes(bytes(data))
    with pytest.raises(ElfSkip, match="truncated"):
        read_rodata_matches_path(str(broken), majors.SONAME_STRINGS, 1 << 20)
