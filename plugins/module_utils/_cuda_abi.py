# Copyright: sparkfleet contributors
# Apache License 2.0
"""CUDA ABI checks over a Python environment: which CUDA each distribution links.

Pure logic plus a directory walk; ELF parsing is in _elf. A wheel's CUDA
linkage is visible in DT_NEEDED (what it loads) and DT_SONAME (what it
provides, e.g. nvidia-cuda-runtime-cu12 provides libcudart.so.12).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ansible.module_utils._elf import ElfSkip, read_dynamic_path

# Libraries whose soname major IS the CUDA major (libcudart.so.12 = CUDA 12):
# only these prove a CUDA-major mismatch.
CUDA_MAJOR_LIBS = ("cudart", "cublas", "cublasLt", "nvrtc", "nvrtc-builtins", "nvJitLink", "cupti")
# CUDA libraries reported with their own soname major, which does not equal
# the CUDA major (cuDNN 9 and NCCL 2 serve CUDA 12 and 13; cuFFT, cuRAND,
# cuSPARSE, cuSOLVER are versioned on their own).
OTHER_CUDA_LIBS = ("cudnn", "nccl", "cufft", "curand", "cusparse", "cusolver", "cusparseLt", "nvToolsExt",
                   "cufile", "nvshmem_host", "cuda")
_SONAME = re.compile(r"^lib(?P<lib>[A-Za-z_][A-Za-z0-9_+-]*?)\.so\.(?P<major>\d+)(?:\.[0-9.]+)?$")


@dataclass
class CudaLink:
    library: str  # e.g. "cudart"
    soname: str  # e.g. "libcudart.so.12"
    major: int
    tracks_cuda: bool  # the major is the CUDA major

    def as_dict(self) -> dict:
        return {"library": self.library, "soname": self.soname, "major": self.major,
                "tracks_cuda_major": self.tracks_cuda}


def cuda_link(soname: str) -> CudaLink | None:
    """Classify one soname; None when it is not a CUDA library."""
    match = _SONAME.match(soname)
    if not match:
        return None
    lib = match.group("lib")
    if lib in CUDA_MAJOR_LIBS:
        return CudaLink(lib, soname, int(match.group("major")), True)
    if lib in OTHER_CUDA_LIBS:
        return CudaLink(lib, soname, int(match.group("major")), False)
    return None


def parse_record(text: str) -> list[str]:
    """Paths listed in a dist-info RECORD (CSV; the first field, possibly quoted)."""
    import csv
    import io

    return [row[0] for row in csv.reader(io.StringIO(text)) if row and row[0]]


def parse_metadata_name_version(text: str) -> tuple[str | None, str | None]:
    name = version = None
    for line in text.splitlines():
        if not line.strip():
            break  # headers end at the first blank line
        if line.startswith("Name:") and name is None:
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:") and version is None:
            version = line.split(":", 1)[1].strip()
    return name, version


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def owners(site_packages: str) -> dict[str, tuple[str, str]]:
    """Map each shared object listed in a RECORD (normalised path) to (distribution, version).

    Only shared-object names are kept: torch's RECORD alone lists ~20,000 files.
    """
    result: dict[str, tuple[str, str]] = {}
    try:
        entries = list(os.scandir(site_packages))
    except OSError:
        return result
    for entry in entries:
        if not entry.name.endswith(".dist-info") or not entry.is_dir():
            continue
        name, version = parse_metadata_name_version(_read_text(os.path.join(entry.path, "METADATA")))
        if name is None:
            name, _, version = entry.name[: -len(".dist-info")].partition("-")
        for rel in parse_record(_read_text(os.path.join(entry.path, "RECORD"))):
            if is_shared_object_name(os.path.basename(rel)):
                result[os.path.normpath(os.path.join(site_packages, rel))] = (name, version or "?")
    return result


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
class Distribution:
    name: str
    version: str
    needs: dict[str, CudaLink] = field(default_factory=dict)
    provides: dict[str, CudaLink] = field(default_factory=dict)
    private: set[str] = field(default_factory=set)  # provided sonames outside the shared nvidia/ folder
    files: int = 0

    def _bundled(self, link: CudaLink, expected_major: int, linked: set[str]) -> bool:
        """A provided library of another CUDA major that nothing is built to load.

        Either it sits beside the same library at the expected major (a
        multi-version bundle picked at run time: triton >= 3.7 ships
        libcupti.so.12 and .13), or it is the distribution's private copy
        (not in the shared nvidia/ folder) and no shared object here links
        it (triton 3.6 ships only libcupti.so.12, which its profiler alone
        opens; torch 2.11+cu130 with it verifies True 13.0 on real hardware).
        """
        if link.soname not in linked and link.soname in self.private:
            return True
        return any(other.library == link.library and other.major == expected_major
                   for other in self.provides.values())

    def _foreign(self, links: dict[str, CudaLink], expected_major: int) -> list[CudaLink]:
        return [lk for lk in sorted(links.values(), key=lambda lk: lk.soname)
                if lk.tracks_cuda and lk.major != expected_major]

    def mismatches(self, expected_major: int, linked: set[str]) -> list[str]:
        found = [f"{self.name} {self.version}: links {lk.soname} (expected {expected_major})"
                 for lk in self._foreign(self.needs, expected_major)]
        found += [f"{self.name} {self.version}: provides {lk.soname} (expected {expected_major})"
                  for lk in self._foreign(self.provides, expected_major)
                  if not self._bundled(lk, expected_major, linked)]
        return found

    def bundles(self, expected_major: int, linked: set[str]) -> list[str]:
        notes = []
        for link in self._foreign(self.provides, expected_major):
            if not self._bundled(link, expected_major, linked):
                continue
            beside = f"lib{link.library}.so.{expected_major}"
            if any(other.soname == beside for other in self.provides.values()):
                notes.append(f"{self.name} {self.version}: provides {link.soname} beside {beside}")
            else:
                notes.append(f"{self.name} {self.version}: provides {link.soname} privately, linked by nothing here")
        return notes

    def as_dict(self, expected_major: int, linked: set[str]) -> dict:
        return {
            "name": self.name,
            "version": self.version,
            "shared_objects": self.files,
            "links": [lk.as_dict() for lk in sorted(self.needs.values(), key=lambda lk: lk.soname)],
            "provides": [lk.as_dict() for lk in sorted(self.provides.values(), key=lambda lk: lk.soname)],
            "cuda_majors": sorted({lk.major for lk in (*self.needs.values(), *self.provides.values())
                                   if lk.tracks_cuda}),
            "mismatches": self.mismatches(expected_major, linked),
            "bundles": self.bundles(expected_major, linked),
        }


def scan(site_packages: str, expected_major: int) -> dict:
    """Scan one site-packages tree. Never raises on bad files: they are listed in `skipped`."""
    owner_of = owners(site_packages)
    dists: dict[tuple[str, str], Distribution] = {}
    skipped: list[dict] = []
    scanned = bytes_read = 0
    for path in shared_objects(site_packages):
        try:
            info = read_dynamic_path(path)
        except ElfSkip as exc:
            skipped.append({"path": path, "reason": str(exc)})
            continue
        scanned += 1
        bytes_read += info.bytes_read
        name, version = owner_of.get(os.path.normpath(path), ("(no distribution)", "-"))
        dist = dists.setdefault((name, version), Distribution(name, version))
        dist.files += 1
        for soname in info.needed:
            link = cuda_link(soname)
            if link:
                dist.needs[soname] = link
        if info.soname:
            link = cuda_link(info.soname)
            if link:
                dist.provides[info.soname] = link
                top = os.path.relpath(path, site_packages).split(os.sep, 1)[0]
                if top != SHARED_CUDA_DIR:
                    dist.private.add(info.soname)
    linked = {soname for d in dists.values() for soname in d.needs}
    cuda_dists = sorted((d for d in dists.values() if d.needs or d.provides), key=lambda d: d.name.lower())
    findings = [m for d in cuda_dists for m in d.mismatches(expected_major, linked)]
    return {
        "site_packages": site_packages,
        "expected_cuda_major": expected_major,
        "distributions": [d.as_dict(expected_major, linked) for d in cuda_dists],
        "findings": findings,
        "verdict": "mismatch" if findings else "ok",
        "shared_objects_scanned": scanned,
        "header_bytes_read": bytes_read,
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
CONTAINER_MAIN = r"""
def _container_main(expected_major, cuda_home):
    import json, os, site, subprocess, sys, sysconfig
    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    try:
        paths += site.getsitepackages()
    except AttributeError:
        pass
    seen, trees = set(), []
    for path in paths:
        real = os.path.realpath(path)
        if os.path.isdir(real) and real not in seen:
            seen.add(real)
            trees.append(path)
    try:
        ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except OSError:
        ldconfig = ""
    print(json.dumps({"python": sys.version.split()[0], "trees": [scan(t, expected_major) for t in trees],
                      "system": system_cuda(cuda_home, ldconfig)}))
"""
