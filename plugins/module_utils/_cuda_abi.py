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

try:
    from ansible_collections.sparkfleet.spark.plugins.module_utils._elf import ElfSkip, read_dynamic_path
except ImportError:  # inside an image: _program_abi_image.py runs this file beside _elf.py, as plain modules
    from _elf import ElfSkip, read_dynamic_path

# Libraries whose soname major IS the CUDA major (libcudart.so.12 = CUDA 12):
# only these prove a CUDA-major mismatch.
CUDA_MAJOR_LIBS = ("cudart", "cublas", "cublasLt", "nvrtc", "nvrtc-builtins", "nvJitLink", "cupti")
# CUDA libraries reported with their own soname major, which does not equal
# the CUDA major (cuDNN 9 and NCCL 2 serve CUDA 12 and 13; cuFFT, cuRAND,
# cuSPARSE, cuSOLVER are versioned on their own).
OTHER_CUDA_LIBS = ("cudnn", "nccl", "cufft", "curand", "cusparse", "cusolver", "cusparseLt", "nvToolsExt",
                   "cufile", "nvshmem_host", "cuda")
# auditwheel renames a library it vendors into <pkg>.libs/ to lib<name>-<8 hex>.so.<version>
# (DT_SONAME and the consumers' DT_NEEDED are patched to match); the real name is what counts.
_SONAME = re.compile(r"^lib(?P<lib>[A-Za-z_][A-Za-z0-9_+-]*?)(?P<hash>-[0-9a-f]{8})?"
                     r"\.so\.(?P<major>\d+)(?P<rest>(?:\.[0-9]+)*)$")
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

    def as_dict(self) -> dict:
        found = {"library": self.library, "soname": self.soname, "major": self.major,
                 "tracks_cuda_major": self.tracks_cuda}
        if self.elf_name != self.soname:
            found["vendored_as"] = self.elf_name
        return found

    def describe(self) -> str:
        return self.soname if self.elf_name == self.soname else f"{self.soname} (vendored as {self.elf_name})"


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
            name, _unused, version = entry.name[: -len(".dist-info")].partition("-")
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
class SharedObject:
    relpath: str  # relative to site-packages
    needs: list[CudaLink]
    provides: CudaLink | None
    private: bool  # outside the shared nvidia/ folder


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
    # Filled by judge_variants() and judge_links():
    findings: list[str] = field(default_factory=list)
    bundles: list[str] = field(default_factory=list)
    variants: list[dict] = field(default_factory=list)

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
        """Findings and bundles from what the files outside variant families link and provide."""
        label = f"{self.name} {self.version}"
        for shared in self.outside_families():
            for link in shared.needs:
                finding = f"{label}: links {link.describe()} (expected {expected_major})"
                if link.tracks_cuda and link.major != expected_major and finding not in self.findings:
                    self.findings.append(finding)
        provided = self.provides.values()
        for shared in self.files:
            link = shared.provides
            if not link or not link.tracks_cuda or link.major == expected_major:
                continue
            beside = f"lib{link.library}.so.{expected_major}"
            if any(other.library == link.library and other.major == expected_major for other in provided):
                self.bundles.append(f"{label}: provides {link.describe()} beside {beside}")
            elif shared.private and link.elf_name not in linked:
                self.bundles.append(f"{label}: provides {link.describe()} privately, linked by nothing here")
            else:
                self.findings.append(f"{label}: provides {link.describe()} (expected {expected_major})")

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
        }


def scan(site_packages: str, expected_major: int, environment: dict[str, str] | None = None) -> dict:
    """Scan one site-packages tree. Never raises on bad files: they are listed in `skipped`.

    A distribution is a finding when one of its files links a library of
    another CUDA major, or ships one in NVIDIA's shared nvidia/ folder, or
    ships a private copy that something here links. Not findings: a private
    copy nothing links (a bundle), a copy beside the expected major's, and
    builds for other CUDA versions beside one for the expected major
    (variants, one is loaded at run time) -- unless `environment` forces
    another variant (VARIANT_SELECTORS) or no build serves the expected major.
    """
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
        relpath = os.path.relpath(path, site_packages)
        dist.files.append(SharedObject(
            relpath=relpath,
            needs=[lk for lk in map(cuda_link, info.needed) if lk],
            provides=cuda_link(info.soname) if info.soname else None,
            private=relpath.split(os.sep, 1)[0] != SHARED_CUDA_DIR,
        ))
    cuda_dists = sorted((d for d in dists.values() if d.needs or d.provides), key=lambda d: d.name.lower())
    for dist in cuda_dists:
        dist.files.sort(key=lambda f: f.relpath)
    linked = set().union(*(d.judge_variants(expected_major, environment or {}) for d in cuda_dists))
    for dist in cuda_dists:
        dist.judge_links(expected_major, linked)
    findings = [m for d in cuda_dists for m in d.findings]
    return {
        "site_packages": site_packages,
        "expected_cuda_major": expected_major,
        "distributions": [d.as_dict() for d in cuda_dists],
        "findings": findings,
        "variants": [{"distribution": d.name, "version": d.version, **v} for d in cuda_dists for v in d.variants],
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
