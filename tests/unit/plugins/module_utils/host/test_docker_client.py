"""The modules' one Docker client (module_utils/host/_docker_client.py): the binary found once from the module's
`docker` option, argv built, every run in Docker's English words (LC_ALL=C), the engine's API asked before the
CLI; and no module finds or runs `docker` on its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_client import DockerClient

MODULES = Path(__file__).resolve().parents[5] / "plugins" / "modules"


class Module:
    """What the client uses of an AnsibleModule: params, get_bin_path (required: fail as Ansible does), run_command."""

    def __init__(self, found: dict[str, str], docker: str | None = "docker") -> None:
        self.params = {"docker": docker} if docker else {}
        self.found = found
        self.looked_up: list[tuple[str, bool]] = []
        self.ran: list[tuple[list[str], dict, str | None]] = []

    def get_bin_path(self, name: str, required: bool = False) -> str | None:
        self.looked_up.append((name, required))
        if name not in self.found and required:
            raise SystemExit(f"Failed to find required executable {name}")
        return self.found.get(name)

    def run_command(self, argv, environ_update=None, data=None):
        self.ran.append((argv, environ_update, data))
        return 0, '{"DockerRootDir": "/srv/docker"}', ""


@pytest.fixture(autouse=True)
def no_socket(monkeypatch):
    """The engine's API out of reach (a tcp:// host): each question goes to the CLI."""
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")


def test_the_binary_is_the_modules_option_found_once_and_every_run_is_in_english():
    module = Module({"/opt/docker/bin/docker": "/opt/docker/bin/docker"}, docker="/opt/docker/bin/docker")
    client = DockerClient(module)
    client.run("pull", "r/x@sha256:1", environ_update={"DOCKER_CONFIG": "/root/.docker"})
    client.run("image", "ls")
    assert module.looked_up == [("/opt/docker/bin/docker", False)], "looked up once"
    assert module.ran == [
        (["/opt/docker/bin/docker", "pull", "r/x@sha256:1"], {"LC_ALL": "C", "DOCKER_CONFIG": "/root/.docker"}, None),
        (["/opt/docker/bin/docker", "image", "ls"], {"LC_ALL": "C"}, None)]


def test_a_required_docker_that_is_missing_fails_the_module_when_first_asked_and_not_before():
    module = Module({})
    client = DockerClient(module, required=True)
    assert module.looked_up == [], "a request refused for its inputs asks nothing of the host"
    with pytest.raises(SystemExit, match="Failed to find required executable docker"):
        client.argv("pull", "x")


def test_a_docker_that_is_not_installed_is_said_and_nothing_is_run():
    module = Module({})
    client = DockerClient(module)
    assert client.path is None
    assert client.info() == ({}, "docker not found")
    assert client.inspect_image("r/x:1") is None
    client.remove_container("sparkfleet-verify-0123")
    assert module.ran == []


def test_a_runner_of_the_modules_own_answers_the_cli_where_the_api_cannot():
    """spark_preflight_facts hands its runner with a deadline: `docker info` goes through it, not run_command."""
    module = Module({"docker": "/usr/bin/docker"})
    through: list[list[str]] = []

    def bounded(argv):
        through.append(argv)
        return 0, '{"ServerVersion": "28.5.1", "DockerRootDir": "/var/lib/docker"}', ""

    client = DockerClient(module, "docker", timeout=5, run=bounded)
    assert client.info() == ({"ServerVersion": "28.5.1", "DockerRootDir": "/var/lib/docker"}, None)
    assert client.data_root() == "/var/lib/docker"
    assert through == [["/usr/bin/docker", "info", "--format", "{{json .}}"]] * 2 and module.ran == []


def test_no_module_finds_or_runs_docker_on_its_own():
    """Every module that runs `docker` does it through one DockerClient (issue 61, item 5): no get_bin_path of the
    docker option, no argv that starts with a docker path of its own, no runner handed to _docker_api."""
    found = []
    for path in sorted(MODULES.glob("*.py")):
        code = path.read_text().split('"""\n\n', 3)[-1]  # past DOCUMENTATION, EXAMPLES and RETURN
        for pattern in (r"get_bin_path\([^)]*docker", r"\[docker, ",
                        r"docker_api\.(engine_info|inspect_image|data_root)"):
            found += [f"{path.name}: {m.group(0)}" for m in re.finditer(pattern, code)]
    assert found == [], f"run docker through module_utils/host/_docker_client.DockerClient: {found}"
