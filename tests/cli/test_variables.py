"""The CLI's check of the inventory's values against the roles' argument specs (src/sparkfleet/variables.py): what
Ansible's argument spec would refuse later, raw and without the file, is named before any host is touched; what
it accepts (and values judged only when rendered) is left alone."""

from __future__ import annotations

import json

import pytest

from sparkfleet import variables

SPECS = variables.specs()


@pytest.mark.parametrize(("name", "value", "said"), [
    ("spark_images_derived", "ngc-audio", "a string, expected a list of mappings"),
    ("spark_images_derived", ["ngc-audio"], "a list holding strings, expected a list of mappings"),
    ("spark_venv_keep", "two", "a string, expected a whole number"),
    ("spark_verify_smoke", "maybe", "a string, expected true or false"),
    ("spark_venv_index_mirrors", ["https://pypi.org/simple"], "a list, expected a mapping"),
    ("spark_venv_python", ["python3"], "a list, expected a single value (a string)"),
])
def test_a_value_of_the_wrong_type_is_named_with_the_type_found_and_expected(name, value, said):
    assert variables.wrong_type(value, SPECS[name]) == said


@pytest.mark.parametrize(("name", "value"), [
    ("spark_verify_smoke", "yes"),  # a boolean to Ansible
    ("spark_venv_keep", "2"),  # an integer to Ansible
    ("spark_verify_pythons", "/usr/bin/python3"),  # Ansible splits a string into a list of strings
    ("spark_images_derived", "{{ my_derived }}"),  # judged when it is rendered
    ("spark_images_registry_credentials", {"__ansible_vault": "$ANSIBLE_VAULT;1.1;AES256\n..."}),  # vaulted
    ("spark_images_derived", None),  # Ansible's argument spec leaves a null alone
])
def test_what_ansible_accepts_is_left_alone(name, value):
    assert variables.wrong_type(value, SPECS[name]) is None


def test_the_sentence_names_the_file_and_never_the_value():
    said = variables.mistyped({"host spark-01": {"spark_venv_keep": "s3cr3t"}},
                              {"spark_venv_keep": ["inv/host_vars/spark-01.yml"]})
    assert said == ["spark_venv_keep in inv/host_vars/spark-01.yml is a string, expected a whole number "
                    "(roles/spark_venv/README.md describes it)"]
    assert "s3cr3t" not in said[0]


def test_a_wrong_value_given_with_dash_e_is_named_as_given_there_not_as_the_inventorys_file():
    """The inventory's file sets the variable (right there); -e overrides it with a word: the -e is named."""
    said = variables.mistyped({"-e (inline)": {"spark_venv_keep": "two"}},
                              {"spark_venv_keep": ["inv/group_vars/all/main.yml"]})
    assert said == ["spark_venv_keep in -e (inline) is a string, expected a whole number "
                    "(roles/spark_venv/README.md describes it)"]


D = "sha256:" + "ab" * 32
ENTRY = {"registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3", "index_digest": D,
         "digests": {"linux/arm64": D}, "resolved_at": "2026-12-01T04:00:00+00:00"}


def _inventory(tmp_path, lock):
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    spark-01:\n")
    if lock is not None:
        (inv / "group_vars" / "all" / "spark_images_lock.yml").write_text(
            json.dumps({"spark_images_lock": lock}))
    return inv


def test_the_inventorys_lock_file_and_its_variable_agree(tmp_path):
    inv = _inventory(tmp_path, {"ngc": ENTRY})
    assert variables.lock_problems({"host spark-01": {"spark_images_lock": {"ngc": ENTRY}}}, str(inv)) == []
    assert variables.lock_problems({"host spark-01": {}}, str(inv)) == []


def test_two_locks_are_named_before_any_host_is_touched(tmp_path):
    """Issue 39: a lock file moved out of the inventory (spark_images_lock_file) with the old one left in
    group_vars/all, or a lock set by hand in host_vars: the driver names both before the playbook (exit 4), as the
    plan would refuse it later on every host."""
    inv = _inventory(tmp_path, {"ngc": ENTRY})
    own = tmp_path / "locks" / "fleet.yml"
    own.parent.mkdir()
    own.write_text(json.dumps({"spark_images_lock": {"ngc": {**ENTRY, "index_digest": "sha256:" + "cd" * 32}}}))
    [said] = variables.lock_problems({"host spark-01": {"spark_images_lock": {"ngc": ENTRY},
                                                        "spark_images_lock_file": str(own)}}, str(inv))
    assert said.startswith(f"two image locks: the inventory sets spark_images_lock, and the lock file "
                           f"spark_images_lock_file is {own}")
    assert "they differ in ngc" in said
    bare = _inventory(tmp_path / "bare", None)  # no lock file where the role's default looks
    [said] = variables.lock_problems({"host spark-01": {"spark_images_lock": {"ngc": ENTRY}}}, str(bare))
    assert f"{bare}/group_vars/all/spark_images_lock.yml is not there" in said


def test_a_lock_entry_or_a_derived_base_that_names_no_catalog_image_is_bad_input_with_the_nearest_name(tmp_path):
    """Issue 58, item 4: a lock entry renamed 'unslot' failed the run (exit 2) as "has no entry 'unsloth'", never
    naming the stray entry; a derived image's base 'ngcc' as a filter's traceback."""
    inv = _inventory(tmp_path, {"ngc": ENTRY, "unslot": {**ENTRY, "registry": "docker.io"}})
    derived = [{"name": "ngc-tools", "base": "ngcc", "launcher": "spark-ngc-tools", "apt_packages": ["htop"]}]
    (inv / "group_vars" / "all" / "main.yml").write_text(json.dumps({"spark_images_derived": derived}))
    said = variables.catalog_problems({"host spark-01": {"spark_images_derived": derived}}, str(inv))
    assert said == [
        f"{inv}/group_vars/all/spark_images_lock.yml: no entry 'unsloth' for docker.io/unsloth/unsloth:dgxspark-latest,"
        " a moving tag, which no run pulls unlocked; the entry 'unslot' names no image of the catalog (ngc, unsloth):"
        " did you mean unsloth? Rename it, or run `sparkfleet pin` to lock it",
        f"{inv}/group_vars/all/main.yml: spark_images_derived: derived image ngc-tools: base 'ngcc' is not one of "
        "the images it can be built from (ngc, unsloth): did you mean ngc?"]
    # A lock serves the fleet and keeps an image no longer configured until the next pin: no problem of itself
    ngc_only = [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3"],
                 "launcher": "spark-ngc"}]
    assert variables.catalog_problems({"host spark-01": {"spark_images_catalog": ngc_only}}, str(inv)) == []
