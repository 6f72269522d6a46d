"""The sparkfleet driver: option pass-through and exit codes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkfleet import ansible_options, cli, commands, doctor, outcome
from sparkfleet.arguments import build_parser


def _args(*argv: str):
    return build_parser().parse_args(["provision", "-i", "inventory/example", *argv])


def test_options_pass_through_with_ansible_meaning():
    args = _args("--limit", "spark-01", "--check", "--diff", "--tags", "spark_preflight",
                 "-e", "a=1", "-e", "@vars.yml")
    assert commands.ansible_cmdline(args) == [
        "--limit", "spark-01", "--tags", "spark_preflight", "--check", "--diff",
        "--extra-vars", "a=1", "--extra-vars", "@vars.yml",
    ]


def test_connection_privilege_vault_and_verbosity_options_pass_through():
    args = _args("-u", "nvidia", "-b", "-K", "--ask-vault-pass", "--vault-id", "ngc@prompt", "--vault-id",
                 "lab@~/.lab-pass", "--vault-password-file", "pass.txt", "--private-key", "~/.ssh/spark",
                 "-f", "12", "-vvv", "--skip-tags", "spark_venv")
    assert commands.ansible_cmdline(args) == [
        "--skip-tags", "spark_venv", "--user", "nvidia", "--vault-password-file", "pass.txt",
        "--private-key", "~/.ssh/spark", "--forks", "12", "--become", "--ask-become-pass", "--ask-vault-pass",
        "--vault-id", "ngc@prompt", "--vault-id", "lab@~/.lab-pass", "-vvv",
    ]


def test_each_password_ansible_will_ask_for_is_asked_once_with_its_prompt():
    options = ansible_options.AnsibleOptions.from_args(_args("-K", "--ask-vault-pass", "--vault-id", "ngc@prompt",
                                                 "--vault-id", "lab@pass.txt"))
    prompts = options.prompts()
    assert [asked for asked, _ in prompts] == ["BECOME password: ", "Vault password: ", "Vault password (ngc): "]
    assert [bool(re.search(regex, shown)) for (_, regex), shown in zip(
        prompts, ["BECOME password: ", "Vault password: ", "Vault password (ngc): "], strict=True)] == [True] * 3
    assert not re.search(prompts[1][1], "Vault password (ngc): ")


def test_the_commands_default_tags_apply_unless_the_user_gives_tags():
    verify = build_parser().parse_args(["verify", "-i", "inv"])
    assert ansible_options.AnsibleOptions.from_args(verify, "spark_verify").tags == "spark_verify"
    chosen = build_parser().parse_args(["verify", "-i", "inv", "-t", "spark_images"])
    assert ansible_options.AnsibleOptions.from_args(chosen, "spark_verify").tags == "spark_images"


def test_no_options_no_arguments():
    assert commands.ansible_cmdline(_args()) == []


@pytest.mark.parametrize(("status", "rc", "stats", "code"), [
    ("successful", 0, {"ok": {"a": 3}, "failures": {}, "dark": {}}, outcome.EXIT_OK),
    ("failed", 2, {"ok": {"a": 3}, "failures": {"b": 1}, "dark": {}}, outcome.EXIT_FAILED_HOSTS),
    ("failed", 4, {"failures": {"b": 1}, "dark": {"c": 1}}, outcome.EXIT_UNREACHABLE),
    ("failed", 1, None, outcome.EXIT_BAD_INPUT),  # ansible-playbook stopped on its own error, no host failed
    ("canceled", 254, None, outcome.EXIT_CANCELLED),
])
def test_exit_codes_tell_failed_from_unreachable(status, rc, stats, code):
    assert outcome.outcome_from_stats(status, rc, stats).exit_code() == code


def test_missing_inventory_is_bad_input(capsys):
    assert cli.main(["provision", "-i", "/nonexistent/inventory"]) == outcome.EXIT_BAD_INPUT
    assert "inventory /nonexistent/inventory not found" in capsys.readouterr().err


def test_help_is_a_manual(capsys):
    with pytest.raises(SystemExit):
        cli.main(["provision", "--help"])
    out = capsys.readouterr().out
    for option in ("--inventory", "--limit", "--check", "--diff", "--tags", "--extra-vars"):
        assert option in out


def test_fast_runs_ansible_under_mitogens_strategy_plugin():
    from sparkfleet.mitogen import mitogen_env

    env = mitogen_env()
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert (Path(env["ANSIBLE_STRATEGY_PLUGINS"]) / "mitogen_linear.py").is_file()


MITOGEN_0_3_0 = "ANSIBLE_VERSION_MIN = (2, 10)\nANSIBLE_VERSION_MAX = (2, 11)\n"  # as that release declared it
MITOGEN_0_3_54 = "ANSIBLE_VERSION_MIN = (2, 10)\n"  # no ceiling since 0.3.x dropped it


@pytest.mark.parametrize(("core", "source", "refused"), [
    ("2.19.14", MITOGEN_0_3_54, False), ("2.21.5", MITOGEN_0_3_54, False), ("2.9.27", MITOGEN_0_3_54, True),
    ("2.19.14", MITOGEN_0_3_0, True), ("2.11.12", MITOGEN_0_3_0, False),
])
def test_fast_says_so_when_mitogen_does_not_support_the_installed_core(core, source, refused):
    from sparkfleet.mitogen import mitogen_refuses

    said = mitogen_refuses(core, source)
    assert bool(said) == refused
    if refused:
        assert f"this is ansible-core {core}" in said and "leave --fast out" in said


def test_the_doctors_report_json_names_hosts_as_its_doctor_md_does():
    from sparkfleet.events import Fleet

    fleet = Fleet()
    fleet.host("spark-07.example.internal").facts["spark_doctor"] = {"host": "host-1"}
    data = {"hosts": {"spark-07.example.internal": {"failures": [{"msg": "nvidia-smi failed on "
                                                                          "spark-07.example.internal"}]}},
            "limit": "spark-07.example.internal"}
    redacted = doctor.redacted(data, fleet)
    assert "spark-07" not in repr(redacted)
    assert redacted["hosts"]["host-1"]["failures"][0]["msg"] == "nvidia-smi failed on host-1"


def test_matrix_propose_at_a_terminal_shows_the_candidates_declared_closure_after_its_pins():
    """The README's promise (each pin old -> new, what held each back, then the candidate's closure): the CLI's
    summary carried the pins and the holds but left the closure out (found running matrix propose against pypi.org,
    issue 48)."""
    from sparkfleet.events import Fleet

    fleet = Fleet()
    fleet._check_result({"rows": [{}, {}], "moved": 1, "lines": ["stack trl 1.8.0 -> 1.9.0", "held back: x"],
                         "closure": {"lines": ["clean: the 9 packages the steps install meet every requirement"]}})
    assert fleet.check_lines("proposal") == [
        "candidate: 1 of 2 pins move", "  stack trl 1.8.0 -> 1.9.0", "  held back: x", "  its declared closure:",
        "    clean: the 9 packages the steps install meet every requirement"]
    # A pin added to the held step is counted apart: the matrix's pins that move, then the pins new to it.
    fleet = Fleet()
    fleet._check_result({"rows": [{}, {}, {}], "moved": 1, "added": 1, "lines": ["unsloth_deps json5 new 0.17.3"],
                         "closure": None})
    assert fleet.check_lines("proposal") == ["candidate: 1 of 2 pins move, 1 added", "  unsloth_deps json5 new 0.17.3"]
