"""sparkfleet as a user installs it: the built collection, and the wheel that carries it with the CLI.

Everything here runs outside this repository: the collection is built with
the real `ansible-galaxy collection build`, installed with the real
`ansible-galaxy collection install` into a temporary directory, and used by a
playbook in another temporary directory whose ansible.cfg names only that
directory (the checkout's own link, collections/ansible_collections, is not on
any path). The wheel is built by pip from this checkout and installed with
`pip install --target`; its CLI runs from a directory that has no sparkfleet
files at all.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from conftest import BIN, COLLECTION, REPO, ansible_env

GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
VERSION = GALAXY["version"]
# What a user runs, and what must never ship (the development side).
# (A built collection carries MANIFEST.json in place of galaxy.yml; the wheel's copy keeps galaxy.yml.)
SHIPPED = ["meta/runtime.yml", "playbooks/site.yml", "playbooks/pin.yml", "playbooks/refresh.yml",
           "roles/spark_images/tasks/main.yml", "roles/spark_preflight/meta/argument_specs.yml",
           "plugins/modules/spark_image_pull.py", "plugins/module_utils/images/_oci.py",
           "plugins/filter/sparkfleet_images.py",
           "plugins/doc_fragments/sparkfleet_docker.py", "matrix/spark-stack.yml", "matrix/advisories.yml",
           "CHANGELOG.md", "changelogs/changelog.yaml", "README.md"]
NOT_SHIPPED = ("tests/", "testbed/", "tools/", "inventory/", "molecule/", "src/", "bench/", "collections/", ".venv/",
               ".cache/", ".ci/", ".git/", "ansible.cfg", "Makefile", "setup.py", "pyproject.toml")


def _run(*argv: str | Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, check=False,
                          env=ansible_env(**env))
    assert proc.returncode == 0, f"{argv[0]} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The collection built from this checkout and installed into a clean directory; returns that directory."""
    work = tmp_path_factory.mktemp("galaxy")
    _run(BIN / "ansible-galaxy", "collection", "build", "--output-path", work / "dist", REPO, cwd=work)
    tarball = work / "dist" / f"sparkfleet-spark-{VERSION}.tar.gz"
    assert tarball.is_file(), sorted(p.name for p in (work / "dist").iterdir())
    # With nothing configured but the target, so the checkout's own link cannot count as "already installed".
    (work / "empty.cfg").write_text("[defaults]\n")
    _run(BIN / "ansible-galaxy", "collection", "install", "--offline", "-p", work / "installed", tarball, cwd=work,
         ANSIBLE_CONFIG=str(work / "empty.cfg"), ANSIBLE_COLLECTIONS_PATH=str(work / "installed"))
    assert (work / "installed" / "ansible_collections" / "sparkfleet" / "spark" / "MANIFEST.json").is_file()
    return work


def test_the_built_collection_ships_the_roles_playbooks_and_plugins_and_nothing_of_the_development_side(installed):
    with tarfile.open(installed / "dist" / f"sparkfleet-spark-{VERSION}.tar.gz") as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("MANIFEST.json"))["collection_info"]
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == ("sparkfleet", "spark", VERSION)
    assert [path for path in SHIPPED if path not in names] == []
    assert sorted(name for name in names if name.startswith(NOT_SHIPPED)) == []
    assert not any("__pycache__" in name for name in names)


def test_a_playbook_outside_the_repository_uses_the_installed_roles_modules_and_filters(installed, tmp_path):
    collections = installed / "installed"
    listed = _run(BIN / "ansible-galaxy", "collection", "list", "-p", collections, COLLECTION, cwd=tmp_path)
    assert f"{COLLECTION} {VERSION}" in " ".join(listed.stdout.split())
    # This directory knows nothing of the checkout: its own ansible.cfg names only the installed collections.
    (tmp_path / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {collections}\n"
                                          "inject_facts_as_vars = False\ngathering = explicit\n")
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"sparks": {"hosts": {"here": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "Use sparkfleet.spark from an installed collection",
        "hosts": "sparks",
        "gather_facts": False,
        "tasks": [
            # A role by FQCN: preflight on this x86_64 machine, let through by its documented override.
            {"name": "Preflight", "ansible.builtin.include_role": {"name": "sparkfleet.spark.spark_preflight"},
             # This machine's free disk is not what this test is about (the disk check has its own tests).
             "vars": {"spark_preflight_require_spark": False, "spark_preflight_min_docker_free_gib": 0}},
            {"name": "Show the preflight's verdict", "ansible.builtin.debug": {"var": "spark_preflight_override"}},
            # A module by FQCN whose module_utils import is ansible_collections.sparkfleet.spark...
            {"name": "Record state", "sparkfleet.spark.spark_state": {
                "path": str(tmp_path / "state.json"), "content": {"host_class": "not-spark"}}},
            # A filter by FQCN from a file holding several.
            {"name": "Show a pin line", "ansible.builtin.debug": {"msg": "{{ {'name': 'ngc', 'registry': 'nvcr.io', "
             "'repository': 'nvidia/pytorch', 'tag': '25.11-py3', 'index_digest': 'sha256:aaa', "
             "'digests': {'linux/arm64': 'sha256:bbb'}} | sparkfleet.spark.spark_images_pin_line }}"}},
        ],
    }], sort_keys=False))
    proc = _run(BIN / "ansible-playbook", "-i", "hosts.yml", "play.yml", cwd=tmp_path,
                ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(collections))
    assert "TASK [sparkfleet.spark.spark_preflight : Say when a host that is not a Spark" in proc.stdout
    assert '"spark_preflight_override": true' in proc.stdout, proc.stdout
    assert json.loads((tmp_path / "state.json").read_text())["host_class"] == "not-spark"
    assert "ngc: nvcr.io/nvidia/pytorch:25.11-py3 @ sha256:aaa (linux/arm64 sha256:bbb)" in proc.stdout
    # Roles came from the installed copy, not from this checkout.
    verbose = _run(BIN / "ansible-playbook", "-i", "hosts.yml", "play.yml", "--list-tasks", "-v", cwd=tmp_path,
                   ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(collections))
    assert str(REPO) not in verbose.stdout


def test_the_installed_site_playbook_is_addressed_by_its_fqcn(installed, tmp_path):
    (tmp_path / "hosts.yml").write_text("sparks:\n  hosts:\n    spark-01:\n")
    proc = _run(BIN / "ansible-playbook", "-i", "hosts.yml", f"{COLLECTION}.site", "--list-tasks", cwd=tmp_path,
                ANSIBLE_CONFIG=str(installed / "empty.cfg"), ANSIBLE_COLLECTIONS_PATH=str(installed / "installed"))
    for role in ("spark_preflight", "spark_container_runtime", "spark_images", "spark_venv", "spark_verify"):
        assert f"{COLLECTION}.{role} :" in proc.stdout, proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", work, REPO,
         cwd=work)
    return next(work.glob("sparkfleet-*.whl"))


def test_the_wheel_carries_the_collection_and_its_version(wheel):
    assert wheel.name.startswith(f"sparkfleet-{VERSION}-")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    inside = "sparkfleet/collection/ansible_collections/sparkfleet/spark/"
    assert [path for path in SHIPPED if inside + path not in names and not path.startswith("changelogs/")] == []
    assert {"sparkfleet/collection/ansible.cfg", inside + "galaxy.yml"} <= names
    assert sorted(n for n in names if n.startswith(tuple(inside + p for p in NOT_SHIPPED))) == []
    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]
    required = [Requirement(line.split(":", 1)[1]) for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")]
    assert [r.specifier for r in required if r.name == "ansible-core" and not r.marker] == [SpecifierSet(runtime)]


def test_the_installed_cli_provisions_from_any_directory(wheel, tmp_path):
    site = tmp_path / "site"
    _run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, wheel, cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "hosts.yml").write_text(yaml.safe_dump({"sparks": {"hosts": {"here": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    cli = ("import sys; sys.path.insert(0, sys.argv.pop(1)); import sparkfleet, sparkfleet.cli; "
           "print('sparkfleet from', sparkfleet.__file__, flush=True); raise SystemExit(sparkfleet.cli.main())")
    proc = subprocess.run([sys.executable, "-c", cli, str(site), "provision", "-i", "hosts.yml", "--plain",
                           "--tags", "spark_preflight", "-e", "spark_preflight_require_spark=false",
                           "-e", "spark_preflight_min_docker_free_gib=0",
                           "--report-dir", "report"],
                          cwd=elsewhere, capture_output=True, text=True, check=False,
                          env=ansible_env(ANSIBLE_CONFIG=""))
    assert f"sparkfleet from {site}/sparkfleet/__init__.py" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads((elsewhere / "report" / "report.json").read_text())
    host = report["hosts"]["here"]
    assert host.get("override") == "not a Spark (override)", host
    # Every task the run shows came from the wheel's copy of the collection.
    events = [json.loads(line) for path in (elsewhere / "report").rglob("*.json") if path.parent.name == "job_events"
              for line in [path.read_text()]]
    paths = {e["event_data"].get("task_path", "").split(":")[0] for e in events if e["event_data"].get("task_path")}
    assert paths and all(p.startswith(f"{site}/sparkfleet/collection/") for p in paths), sorted(paths)


def test_ansible_builder_creates_an_execution_environment_that_installs_this_collection(tmp_path):
    _run("make", "--no-print-directory", "collection", cwd=REPO)
    context = tmp_path / "context"
    _run(BIN / "ansible-builder", "create", "-f", REPO / "execution-environment.yml", "-c", context, cwd=REPO)
    dockerfile = (context / "Dockerfile").read_text()
    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]
    refs = next(line for line in dockerfile.splitlines() if line.startswith("ARG ANSIBLE_INSTALL_REFS="))
    core = next(Requirement(ref) for ref in refs.split("=", 1)[1].strip('"').split() if ref.startswith("ansible-core"))
    assert core.specifier == SpecifierSet(runtime), "execution-environment.yml and meta/runtime.yml disagree"
    assert "openssh-clients [platform:rpm]" in (context / "_build" / "bindep.txt").read_text()
    # The base image by digest: every FROM of the build names it so, never the moving tag alone.
    froms = [line for line in dockerfile.splitlines() if line.startswith("ARG EE_BASE_IMAGE=")]
    assert froms and all(re.search(r"@sha256:[0-9a-f]{64}\b", line) for line in froms), froms
    assert "ansible-galaxy collection install" in dockerfile and "COPY _build /build" in dockerfile
    # The galaxy stage's own command, on a copy of _build/ as the image has it at /build: it must install
    # sparkfleet.spark from the tarball the context carries (the image itself needs registries we cannot reach).
    build = tmp_path / "build"
    shutil.copytree(context / "_build", build)
    (tmp_path / "empty.cfg").write_text("[defaults]\n")
    target = tmp_path / "usr-share-ansible-collections"
    _run(BIN / "ansible-galaxy", "collection", "install", "--offline", "-r", "requirements.yml", "--collections-path",
         target, cwd=build, ANSIBLE_CONFIG=str(tmp_path / "empty.cfg"), ANSIBLE_COLLECTIONS_PATH=str(target))
    manifest = json.loads((target / "ansible_collections" / "sparkfleet" / "spark" / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["version"] == VERSION
