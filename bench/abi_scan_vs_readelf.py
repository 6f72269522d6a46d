"""Benchmark: spark_abi_scan vs readelf on every shared object: `readelf -dW` (the dynamic section) and
`readelf -dW -p .rodata` (also the strings a dlopen() names, the scan's second kind of evidence).

Scans the venv the ABI tests use (tests/integration/wheels.py, cached in
.cache/tests/cuda13-venv): the real torch 2.14.1 (a CUDA 13 build) with its
CUDA 13 runtime, cuBLAS, nvJitLink and cuSPARSE wheels from this machine's
wheel store, and the real bitsandbytes 0.49.2 from PyPI; both ways in one
run, and prints the figures, their ratio and what the scan says; records them with the commit in
bench/results/abi_scan.json. Not a test: machines are noisy, run it by hand:

    .venv/bin/python bench/abi_scan_vs_readelf.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
# module_utils as the collection sparkfleet.spark (collections/ansible_collections/sparkfleet/spark links here).
sys.path.insert(0, str(REPO / "collections"))
import wheels  # noqa: E402
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._cuda_abi import scan  # noqa: E402
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._dist_info import shared_objects  # noqa: E402
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._elf import read_dynamic_path  # noqa: E402


def build() -> Path:
    print("the real CUDA 13 torch + bitsandbytes venv (built once, a few minutes)", flush=True)
    return next(wheels.cuda13_venv().glob("lib/python3*/site-packages"))


def main() -> int:
    site = build()
    files = list(shared_objects(str(site)))
    total = sum(Path(f).stat().st_size for f in files)
    # Warm the page cache for both contenders alike.
    for f in files:
        Path(f).read_bytes()
    start = time.perf_counter()
    result = scan(str(site), 13)
    ours = time.perf_counter() - start
    start = time.perf_counter()
    for f in files:
        read_dynamic_path(f)
    reader = time.perf_counter() - start
    start = time.perf_counter()
    for f in files:
        subprocess.run(["readelf", "-dW", f], capture_output=True, check=False)
    theirs = time.perf_counter() - start
    start = time.perf_counter()
    for f in files:
        subprocess.run(["readelf", "-dW", "-p", ".rodata", f], capture_output=True, check=False)
    theirs_strings = time.perf_counter() - start
    print(f"tree: {site}")
    print(f"shared objects: {len(files)}, {total / 1e9:.2f} GB; CUDA distributions: "
          f"{len(result['distributions'])}; findings: {result['findings'] or 'none'}")
    print(f"readelf -d on each shared object (file list given): {theirs:.3f} s")
    print(f"our ELF reader on the same files:                  {reader:.3f} s "
          f"({result['header_bytes_read'] / 1e6:.2f} MB of headers read) -> {theirs / reader:.1f}x faster")
    print(f"whole scan (walk + RECORD attribution + ELF + .rodata strings): {ours:.3f} s "
          f"({result['strings']['rodata_bytes_read'] / 1e6:.1f} MB of .rodata read, "
          f"{len(result['strings']['not_read_to_the_end'])} files over the limit)")
    print(f"readelf -dW -p .rodata on each shared object:        {theirs_strings:.3f} s -> "
          f"{theirs_strings / ours:.1f}x the scan's time")
    print(f"verdict: {result['verdict']}; notes: {result['notes'] or 'none'}")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "plugins"],
                                capture_output=True, text=True, check=False).stdout.strip())
    record = {
        "commit": commit + ("+changes" if dirty else ""), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tree": "real torch 2.14.1 (CUDA 13) + its CUDA 13 wheels + bitsandbytes 0.49.2, x86_64",
        "shared_objects": len(files), "bytes": total,
        "scan_s": round(ours, 4), "readelf_dynamic_s": round(theirs, 4),
        "readelf_dynamic_rodata_s": round(theirs_strings, 4),
        "ratio_readelf_dynamic_rodata_to_scan": round(theirs_strings / ours, 2),
        "ratio_readelf_dynamic_to_scan": round(theirs / ours, 2),
        "header_bytes_read": result["header_bytes_read"], "rodata_bytes_read": result["strings"]["rodata_bytes_read"],
        "verdict": result["verdict"], "findings": result["findings"],
    }
    out = REPO / "bench" / "results" / "abi_scan.json"
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"recorded in {out.relative_to(REPO)}")
    for family in result["variants"]:
        print(f"variants: {family['distribution']} {family['version']} {family['family']}: majors "
              f"{family['majors']}, serves {family['serves']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
