"""The sparkfleet driver: option pass-through and exit codes."""

from __future__ import annotations

import pytest

from sparkfleet import cli


def _args(*argv: str):
    return cli.build_parser().parse_args(["provision", "-i", "inventory/example", *argv])


def test_options_pass_through_with_ansible_meaning():
    args = _args("--limit", "spark-01", "--check", "--diff", "--tags", "spark_preflight",
                 "-e", "a=1", "-e", "@vars.yml")
    assert cli.ansible_cmdline(args) == [
        "--limit", "spark-01", "--check", "--diff", "--tags", "spark_preflight",
        "--extra-vars", "a=1", "--extra-vars", "@vars.yml",
    ]


def test_no_options_no_arguments():
    assert cli.ansible_cmdline(_args()) == []


@pytest.mark.parametrize(("status", "rc", "stats", "code"), [
    ("successful", 0, {"ok": {"a": 3}, "failures": {}, "dark": {}}, cli.EXIT_OK),
    ("failed", 2, {"ok": {"a": 3}, "failures": {"b": 1}, "dark": {}}, cli.EXIT_FAILED_HOSTS),
    ("failed", 4, {"failures": {"b": 1}, "dark": {"c": 1}}, cli.EXIT_UNREACHABLE),
    ("failed", 1, None, cli.EXIT_FAILED_HOSTS),
    ("canceled", 254, None, cli.EXIT_CANCELLED),
])
def test_exit_codes_tell_failed_from_unreachable(status, rc, stats, code):
    assert cli.outcome_from_stats(status, rc, stats).exit_code() == code


def test_missing_inventory_is_bad_input(capsys):
    assert cli.main(["provision", "-i", "/nonexistent/inventory"]) == cli.EXIT_BAD_INPUT
    assert "inventory /nonexistent/inventory not found" in capsys.readouterr().err


def test_help_is_a_manual(capsys):
    with pytest.raises(SystemExit):
        cli.main(["provision", "--help"])
    out = capsys.readouterr().out
    for option in ("--inventory", "--limit", "--check", "--diff", "--tags", "--extra-vars"):
        assert option in out
