"""ansible-test, Ansible's own checks for a collection, on sparkfleet.spark as it ships.

The tree ansible-test sees is ansible_collections/sparkfleet/spark made of the
built collection (what Galaxy would serve: roles, playbooks, plugins, meta,
matrix) plus tests/unit and tests/sanity. ansible-test runs each test in a venv
of its own (--venv) with the pinned tools it installs from PyPI; no container.

One stand-in: ansible-test bootstraps pip in those venvs with a get-pip script
from ci-files.testing.ansible.com, which this machine cannot reach. Its own
error message names the cache file to put in its place; that file here runs
pip itself from the real pip wheel, downloaded from PyPI, with the same
arguments get-pip takes. HOME points into .cache/, so nothing is written to
the user's home.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import ansible_test
import pytest

from conftest import BIN, REPO, ansible_env

pytestmark = pytest.mark.network  # ansible-test's venvs install from PyPI

# The pip ansible-test bootstraps in its venvs, as its own source states it.
PIP_VERSION = re.search(r"pip='([0-9.]+)'", (Path(ansible_test.__file__).parent / "_internal" /
                                            "python_requirements.py").read_text()).group(1)
GET_PIP = f'''"""Stand-in for get-pip-{PIP_VERSION}.py: pip install ARGS from the real pip wheel (tests/collection)."""
import os, runpy, sys
wheel = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pip-{PIP_VERSION}-py3-none-any.whl")
sys.path.insert(0, wheel)
sys.argv = ["pip", "install", *[a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    work = tmp_path_factory.mktemp("ansible-test")
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work), str(REPO)],
                   check=True, capture_output=True, env=ansible_env())
    root = work / "ansible_collections" / "sparkfleet" / "spark"
    root.mkdir(parents=True)
    with tarfile.open(next(work.glob("sparkfleet-spark-*.tar.gz"))) as tar:
        tar.extractall(root, filter="data")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("unit", "sanity"):
        shutil.copytree(REPO / "tests" / part, root / "tests" / part, ignore=ignore)
    shutil.copy2(REPO / "tests" / "conftest.py", root / "tests" / "conftest.py")
    home = REPO / ".cache" / "ansible-test-home"
    cache = home / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    if not (cache / f"pip-{PIP_VERSION}-py3-none-any.whl").is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                        str(cache), f"pip=={PIP_VERSION}"], check=True)
    (cache / f"get_pip_{PIP_VERSION.replace('.', '_')}.py").write_text(GET_PIP)
    return root, home


def _ansible_test(root, home, *args: str) -> subprocess.CompletedProcess:
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return subprocess.run([str(BIN / "ansible-test"), *args, "--venv", "--python", python, "--color", "no"],
                          cwd=root, capture_output=True, text=True, check=False,
                          env=ansible_env(HOME=str(home), ANSIBLE_CONFIG=""))


def test_ansible_test_sanity_passes(tree):
    proc = _ansible_test(*tree, "sanity")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    # The checks that matter to a collection ran, not a skipped subset.
    for name in ("validate-modules", "pylint", "pep8", "import", "compile", "ansible-doc", "yamllint",
                 "runtime-metadata"):
        assert f'Running sanity test "{name}"' in proc.stdout + proc.stderr, name


def test_ansible_test_units_passes(tree):
    root, home = tree
    # The parsers' unit tests read what a GB10 and an H200 answered (nvidia-smi, /etc/dgx-release): data, not code.
    doubles = Path("testbed", "doubles")
    shutil.copytree(REPO / doubles / "nvidia-smi" / "recordings", root / doubles / "nvidia-smi" / "recordings",
                    dirs_exist_ok=True)
    shutil.copy2(REPO / doubles / "dgx-release", root / doubles / "dgx-release")
    proc = _ansible_test(root, home, "units")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    assert " passed" in proc.stdout
