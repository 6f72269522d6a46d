"""What an owner met on the lab (issue 35), as they met it: at a real terminal (a pty), from a directory of their
own. Each test reproduces the item as reported and failed on the code before."""

from __future__ import annotations

import json

from pty_screen import Screen, piped


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
    data = json.loads((tmp_path / "reports" / "latest" / "report.json").read_text())
    assert data["hosts"] == {} and data["exit_code"] == 4, "nothing ran; the report says why (issue 45, item 3)"


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
    assert json.loads((tmp_path / "reports" / "latest" / "report.json").read_text())["hosts"] == {}, "nothing ran"


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


# Issue 45: what an owner met on the lab again. Each test reproduces the item as reported (at a pty where the screen
# is what is tested) and failed on the code before.

def _inventory(root, **group_vars) -> None:
    """inv/ with one Spark reached through Docker (never contacted: each run here stops before any host, or on the
    controller) and the group variables given."""
    (root / "inv" / "group_vars" / "all").mkdir(parents=True)
    (root / "inv" / "hosts.yml").write_text("all:\n  children:\n    sparks:\n      hosts:\n        spark-01:\n"
                                            "          ansible_connection: community.docker.docker\n"
                                            "        spark-02:\n"
                                            "          ansible_connection: community.docker.docker\n")
    (root / "inv" / "group_vars" / "all" / "main.yml").write_text(json.dumps(group_vars))


def _report(directory) -> tuple[dict, object]:
    import xml.etree.ElementTree as ET

    return (json.loads((directory / "report.json").read_text()),
            ET.parse(directory / "report.junit.xml").getroot())


def test_bad_input_writes_the_report_a_ci_job_reads_with_its_errors_and_a_failing_case(tmp_path):
    """Item 3: a typo'd variable with --report-dir exited 4 and wrote nothing there, and reports/latest kept
    pointing at the last green run, so a CI job reading it saw a pass."""
    _inventory(tmp_path, spark_venv_enabeld=True)
    screen = Screen(["verify", "-i", "inv", "--report-dir", "ci-report"], tmp_path, columns=100).wait()
    assert screen.rc == 4, screen.text[-3000:]
    assert "spark_venv_enabeld, set for host spark-01, host spark-02: did you mean spark_venv_enabled?" in screen.text
    data, suite = _report(tmp_path / "ci-report")
    assert (data["status"], data["exit_code"], data["hosts"]) == ("failed", 4, {})
    assert any("spark_venv_enabeld" in e and "did you mean spark_venv_enabled?" in e for e in data["errors"])
    assert suite.get("failures") == "1" and "spark_venv_enabeld" in next(suite.iter("failure")).get("message")
    assert any(line.startswith("sparkfleet verify: failed (exit 4") for line in screen.lines())
    # without --report-dir: the default report, and reports/latest follows it
    screen = Screen(["verify", "-i", "inv"], tmp_path, columns=100).wait()
    assert screen.rc == 4
    data, _ = _report(tmp_path / "reports" / "latest")
    assert data["exit_code"] == 4 and data["errors"]


def test_a_limit_or_a_tag_that_matches_nothing_is_named_with_what_exists_before_anything_runs(tmp_path):
    """Item 4: `-l spark-02,spark-09` (spark-09 not in the inventory) checked one host and exited 0, `--tags
    spark_imagez` ran nothing and said successful, `-l spark-03` blamed the inventory and the vault."""
    _inventory(tmp_path)
    cases = {("-l", "spark-02,spark-09"): "--limit names spark-09, which is no host or group of inventory inv: "
                                          "did you mean spark-02? its hosts: spark-01, spark-02; its groups: sparks",
             ("--tags", "spark_imagez"): "--tags names spark_imagez, which no task of sparkfleet has: did you mean "
                                         "spark_images?",
             ("-l", "spark-0*,!spark-0?"): "--limit spark-0*,!spark-0? leaves no host of inventory inv (its hosts: "
                                           "spark-01, spark-02)"}
    for flags, said in cases.items():
        screen = Screen(["verify", "-i", "inv", *flags], tmp_path, columns=100).wait()
        assert screen.rc == 4, screen.text[-3000:]
        assert said in " ".join(screen.text.split()), (flags, screen.text[-3000:])
        assert "Expected an inventory, variables and a vault password" not in screen.text
        data, _ = _report(tmp_path / "reports" / "latest")
        assert data["exit_code"] == 4 and data["hosts"] == {}, "nothing ran"
    for flags in (("-l", "sparks:!spark-02"), ("-l", "~spark-0[12]"), ("--tags", "spark_images,always"),
                  ("--skip-tags", "spark_verify_smoke,never")):
        screen = Screen(["verify", "-i", "inv", *flags, "-e", "spark_venv_enabeld=1"], tmp_path, columns=100).wait()
        assert screen.rc == 4 and "did you mean spark_venv_enabled?" in screen.text, "the selection itself passed"
        assert "--limit names" not in screen.text and "--tags names" not in screen.text, (flags, screen.text[-2000:])


def test_the_inventory_comes_from_ansible_inventory_or_the_users_ansible_cfg_as_for_ansible_playbook(tmp_path):
    """Item 7: `sparkfleet verify` with `inventory = inv` in the user's ansible.cfg said `the following arguments are
    required: -i/--inventory` (exit 4)."""
    _inventory(tmp_path)
    (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = inv\n")
    screen = Screen(["verify", "-l", "spark-09"], tmp_path, columns=100).wait()
    assert screen.rc == 4
    assert f"--limit names spark-09, which is no host or group of inventory {tmp_path / 'inv'}" in \
        " ".join(screen.text.split()), screen.text[-2000:]
    (tmp_path / "ansible.cfg").unlink()
    screen = Screen(["verify", "-l", "spark-09"], tmp_path, columns=100, ANSIBLE_INVENTORY="inv").wait()
    assert f"which is no host or group of inventory {tmp_path / 'inv'}" in " ".join(screen.text.split())
    screen = Screen(["verify"], tmp_path, columns=100).wait()
    assert screen.rc == 4
    assert "no inventory: sparkfleet verify runs on the hosts of one; name it with -i INVENTORY, or set " \
           "ANSIBLE_INVENTORY, or inventory = ... under [defaults] in your ansible.cfg" in " ".join(screen.text.split())


def test_a_controller_failure_counts_on_the_controller_and_on_no_host(tmp_path):
    """Item 5: the registry down during `refresh` said `localhost: FAILED Resolve the images on the controller` but
    the table, report.json and JUnit gave the first host `failed 1` and localhost `failed 0`."""
    _inventory(tmp_path, spark_images_registry_replacements={"nvcr.io": "127.0.0.1:9", "docker.io": "127.0.0.1:9"})
    screen = Screen(["refresh", "-i", "inv", "--check"], tmp_path, columns=100).wait()
    assert screen.rc == 2, screen.text[-3000:]
    assert any(line.startswith("localhost: FAILED ") for line in screen.lines()), screen.text[-3000:]
    assert not any(line.startswith("spark-0") and "FAILED" in line for line in screen.lines())
    data, suite = _report(tmp_path / "reports" / "latest")
    assert data["hosts"]["localhost"]["counts"]["failed"] == 1
    assert all(data["hosts"][h]["counts"]["failed"] == 0 for h in data["hosts"] if h != "localhost"), data["hosts"]
    failed = [case.get("classname") for case in suite.iter("testcase") if case.find("failure") is not None]
    assert failed == ["sparkfleet.localhost"], failed
    lines = screen.lines()
    title = next(i for i, line in enumerate(lines) if line.startswith("sparkfleet refresh: failed (exit 2"))
    rows = {line.split()[0]: line.split()[-2:] for line in lines[title:] if line.startswith(("localhost ", "spark-0"))}
    assert rows == {"localhost": ["0", "1"], "spark-01": ["0", "0"], "spark-02": ["0", "0"]}, lines[title:]
    assert "…" not in "\n".join(lines[title:title + 3]), "no header cut short"


def test_the_summary_at_100_columns_keeps_each_images_digest_and_piped_keeps_every_line_whole(tmp_path):
    """Item 8: at 100 columns the summary left out the images' digests, the runtime and the venv while keeping
    `line = simulated`, which repeats the verdict; `report | cat` cut the venv path mid-word at 80 columns; the
    `image / or / venv` header took three lines even at 200 columns."""
    from sparkfleet import report as reports

    entry = {"host_class": "spark", "simulated": True, "override": None, "reachable": True, "unreachable": None,
             "history": "converged", "runtime": {"registered": True, "runtimes": ["nvidia", "runc"],
                                                 "toolkit_version": "1.18.0-1"},
             "images": [{"name": "ngc", "ref": "r/nvidia/pytorch@sha256:" + "a" * 64, "tag": "25.11-py3",
                         "source": "lock"},
                        {"name": "unsloth", "ref": "r/unsloth/unsloth@sha256:" + "b" * 64, "tag": "dgxspark-latest",
                         "source": "lock"}],
             "venv": {"path": "/opt/sparkfleet/venvs/unsloth-2026.7.2-5a6c0fb6f58a", "matrix": "unsloth-2026.7.2",
                      "fingerprint": "5a6c", "status": "simulated", "line": "True 13.0", "verified_by": "stand-in",
                      "stale": True},
             "verification": {"verdict": "not verified", "lines": [], "gpu": [], "smoke": [], "abi": [],
                              "failures": []},
             "abi_findings": [], "abi_evidence": [], "abi_notes": [], "refresh_failure": None, "refresh": None,
             "counts": {"changed": 0, "failed": 0}, "failures": [], "changes": []}
    data = {"schema": reports.SCHEMA, "command": "verify", "playbook": "playbooks/verify.yml", "inventory": "inv",
            "limit": None, "check": False, "started_at": "2026-12-04T00:00:00+00:00",
            "finished_at": "2026-12-04T00:00:15+00:00", "duration_s": 15.4, "status": "successful", "exit_code": 0,
            "hosts": {"sparkfleet-lab-1": entry, "sparkfleet-lab-2": {**entry, "venv": None}}, "refresh": None}
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "report.json").write_text(json.dumps(data))
    screen = Screen(["report", "r", "--no-color"], tmp_path, columns=100).wait()
    assert screen.rc == 0, screen.text[-3000:]
    lines = screen.lines()
    title = next(i for i, line in enumerate(lines) if line.startswith("sparkfleet verify: successful"))
    table = lines[title + 1:next(i for i in range(title, len(lines)) if lines[i].startswith("(left out"))]
    head = " ".join(table[:2])
    for column in ("host", "verdict", "changed", "failed", "images (digest)"):
        assert column in head, table
    rows = [line for line in table if line.startswith("sparkfleet-lab-")]
    assert all("aaaaaaaaaaaa" in line for line in rows), table  # ngc's digest on the host's first line
    assert sum("bbbbbbbbbbbb" in line for line in table) == 2, table  # unsloth's, on the next
    assert "simulated" not in " ".join(rows), "the line column does not repeat the verdict"
    assert all(len(line) <= 100 for line in table)
    wide = Screen(["report", "r", "--no-color"], tmp_path, columns=200).wait()
    heads = [line for line in wide.lines() if line.lstrip().startswith("host ")]
    assert heads and all(len(line.split()) > 3 for line in heads), "each header on one line where there is room"
    assert not any(line.strip() in ("or", "venv", "image") for line in wide.lines()), "no header one word a line"
    proc = piped(["report", "r"], tmp_path, COLUMNS="80")
    assert "/opt/sparkfleet/venvs/unsloth-2026.7.2-5a6c0fb6f58a" in proc.stdout, "piped: the path whole"
    assert any(line.startswith("sparkfleet-lab-1") and "registered" in line and "not verified" in line
               for line in proc.stdout.splitlines()), "piped: every column on the host's line"
