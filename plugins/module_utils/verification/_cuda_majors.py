# Copyright: sparkfleet contributors
# Apache License 2.0
"""What a name says of the CUDA major it serves: a library's soname (SONAME_TABLE, each row backed by a real
wheel), a wheel's name or local version, a requirement's specifier. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass


def _normal(name: str) -> str:
    """PEP 503 name normalisation (as venv/_stack_matrix.normalize; these files run alone inside images)."""
    return re.sub(r"[-_.]+", "-", name).lower()


# Libraries whose soname major IS the CUDA major (libcudart.so.12 = CUDA 12), also beyond SONAME_TABLE's rows.
CUDA_MAJOR_LIBS = ("cudart", "cublas", "cublasLt", "nvrtc", "nvrtc-builtins", "nvJitLink", "cupti", "nvfatbin",
                   "nvjpeg")


# CUDA libraries versioned on their own (cuDNN 9 and NCCL 2 serve CUDA 11 to 13; cuFFT 11 is CUDA 12's, 12 is
# CUDA 13's): judged through SONAME_TABLE; a soname major without a row is reported, not judged. libcuda.so.1 is
# the driver's, which serves every CUDA major.
OTHER_CUDA_LIBS = ("cudnn", "nccl", "cufft", "cufftw", "curand", "cusparse", "cusolver", "cusolverMg", "cusparseLt",
                   "nvToolsExt", "cufile", "nvshmem_host", "cutensor", "cuda")


# The cuda-toolkit metapackage release whose extras pin each CUDA major's wheels (the test of the table reads
# these releases' Requires-Dist from PyPI).
TOOLKITS = {11: "11.8.0", 12: "12.9.1", 13: "13.0.3"}


@dataclass(frozen=True)
class Source:
    """A wheel that ships lib<library>.so.<soname major>, and how its CUDA major is known."""

    cuda_major: int
    wheel: str
    version: str
    toolkit_extra: str | None = None  # cuda-toolkit==TOOLKITS[cuda_major] pins the wheel in this extra

    def describe(self) -> str:
        how = (f"cuda-toolkit {TOOLKITS[self.cuda_major]} [{self.toolkit_extra}]" if self.toolkit_extra
               else f"its -cu{self.cuda_major} suffix")
        return f"{self.wheel} {self.version} (CUDA {self.cuda_major}: {how})"


@dataclass(frozen=True)
class SonameRow:
    library: str
    soname_major: int
    sources: tuple[Source, ...]

    @property
    def cuda_majors(self) -> tuple[int, ...]:
        return tuple(sorted({source.cuda_major for source in self.sources}))


def _rows(libraries: str, soname_major: int, *sources: tuple) -> tuple[SonameRow, ...]:
    """One row per library (space-separated: the libraries one wheel ships under one soname major)."""
    return tuple(SonameRow(library, soname_major, tuple(Source(*source) for source in sources))
                 for library in libraries.split())


# soname major -> CUDA majors, one row per (library, soname major), each CUDA major backed by a real wheel that
# ships the file (tests/integration/test_cuda_soname_table.py lists each wheel's files on PyPI and reads the
# cuda-toolkit pins). Libraries of CUDA_MAJOR_LIBS have rows too: the rows are the proof, the rule the fallback.
SONAME_TABLE = (
    *_rows("cudart", 11, (11, "nvidia-cuda-runtime-cu11", "11.8.89", "cudart")),
    *_rows("cudart", 12, (12, "nvidia-cuda-runtime-cu12", "12.9.79", "cudart")),
    *_rows("cudart", 13, (13, "nvidia-cuda-runtime", "13.0.96", "cudart")),
    *_rows("cublas", 11, (11, "nvidia-cublas-cu11", "11.11.3.6", "cublas")),
    *_rows("cublas cublasLt", 12, (12, "nvidia-cublas-cu12", "12.9.1.4", "cublas")),
    *_rows("cublas cublasLt", 13, (13, "nvidia-cublas", "13.1.1.3", "cublas")),
    *_rows("nvrtc", 11, (11, "nvidia-cuda-nvrtc-cu11", "11.8.89", "nvrtc")),
    *_rows("nvrtc", 12, (12, "nvidia-cuda-nvrtc-cu12", "12.9.86", "nvrtc")),
    *_rows("nvrtc", 13, (13, "nvidia-cuda-nvrtc", "13.0.88", "nvrtc")),
    *_rows("nvJitLink", 12, (12, "nvidia-nvjitlink-cu12", "12.9.86", "nvjitlink")),
    *_rows("nvJitLink", 13, (13, "nvidia-nvjitlink", "13.0.88", "nvjitlink")),
    *_rows("cupti", 11, (11, "nvidia-cuda-cupti-cu11", "11.8.87", "cupti")),
    *_rows("cupti", 12, (12, "nvidia-cuda-cupti-cu12", "12.9.79", "cupti")),
    *_rows("cupti", 13, (13, "nvidia-cuda-cupti", "13.0.85", "cupti")),
    *_rows("nvfatbin", 12, (12, "nvidia-nvfatbin-cu12", "12.9.82", "nvfatbin")),
    *_rows("nvfatbin", 13, (13, "nvidia-nvfatbin", "13.0.85", "nvfatbin")),
    *_rows("nvjpeg", 11, (11, "nvidia-nvjpeg-cu11", "11.9.0.86", "nvjpeg")),
    *_rows("nvjpeg", 12, (12, "nvidia-nvjpeg-cu12", "12.4.0.76", "nvjpeg")),
    *_rows("nvjpeg", 13, (13, "nvidia-nvjpeg", "13.0.1.86", "nvjpeg")),
    *_rows("curand", 10, (11, "nvidia-curand-cu11", "10.3.0.86", "curand"),
           (12, "nvidia-curand-cu12", "10.3.10.19", "curand"), (13, "nvidia-curand", "10.4.0.35", "curand")),
    *_rows("cufft cufftw", 10, (11, "nvidia-cufft-cu11", "10.9.0.58", "cufft")),
    *_rows("cufft cufftw", 11, (12, "nvidia-cufft-cu12", "11.4.1.4", "cufft")),
    *_rows("cufft cufftw", 12, (13, "nvidia-cufft", "12.0.0.61", "cufft")),
    *_rows("cusolver cusolverMg", 11, (11, "nvidia-cusolver-cu11", "11.4.1.48", "cusolver"),
           (12, "nvidia-cusolver-cu12", "11.7.5.82", "cusolver")),
    *_rows("cusolver cusolverMg", 12, (13, "nvidia-cusolver", "12.0.4.66", "cusolver")),
    *_rows("cusparse", 11, (11, "nvidia-cusparse-cu11", "11.7.5.86", "cusparse")),
    *_rows("cusparse", 12, (12, "nvidia-cusparse-cu12", "12.5.10.65", "cusparse"),
           (13, "nvidia-cusparse", "12.6.3.3", "cusparse")),
    *_rows("cufile", 0, (12, "nvidia-cufile-cu12", "1.14.1.1", "cufile"), (13, "nvidia-cufile", "1.15.1.6", "cufile")),
    *_rows("nvToolsExt", 1, (11, "nvidia-nvtx-cu11", "11.8.86", "nvtx"), (12, "nvidia-nvtx-cu12", "12.4.127")),
    *_rows("cudnn", 8, (11, "nvidia-cudnn-cu11", "8.9.6.50"), (12, "nvidia-cudnn-cu12", "8.9.2.26")),
    *_rows("cudnn", 9, (11, "nvidia-cudnn-cu11", "9.10.2.21"), (12, "nvidia-cudnn-cu12", "9.10.2.21"),
           (13, "nvidia-cudnn-cu13", "9.24.0.43")),
    *_rows("nccl", 2, (11, "nvidia-nccl-cu11", "2.21.5"), (12, "nvidia-nccl-cu12", "2.27.7"),
           (13, "nvidia-nccl-cu13", "2.30.7")),
    *_rows("cusparseLt", 0, (12, "nvidia-cusparselt-cu12", "0.8.1"), (13, "nvidia-cusparselt-cu13", "0.8.1")),
    *_rows("nvshmem_host", 3, (12, "nvidia-nvshmem-cu12", "3.4.5"), (13, "nvidia-nvshmem-cu13", "3.4.5")),
    *_rows("cutensor", 2, (11, "cutensor-cu11", "2.2.0"), (12, "cutensor-cu12", "2.8.1"),
           (13, "cutensor-cu13", "2.8.1")),
)


_ROWS = {(row.library, row.soname_major): row for row in SONAME_TABLE}


# A suffix-less NVIDIA wheel (nvidia-cuda-runtime, nvidia-curand): the CUDA major its table sources give it.
_SUFFIXLESS_WHEELS = {s.wheel: s.cuda_major for row in SONAME_TABLE for s in row.sources
                      if not re.search(r"-cu\d+$", s.wheel)}


_TRACKING_WHEELS = {s.wheel for row in SONAME_TABLE if row.library in CUDA_MAJOR_LIBS for s in row.sources}


def cuda_majors_of(library: str, soname_major: int) -> tuple[int, ...] | None:
    """The CUDA majors lib<library>.so.<major> belongs to; None when nothing says (a row is missing)."""
    row = _ROWS.get((library, soname_major))
    if row:
        return row.cuda_majors
    if library in CUDA_MAJOR_LIBS:
        return (soname_major,)
    return None


# auditwheel renames a library it vendors into <pkg>.libs/ to lib<name>-<8 hex>.so.<version>
# (DT_SONAME and the consumers' DT_NEEDED are patched to match); the real name is what counts.
_SONAME = re.compile(r"^lib(?P<lib>[A-Za-z_][A-Za-z0-9_+-]*?)(?P<hash>-[0-9a-f]{8})?"
                     r"\.so\.(?P<major>\d+)(?P<rest>(?:\.[0-9]+)*)$")


# CUDA sonames as C strings in .rodata: the name, then a byte that cannot continue it.
_STRING_LIBS = sorted((lib for lib in (*CUDA_MAJOR_LIBS, *OTHER_CUDA_LIBS) if lib != "cuda"), key=len, reverse=True)


SONAME_STRINGS = re.compile(rb"lib(?:" + b"|".join(re.escape(lib.encode()) for lib in _STRING_LIBS)
                            + rb")\.so\.\d+(?:\.\d+)*(?![A-Za-z0-9_.+-])")


# Builds of one library for several CUDA versions, told apart by a version in
# the file's path (bitsandbytes: libbitsandbytes_cuda118.so .. _cuda130.so; cu12/ and cu13/ folders).
_VARIANT_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:cuda|cu)(?P<ver>\d{2,3})(?![0-9])")


@dataclass
class CudaLink:
    library: str  # e.g. "cudart"
    soname: str  # the real name, e.g. "libcudart.so.12" (also for a renamed, vendored copy)
    major: int
    tracks_cuda: bool  # the major is the CUDA major
    elf_name: str = ""  # the name in the ELF file when a vendoring tool renamed it

    @property
    def cuda_majors(self) -> tuple[int, ...] | None:
        return cuda_majors_of(self.library, self.major)

    def excludes(self, expected_major: int) -> bool:
        """Known to belong to other CUDA majors only."""
        return self.cuda_majors is not None and expected_major not in self.cuda_majors

    def conclusive(self, expected_major: int) -> bool:
        """Says whether the expected major is served: it excludes it, or names it alone."""
        return self.cuda_majors is not None and (self.excludes(expected_major) or self.cuda_majors == (expected_major,))

    def as_dict(self) -> dict:
        found = {"library": self.library, "soname": self.soname, "major": self.major,
                 "tracks_cuda_major": self.tracks_cuda}
        if self.elf_name != self.soname:
            found["vendored_as"] = self.elf_name
        if not self.tracks_cuda:
            majors = self.cuda_majors
            found["cuda_majors"] = list(majors) if majors is not None else None
        return found

    def describe(self) -> str:
        text = self.soname if self.elf_name == self.soname else f"{self.soname} (vendored as {self.elf_name})"
        if not self.tracks_cuda and self.cuda_majors is not None:
            text += f" (CUDA {', '.join(map(str, self.cuda_majors))})"
        return text


def cuda_link(soname: str) -> CudaLink | None:
    """Classify one soname (renamed vendored copies by their real name); None when it is not CUDA's."""
    match = _SONAME.match(soname)
    if not match:
        return None
    lib = match.group("lib")
    if lib not in CUDA_MAJOR_LIBS and lib not in OTHER_CUDA_LIBS:
        return None
    real = f"lib{lib}.so.{match.group('major')}{match.group('rest')}"
    return CudaLink(lib, real, int(match.group("major")), lib in CUDA_MAJOR_LIBS, soname)


def token_major(digits: str) -> int | None:
    """The CUDA major of a version token: 12 -> 12, 118 -> 11, 126 -> 12, 130 -> 13, 92 -> 9."""
    if len(digits) == 2:
        return int(digits) if 10 <= int(digits) <= 19 else int(digits[0])
    if len(digits) == 3:
        return int(digits[:2]) if 10 <= int(digits[:2]) <= 19 else int(digits[0])
    return None


_NAME_TOKEN = re.compile(r"^(?:cu|cuda)(\d{2,3})x?$")


_LOCAL_TOKEN = re.compile(r"(?:^|[.+])(?:cu|cuda)(\d{2,3})(?:$|[.])")


_CUDA_WHEEL = re.compile(r"^(?:nvidia-[a-z0-9-]+|cutensor)-cu(\d+)$")


def name_major(name: str, version: str = "") -> tuple[int, str] | None:
    """(CUDA major, the token) a distribution's own name or local version names: cupy-cuda12x, torch 2.5+cu124."""
    for token in _normal(name).split("-"):
        match = _NAME_TOKEN.match(token)
        if match and token_major(match.group(1)):
            return token_major(match.group(1)), token
    local = version.partition("+")[2]
    match = _LOCAL_TOKEN.search(local) if local else None
    if match and token_major(match.group(1)):
        return token_major(match.group(1)), f"+{local}"
    if _normal(name) in ("cuda-bindings", "cuda-python") and re.match(r"^\d+\.", version):
        return int(version.split(".")[0]), f"version {version}"  # their major is the CUDA major they bind
    return None


def cuda_wheel_major(name: str, version: str | None = None) -> int | None:
    """The CUDA major of one of NVIDIA's CUDA wheels (nvidia-*-cuNN, cutensor-cuNN, a suffix-less CUDA 13
    name of SONAME_TABLE's sources, whose version gives the major of a tracking library); None for others."""
    normal = _normal(name)
    match = _CUDA_WHEEL.match(normal)
    if match:
        return int(match.group(1))
    if normal in _TRACKING_WHEELS and version and re.match(r"^\d+\.", version):
        return int(version.split(".")[0])
    return _SUFFIXLESS_WHEELS.get(normal)


_REQUIREMENT = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?(?P<spec>[^;()]*)\)?"
                          r"\s*(?:;\s*(?P<marker>.*))?$")


_CLAUSE = re.compile(r"(?P<op>===|==|~=|>=|<=|!=|>|<)\s*(?P<major>\d+)(?P<rest>[0-9.*a-z+]*)")


def spec_majors(spec: str) -> tuple[int, ...] | None:
    """The majors a version specifier admits, when it bounds them: ==13.*, ~=13.0, >=12.9,<13 -> (13,), (13,), (12,)."""
    low = high = None
    for clause in _CLAUSE.finditer(spec):
        op, major = clause.group("op"), int(clause.group("major"))
        if op in ("==", "===", "~="):
            return (major,)
        if op in (">=", ">"):
            low = major if low is None else max(low, major)
        elif op == "<":
            # <14 and <14.0.0 admit no 14; <13.5 admits 13
            top = major - 1 if re.fullmatch(r"(?:\.0)*", clause.group("rest")) else major
            high = top if high is None else min(high, top)
        elif op == "<=":
            high = major if high is None else min(high, major)
    if low is not None and high is not None and low <= high:
        return tuple(range(low, high + 1))
    return None


@dataclass
class Requirement:
    text: str
    name: str
    cuda_majors: tuple[int, ...]
    conditional: bool  # behind an extra or a marker
    installed: str | None  # the installed version of the required distribution


def cuda_requirements(requires: list[str], installed: dict[str, str]) -> list[Requirement]:
    """The Requires-Dist entries on CUDA wheels, with the majors they name (the installed version's, if any)."""
    found = []
    for text in requires:
        match = _REQUIREMENT.match(text)
        if not match:
            continue
        name = _normal(match.group("name"))
        have = installed.get(name)
        if _CUDA_WHEEL.match(name) or name in _SUFFIXLESS_WHEELS:
            major = cuda_wheel_major(name, have)
            majors = (major,) if major else None
            if majors is None or (name in _TRACKING_WHEELS and not have):
                majors = spec_majors(match.group("spec")) or majors
        elif name in ("cuda-toolkit", "cuda-bindings", "cuda-python"):
            majors = (int(have.split(".")[0]),) if have and re.match(r"^\d+\.", have) else \
                spec_majors(match.group("spec"))
        else:
            continue
        if majors:
            found.append(Requirement(text.strip(), name, majors, bool(match.group("marker")), have))
    return found


def variant_key(relpath: str) -> tuple[str, str] | None:
    """(the path with its CUDA version replaced by '{}', the version) or None when it names none."""
    found = list(_VARIANT_TOKEN.finditer(relpath))
    if len(found) != 1:
        return None
    token = found[0]
    key = relpath[: token.start("ver")] + "{}" + relpath[token.end("ver"):]
    return key, token.group("ver")
