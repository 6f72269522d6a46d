# Copyright: sparkfleet contributors
# Apache License 2.0
"""The one Docker client of the modules: the CLI found, its argv built and run, the engine's API asked first.

In the manner of community.docker's CLI client, for the few questions sparkfleet asks: the binary is the
module's `docker` option (a name looked up on PATH, or a path; docs fragment sparkfleet_docker), found once;
every run goes through the module's runner with LC_ALL=C, so the words sparkfleet reads back are Docker's
English ones; `info()`, `inspect_image()` and `data_root()` ask the engine's API over its socket and run the CLI
only where the socket cannot be used (_docker_api). A module that runs `docker` makes one of these.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _docker_api

_NOT_LOOKED_UP = object()


class DockerClient:
    def __init__(self, module, binary: str | None = None, required: bool = False, timeout: float = 30,
                 run=None) -> None:
        """module: the AnsibleModule; binary: the CLI's name or path (the module's `docker` option when not given);
        required: fail the module, as get_bin_path does, where it is not found; run: argv -> (rc, out, err), a
        runner of the module's own (one with a deadline), else the module's run_command."""
        self.module = module
        self.binary = binary or (module.params or {}).get("docker") or "docker"
        self.required = required
        self.timeout = timeout
        self._run = run
        self._path = _NOT_LOOKED_UP

    @property
    def path(self) -> str | None:
        """The CLI's path; None where it is not installed (the module fails instead where it is required)."""
        if self._path is _NOT_LOOKED_UP:
            self._path = self.module.get_bin_path(self.binary, required=self.required)
        return self._path

    def argv(self, *args: str) -> list[str]:
        """`docker ARGS...` as argv (the binary found, as required or not)."""
        return [self.path or self.binary, *args]

    def run_argv(self, argv: list[str], environ_update: dict | None = None, data: str | None = None):
        """(rc, stdout, stderr) of argv, in Docker's English words (LC_ALL=C)."""
        if self._run is not None and not environ_update and data is None:
            return self._run(argv)
        return self.module.run_command(argv, environ_update={"LC_ALL": "C", **(environ_update or {})}, data=data)

    def run(self, *args: str, environ_update: dict | None = None, data: str | None = None):
        """(rc, stdout, stderr) of `docker ARGS...`."""
        return self.run_argv(self.argv(*args), environ_update=environ_update, data=data)

    def info(self) -> tuple[dict, str | None]:
        """(the engine's /info, why it is empty): the API, else `docker info --format '{{json .}}'`."""
        return _docker_api.engine_info(self.run_argv, self.path, self.timeout)

    def inspect_image(self, ref: str) -> dict | None:
        """{Id, Architecture, RepoDigests, Labels} of the image; None where the engine has none (or cannot say)."""
        return _docker_api.inspect_image(self.run_argv, self.path, ref, self.timeout)

    def data_root(self) -> str:
        """Docker's data root (DockerRootDir); "" where it cannot be read."""
        return _docker_api.data_root(self.run_argv, self.path, self.timeout)

    def remove_container(self, name: str) -> None:
        """`docker rm -f NAME`, its answer not needed (a container left behind by a probe stopped at its deadline);
        nothing where Docker is not installed."""
        if self.path:
            self.run("rm", "-f", name)
