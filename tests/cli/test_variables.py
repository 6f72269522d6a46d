"""The CLI's check of the inventory's values against the roles' argument specs (src/sparkfleet/variables.py): what
Ansible's argument spec would refuse later, raw and without the file, is named before any host is touched; what
it accepts (and values judged only when rendered) is left alone."""

from __future__ import annotations

import pytest

from sparkfleet import variables

SPECS = variables.specs()


@pytest.mark.parametrize(("name", "value", "said"), [
    ("spark_images_derived", "ngc-audio", "a string, expected a list of mappings"),
    ("spark_images_derived", ["ngc-audio"], "a list holding strings, expected a list of mappings"),
    ("spark_venv_keep", "two", "a string, expected a whole number"),
    ("spark_verify_smoke", "maybe", "a string, expected true or false"),
    ("spark_venv_index_overrides", ["https://pypi.org/simple"], "a list, expected a mapping"),
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
