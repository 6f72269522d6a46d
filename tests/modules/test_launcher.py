"""The launcher template, rendered by real Ansible (ansible.builtin.template) and run by a real shell with a
docker stand-in that records its argv: a working directory whose name holds shell syntax, and a value with a
quote, reach docker as plain arguments and run nothing."""

from __future__ import annotations

import json
import os
import subprocess

from conftest import REPO, run_module

D = "sha256:" + "cd" * 32


def render(tmp_path, workdir: str, environment: dict) -> str:
    launcher = tmp_path / "spark-ngc"
    variables = tmp_path / "vars.json"
    variables.write_text(json.dumps({
        "item": {"registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3",
                 "resolved_at": "2026-12-01T04:00:00+00:00", "launcher": "spark-ngc",
                 "ref": f"nvcr.io/nvidia/pytorch@{D}"},
        "__spark_images_workdir": workdir, "spark_images_environment": environment,
        "spark_images_run_flags": ["--runtime=nvidia", "--gpus", "all"]}))
    result = run_module("ansible.builtin.template", {
        "src": str(REPO / "roles" / "spark_images" / "templates" / "launcher.sh.j2"), "dest": str(launcher),
        "mode": "0755"}, "-e", f"@{variables}")
    assert not result["failed"], result.get("msg")
    return str(launcher)


def test_a_hostile_directory_name_and_a_quoted_value_reach_docker_as_plain_arguments(tmp_path, fake_bin):
    record = tmp_path / "argv.json"
    fake_bin("docker", f'exec python3 -c \'import json, sys; json.dump(sys.argv[1:], open("{record}", "w"))\' "$@"\n')
    launcher = render(tmp_path, "work/runs", {"NOTE": "it's $(touch PWNED) `touch PWNED`"})
    here = tmp_path / "my $(touch PWNED) dir"
    here.mkdir()
    subprocess.run(["sh", launcher, "python3", "-c", "print(1)"], cwd=here, check=True,
                   env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    argv = json.loads(record.read_text())
    assert f"{here}/work/runs:/workspace/runs" in argv, argv
    assert "NOTE=it's $(touch PWNED) `touch PWNED`" in argv
    assert argv[-4:] == [f"nvcr.io/nvidia/pytorch@{D}", "python3", "-c", "print(1)"]
    assert not list(tmp_path.rglob("PWNED")), "nothing the values carry ran"
    assert (here / "work" / "runs").is_dir()
