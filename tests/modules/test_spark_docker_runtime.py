"""spark_docker_runtime run by real Ansible against the nvidia-ctk stand-in.

The stand-in (testbed/doubles/nvidia-container-toolkit/nvidia-ctk) behaves as
NVIDIA documents nvidia-ctk: it rewrites daemon.json on every run, so the
module's "only when needed" is observable in the file's inode and mtime.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from conftest import DOUBLES, run_module

CTK = str(DOUBLES / "nvidia-container-toolkit" / "nvidia-ctk")


def _run(path, *flags, **params):
    return run_module("spark_docker_runtime", {"path": str(path), "nvidia_ctk": CTK, **params}, *flags)


def test_fresh_host_gets_the_runtime_and_a_second_run_changes_nothing(tmp_path):
    daemon = tmp_path / "daemon.json"
    first = _run(daemon)
    assert first["changed"] is True, first
    assert first["gaps"] == ["runtimes.nvidia is not registered"]
    assert json.loads(daemon.read_text()) == {
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    assert stat.S_IMODE(daemon.stat().st_mode) == 0o644
    before = daemon.stat()
    second = _run(daemon)
    assert second["changed"] is False
    assert second["command"] == []
    after = daemon.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_every_other_key_the_user_had_is_kept(tmp_path):
    daemon = tmp_path / "daemon.json"
    user = {"log-driver": "json-file", "log-opts": {"max-size": "10m"},
            "registry-mirrors": ["http://127.0.0.1:5000"], "data-root": "/srv/docker",
            "runtimes": {"crun": {"path": "/usr/bin/crun"}}, "features": {"buildkit": True}}
    daemon.write_text(json.dumps(user))
    daemon.chmod(0o600)
    assert _run(daemon)["changed"] is True
    result = json.loads(daemon.read_text())
    assert result == {**user, "runtimes": {"crun": {"path": "/usr/bin/crun"},
                                           "nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    assert stat.S_IMODE(daemon.stat().st_mode) == 0o600


def test_registration_with_runtime_args_instead_of_args_is_left_alone(tmp_path):
    daemon = tmp_path / "daemon.json"
    text = '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}\n'
    daemon.write_text(text)
    assert _run(daemon)["changed"] is False
    assert daemon.read_text() == text


def test_a_wrong_runtime_path_is_corrected(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"runtimes": {"nvidia": {"path": "/opt/old/nvidia-container-runtime"}}}')
    result = _run(daemon)
    assert result["gaps"] == ["runtimes.nvidia.path is '/opt/old/nvidia-container-runtime', "
                              "expected 'nvidia-container-runtime'"]
    assert json.loads(daemon.read_text())["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"


@pytest.mark.parametrize("text", ['{"log-driver": "json-file",', "[1, 2]"])
def test_malformed_daemon_json_fails_with_path_and_error_and_is_untouched(tmp_path, text):
    daemon = tmp_path / "daemon.json"
    daemon.write_text(text)
    before = daemon.stat()
    result = _run(daemon)
    assert result["failed"] is True
    assert str(daemon) in result["msg"]
    assert "left untouched" in result["msg"]
    assert ("not valid JSON" in result["msg"]) or ("expected an object" in result["msg"])
    assert daemon.read_text() == text
    assert daemon.stat().st_mtime_ns == before.st_mtime_ns
    assert list(tmp_path.iterdir()) == [daemon]


def test_check_mode_shows_the_dry_run_diff_and_writes_nothing(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"log-driver": "json-file"}')
    result = _run(daemon, "--check", "--diff")
    assert result["changed"] is True
    assert result["predicted"] is False
    shown = result["_stdout"]
    assert f"--- before: {daemon}" in shown
    assert '-{"log-driver": "json-file"}' in shown
    assert '+    "runtimes": {' in shown
    assert '+            "path": "nvidia-container-runtime"' in shown
    assert daemon.read_text() == '{"log-driver": "json-file"}'


def test_check_mode_before_the_toolkit_is_installed_predicts_the_change(tmp_path):
    daemon = tmp_path / "daemon.json"
    result = run_module("spark_docker_runtime",
                        {"path": str(daemon), "nvidia_ctk": str(tmp_path / "absent")}, "--check")
    assert result["changed"] is True
    assert result["predicted"] is True
    assert not daemon.exists()


def test_without_nvidia_ctk_a_real_run_says_what_to_install(tmp_path):
    result = run_module("spark_docker_runtime",
                        {"path": str(tmp_path / "daemon.json"), "nvidia_ctk": str(tmp_path / "absent")})
    assert result["failed"] is True
    assert "Install nvidia-container-toolkit-base" in result["msg"]


def test_default_runtime_and_cdi_only_when_asked(tmp_path):
    daemon = tmp_path / "daemon.json"
    _run(daemon)
    assert "default-runtime" not in json.loads(daemon.read_text())
    result = _run(daemon, set_as_default=True, enable_cdi=True)
    assert result["command"][-2:] == ["--set-as-default", "--cdi.enabled"]
    config = json.loads(daemon.read_text())
    assert config["default-runtime"] == "nvidia"
    assert config["features"] == {"cdi": True}
    assert _run(daemon, set_as_default=True, enable_cdi=True)["changed"] is False


def test_a_rewrite_that_drops_user_keys_is_refused(tmp_path, fake_bin):
    bad_ctk = fake_bin("nvidia-ctk", 'for a; do case "$a" in --config=*) f="${a#--config=}";; esac; done\n'
                                     'echo \'{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}\' > "$f"\n')
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"data-root": "/srv/docker"}')
    result = run_module("spark_docker_runtime", {"path": str(daemon), "nvidia_ctk": str(bad_ctk)})
    assert result["failed"] is True
    assert "dropped or changed settings you had: data-root" in result["msg"]
    assert daemon.read_text() == '{"data-root": "/srv/docker"}'
    assert sorted(os.listdir(tmp_path)) == ["daemon.json", "nvidia-ctk"]
