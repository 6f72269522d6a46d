# Copyright: sparkfleet contributors
# Apache License 2.0
"""CUDA ABI checks over a Python environment: which CUDA each distribution needs, and the evidence for it.

The judge: each distribution's evidence weighed, its findings, bundles and variants. What a name says of a CUDA
major is _cuda_majors, the environment's distributions and files _dist_info, ELF parsing _elf, the system's CUDA
_system_cuda. The kinds of evidence, strongest first (EVIDENCE):
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
from dataclasses import dataclass, field

try:
    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _cuda_majors, _dist_info, _elf
except ImportError:  # inside an image: _program_abi_image.py runs these files side by side, as plain modules
    import _cuda_majors
    import _dist_info
    import _elf


EVIDENCE = ("dt_needed", "dt_soname", "strings", "requires_dist", "cuda_wheel", "name")


_RANK = {"dt_needed": 0, "dt_soname": 0, "strings": 1, "requires_dist": 2, "cuda_wheel": 3, "name": 4}


# Bytes of .rodata read per shared object, and in all per scan: the bound of the strings evidence.
STRINGS_LIMIT_PER_FILE = 64 << 20


STRINGS_LIMIT_PER_SCAN = 512 << 20


# Environment variables that make a distribution load one variant whatever
# the CUDA torch reports: BNB_CUDA_VERSION=128 loads libbitsandbytes_cuda128.so.
VARIANT_SELECTORS = {"bitsandbytes": "BNB_CUDA_VERSION"}


# The folder NVIDIA's CUDA wheels share (nvidia/cuda_runtime/lib, nvidia/cu13/lib):
# other wheels reach it through their RPATH ($ORIGIN/../../nvidia/...), so a
# library there is loaded by whoever asks for its soname.
SHARED_CUDA_DIR = "nvidia"


@dataclass
class SharedObject:
    relpath: str  # relative to site-packages
    needs: list[_cuda_majors.CudaLink]
    provides: _cuda_majors.CudaLink | None
    private: bool  # outside the shared nvidia/ folder
    # CUDA sonames named in its .rodata (dlopen targets)
    strings: list[_cuda_majors.CudaLink] = field(default_factory=list)


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


@dataclass
class Distribution:
    name: str
    version: str
    files: list[SharedObject] = field(default_factory=list)
    requires: list[_cuda_majors.Requirement] = field(default_factory=list)  # Requires-Dist on CUDA wheels
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
                    or _cuda_majors.cuda_wheel_major(self.name, self.version)
                    or _cuda_majors.name_major(self.name, self.version))

    @property
    def needs(self) -> dict[str, _cuda_majors.CudaLink]:
        return {lk.elf_name: lk for f in self.files for lk in f.needs}

    @property
    def provides(self) -> dict[str, _cuda_majors.CudaLink]:
        return {f.provides.elf_name: f.provides for f in self.files if f.provides}

    def variant_families(self) -> list[Variants]:
        groups: dict[str, dict[str, SharedObject]] = {}
        for shared in self.files:
            keyed = _cuda_majors.variant_key(shared.relpath)
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
        named: dict[str, tuple[_cuda_majors.CudaLink, str]] = {}
        for shared in self.files:
            for link in shared.strings:
                if link.cuda_majors is not None and link.library not in own:
                    named.setdefault(link.soname, (link, shared.relpath))
        by_library: dict[str, list[tuple[_cuda_majors.CudaLink, str]]] = {}
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
        major = _cuda_majors.cuda_wheel_major(self.name, self.version)
        if major is not None:
            detail = f"NVIDIA's CUDA {major} wheel {self.name}"
            self._evidence("cuda_wheel", (major,), detail)
            weaker.append(("cuda_wheel", major != expected_major, detail,
                           f"{label}: NVIDIA's CUDA {major} build of its library (expected {expected_major})"))
        else:
            token = _cuda_majors.name_major(self.name, self.version)
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
        selector = VARIANT_SELECTORS.get(_cuda_majors._normal(self.name))
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
    infos = _dist_info.installed_distributions(site_packages)
    installed = {_cuda_majors._normal(d.name): d.version for d in infos}
    owner_of = {path: (d.name, d.version) for d in infos for path in d.shared_objects}
    dists: dict[tuple[str, str], Distribution] = {(d.name, d.version): Distribution(d.name, d.version) for d in infos}
    for info in infos:
        dists[(info.name, info.version)].requires = _cuda_majors.cuda_requirements(info.requires, installed)
    skipped: list[dict] = []
    scanned = bytes_read = strings_read = 0
    strings_cut: list[str] = []
    for path in _dist_info.shared_objects(site_packages):
        try:
            info = _elf.read_dynamic_path(path)
        except _elf.ElfSkip as exc:
            skipped.append({"path": path, "reason": str(exc)})
            continue
        scanned += 1
        bytes_read += info.bytes_read
        relpath = os.path.relpath(path, site_packages)
        named: list[_cuda_majors.CudaLink] = []
        budget = min(strings_limit, strings_total - strings_read)
        if budget > 0:
            try:
                rodata = _elf.read_rodata_matches_path(path, _cuda_majors.SONAME_STRINGS, budget)
            except _elf.ElfSkip:
                rodata = None
            if rodata is not None:
                strings_read += rodata.bytes_read
                named = [lk for lk in map(_cuda_majors.cuda_link, rodata.matches) if lk]
                if rodata.truncated:
                    strings_cut.append(relpath)
        else:
            strings_cut.append(relpath)
        name, version = owner_of.get(os.path.normpath(path), ("(no distribution)", "-"))
        dist = dists.setdefault((name, version), Distribution(name, version))
        dist.files.append(SharedObject(
            relpath=relpath,
            needs=[lk for lk in map(_cuda_majors.cuda_link, info.needed) if lk],
            provides=_cuda_majors.cuda_link(info.soname) if info.soname else None,
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
        "cuda_wheels": [{"name": d.name, "version": d.version,
                         "cuda_major": _cuda_majors.cuda_wheel_major(d.name, d.version)}
                        for d in cuda_dists if _cuda_majors.cuda_wheel_major(d.name, d.version) is not None],
        "variants": [{"distribution": d.name, "version": d.version, **v} for d in cuda_dists for v in d.variants],
        "verdict": "mismatch" if findings else "ok",
        "shared_objects_scanned": scanned,
        "header_bytes_read": bytes_read,
        "strings": {"rodata_bytes_read": strings_read, "limit_per_file": strings_limit, "limit_per_scan": strings_total,
                    "not_read_to_the_end": strings_cut},
        "unreadable": skipped,
    }
