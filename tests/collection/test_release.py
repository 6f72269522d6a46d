"""The release as Galaxy and the community collections' tools judge it.

One version: galaxy.yml's is the newest release changelogs/changelog.yaml
records (or, while changelogs/fragments/ holds changes not yet released, the
next one), the Python package carries it (tests/collection/test_collection.py),
and each plugin's `version_added` is the release whose changelog lists it as
new. CHANGELOG.md is what antsibull-changelog generates from changelog.yaml.

The tools are the real ones, at the versions pinned in RELEASE_TOOLS, in a venv
of their own in the test store (galaxy-importer pins an ansible-core and
ansible-lint of its own): galaxy-importer on the tarball `ansible-galaxy
collection build` makes, with no warning; antsibull-docs lint-collection-docs
on that tarball unpacked; antsibull-changelog lint on the fragments.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import store
import yaml
from packaging.version import Version

from conftest import BIN, REPO, ansible_env

RELEASE_TOOLS = ("galaxy-importer==0.4.44", "antsibull-changelog==0.36.0", "antsibull-docs==2.28.0")
VERSION = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
CHANGES = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())
RELEASES = sorted(CHANGES["releases"], key=Version)
FRAGMENTS = sorted(p.name for p in (REPO / "changelogs" / "fragments").glob("*.y*ml"))


def _plugins_version_added() -> dict[str, str]:
    """{'module spark_venv': '0.1.0', 'filter spark_checked': ...}: each plugin's own version_added."""
    found = {}
    for path in sorted((REPO / "plugins").glob("*/*.py")) + sorted((REPO / "plugins" / "filter").glob("*.yml")):
        kind = path.parent.name.removesuffix("s") if path.parent.name == "modules" else path.parent.name
        if path.suffix == ".py":
            tree = ast.parse(path.read_text())
            docs = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                    and [getattr(t, "id", None) for t in node.targets] == ["DOCUMENTATION"]]
            if not docs:
                continue
            doc = yaml.safe_load(docs[0])
        else:
            doc = yaml.safe_load(path.read_text())["DOCUMENTATION"]
        found[f"{kind} {doc.get('name') or doc.get('module') or doc.get('callback') or path.stem}"] = \
            str(doc.get("version_added"))
    return found


def _new_in_releases() -> dict[str, str]:
    """{'module spark_venv': '0.1.0', ...}: the release whose changelog lists each plugin as new."""
    new = {}
    for release, data in CHANGES["releases"].items():
        for module in data.get("modules", []):
            new[f"module {module['name']}"] = release
        for kind, plugins in data.get("plugins", {}).items():
            for plugin in plugins:
                new[f"{kind} {plugin['name']}"] = release
    return new


def test_galaxy_yml_is_the_newest_release_or_the_next_while_fragments_wait():
    newest = RELEASES[-1]
    if FRAGMENTS:
        assert Version(VERSION) > Version(newest), (
            f"changelogs/fragments/ holds {len(FRAGMENTS)} change(s) not yet released, so galaxy.yml's version "
            f"{VERSION} must be the next release, after {newest}")
    else:
        assert newest == VERSION, f"galaxy.yml says {VERSION}; the newest release changelog.yaml records is {newest}"


def test_each_plugin_was_added_in_the_release_that_lists_it_as_new():
    added, new = _plugins_version_added(), _new_in_releases()
    unreleased = {name: version for name, version in added.items() if name not in new}
    # A plugin not in a release yet is the next release's: version_added is galaxy.yml's version.
    assert {name: version for name, version in unreleased.items() if version != VERSION} == {}, \
        f"plugins not in any release must say version_added: {VERSION!r}"
    assert {name: (added[name], new[name]) for name in added if name in new and added[name] != new[name]} == {}, \
        "(version_added, the release whose changelog lists the plugin as new)"
    routed = {f"{kind} {name}" for kind, plugins in (yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())
                                                      .get("plugin_routing") or {}).items() for name in plugins}
    assert sorted(name for name in new if name not in added and name not in routed) == [], \
        "changelog.yaml lists plugins that are gone (a renamed one is routed to its new name in meta/runtime.yml)"
    assert len(added) > 40  # the walk found the modules, filters and the callback


@pytest.fixture(scope="module")
def tools() -> Path:
    return release_tools()


def release_tools() -> Path:
    """The bin/ of a venv with RELEASE_TOOLS, made once in the test store (testbed/store.py)."""
    want = store.stamp(*RELEASE_TOOLS, store.interpreter(sys.executable), code=release_tools)
    with store.locked("release-tools") as venv:
        if not store.current(venv, want):
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *RELEASE_TOOLS],
                           check=True, capture_output=True)
            store.done(venv, want)
    return venv / "bin"


def _tool(tools: Path, *argv: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environ = ansible_env(**env)
    environ["PATH"] = f"{tools}{os.pathsep}{environ['PATH']}"  # galaxy-importer runs ansible-doc and ansible-lint
    environ.pop("ANSIBLE_CONFIG", None)
    return subprocess.run([str(tools / argv[0]), *argv[1:]], cwd=cwd, capture_output=True, text=True, check=False,
                          env=environ)


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("release")
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work), str(REPO)],
                   check=True, capture_output=True, env=ansible_env())
    return work / f"sparkfleet-spark-{VERSION}.tar.gz"


@pytest.mark.network
def test_galaxy_importer_accepts_the_built_collection_without_a_warning(tools, tarball, tmp_path):
    proc = _tool(tools, "python", "-m", "galaxy_importer.main", str(tarball), cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert "Importer processing completed successfully" in output, output[-6000:]
    assert "Linting collection via ansible-lint" in output, "the importer's ansible-lint step ran"
    assert [line for line in output.splitlines() if re.search(r"WARNING|ERROR", line)] == []


@pytest.mark.network
def test_antsibull_docs_lint_passes_on_the_built_collection(tools, tarball, tmp_path):
    root = tmp_path / "ansible_collections" / "sparkfleet" / "spark"
    root.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(root, filter="data")
    proc = _tool(tools, "antsibull-docs", "lint-collection-docs", "--plugin-docs", str(root), cwd=tmp_path,
                 ANSIBLE_COLLECTIONS_PATH=f"{tmp_path}{os.pathsep}{REPO / 'collections'}")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]


@pytest.mark.network
def test_the_changelog_and_its_fragments_pass_antsibull_changelog_lint(tools):
    for argv in (("lint",), ("lint-changelog-yaml", "changelogs/changelog.yaml")):
        proc = _tool(tools, "antsibull-changelog", *argv, cwd=REPO)
        assert (proc.returncode, proc.stdout + proc.stderr) == (0, ""), argv


@pytest.mark.network
def test_changelog_md_is_what_antsibull_changelog_generates(tools, tmp_path):
    for part in ("galaxy.yml", "changelogs"):
        (shutil.copytree if (REPO / part).is_dir() else shutil.copy2)(REPO / part, tmp_path / part)
    proc = _tool(tools, "antsibull-changelog", "generate", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "CHANGELOG.md").read_text() == (REPO / "CHANGELOG.md").read_text(), (
        "CHANGELOG.md is generated: add a fragment under changelogs/fragments/ and run antsibull-changelog generate")
