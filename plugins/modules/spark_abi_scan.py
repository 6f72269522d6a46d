#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Find CUDA ABI mismatches in the wheels of a Python environment."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_abi_scan
short_description: Find wheels linked against the wrong CUDA major in a Python environment
description:
  - Walks a Python environment's site-packages (a venv, a site-packages
    path, an interpreter's, or those of an image's python3 inside a
    container) for ELF shared objects, reads
    only their dynamic sections (C(DT_NEEDED), C(DT_SONAME)) and maps each
    file to its installed distribution through the dist-info C(RECORD).
  - Reports, per distribution, the CUDA libraries it links and provides, and
    flags every distribution whose CUDA major differs from
    O(expected_cuda_major), for example C(bitsandbytes 0.49.2 - links libcudart.so.12 (expected 13)) in
    the form RV(findings) gives.
    pip checks version constraints, not this; the failure otherwise shows up
    at run time as a missing symbol or a segfault.
  - Reads more than C(DT_NEEDED). The kinds of evidence, strongest first, each
    distribution listing those it has (C(evidence), C(judged_by) in RV(distributions)), are
    C(dt_needed) and C(dt_soname) (the dynamic section); C(strings) (CUDA
    sonames named in a binary's C(.rodata), the targets of C(dlopen()), read up
    to a byte limit per file, see RV(strings)); C(requires_dist) (Requires-Dist
    on NVIDIA's CUDA wheels, C(cuda-toolkit==NN.*), C(cuda-bindings) or
    C(cuda-python) majors; one behind an extra or a marker counts only when
    the wheel is installed); C(cuda_wheel) (NVIDIA's own C(nvidia-*-cuNN)
    wheels, listed in RV(cuda_wheels)); C(name) (the distribution's name or
    local version, C(cupy-cuda12x), C(+cu126)).
  - The strongest conclusive kind judges, a finding when it excludes
    O(expected_cuda_major). Weaker evidence that disagrees is a note
    (RV(notes)), and a name alone is never a finding.
  - Sonames whose major is the CUDA major (libcudart, libcublas, libcublasLt,
    libnvrtc, libnvJitLink, libcupti, libnvfatbin, libnvjpeg) tell it
    directly. Others (libcudnn.so.9, libnccl.so.2, libcurand.so.10,
    libcufft.so.11, libcusolver.so.11, ...) are judged through one table of
    soname major to CUDA majors, each row backed by NVIDIA's wheels (C(libcufft.so.11)
    is CUDA 12's cuFFT, a finding on CUDA 13; C(libcurand.so.10) serves CUDA 11 to 13).
    A soname with no row is reported, not judged.
  - A distribution that ships builds for several CUDA versions and loads one
    at run time (bitsandbytes 0.49.2 - C(libbitsandbytes_cuda118.so) ..
    C(libbitsandbytes_cuda130.so)) is not a mismatch when one build links the
    expected major; it is listed under RV(variants) with the build that serves
    it. It is a finding when no build serves the expected major, or when
    O(environment) forces another build (C(BNB_CUDA_VERSION)).
  - Libraries vendored and renamed by auditwheel (C(<pkg>.libs/libcudart-1a2b3c4d.so.12.8.90))
    are judged by their real name. A private copy of another CUDA major that
    nothing links is a bundle (listed in C(bundles) of each of RV(distributions)), not a finding.
  - Also reports which CUDA runtimes the system provides (the ldconfig cache
    and the toolkit under O(cuda_home)).
  - Reads headers only, a few kilobytes per file. Truncated, non-ELF, 32-bit,
    big-endian or unreadable files are listed in RV(unreadable) with a reason.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment:
  - sparkfleet.spark.sparkfleet_attributes
  - sparkfleet.spark.sparkfleet_read_only
  - sparkfleet.spark.sparkfleet_docker
options:
  path:
    description:
      - A virtual environment (a directory with C(pyvenv.cfg)) or a
        site-packages directory to scan. Exactly one of O(path), O(python) and O(image).
    type: path
  python:
    description:
      - A Python interpreter; its purelib and platlib directories are scanned.
    type: path
  image:
    description:
      - An image (by digest); its python3's site-packages are scanned inside a
        throwaway container (no network, no GPU needed), and RV(system) describes
        the image, not the host.
    type: str
  expected_cuda_major:
    description: The CUDA major every CUDA wheel must link (13 on a DGX Spark).
    type: int
    default: 13
  cuda_home:
    description: The CUDA toolkit whose runtime libraries count as system-provided.
    type: path
    default: /usr/local/cuda
  environment:
    description:
      - The environment the workload runs with (a launcher's C(--env) values,
        a venv's exports). Variables that pick a build at run time
        (C(BNB_CUDA_VERSION)) are judged from it; with O(image), it is passed
        into the container by name, on top of the image's own C(ENV).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Scan the bare-pip venv
  sparkfleet.spark.spark_abi_scan:
    path: /opt/sparkfleet/venv
  register: abi

- name: Fail on any CUDA 12 leftover
  ansible.builtin.assert:
    that: abi.verdict == 'ok'
    fail_msg: "{{ abi.findings | join('; ') }}"

- name: Scan the environment of a given interpreter
  sparkfleet.spark.spark_abi_scan:
    python: /usr/bin/python3

- name: Scan the pinned NGC image
  sparkfleet.spark.spark_abi_scan:
    image: "nvcr.io/nvidia/pytorch@sha256:{{ digest }}"
"""

RETURN = r"""
verdict:
  description: C(ok) when no distribution links or provides another CUDA major, else C(mismatch).
  returned: success
  type: str
  sample: mismatch
findings:
  description:
    - "One line per mismatching library: C(<dist> <version>: links|provides <soname> (expected <major>)), or
      by a weaker kind of evidence C(loads <soname> at run time, by name (<file>)), C(requires <wheel> (CUDA <major>;
      installed <version>)), C(NVIDIA's CUDA <major> build of its library)."
  returned: success
  type: list
  elements: str
  sample: ["bitsandbytes 0.49.2: links libcudart.so.12 (expected 13)"]
findings_by_evidence:
  description: Each finding with its distribution and the kind of evidence that made it.
  returned: success
  type: list
  elements: dict
  sample:
    - distribution: cuda-bindings
      version: 12.8.0
      evidence: strings
      finding: "cuda-bindings 12.8.0: loads libcudart.so.12 at run time, by name (cuda/bindings/...) (expected 13)"
notes:
  description: Evidence that names another CUDA major where a stronger kind, or nothing, judged (never a finding).
  returned: success
  type: list
  elements: str
  sample: ["jax-cuda12-plugin 0.12.0.1: its name or version says CUDA 12 (cuda12), not 13 (nothing in its files or
    requirements says which CUDA it loads)"]
cuda_wheels:
  description: NVIDIA's CUDA wheels the environment holds, with the CUDA major each is built for.
  returned: success
  type: list
  elements: dict
  sample: [{name: nvidia-cuda-runtime, version: 13.0.96, cuda_major: 13}]
strings:
  description: How much of the binaries' C(.rodata) was read for the strings evidence, the limits, and the files
    whose C(.rodata) was not read to the end (over a limit).
  returned: success
  type: dict
  sample: {rodata_bytes_read: 2913615, limit_per_file: 67108864, limit_per_scan: 536870912, not_read_to_the_end: []}
distributions:
  description: Every distribution that links or provides a CUDA library, with what and which majors.
  returned: success
  type: list
  elements: dict
  sample:
    - name: torch
      version: 2.14.1
      shared_objects: 60
      links: [{library: cudart, soname: libcudart.so.13, major: 13, tracks_cuda_major: true}]
      provides: []
      cuda_majors: [13]
      mismatches: []
      bundles: []
      variants: []
      evidence: [{kind: dt_needed, cuda_majors: [13], detail: links libcudart.so.13, counted: true, finding: null}]
      judged_by: dt_needed
      notes: []
variants:
  description: Distributions that ship builds for several CUDA versions, per family of builds.
  returned: success
  type: list
  elements: dict
  sample:
    - distribution: bitsandbytes
      version: 0.49.2
      family: "bitsandbytes/libbitsandbytes_cuda{}.so"
      builds: {"118": [11], "120": [12], "130": [13]}
      majors: [11, 12, 13]
      serves: bitsandbytes/libbitsandbytes_cuda130.so
      forced_by: null
site_packages:
  description: The directories scanned.
  returned: success
  type: list
  elements: str
shared_objects_scanned:
  description: ELF shared objects read.
  returned: success
  type: int
header_bytes_read:
  description: Bytes read from them in all (headers only).
  returned: success
  type: int
unreadable:
  description: Files named like shared objects that could not be read as 64-bit little-endian ELF, and why.
  returned: success
  type: list
  elements: dict
  sample:
    - path: /venv/lib/python3.12/site-packages/x/broken.so
      reason: "truncated: 12 bytes, an ELF header needs 64"
system:
  description: CUDA libraries the system provides.
  returned: success
  type: dict
  contains:
    ldconfig:
      description: CUDA sonames in the ldconfig cache and where they are.
      type: dict
    cuda_home:
      description: O(cuda_home), its runtime sonames and the toolkit version from version.json.
      type: dict
    cudart_majors:
      description: libcudart majors available system-wide.
      type: list
      elements: int
"""

import glob
import inspect
import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._isolated import isolate
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._shared_options import DOCKER
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_client import DockerClient
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import (
    _cuda_abi,
    _cuda_majors,
    _dist_info,
    _elf,
    _program_abi_image,
    _system_cuda,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._cuda_abi import scan
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._system_cuda import system_cuda


def _unique(paths: list[str]) -> list[str]:
    """One entry per real directory (a venv's lib64 is a link to lib)."""
    seen: dict[str, str] = {}
    for path in paths:
        seen.setdefault(os.path.realpath(path), path)
    return list(seen.values())


def site_packages_of(module: AnsibleModule) -> list[str]:
    path, python = module.params["path"], module.params["python"]
    if python:
        code = ("import json, sysconfig; p = sysconfig.get_paths(); "
                "print(json.dumps(sorted({p['purelib'], p['platlib']})))")
        rc, out, err = module.run_command([python, "-c", code], environ_update={"LC_ALL": "C"})
        if rc != 0:
            module.fail_json(msg=f"{python} could not say where its packages are (rc {rc}): {err.strip()}; "
                                 f"expected a working Python interpreter.", rc=rc, stderr=err)
        return _unique([p for p in json.loads(out) if os.path.isdir(p)])
    if os.path.isfile(os.path.join(path, "pyvenv.cfg")):
        found = _unique(sorted(glob.glob(os.path.join(path, "lib*", "python3*", "site-packages"))))
        if found:
            return found
        module.fail_json(msg=f"{path} is a virtual environment without lib/python3*/site-packages; "
                             f"is it complete? Recreate it.")
    if os.path.isdir(path) and glob.glob(os.path.join(path, "*.dist-info")):
        return [path]
    module.fail_json(msg=f"{path} is neither a virtual environment (no pyvenv.cfg) nor a site-packages "
                         f"directory (no *.dist-info); expected one of them.")


def host_system_cuda(module: AnsibleModule) -> dict:
    ldconfig = module.get_bin_path("ldconfig", opt_dirs=["/sbin", "/usr/sbin"])
    output = ""
    if ldconfig:
        rc, out, _unused = module.run_command([ldconfig, "-p"], environ_update={"LC_ALL": "C"})
        output = out if rc == 0 else ""
    return system_cuda(module.params["cuda_home"], output)


# Where the scan's files are mounted inside the image's container.
MOUNT = "/run/sparkfleet-abi"


# The scan inside an image: the program and the modules it imports, side by side as plain modules.
SCAN_FILES = (("scan.py", _program_abi_image), ("_cuda_abi.py", _cuda_abi), ("_cuda_majors.py", _cuda_majors),
              ("_dist_info.py", _dist_info), ("_elf.py", _elf), ("_system_cuda.py", _system_cuda))


def program_dir(module: AnsibleModule) -> str:
    """A directory with the scan as files: _program_abi_image.py (as scan.py) and the modules it imports (SCAN_FILES).

    Each is its module's own source; the directory is mounted read-only into the image's container and
    readable by any user the image runs as.
    """
    directory = tempfile.mkdtemp(prefix="sparkfleet-abi-", dir=module.tmpdir)
    os.chmod(directory, 0o755)
    for name, source in SCAN_FILES:
        path = os.path.join(directory, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(inspect.getsource(source))
        os.chmod(path, 0o644)
    return directory


def scan_image(module: AnsibleModule, environment: dict[str, str]) -> tuple[list[dict], dict]:
    docker = DockerClient(module, required=True)
    image = module.params["image"]
    # --env NAME takes the value from docker's own environment: no value reaches argv.
    passed = [arg for name in sorted(environment) for arg in ("--env", name)]
    cmd = docker.argv("run", "--rm", "--network", "none", *passed, "--volume", f"{program_dir(module)}:{MOUNT}:ro",
                      "--entrypoint", "python3", image, f"{MOUNT}/scan.py", str(module.params["expected_cuda_major"]),
                      module.params["cuda_home"])
    rc, out, err = docker.run_argv(cmd, environ_update=environment)
    try:
        report = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        module.fail_json(msg=f"could not scan inside {image} (rc {rc}): {(err or out).strip()[-1000:]}; "
                             f"expected the image to start and have python3.", cmd=cmd, rc=rc, stderr=err)
    return report["trees"], report["system"]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path"},
            "python": {"type": "path"},
            "image": {"type": "str"},
            **DOCKER,
            "expected_cuda_major": {"type": "int", "default": 13},
            "cuda_home": {"type": "path", "default": "/usr/local/cuda"},
            "environment": {"type": "dict", "default": {}},
        },
        required_one_of=[["path", "python", "image"]],
        mutually_exclusive=[["path", "python", "image"]],
        supports_check_mode=True,
    )
    # Every Python it starts runs in "/", without the caller's PYTHONPATH or caches (module_utils/common/_isolated.py).
    isolate()
    expected = module.params["expected_cuda_major"]
    environment = {str(k): str(v) for k, v in module.params["environment"].items()}
    if module.params["image"]:
        results, system = scan_image(module, environment)
        trees = [r["site_packages"] for r in results]
    else:
        trees = site_packages_of(module)
        results = [scan(tree, expected, environment) for tree in trees]
        system = host_system_cuda(module)
    findings = [f for r in results for f in r["findings"]]
    module.exit_json(
        changed=False,
        verdict="mismatch" if findings else "ok",
        findings=findings,
        findings_by_evidence=[f for r in results for f in r["findings_by_evidence"]],
        notes=[n for r in results for n in r["notes"]],
        cuda_wheels=[w for r in results for w in r["cuda_wheels"]],
        strings={"rodata_bytes_read": sum(r["strings"]["rodata_bytes_read"] for r in results),
                 "limit_per_file": _cuda_abi.STRINGS_LIMIT_PER_FILE, "limit_per_scan": _cuda_abi.STRINGS_LIMIT_PER_SCAN,
                 "not_read_to_the_end": [p for r in results for p in r["strings"]["not_read_to_the_end"]]},
        distributions=[d for r in results for d in r["distributions"]],
        variants=[v for r in results for v in r["variants"]],
        site_packages=trees,
        expected_cuda_major=expected,
        shared_objects_scanned=sum(r["shared_objects_scanned"] for r in results),
        header_bytes_read=sum(r["header_bytes_read"] for r in results),
        unreadable=[s for r in results for s in r["unreadable"]],
        system=system,
    )


if __name__ == "__main__":
    main()
