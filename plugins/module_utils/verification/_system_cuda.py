# Copyright: sparkfleet contributors
# Apache License 2.0
"""The CUDA the system provides beside an environment: ldconfig's cache and CUDA_HOME's libraries."""

from __future__ import annotations

import os
import re

try:
    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._cuda_majors import cuda_link
except ImportError:  # inside an image: _program_abi_image.py runs these files side by side, as plain modules
    from _cuda_majors import cuda_link


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
