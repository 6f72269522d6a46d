"""Contracts every role keeps: argument specs match defaults, no GPU driver is touched."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import REPO

ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_equal_defaults_key_for_key(role):
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert sorted(options) == sorted(defaults)
    for name, spec in options.items():
        assert spec.get("description"), f"{role}: {name} has no description"
        if spec["type"] in ("dict", "bool") and isinstance(defaults[name], str) and "{{" in defaults[name]:
            # A dict or a bool whose default is a template of another variable (a renamed one's old name, read
            # through spark_renamed): the spec cannot hold it (antsibull-docs refuses the string), so its
            # description says it, word for word.
            assert "default" not in spec, f"{role}: {name} has a template default the spec cannot hold"
            assert f"C({defaults[name]})" in " ".join(spec["description"]), f"{role}: {name}'s default is not said"
            continue
        assert spec.get("default") == defaults[name], f"{role}: {name} default differs"


@pytest.mark.parametrize("role", ROLES)
def test_every_public_variable_is_documented_in_the_role_readme(role):
    readme = (REPO / "roles" / role / "README.md").read_text()
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}
    missing = [name for name in defaults if name not in readme]
    assert not missing, f"roles/{role}/README.md does not document {missing}"


def test_the_toolkit_packages_are_the_ones_the_facts_and_the_doctor_report():
    """The role installs and holds the packages its vars name; the preflight facts and the doctor report the ones
    module_utils/host/_dpkg.py names. One list each side, held equal here."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _dpkg

    role = yaml.safe_load((REPO / "roles" / "spark_container_runtime" / "vars" / "main.yml").read_text())
    assert tuple(role["__spark_container_runtime_packages"]) == _dpkg.TOOLKIT_PACKAGES
    assert tuple(role["__spark_container_runtime_packages"] + role["__spark_container_runtime_prerequisites"]) \
        == _dpkg.PACKAGES


# DGX OS updates the GPU driver through OTA; provisioning must never install,
# upgrade or hold it (platform-facts.md).
DRIVER_PACKAGE_PREFIXES = ("nvidia-driver", "libnvidia-compute", "cuda-drivers", "nvidia-dkms",
                           "nvidia-kernel")


def _yaml_files() -> list[Path]:
    return [*(REPO / "roles").rglob("*.yml"), *(REPO / "playbooks").rglob("*.yml")]


def test_no_task_names_a_gpu_driver_package():
    offenders = [
        f"{path.relative_to(REPO)}: {prefix}"
        for path in _yaml_files()
        for prefix in DRIVER_PACKAGE_PREFIXES
        if prefix in path.read_text()
    ]
    assert offenders == []


def test_every_tasks_from_entry_point_has_its_own_argument_spec():
    """A role entered through tasks_from validates its variables like one entered through main."""
    import re

    used = set()
    for path in [*(REPO / "roles").rglob("*.yml"), *(REPO / "playbooks").glob("*.yml"),
                 *(REPO / "molecule").rglob("*.yml")]:
        for block in re.findall(r"name: sparkfleet\.spark\.(\w+)\n\s+tasks_from: (\w+)\.yml", path.read_text()):
            used.add(block)
    for path in (REPO / "tests").rglob("*.py"):  # playbooks the tests write
        used |= set(re.findall(r'"name": "sparkfleet\.spark\.(\w+)",\s*"tasks_from": "(\w+)\.yml"', path.read_text()))
    assert used, "no tasks_from found: the pattern no longer matches the playbooks"
    missing = [f"{role}: {entry}" for role, entry in sorted(used)
               if entry not in yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
               ["argument_specs"]]
    assert missing == []


def test_sparkfleet_filters_are_called_by_their_full_name():
    """A short name (| spark_x, map('spark_x')) does not resolve from a collection role: it fails at run time."""
    import re

    names = set()
    for path in (REPO / "plugins" / "filter").glob("*.py"):
        names |= set(re.findall(r'"(spark_\w+)": spark_\w+', path.read_text()))
    assert names, "no filters found: the pattern no longer matches plugins/filter"
    short = re.compile(r"(?:\|\s*|\(\s*['\"])(" + "|".join(sorted(names)) + r")\b")
    offenders = [f"{path.relative_to(REPO)}: {match}"
                 for path in [*(REPO / "roles").rglob("*.yml"), *(REPO / "roles").rglob("*.j2"),
                              *(REPO / "playbooks").glob("*.yml"), *(REPO / "molecule").rglob("*.yml")]
                 for match in short.findall(path.read_text())]
    assert offenders == []


@pytest.mark.parametrize("role", ROLES)
def test_a_roles_vars_are_static_data(role):
    """vars/main.yml holds constants only: what a role works out from its inputs or results is a task's (vars: next
    to where it is used, or a set_fact named for what it decides) and the decision a filter's, tested in Python."""
    path = REPO / "roles" / role / "vars" / "main.yml"
    if not path.exists():
        return
    templated = [line.strip() for line in path.read_text().splitlines() if "{{" in line or "{%" in line]
    assert templated == [], f"roles/{role}/vars/main.yml computes something: {templated}"


def _strings(node):
    if isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, str):
        yield node


def test_an_inventory_host_name_reaches_a_path_only_through_the_host_name_check():
    """An inventory host named ../../tmp/x once made the controller's record land outside its directory: every
    path built from inventory_hostname (a '/' before it or after it) goes through spark_checked('host_name', ...),
    which refuses it."""
    import re

    from ansible.errors import AnsibleFilterError
    from ansible_collections.sparkfleet.spark.plugins.filter.sparkfleet_inputs import spark_checked

    in_a_path = re.compile(r"/\s*\{\{\s*inventory_hostname|/\s*'\s*~\s*inventory_hostname"
                           r"|inventory_hostname[^}]*\}\}\s*(/|\.json)")
    unchecked, checked = [], 0
    for path in _yaml_files():
        for value in _strings(yaml.safe_load(path.read_text())):
            if in_a_path.search(" ".join(value.split())):
                if "spark_checked('host_name'" in value.replace('"', "'"):
                    checked += 1
                else:
                    unchecked.append(f"{path.relative_to(REPO)}: {value.strip()}")
    assert unchecked == [] and checked >= 1
    for hostile in ("../../tmp/x", "a/b", "..", "spark\n01", "$(id)"):
        with pytest.raises(AnsibleFilterError, match=r"the inventory host name is .*; expected"):
            spark_checked(hostile, "host_name", "the inventory host name")
    assert spark_checked("spark-01.lan", "host_name", "the inventory host name") == "spark-01.lan"


def test_nvidias_apt_key_is_pinned_by_default():
    """The toolkit repository's key is trusted only by NVIDIA's published fingerprint unless the user says
    otherwise (an empty default once trusted whatever key the URL served, and replaced it when it changed)."""
    defaults = yaml.safe_load((REPO / "roles" / "spark_container_runtime" / "defaults" / "main.yml").read_text())
    assert defaults["spark_container_runtime_gpg_key_fingerprint"] == "C95B321B61E88C1809C4F759DDCAE044F796ECB0"


# The tasks that run once for the play's hosts, and the role variables each may read: values the controller uses
# once for the fleet, each with why. A role variable can be set per host (host_vars): read in a run_once task, the
# first host's value stood for every host's (issue 35: a per-host spark_venv_require_hashes failed the others, the
# pull plan was the first host's catalog). A new run_once task, or a new variable in one, must be added here with
# its reason, or not run once.
RUN_ONCE_READS = {
    ("spark_images", "resolve.yml", "Resolve the images on the controller, once for the fleet"): {
        # pin and a refresh move the fleet's one lock, plan_unlocked.yml resolves every host's unlocked images
        # together (the union of their plans): the registries and their login are the fleet's (group_vars/all)
        "spark_images_registry_credentials", "spark_images_plain_http"},
    ("spark_images", "plan_unlocked.yml", "Say which images are not locked"): set(),
    ("spark_images", "read_lock.yml", "Read the image lock"): {
        # the inventory's one lock, the file pin writes on the controller (a refresh and cluster verify read it once)
        "spark_images_lock_file"},
    ("spark_images", "refresh_resolve.yml", "Keep the refresh's plan for every host (set once, given to each)"): set(),
    ("spark_images", "refresh_resolve.yml", "Show the lock diff (old -> new digest per image)"): set(),
    ("spark_verify", "record.yml", "Show the fleet's verification table"): set(),  # every host's, from hostvars
}


def test_a_task_run_once_reads_no_role_variable_that_may_differ_per_host_unless_listed_with_why():
    import re

    options = {name for path in (REPO / "roles").glob("*/meta/argument_specs.yml")
               for entry in yaml.safe_load(path.read_text())["argument_specs"].values()
               for name in (entry.get("options") or {})}
    found = {}
    for path in sorted((REPO / "roles").glob("*/tasks/*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            if "run_once" not in task:
                continue
            text = yaml.safe_dump({k: v for k, v in task.items() if k != "name"})
            reads = set(re.findall(r"\b(spark_[a-z0-9_]+)\b", text)) & options  # the roles' variables
            found[(path.parts[-3], path.name, task.get("name"))] = reads
    assert set(found) == set(RUN_ONCE_READS), "a run_once task was added or removed: list it with why"
    unlisted = {key: sorted(reads - RUN_ONCE_READS[key]) for key, reads in found.items() if reads - RUN_ONCE_READS[key]}
    assert unlisted == {}, unlisted


def test_the_lock_files_default_is_where_the_lock_module_and_the_driver_look():
    """The role's default names the lock file where module_utils/images/_lock.py's DEFAULT_FILE says (the driver's
    check before a run reads it there): one path, held together."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.images._lock import DEFAULT_FILE

    default = yaml.safe_load((REPO / "roles" / "spark_images" / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((REPO / "roles" / "spark_images" / "meta" / "argument_specs.yml").read_text())
    expected = f"{{{{ ansible_inventory_sources | sparkfleet.spark.spark_inventory_dir('{DEFAULT_FILE}') }}}}"
    assert default["spark_images_lock_file"] == expected
    assert spec["argument_specs"]["main"]["options"]["spark_images_lock_file"]["default"] == expected
