"""What an owner met on the lab (issue 35), as they met it: at a real terminal (a pty), from a directory of their
own. Each test reproduces the item as reported and failed on the code before."""

from __future__ import annotations

import json

from pty_screen import Screen


def test_a_host_that_is_not_there_is_unreachable_with_the_connections_own_words(tmp_path):
    """Item 2: `verify -l sparkfleet-lab-2,sparkfleet-lab-9` (lab-9 does not exist) printed "Module result
    deserialization failed: No start of json char found" and exited 2; the cause was only in the artifacts."""
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "hosts.yml").write_text(
        "all:\n  children:\n    sparks:\n      hosts:\n        sparkfleet-trial-9:\n"
        "          ansible_connection: community.docker.docker\n")
    screen = Screen(["verify", "-i", "inv", "--report-dir", "out"], tmp_path, columns=100).wait()
    assert screen.rc == 3, screen.text[-3000:]
    line = next(line for line in screen.lines() if line.startswith("sparkfleet-trial-9: UNREACHABLE"))
    assert "No such container: sparkfleet-trial-9" in line or "Cannot connect to the Docker daemon" in line, line
    assert "deserialization" not in screen.text
    host = json.loads((tmp_path / "out" / "report.json").read_text())["hosts"]["sparkfleet-trial-9"]
    assert host["reachable"] is False and host["unreachable"] == line.split("UNREACHABLE ", 1)[1].strip()


def test_a_misspelt_variable_is_named_with_the_nearest_known_one_and_nothing_runs(tmp_path):
    """Item 8: a typo in a variable (spark_verify_can_run_container) was silently ignored and surfaced later as a
    Docker error. Named now, with the nearest known one, exit 4, before any host is touched."""
    (tmp_path / "inv" / "host_vars").mkdir(parents=True)
    (tmp_path / "inv" / "hosts.yml").write_text("all:\n  children:\n    sparks:\n      hosts:\n        spark-01:\n"
                                                "          ansible_connection: community.docker.docker\n")
    (tmp_path / "inv" / "host_vars" / "spark-01.yml").write_text("spark_verify_can_run_container: false\n")
    screen = Screen(["provision", "-i", "inv", "-e", "spark_venv_enabeld=true"], tmp_path, columns=100).wait()
    assert screen.rc == 4, screen.text[-3000:]
    assert "spark_verify_can_run_container, set for host spark-01: did you mean spark_verify_can_run_containers?" \
        in screen.text
    assert "spark_venv_enabeld, set for -e (inline): did you mean spark_venv_enabled?" in screen.text
    assert not (tmp_path / "reports").exists(), "nothing ran"


def test_a_value_of_the_wrong_type_and_a_broken_lock_are_named_with_their_files_and_nothing_runs(tmp_path):
    """Item 8: a string where a list is expected (spark_images_derived: ngc-audio) gave Ansible's raw conversion
    error without the file, and exit 2 (a host failed); so did a malformed lock digest. Each is named now - the
    variable, the file it came from, the type found and expected (never the value: it may be a password) - exit 4,
    before any host is touched."""
    (tmp_path / "inv" / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "inv" / "hosts.yml").write_text("all:\n  children:\n    sparks:\n      hosts:\n        spark-01:\n"
                                                "          ansible_connection: community.docker.docker\n")
    (tmp_path / "inv" / "group_vars" / "all" / "main.yml").write_text(
        "spark_images_derived: ngc-audio\nspark_venv_keep: two\nspark_verify_smoke: yes\n")
    lock = tmp_path / "inv" / "group_vars" / "all" / "spark_images_lock.yml"
    lock.write_text("spark_images_lock:\n  ngc:\n    registry: nvcr.io\n    repository: nvidia/pytorch\n"
                    "    tag: 25.11-py3\n    index_digest: sha256:12345\n    arm64_digest: sha256:12345\n")
    screen = Screen(["provision", "-i", "inv"], tmp_path, columns=100).wait()
    assert screen.rc == 4, screen.text[-3000:]
    text = " ".join(screen.text.split())
    main = "inv/group_vars/all/main.yml"  # as the owner named the inventory
    assert f"spark_images_derived in {main} is a string, expected a list of mappings" in text, text[-3000:]
    assert f"spark_venv_keep in {main} is a string, expected a whole number" in text
    assert "spark_verify_smoke" not in text, "yes is a boolean to Ansible"
    assert "inv/group_vars/all/spark_images_lock.yml: entry 'ngc' index_digest is 'sha256:12345'" in text, text
    assert not (tmp_path / "reports").exists(), "nothing ran"


def test_version_names_the_collections_version_beside_its_path(tmp_path):
    """Item 10: `--version` named the collection's path but not its version."""
    import re

    from conftest import REPO

    screen = Screen(["--version"], tmp_path).wait()
    version = re.search(r"^version:\s*(\S+)", (REPO / "galaxy.yml").read_text(), re.M).group(1)
    assert f"collection sparkfleet.spark {version} = " in screen.text, screen.text


def test_completion_offers_paths_after_dash_i_and_the_report_dir(tmp_path):
    """Item 10: completion did not complete paths after -i. The script `sparkfleet completion bash` prints, sourced
    in bash, asked as bash asks when Tab is pressed after `sparkfleet provision -i inventory/m`."""
    import subprocess

    from conftest import BIN

    (tmp_path / "inventory" / "mylab").mkdir(parents=True)
    (tmp_path / "inventory" / "other").mkdir()
    script = subprocess.run([str(BIN / "sparkfleet"), "completion", "bash"], capture_output=True, text=True,
                            check=True).stdout
    (tmp_path / "completion.bash").write_text(script)

    def offered(*words: str) -> list[str]:
        line = " ".join(words)
        proc = subprocess.run(
            ["bash", "-c", 'source completion.bash; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); '
             f'COMP_LINE="$*"; COMP_POINT={len(line)}; _shtab_sparkfleet; printf "%s\\n" "${{COMPREPLY[@]}}"',
             "bash", *words], cwd=tmp_path, capture_output=True, text=True, check=True)
        return proc.stdout.split()

    assert offered("sparkfleet", "provision", "-i", "inventory/m") == ["inventory/mylab"]
    assert sorted(offered("sparkfleet", "verify", "--report-dir", "inventory/")) == ["inventory/mylab",
                                                                                      "inventory/other"]
