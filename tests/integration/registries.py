"""Real registries for the tests: Debian's docker-registry (CNCF distribution) on private loopback ports.

Anonymous, htpasswd (Basic) and token auth - the Bearer flow nvcr.io and
Docker Hub use - with a small token server of the tests' own that signs
JWTs the way distribution verifies them (an x5c certificate chain to the
configured rootcertbundle).
"""

from __future__ import annotations

import base64
import datetime
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID
from fake_http import FakeHTTP


def free_port() -> int:
    """A loopback port nothing listens on now: tests that run side by side (pytest -n) never share one."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Registry:
    def __init__(self, workdir: Path, port: int, auth: dict | None = None, proxy: str | None = None) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.host = f"127.0.0.1:{port}"
        self.log = workdir / f"registry-{port}.log"
        config = {
            "version": 0.1,
            "log": {"level": "info", "accesslog": {"disabled": False}},
            "storage": {"filesystem": {"rootdirectory": str(workdir / f"data-{port}")}, "delete": {"enabled": True}},
            "http": {"addr": f"127.0.0.1:{port}"},
        }
        if auth:
            config["auth"] = auth
        if proxy:  # pull-through cache of one upstream registry (distribution's proxy mode)
            config["proxy"] = {"remoteurl": proxy}
        path = workdir / f"registry-{port}.yml"
        path.write_text(json.dumps(config))
        self.proc = subprocess.Popen(["docker-registry", "serve", str(path)], stdout=self.log.open("w"),
                                     stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{self.url}/v2/", timeout=1)
                return
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"docker-registry did not start on {self.url}: {self.log.read_text()[-2000:]}")

    def requests(self, method: str, path: str) -> int:
        """Requests in the registry's access log, e.g. requests("HEAD", "/v2/a/b/manifests/v1")."""
        return self.log.read_text().count(f'"{method} {path} HTTP/')

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


class TokenServer:
    """Issues registry tokens; requires Basic credentials when `users` is given."""

    def __init__(self, workdir: Path, port: int, service: str, users: dict[str, str] | None = None) -> None:
        self.port = port
        self.realm = f"http://127.0.0.1:{port}/token"
        self.service = service
        self.issuer = "sparkfleet-test-issuer"
        self.users = users
        self.requests: list[str] = []
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sparkfleet test token issuer")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(hours=1))
                     .not_valid_after(now + datetime.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.bundle = workdir / f"token-{port}.pem"
        self.bundle.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.http = FakeHTTP(self.answer, port=port)

    def answer(self, request) -> tuple:
        self.requests.append(request.path)
        query = self.http.seen[-1]["query"]
        if self.users is not None:
            given = request.headers.get("Authorization", "")
            if not (given.startswith("Basic ") and base64.b64decode(given[6:]).decode() in {
                    f"{u}:{p}" for u, p in self.users.items()}):
                return 401, {}, b""
        token = self.token(query.get("scope", [""])[0])
        return 200, {}, {"token": token, "access_token": token, "expires_in": 300}

    def token(self, scope: str) -> str:
        access = []
        if scope.startswith("repository:"):
            _, name, actions = scope.split(":", 2)
            access.append({"type": "repository", "name": name, "actions": actions.split(",")})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256",
                  "x5c": [base64.b64encode(self.cert.public_bytes(serialization.Encoding.DER)).decode()]}
        claims = {"iss": self.issuer, "sub": "sparkfleet", "aud": self.service, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": uuid.uuid4().hex, "access": access}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"

    def registry_auth(self) -> dict:
        return {"token": {"realm": self.realm, "service": self.service, "issuer": self.issuer,
                          "rootcertbundle": str(self.bundle)}}

    def stop(self) -> None:
        self.http.close()
