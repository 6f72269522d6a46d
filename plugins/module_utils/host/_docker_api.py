# Copyright: sparkfleet contributors
# Apache License 2.0
"""Docker Engine API reads over the engine's own unix socket, for the questions a converged run asks.

`docker info` and `docker image inspect` start the Docker CLI, a process per question; on a Spark that is
cheap, on an emulated lab host it is most of a module's time. The engine answers the same questions on its API
(GET /info, GET /images/{name}/json: the objects the CLI's `--format '{{json .}}'` prints), so a module asks
there first and runs the CLI only where the socket cannot be used: DOCKER_HOST names something other than a
unix socket (tcp://, ssh://, a context), the socket is missing, or this user may not open it.

`engine_info` and `inspect_image` are the one way every module asks (the API, else the CLI through the
module's own runner), through the modules' Docker client (_docker_client.DockerClient).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import stat
import urllib.parse

DEFAULT_SOCKET = "/var/run/docker.sock"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def socket_path(environ=None) -> str | None:
    """The engine's unix socket this process may use, as the CLI would find it; None when the CLI must answer."""
    environ = os.environ if environ is None else environ
    if environ.get("DOCKER_CONTEXT"):
        return None
    host = environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None
    path = host[len("unix://"):] if host else DEFAULT_SOCKET
    try:
        if not stat.S_ISSOCK(os.stat(path).st_mode) or not os.access(path, os.R_OK | os.W_OK):
            return None
    except OSError:
        return None
    return path


class Unanswered(Exception):
    """The API could not be asked (no socket, the engine did not answer): ask the CLI instead."""


def get(path: str, api_path: str, timeout: float = 30) -> tuple[int, object]:
    """(HTTP status, the JSON body) of GET api_path on the engine at the unix socket path."""
    conn = _UnixConnection(path, timeout)
    try:
        conn.request("GET", api_path, headers={"Accept": "application/json"})
        response = conn.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise Unanswered(str(exc)) from exc
    finally:
        conn.close()
    try:
        return response.status, json.loads(body or b"null")
    except ValueError as exc:
        raise Unanswered(f"GET {api_path}: the engine's answer is not JSON") from exc


def info(timeout: float = 30, environ=None) -> dict:
    """GET /info (what `docker info --format '{{json .}}'` prints of the engine). Raises Unanswered."""
    path = socket_path(environ)
    if path is None:
        raise Unanswered("no usable Docker socket")
    status, body = get(path, "/info", timeout)
    if status != 200 or not isinstance(body, dict):
        raise Unanswered(f"GET /info: HTTP {status}")
    return body


def image(ref: str, timeout: float = 30, environ=None) -> dict | None:
    """GET /images/{ref}/json (`docker image inspect REF`); None when the engine has no such image. Raises
    Unanswered."""
    path = socket_path(environ)
    if path is None:
        raise Unanswered("no usable Docker socket")
    status, body = get(path, f"/images/{urllib.parse.quote(ref, safe='/:@')}/json", timeout)
    if status == 404:
        return None
    if status != 200 or not isinstance(body, dict):
        raise Unanswered(f"GET /images/{ref}/json: HTTP {status}")
    return body


# `docker image inspect --format` for the fields inspect_image returns, as the API's JSON has them (the labels
# lifted out of Config).
INSPECT_FORMAT = ('{"Id": {{json .Id}}, "Architecture": {{json .Architecture}}, "RepoDigests": {{json .RepoDigests}}, '
                  '"Labels": {{json .Config.Labels}}}')
NO_IMAGE_FIELDS = {"Id": None, "Architecture": None, "RepoDigests": [], "Labels": {}}


# `run` below is the module's runner: argv -> (rc, stdout, stderr), rc None when it timed out.
def engine_info(run, docker: str | None, timeout: float = 30) -> tuple[dict, str | None]:
    """(the engine's /info, why it is empty): the API, else one `docker info --format '{{json .}}'` through
    run(argv) -> (rc, out, err). The reason names the CLI's own words (the daemon not running, ...)."""
    try:
        return info(timeout), None
    except Unanswered:
        pass
    if not docker:
        return {}, "docker not found"
    rc, out, err = run([docker, "info", "--format", "{{json .}}"])
    if rc != 0:
        return {}, f"{docker} info --format: rc {rc}: {(err or out or '').strip()[-300:]}"
    try:
        found = json.loads(out)
    except ValueError:
        return {}, f"{docker} info gave no JSON"
    return (found, None) if isinstance(found, dict) else ({}, f"{docker} info gave no JSON object")


# A graph driver's name as /info says it (overlay2, btrfs, zfs, vfs): the image store's folder under the data root.
_DRIVER = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


def image_store(info: dict) -> str | None:
    """Where the engine keeps its images, from its /info: "containerd" for the containerd image store (Docker 24
    and later with the containerd-snapshotter feature, the default of a fresh Docker 29 install: /info's
    DriverStatus says driver-type io.containerd.snapshotter.v1), else its graph driver's name (overlay2), whose
    folder image/<driver>/ under the data root holds repositories.json; None where the engine did not say."""
    status = info.get("DriverStatus") if isinstance(info, dict) else None
    if any(isinstance(pair, (list, tuple)) and len(pair) == 2 and str(pair[1]).startswith("io.containerd.snapshotter")
           for pair in status or []):
        return "containerd"
    driver = info.get("Driver") if isinstance(info, dict) else None
    return driver if isinstance(driver, str) and _DRIVER.match(driver) else None


def store_file(data_root: str | None, store: str | None) -> str | None:
    """The file Docker rewrites on every pull, tag and removal of its image store: image/<driver>/repositories.json
    under the data root for a graph driver; None for the containerd image store (its state is containerd's own
    database, which sparkfleet does not read) or a store the engine did not name."""
    if not data_root or not store or store == "containerd" or not _DRIVER.match(store):
        return None
    return os.path.join(data_root, "image", store, "repositories.json")


def inspect_image(run, docker: str | None, ref: str, timeout: float = 30) -> dict | None:
    """{Id, Architecture, RepoDigests, Labels} of the image ref (the API, else `docker image inspect` through run);
    None when the engine has no such image (or cannot be asked). Labels is {} for an image without any."""
    try:
        found = image(ref, timeout)
    except Unanswered:
        pass
    else:
        if found is None:
            return None
        return {"Id": found.get("Id"), "Architecture": found.get("Architecture"),
                "RepoDigests": found.get("RepoDigests"), "Labels": (found.get("Config") or {}).get("Labels") or {}}
    if not docker:
        return None
    rc, out, _unused = run([docker, "image", "inspect", "--format", INSPECT_FORMAT, ref])
    if rc != 0:
        return None
    try:
        found = json.loads(out)
    except ValueError:
        return dict(NO_IMAGE_FIELDS)
    if not isinstance(found, dict):
        return dict(NO_IMAGE_FIELDS)
    return {**found, "Labels": found.get("Labels") or {}}


def data_root(run, docker: str | None, timeout: float = 30) -> str:
    """Docker's data root (DockerRootDir of the engine's /info, the API or the CLI); "" when it cannot be read."""
    found, _why = engine_info(run, docker, timeout)
    return str(found.get("DockerRootDir") or "")


def free_bytes(path: str) -> int | None:
    """Bytes free (for an unprivileged user's writes) on the filesystem of `path`, Docker's data root; where it
    does not exist yet, its nearest parent that does. None when it cannot be read."""
    probe = path
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe.rstrip("/")) or "/"
    try:
        found = os.statvfs(probe)
    except OSError:
        return None
    return found.f_bavail * found.f_frsize
