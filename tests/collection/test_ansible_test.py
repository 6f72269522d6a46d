"""ansible-test, Ansible's own checks for a collection, on sparkfleet.spark as it ships.

The tree ansible-test sees is ansible_collections/sparkfleet/spark made of the
built collection (what Galaxy would serve: roles, playbooks, plugins, meta,
matrix) plus tests/unit and tests/sanity. ansible-test runs each test in a venv
of its own (--venv) with the pinned tools it installs from PyPI; no container.

One stand-in: ansible-test bootstraps pip in those venvs with a get-pip script
from ci-files.testing.ansible.com, which this machine cannot reach. Its own
error message names the cache file to put in its place; that file here runs
pip itself from the real pip wheel, downloaded from PyPI, with the same
arguments get-pip takes. HOME is a folder of the test store's (testbed/store.py), so nothing is written
into the user's own ~/.ansible, and every clone of this machine reuses ansible-test's tool venvs.

Each ansible-core the collection admits (meta/runtime.yml: 2.19 to 2.21) runs
both, each on the oldest Python it supports: the test venv's own core (2.21 on
Python 3.12, what `pip install ansible` brings today) from the test venv, the
others from venvs of their own in the test store, made with the first python3.NN
under pyenv or on PATH. Each core has its ignore file
(tests/sanity/ignore-2.NN.txt).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import ansible_test
import pytest
import store
from ansible.release import __version__ as ansible_version
from ansible_cores import CORES, TEST_VENV_CORE, core_bin

from conftest import BIN, REPO, ansible_env

pytestmark = pytest.mark.network  # ansible-test's venvs install from PyPI


def _pip_version(bin_dir: Path) -> str:
    """The pip ansible-test bootstraps in its venvs, as the source of that core's ansible-test states it."""
    if bin_dir == BIN:
        source = Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
    else:
        source = next(bin_dir.parent.glob("lib/python*/site-packages/ansible_test/_internal/python_requirements.py"))
    return re.search(r"pip='([0-9.]+)'", source.read_text()).group(1)


def _get_pip(version: str) -> str:
    return f'''"""Stand-in for get-pip-{version}.py: pip install ARGS from the real pip wheel (tests/collection)."""
import os, runpy, sys
wheel = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pip-{version}-py3-none-any.whl")
sys.path.insert(0, wheel)
sys.argv = ["pip", "install", *[a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
'''


def test_the_range_the_collection_admits_is_the_range_tested():
    runtime = (REPO / "meta" / "runtime.yml").read_text()
    low, high = map(int, re.search(r'requires_ansible: ">=2\.(\d+)\.0,<2\.(\d+)\.0"', runtime).groups())
    assert sorted(CORES) == [f"2.{minor}" for minor in range(low, high)], "CORES is meta/runtime.yml's range"
    assert TEST_VENV_CORE in CORES, f"the test venv's ansible-core {ansible_version} is not one the collection admits"


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    """The collection as `ansible-galaxy collection build` makes it, built once for every core's tree."""
    work = tmp_path_factory.mktemp("built")
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work), str(REPO)],
                   check=True, capture_output=True, env=ansible_env())
    return next(work.glob("sparkfleet-spark-*.tar.gz"))


@pytest.fixture(scope="module", params=list(CORES), ids=lambda core: f"ansible-core-{core}")
def tree(request, tmp_path_factory, tarball):
    core = request.param
    bin_dir = core_bin(core)
    work = tmp_path_factory.mktemp(f"ansible-test-{core}")
    root = work / "ansible_collections" / "sparkfleet" / "spark"
    root.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(root, filter="data")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("unit", "sanity"):
        shutil.copytree(REPO / "tests" / part, root / "tests" / part, ignore=ignore)
    for helper in ("conftest.py", "fake_http.py"):  # what tests/unit imports from tests/
        shutil.copy2(REPO / "tests" / helper, root / "tests" / helper)
    # ansible-test's HOME, with the tool venvs it makes there, kept in the test store (testbed/store.py) for every
    # clone of this machine; held while this core's tests use it.
    with store.locked("ansible-test-home" if bin_dir == BIN else f"ansible-test-home-{core}") as home:
        cache = home / ".ansible" / "test" / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        pip = _pip_version(bin_dir)
        if not (cache / f"pip-{pip}-py3-none-any.whl").is_file():
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                            str(cache), f"pip=={pip}"], check=True)
        (cache / f"get_pip_{pip.replace('.', '_')}.py").write_text(_get_pip(pip))
        yield root, home, bin_dir, CORES[core]


def _ansible_test(root, home, bin_dir, python, *args: str) -> subprocess.CompletedProcess:
    """ansible-test of the tree's core, in venvs of its own on `python`."""
    env = ansible_env(HOME=str(home), ANSIBLE_CONFIG="")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return subprocess.run([str(bin_dir / "ansible-test"), *args, "--venv", "--python", python, "--color", "no"],
                          cwd=root, capture_output=True, text=True, check=False, env=env)


def test_ansible_test_sanity_passes(tree):
    proc = _ansible_test(*tree, "sanity")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    # The checks that matter to a collection ran, not a skipped subset.
    for name in ("validate-modules", "pylint", "pep8", "import", "compile", "ansible-doc", "yamllint",
                 "runtime-metadata"):
        assert f'Running sanity test "{name}"' in proc.stdout + proc.stderr, name


def test_ansible_test_units_passes(tree):
    root = tree[0]
    # The parsers' unit tests read what a GB10 and an H200 answered (nvidia-smi, /etc/dgx-release): data, not code.
    doubles = Path("testbed", "doubles")
    shutil.copytree(REPO / doubles / "nvidia-smi" / "recordings", root / doubles / "nvidia-smi" / "recordings",
                    dirs_exist_ok=True)
    shutil.copy2(REPO / doubles / "dgx-release", root / doubles / "dgx-release")
    # So do the cluster checks' parsers: what ping, iperf3, ethtool, ibdev2netdev, perftest and nccl-tests print.
    shutil.copytree(REPO / "tests" / "fixtures" / "cluster", root / "tests" / "fixtures" / "cluster")
    # And the declared closure's: the real packages' METADATA, as PyPI publishes it.
    shutil.copytree(REPO / "tests" / "fixtures" / "metadata", root / "tests" / "fixtures" / "metadata")
    proc = _ansible_test(*tree, "units")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    # Every unit test ran, none left in a folder ansible-test's pytest would not enter (pytest's default leaves
    # out folders named venv, and tests/unit/plugins/module_utils/venv/ mirrors module_utils/venv/).
    summary = [line for line in proc.stdout.splitlines() if re.search(r"\d+ passed.* in [\d.]+s", line)]
    assert summary, proc.stdout[-2000:]
    counts: dict[str, int] = {}  # ansible-test runs pytest once for the controller's tests, once for the modules'
    for line in summary:
        for n, kind in re.findall(r"(\d+) (passed|skipped)", line):
            counts[kind] = counts.get(kind, 0) + int(n)
    here = subprocess.run([str(BIN / "pytest"), "--collect-only", "-q", "-p", "no:cacheprovider", "tests/unit"],
                          cwd=REPO, capture_output=True, text=True, check=False).stdout
    collected = int(re.search(r"(\d+) tests? collected", here).group(1))
    assert counts.get("passed", 0) + counts.get("skipped", 0) == collected, (counts, collected, summary)
