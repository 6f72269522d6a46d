# Copyright: sparkfleet contributors
# Apache License 2.0
"""CUDA ABI checks over a Python environment: which CUDA each distribution needs, and the evidence for it.

Pure logic plus a directory walk; ELF parsing is in _elf. The kinds of evidence, strongest first (EVIDENCE):
  1. dt_needed / dt_soname: the dynamic section, what a binary loads with the program (DT_NEEDED) and what it
     provides (DT_SONAME; nvidia-cuda-runtime-cu12 provides libcudart.so.12);
  2. strings: CUDA sonames named in a binary's .rodata, the targets of dlopen() (cuda-bindings 12.8 opens
     "libnvrtc.so.12" by name and links no CUDA library);
  3. requires_dist: the distribution's Requires-Dist on CUDA wheels (nvidia-*-cuNN, cuda-toolkit==NN.*,
     cuda-bindings/cuda-python majors); one behind an extra or a marker counts only when it is installed;
  4. cuda_wheel: NVIDIA's own CUDA wheels in the environment (nvidia-*-cuNN, cutensor-cuNN and the
     suffix-less CUDA 13 names of SONAME_TABLE's sources): the vendor's statement of the build's CUDA major;
  5. name: the distribution's own name or local version (cupy-cuda12x, jax-cuda12-plugin, +cu126).
A distribution is judged by the strongest kind that is conclusive (names the expected major only, or excludes
it): a finding when that kind excludes the expected major. A weaker kind that disagrees is a note; a name
alone is never a finding.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

try:
    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._elf import (
        ElfSkip,
        read_dynamic_path,
        read_rodata_matches_path,
    )
except ImportError:  # inside an image: _program_abi_image.py runs this file beside _elf.py, as plain modules
    from _elf import ElfSkip, read_dynamic_path, read_rodata_matches_path

EVIDENCE = ("dt_needed", "dt_soname", "strings", "requires_dist", "cuda_wheel", "name")
_RANK = {"dt_needed": 0, "dt_soname": 0, "strings": 1, "requires_dist": 2, "cuda_wheel": 3, "name": 4}

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
# Bytes of .rodata read per shared object, and in all per scan: the bound of the strings evidence.
STRINGS_LIMIT_PER_FILE = 64 << 20
STRINGS_LIMIT_PER_SCAN = 512 << 20
# Builds of one library for several CUDA versions, told apart by a version in
# the file's path (bitsandbytes: libbitsandbytes_cuda118.so .. _cuda130.so; cu12/ and cu13/ folders).
_VARIANT_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:cuda|cu)(?P<ver>\d{2,3})(?![0-9])")
# Environment variables that make a distribution load one variant whatever
# the CUDA torch reports: BNB_CUDA_VERSION=128 loads libbitsandbytes_cuda128.so.
VARIANT_SELECTORS = {"bitsandbytes": "BNB_CUDA_VERSION"}


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


def parse_record(text: str) -> list[str]:
    """Paths listed in a dist-info RECORD (CSV; the first field, possibly quoted)."""
    import csv
    import io

    return [row[0] for row in csv.reader(io.StringIO(text)) if row and row[0]]


def parse_metadata(text: str) -> tuple[str | None, str | None, list[str]]:
    """Name, Version and the Requires-Dist entries of a dist-info METADATA (its headers)."""
    name = version = None
    requires = []
    for line in text.splitlines():
        if not line.strip():
            break  # headers end at the first blank line
        if line.startswith("Name:") and name is None:
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:") and version is None:
            version = line.split(":", 1)[1].strip()
        elif line.startswith("Requires-Dist:"):
            requires.append(line.split(":", 1)[1].strip())
    return name, version, requires


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


@dataclass
class DistInfo:
    name: str
    version: str
    requires: list[str]
    shared_objects: list[str]  # normalised paths listed in its RECORD


def installed_distributions(site_packages: str) -> list[DistInfo]:
    """Every distribution a dist-info directory describes, with its shared objects (from RECORD).

    Only shared-object names are kept: torch's RECORD alone lists ~20,000 files.
    """
    found = []
    try:
        entries = sorted(os.scandir(site_packages), key=lambda e: e.name)
    except OSError:
        return found
    for entry in entries:
        if not entry.name.endswith(".dist-info") or not entry.is_dir():
            continue
        name, version, requires = parse_metadata(_read_text(os.path.join(entry.path, "METADATA")))
        if name is None:
            name, _unused, version = entry.name[: -len(".dist-info")].partition("-")
        sos = [os.path.normpath(os.path.join(site_packages, rel))
               for rel in parse_record(_read_text(os.path.join(entry.path, "RECORD")))
               if is_shared_object_name(os.path.basename(rel))]
        found.append(DistInfo(name, version or "?", requires, sos))
    return found


def is_shared_object_name(name: str) -> bool:
    return name.endswith(".so") or ".so." in name


def shared_objects(root: str):
    """Yield regular files under root named like shared objects (symlinks are not followed)."""
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif is_shared_object_name(entry.name) and entry.is_file(follow_symlinks=False):
                yield entry.path


# The folder NVIDIA's CUDA wheels share (nvidia/cuda_runtime/lib, nvidia/cu13/lib):
# other wheels reach it through their RPATH ($ORIGIN/../../nvidia/...), so a
# library there is loaded by whoever asks for its soname.
SHARED_CUDA_DIR = "nvidia"


@dataclass
class SharedObject:
    relpath: str  # relative to site-packages
    needs: list[CudaLink]
    provides: CudaLink | None
    private: bool  # outside the shared nvidia/ folder
    strings: list[CudaLink] = field(default_factory=list)  # CUDA sonames named in its .rodata (dlopen targets)


@dataclass
class Variants:
    """Builds of one library for several CUDA versions; the distribution loads one at run time."""

    key: str  # the path with its CUDA version as {}
    builds: dict[str, SharedObject]  # version token -> file

    def majors_of(self, version: str) -> list[int]:
        return sorted({lk.major for lk in self.builds[version].needs if lk.tracks_cuda})

    def serving(self, expected_major: int) -> str | None:
        """The newest build that links only the expected CUDA major."""
        good = [v for v in self.builds if self.majors_of(v) == [expected_major]]
        return max(good, key=int) if good else None


def _normal(name: str) -> str:
    """PEP 503 name normalisation (as _stack_matrix.normalize; this module runs alone inside images)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Distribution:
    name: str
    version: str
    files: list[SharedObject] = field(default_factory=list)
    requires: list[Requirement] = field(default_factory=list)  # Requires-Dist on CUDA wheels
    # Filled by judge_variants(), judge_links() and judge_evidence():
    findings: list[str] = field(default_factory=list)
    bundles: list[str] = field(default_factory=list)
    variants: list[dict] = field(default_factory=list)
    evidence: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    judged_by: str | None = None
    conclusive_elf: bool = False  # the dynamic section alone settles it

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    def has_cuda_evidence(self) -> bool:
        return bool(self.needs or self.provides or self.requires or any(f.strings for f in self.files)
                    or cuda_wheel_major(self.name, self.version) or name_major(self.name, self.version))

    @property
    def needs(self) -> dict[str, CudaLink]:
        return {lk.elf_name: lk for f in self.files for lk in f.needs}

    @property
    def provides(self) -> dict[str, CudaLink]:
        return {f.provides.elf_name: f.provides for f in self.files if f.provides}

    def variant_families(self) -> list[Variants]:
        groups: dict[str, dict[str, SharedObject]] = {}
        for shared in self.files:
            keyed = variant_key(shared.relpath)
            if keyed and any(lk.tracks_cuda for lk in shared.needs):
                groups.setdefault(keyed[0], {})[keyed[1]] = shared
        return [Variants(key, builds) for key, builds in sorted(groups.items()) if len(builds) > 1]

    def outside_families(self) -> list[SharedObject]:
        in_family = {id(f) for family in self.variant_families() for f in family.builds.values()}
        return [f for f in self.files if id(f) not in in_family]

    def judge_variants(self, expected_major: int, environment: dict[str, str]) -> set[str]:
        """Judge the variant families; return the CUDA sonames the files loaded at run time link."""
        loaded = self.outside_families()
        for family in self.variant_families():
            chosen = self._judge_family(family, expected_major, environment)
            if chosen in family.builds:
                loaded.append(family.builds[chosen])
        return {lk.elf_name for f in loaded for lk in f.needs}

    def judge_links(self, expected_major: int, linked: set[str]) -> None:
        """Findings and bundles from what the files outside variant families link and provide (DT_NEEDED, DT_SONAME)."""
        label = self.label
        from_variants = list(self.findings)  # judge_variants ran first
        for family in self.variants:
            self.conclusive_elf = True  # a family's builds link CUDA by DT_NEEDED
            served = family["serves"] or "no build"
            self._evidence("dt_needed", family["majors"], f"builds {family['family']} for CUDA "
                           f"{', '.join(map(str, family['majors']))}; {served} is loaded"
                           + (f" ({family['forced_by']})" if family["forced_by"] else ""),
                           "; ".join(f for f in from_variants if family["family"].replace("{}", "") in f
                                     or family["family"] in f) or None)
        linking = False
        for shared in self.outside_families():
            for link in shared.needs:
                if link.conclusive(expected_major):
                    self.conclusive_elf = linking = True
                finding = f"{label}: links {link.describe()} (expected {expected_major})"
                if link.excludes(expected_major) and finding not in self.findings:
                    self.findings.append(finding)
                    self._evidence("dt_needed", link.cuda_majors, f"{shared.relpath} links {link.describe()}", finding)
                elif not link.excludes(expected_major):
                    self._evidence("dt_needed", link.cuda_majors, f"links {link.describe()}")
        provided = self.provides.values()
        for shared in self.files:
            link = shared.provides
            if not link or link.cuda_majors is None:
                continue
            if link.conclusive(expected_major):
                self.conclusive_elf = True
            if not link.excludes(expected_major):
                self._evidence("dt_soname", link.cuda_majors, f"provides {link.describe()}")
                continue
            beside = f"lib{link.library}.so.{expected_major}" if link.tracks_cuda else f"lib{link.library} for CUDA " \
                f"{expected_major}"
            if any(other.library == link.library and not other.excludes(expected_major) for other in provided):
                self.bundles.append(f"{label}: provides {link.describe()} beside {beside}")
            elif shared.private and link.elf_name not in linked:
                self.bundles.append(f"{label}: provides {link.describe()} privately, linked by nothing here")
            else:
                finding = f"{label}: provides {link.describe()} (expected {expected_major})"
                self.findings.append(finding)
                self._evidence("dt_soname", link.cuda_majors, f"{shared.relpath} is {link.describe()}", finding)
        if self.findings:
            found_by = [e["kind"] for e in self.evidence if e["finding"]]
            self.judged_by = "dt_needed" if from_variants or "dt_needed" in found_by else "dt_soname"
        elif self.conclusive_elf:
            self.judged_by = "dt_needed" if linking or self.variants else "dt_soname"

    def _evidence(self, kind: str, majors, detail: str, finding: str | None = None, counted: bool = True) -> None:
        """One piece of evidence (once: a library linked by 60 files is one item)."""
        item = {"kind": kind, "cuda_majors": list(majors) if majors is not None else None, "detail": detail,
                "counted": counted, "finding": finding}
        if item not in self.evidence:
            self.evidence.append(item)

    def judge_evidence(self, expected_major: int) -> None:
        """The weaker kinds (strings, requires_dist, cuda_wheel, name), after judge_links: the strongest
        conclusive kind judges; a weaker one that names another major is a note."""
        label = self.label
        own = {f.provides.library for f in self.files if f.provides}  # what it bundles: its dlopen targets too
        weaker: list[tuple[str, bool, str, str]] = []  # (kind, excludes, detail, finding line)
        named: dict[str, tuple[CudaLink, str]] = {}
        for shared in self.files:
            for link in shared.strings:
                if link.cuda_majors is not None and link.library not in own:
                    named.setdefault(link.soname, (link, shared.relpath))
        by_library: dict[str, list[tuple[CudaLink, str]]] = {}
        for link, relpath in named.values():
            by_library.setdefault(link.library, []).append((link, relpath))
        for _library, links in sorted(by_library.items()):
            # a list of candidates (libnvrtc.so.13, then .so.12) serves the expected major when one does
            serves = any(not link.excludes(expected_major) for link, _path in links)
            for link, relpath in links:
                excludes = link.excludes(expected_major) and not serves
                detail = f"{relpath} names {link.soname}"
                weaker.append(("strings", excludes, detail, f"{label}: loads {link.describe()} at run time, "
                               f"by name ({relpath}) (expected {expected_major})"))
                self._evidence("strings", link.cuda_majors, detail)
        for req in self.requires:
            counted = not req.conditional or req.installed is not None
            if req.installed:
                state = f"installed {req.installed}"
            else:
                state = "not installed" if req.conditional else "not installed, unconditional"
            detail = f"Requires-Dist: {req.text} ({state})"
            self._evidence("requires_dist", req.cuda_majors, detail, counted=counted)
            if counted:
                majors = ", ".join(map(str, req.cuda_majors))
                weaker.append(("requires_dist", expected_major not in req.cuda_majors, detail,
                               f"{label}: requires {req.name} (CUDA {majors}; {state}) (expected {expected_major})"))
        major = cuda_wheel_major(self.name, self.version)
        if major is not None:
            detail = f"NVIDIA's CUDA {major} wheel {self.name}"
            self._evidence("cuda_wheel", (major,), detail)
            weaker.append(("cuda_wheel", major != expected_major, detail,
                           f"{label}: NVIDIA's CUDA {major} build of its library (expected {expected_major})"))
        else:
            token = name_major(self.name, self.version)
            if token:
                detail = f"its name or version says CUDA {token[0]} ({token[1]})"
                self._evidence("name", (token[0],), detail)
                weaker.append(("name", token[0] != expected_major, detail, ""))
        if self.judged_by is None:
            for kind in ("strings", "requires_dist", "cuda_wheel"):
                items = [w for w in weaker if w[0] == kind]
                if any(w[1] for w in items):
                    for _kind, excludes, detail, line in items:
                        if excludes and line not in self.findings:
                            self.findings.append(line)
                            for item in self.evidence:
                                if item["kind"] == kind and item["detail"] == detail:
                                    item["finding"] = line
                    self.judged_by = kind
                    break
                if items:  # names the expected major (or candidates that include it)
                    self.judged_by = kind
                    break
        for kind, excludes, detail, _line in weaker:
            if self.findings:
                break  # evidence that agrees with a finding adds nothing to read
            if excludes and (self.judged_by is None or _RANK[kind] > _RANK[self.judged_by]):
                verdict = f"judged by {self.judged_by}" if self.judged_by else "nothing in its files or " \
                    "requirements says which CUDA it loads"
                note = f"{label}: {detail}, not {expected_major} ({verdict})"
                if note not in self.notes:
                    self.notes.append(note)

    def _judge_family(self, family: Variants, expected_major: int, environment: dict[str, str]) -> str | None:
        """Record the family under variants (and a finding when it is one); return the build loaded."""
        label = f"{self.name} {self.version}"
        versions = sorted(family.builds, key=int)
        selector = VARIANT_SELECTORS.get(_normal(self.name))
        forced = environment.get(selector) if selector else None
        chosen = forced or family.serving(expected_major)
        self.variants.append({
            "family": family.key,
            "builds": {v: family.majors_of(v) for v in versions},
            "majors": sorted({m for v in versions for m in family.majors_of(v)}),
            "serves": family.builds[chosen].relpath if chosen in family.builds else None,
            "forced_by": f"{selector}={forced}" if forced else None,
        })
        if forced and forced not in family.builds:
            self.findings.append(f"{label}: {selector}={forced} asks for {family.key.replace('{}', forced)}, "
                                 f"which it does not ship (builds: {', '.join(versions)}); unset {selector}")
        elif forced and family.majors_of(forced) != [expected_major]:
            links = ", ".join(lk.describe() for lk in family.builds[forced].needs
                              if lk.tracks_cuda and lk.major != expected_major)
            self.findings.append(f"{label}: {selector}={forced} forces {family.key.replace('{}', forced)}, which "
                                 f"links {links} (expected {expected_major}); unset {selector}")
        elif chosen is None:
            links = ", ".join(lk.describe() for lk in family.builds[versions[-1]].needs if lk.tracks_cuda)
            self.findings.append(f"{label}: no build for CUDA {expected_major} among its variants "
                                 f"{family.key.replace('{}', '{' + ','.join(versions) + '}')} "
                                 f"(the newest links {links})")
        return chosen

    def as_dict(self) -> dict:
        links, provides = self.needs, self.provides
        return {
            "name": self.name,
            "version": self.version,
            "shared_objects": len(self.files),
            "links": [lk.as_dict() for lk in sorted(links.values(), key=lambda lk: lk.elf_name)],
            "provides": [lk.as_dict() for lk in sorted(provides.values(), key=lambda lk: lk.elf_name)],
            "cuda_majors": sorted({lk.major for lk in (*links.values(), *provides.values()) if lk.tracks_cuda}),
            "mismatches": self.findings,
            "bundles": self.bundles,
            "variants": self.variants,
            "evidence": self.evidence,
            "judged_by": self.judged_by,
            "notes": self.notes,
        }


def scan(site_packages: str, expected_major: int, environment: dict[str, str] | None = None,
         strings_limit: int = STRINGS_LIMIT_PER_FILE, strings_total: int = STRINGS_LIMIT_PER_SCAN) -> dict:
    """Scan one site-packages tree. Never raises on bad files: they are listed in `unreadable`.

    By the dynamic section (the strongest evidence), a distribution is a finding when one of its files links a
    library of another CUDA major, or ships one in NVIDIA's shared nvidia/ folder, or ships a private copy that
    something here links. Not findings: a private copy nothing links (a bundle), a copy beside the expected
    major's, and builds for other CUDA versions beside one for the expected major (variants, one is loaded at
    run time) -- unless `environment` forces another variant (VARIANT_SELECTORS) or no build serves the
    expected major. When the dynamic section says nothing conclusive, the weaker kinds of EVIDENCE judge in
    turn (Distribution.judge_evidence). Reading .rodata stops at `strings_limit` bytes per file and
    `strings_total` per scan (reported under `strings`).
    """
    infos = installed_distributions(site_packages)
    installed = {_normal(d.name): d.version for d in infos}
    owner_of = {path: (d.name, d.version) for d in infos for path in d.shared_objects}
    dists: dict[tuple[str, str], Distribution] = {(d.name, d.version): Distribution(d.name, d.version) for d in infos}
    for info in infos:
        dists[(info.name, info.version)].requires = cuda_requirements(info.requires, installed)
    skipped: list[dict] = []
    scanned = bytes_read = strings_read = 0
    strings_cut: list[str] = []
    for path in shared_objects(site_packages):
        try:
            info = read_dynamic_path(path)
        except ElfSkip as exc:
            skipped.append({"path": path, "reason": str(exc)})
            continue
        scanned += 1
        bytes_read += info.bytes_read
        relpath = os.path.relpath(path, site_packages)
        named: list[CudaLink] = []
        budget = min(strings_limit, strings_total - strings_read)
        if budget > 0:
            try:
                rodata = read_rodata_matches_path(path, SONAME_STRINGS, budget)
            except ElfSkip:
                rodata = None
            if rodata is not None:
                strings_read += rodata.bytes_read
                named = [lk for lk in map(cuda_link, rodata.matches) if lk]
                if rodata.truncated:
                    strings_cut.append(relpath)
        else:
            strings_cut.append(relpath)
        name, version = owner_of.get(os.path.normpath(path), ("(no distribution)", "-"))
        dist = dists.setdefault((name, version), Distribution(name, version))
        dist.files.append(SharedObject(
            relpath=relpath,
            needs=[lk for lk in map(cuda_link, info.needed) if lk],
            provides=cuda_link(info.soname) if info.soname else None,
            private=relpath.split(os.sep, 1)[0] != SHARED_CUDA_DIR,
            strings=named,
        ))
    cuda_dists = sorted((d for d in dists.values() if d.has_cuda_evidence()), key=lambda d: d.name.lower())
    for dist in cuda_dists:
        dist.files.sort(key=lambda f: f.relpath)
    linked = set().union(*(d.judge_variants(expected_major, environment or {}) for d in cuda_dists))
    for dist in cuda_dists:
        dist.judge_links(expected_major, linked)
        dist.judge_evidence(expected_major)
    findings = [m for d in cuda_dists for m in d.findings]
    return {
        "site_packages": site_packages,
        "expected_cuda_major": expected_major,
        "distributions": [d.as_dict() for d in cuda_dists],
        "findings": findings,
        "findings_by_evidence": [{"distribution": d.name, "version": d.version, "evidence": d.judged_by,
                                  "finding": m} for d in cuda_dists for m in d.findings],
        "notes": [n for d in cuda_dists for n in d.notes],
        "cuda_wheels": [{"name": d.name, "version": d.version, "cuda_major": cuda_wheel_major(d.name, d.version)}
                        for d in cuda_dists if cuda_wheel_major(d.name, d.version) is not None],
        "variants": [{"distribution": d.name, "version": d.version, **v} for d in cuda_dists for v in d.variants],
        "verdict": "mismatch" if findings else "ok",
        "shared_objects_scanned": scanned,
        "header_bytes_read": bytes_read,
        "strings": {"rodata_bytes_read": strings_read, "limit_per_file": strings_limit, "limit_per_scan": strings_total,
                    "not_read_to_the_end": strings_cut},
        "unreadable": skipped,
    }


def parse_ldconfig(text: str) -> dict[str, list[str]]:
    """`ldconfig -p` -> {soname: [paths]} for CUDA libraries the system provides."""
    result: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$", line)
        if match and cuda_link(match.group(1)):
            result.setdefault(match.group(1), []).append(match.group(3))
    return result


def system_cuda(cuda_home: str, ldconfig_output: str) -> dict:
    """CUDA libraries the system provides: the ldconfig cache and the toolkit under cuda_home."""
    import glob
    import json

    cache = parse_ldconfig(ldconfig_output)
    sonames = sorted({os.path.basename(p) for p in glob.glob(os.path.join(cuda_home, "lib*", "libcudart.so.*"))
                      + glob.glob(os.path.join(cuda_home, "targets", "*", "lib", "libcudart.so.*"))})
    version = None
    try:
        with open(os.path.join(cuda_home, "version.json"), encoding="utf-8") as handle:
            version = json.load(handle).get("cuda", {}).get("version")
    except (OSError, ValueError, AttributeError):
        version = None
    return {
        "ldconfig": cache,
        "cuda_home": {"path": cuda_home, "exists": os.path.isdir(cuda_home), "cudart": sonames, "version": version},
        "cudart_majors": system_cuda_majors(cache, sonames),
    }


def system_cuda_majors(ldconfig: dict[str, list[str]], cuda_home_sonames: list[str]) -> list[int]:
    """CUDA runtime majors the system provides (libcudart in the ldconfig cache or the toolkit)."""
    majors = set()
    for soname in [*ldconfig, *cuda_home_sonames]:
        link = cuda_link(soname)
        if link and link.library == "cudart":
            majors.add(link.major)
    return sorted(majors)


# Run inside a container by spark_abi_scan's image mode: this module and _elf,
# concatenated, then this entry point. Prints one JSON object.
