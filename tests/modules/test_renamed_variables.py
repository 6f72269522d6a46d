"""A variable renamed for the glossary (issue 50) is still read under its old name, with a deprecation warning
that names the new one: real ansible-playbook runs of the role's own entry point, and the CLI's check before a run.

Renamed: spark_venv_index_overrides -> spark_venv_index_mirrors (an index's mirror, as the prose says),
spark_images_registry_overrides -> spark_images_registry_replacements (override is the glossary's host that is not
a Spark), spark_images_blessed_local_fallback -> spark_images_local_blessed (the glossary's local blessed tag; the
fallback tag is pin's)."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from conftest import BIN, REPO, ansible_env
from sparkfleet import variables

CATALOG = [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3"],
            "launcher": "spark-ngc"}]


def _play(tmp_path, role_vars: dict, include: dict, said: str) -> subprocess.CompletedProcess:
    """A play on this machine that includes a role's entry point with role_vars and writes `said` (a template)
    to said.json; it must succeed, deprecation warnings shown."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False, "vars": role_vars,
        "tasks": [{"ansible.builtin.include_role": include},
                  {"ansible.builtin.copy": {"dest": str(tmp_path / "said.json"), "mode": "0600", "content": said}}],
    }]))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
                           "-e", f"ansible_python_interpreter={sys.executable}"], cwd=REPO,
                          env=ansible_env(ANSIBLE_DEPRECATION_WARNINGS="true"), capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _effective(tmp_path, **role_vars) -> subprocess.CompletedProcess:
    return _play(tmp_path, {"spark_images_catalog": CATALOG, **role_vars},
                 {"name": "sparkfleet.spark.spark_images", "tasks_from": "inputs.yml", "public": True},
                 "{{ {'effective': __spark_images_effective, 'blessed': spark_images_local_blessed} | to_json }}")


def _said(tmp_path) -> tuple[list, object]:
    said = json.loads((tmp_path / "said.json").read_text())
    return said["effective"], said["blessed"]


def test_the_old_names_are_still_read_and_each_is_told_its_new_name(tmp_path):
    proc = _effective(tmp_path, spark_images_registry_overrides={"nvcr.io": "127.0.0.1:5000"},
                      spark_images_blessed_local_fallback=False)
    effective, blessed = _said(tmp_path)
    assert effective[0]["registry"] == "127.0.0.1:5000" and blessed is False
    warned = " ".join((proc.stdout + proc.stderr).split())
    for old, new in (("spark_images_registry_overrides", "spark_images_registry_replacements"),
                     ("spark_images_blessed_local_fallback", "spark_images_local_blessed")):
        assert f"the variable {old} is now {new}: rename it where you set it" in warned, warned[-2000:]


def test_the_new_names_are_read_without_a_warning_and_the_defaults_hold(tmp_path):
    _effective(tmp_path, spark_images_registry_replacements={"nvcr.io": "127.0.0.1:5001"})
    effective, blessed = _said(tmp_path)
    assert effective[0]["registry"] == "127.0.0.1:5001" and blessed is True
    proc = _effective(tmp_path)
    effective, blessed = _said(tmp_path)
    assert (effective[0]["registry"], blessed) == ("nvcr.io", True)
    assert "is now" not in proc.stdout + proc.stderr


def test_the_cli_knows_each_old_name_by_its_role_defaults_and_says_what_to_rename():
    assert variables.renamed() == {"spark_venv_index_overrides": "spark_venv_index_mirrors",
                                   "spark_images_registry_overrides": "spark_images_registry_replacements",
                                   "spark_images_blessed_local_fallback": "spark_images_local_blessed"}
    assert variables.unknown({"group all": {"spark_venv_index_overrides"}}) == [], "not a typo: still read"
    assert variables.renamed_in_use({"group all": {"spark_venv_index_overrides"}, "host spark-01": set()}) == [
        "spark_venv_index_overrides is now spark_venv_index_mirrors (set for group all): rename it there; the old "
        "name is still read, until 1.0.0"]
    # where the inventory's files set it, they are named (not every host the group reaches)
    assert variables.renamed_in_use({"host spark-01": {"spark_venv_index_overrides"}},
                                    {"spark_venv_index_overrides": ["inv/group_vars/all/main.yml"]}) == [
        "spark_venv_index_overrides is now spark_venv_index_mirrors (set in inv/group_vars/all/main.yml): rename it "
        "there; the old name is still read, until 1.0.0"]
    # the old name is held to the new name's type before the run, as the new one is
    assert variables.mistyped({"group all": {"spark_venv_index_overrides": ["http://mirror/simple"]}})


def test_a_modules_old_option_name_is_still_taken_with_a_deprecation_and_its_secret_masked():
    """The matrix modules' option index_overrides is index_mirrors (an alias until 1.0.0): a playbook of the owner's
    that still says index_overrides works, is told, and a token in a mirror's URL is masked whatever the name."""
    from conftest import run_module

    result = run_module("spark_matrix_check", {"matrix": {"schema": 1, "steps": "pip install torch"},
                                               "index_overrides": {"https://pypi.org/simple":
                                                                   "https://fleet:t0ken-under-old-name@m.example/s"}})
    assert result["failed"] and result["msg"].endswith("Nothing was checked."), result["msg"]
    said = " ".join((result["_stdout"] + result["_stderr"]).split())
    assert "Alias 'index_overrides' is deprecated" in said and "sparkfleet.spark' version 1.0.0" in said, said[-2000:]
    assert "t0ken-under-old-name" not in json.dumps(result)


def test_the_host_class_is_no_platform_and_the_old_entry_point_and_fact_still_work(tmp_path):
    """The role spark_preflight's entry point platform is facts (a platform is linux/arm64 in sparkfleet's words):
    a playbook of the owner's that still names it runs the same tasks, is told, and gets the host class under both
    names (spark_platform deprecated until 1.0.0). This machine is x86_64 with no GPU: not-spark, let through."""
    proc = _play(tmp_path, {"spark_preflight_require_spark": False},
                 {"name": "sparkfleet.spark.spark_preflight", "tasks_from": "platform"},
                 "{{ [ansible_facts.spark_host_class, ansible_facts.spark_platform,"
                 " ansible_facts.spark_preflight.host_class, spark_preflight_override] | to_json }}")
    assert json.loads((tmp_path / "said.json").read_text()) == ["not-spark", "not-spark", "not-spark", True]
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "the entry point platform is now facts: rename it where you name it" in said, said[-2000:]
    assert "TASK [sparkfleet.spark.spark_preflight : Refuse a host that is not a DGX Spark]" in proc.stdout
