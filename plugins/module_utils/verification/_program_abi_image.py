# Copyright: sparkfleet contributors
# Apache License 2.0
"""The CUDA ABI scan inside an image: a program of its own, run by the image's python3.

spark_abi_scan writes this file and the modules it imports (their own sources, spark_abi_scan's SCAN_FILES)
into one directory, mounts it
read-only into a throwaway container of the image (--network none) and runs this file there. It scans every
site-packages tree the image's Python has and prints one JSON object: the Python version, each tree's
findings, and the system CUDA the image carries.
"""

import contextlib
import json
import os
import site
import subprocess
import sys
import sysconfig


def main(expected_major, cuda_home):
    # The modules it imports are beside this file (also under python -I or PYTHONSAFEPATH).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _cuda_abi import scan
    from _system_cuda import system_cuda

    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    with contextlib.suppress(AttributeError):  # a venv's site module may lack it
        paths += site.getsitepackages()
    seen, trees = set(), []
    for path in paths:
        real = os.path.realpath(path)
        if os.path.isdir(real) and real not in seen:
            seen.add(real)
            trees.append(path)
    try:
        ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout  # pylint: disable=ansible-bad-function
    except OSError:
        ldconfig = ""
    environment = dict(os.environ)  # the image's ENV and what the module passed (--env NAME)
    sys.stdout.write(json.dumps({"python": sys.version.split()[0],
                                 "trees": [scan(t, expected_major, environment) for t in trees],
                                 "system": system_cuda(cuda_home, ldconfig)}) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
