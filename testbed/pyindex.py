#!/usr/bin/env python3
"""The test bed's Python package index: stand-in wheels under the real names and pins.

PyPI and download.pytorch.org are outside what tests may reach, so the
bare-pip sequence runs against this PEP 503 tree on 127.0.0.1 (directory
listings, which pip reads as simple pages):

    <root>/pypi/<name>/   stands in for https://pypi.org/simple
    <root>/cu130/<name>/  stands in for https://download.pytorch.org/whl/cu130

The wheels are tiny and pure Python, but their metadata and import-time
behaviour make the sequence's rules observable (each says so in its module):

- torch 2.10.0+cu130 (cu130 index): the torch double (testbed/doubles/torch)
  reporting CUDA 13.0 on a GB10, as the real cu130 build does on a Spark.
- torch 2.9.1 (PyPI root): a build reporting CUDA 12.8, the trap pip falls into
  when it re-resolves torch from PyPI.
- unsloth, unsloth_zoo, trl and peft at the matrix's pins declare what the real ones declare (their METADATA,
  tests/fixtures/metadata/), for the packages this index serves: unsloth 2026.7.2 asks for transformers<=5.5.0
  and trl<=0.24.0, so without --no-deps pip refuses the matrix's transformers and trl, and the declared closure
  (sparkfleet matrix check) names each as the matrix's accepted deviations say. One exception, so that the
  shipped stack resolves here as on an index that holds the verified set: trl 1.8.0's datasets>=4.7.0 (advisory
  pypi-trl-1.8.0-datasets) is left out (LEFT_OUT).
- trl 1.8.1 asks for torchao<0.14: a stack with it leaves an old torchao in the venv after step 2, as NGC's
  torchao 0.13.0+git is in the container (a test-bed construction, for the matrix check's notes).
- peft 0.19.1 refuses to import with torchao < 0.16.0, with peft's real message:
  only step 3 (-U torchao==0.17.0) run last makes the venv import.
- axolotl 0.9.0 asks for torch==2.9.1: an extra package that would move a pin.
- trl 1.9.0 exists too, for a matrix change; trl 1.10.0 asks for datasets>=4.7.0 (as the real trl 1.8.0 does,
  advisory pypi-trl-1.8.0-datasets) and datasets 4.7.0 is there: a newer set exists that resolves only when
  both move (`sparkfleet matrix propose`).

- uv, the matrix's installer step (matrix/spark-stack.yml): the real wheels of its pin for x86_64 and aarch64,
  from PyPI, downloaded once by pip into .cache/testbed-wheels (a real program: the venv's steps run through it).

The PyPI tree answers a client that asks for PEP 691's JSON (pip does, and `sparkfleet matrix propose` for the
dates) with it, each file with its PEP 700 upload-time (UPLOADED); the cu130 tree, as download.pytorch.org,
serves plain pages only.

    pyindex.py fetch                     download the real wheels it serves (once: kept in .cache/testbed-wheels)
    pyindex.py build ROOT                write the tree (idempotent)
    pyindex.py serve ROOT PORT [LOG]     serve it on 127.0.0.1:PORT, one line per request in LOG
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import io
import json
import re
import sys
import zipfile
from pathlib import Path

import store

HERE = Path(__file__).resolve().parent
TORCH_DOUBLE = HERE / "doubles" / "torch" / "torch" / "__init__.py"
REPO = HERE.parent
REAL_WHEELS = store.ROOT / "testbed-wheels"  # store.py: kept outside the clone, reused by every clone of this machine
# pip --platform matches manylinux tags exactly: the tags uv's wheels carry on PyPI, for each architecture.
INSTALLER_PLATFORMS = {"x86_64": ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64"],
                       "aarch64": ["manylinux_2_17_aarch64", "manylinux2014_aarch64", "manylinux_2_28_aarch64"]}


def installer_pin() -> str:
    """The matrix's installer pin (uv==X), read from matrix/spark-stack.yml: the one place it is written."""
    import re

    found = re.search(r'"(uv==[0-9][0-9A-Za-z.+!_-]*)"', (REPO / "matrix" / "spark-stack.yml").read_text())
    if not found:
        raise SystemExit("matrix/spark-stack.yml has no installer pin uv==X; expected its installer step")
    return found.group(1)


def installer_wheels() -> list[Path]:
    """The real wheels of the installer pin for each architecture, downloaded by pip once (kept)."""
    import subprocess

    pin = installer_pin()
    version = pin.split("==")[1]
    wheels = []
    with store.locked("testbed-wheels"):  # the test bed's index and a test may both fetch them at once
        for arch, platforms in INSTALLER_PLATFORMS.items():
            found = sorted(REAL_WHEELS.glob(f"uv-{version}-*{arch}*.whl"))
            if not found:
                python = REPO / ".venv" / "bin" / "python"
                subprocess.run([str(python if python.exists() else sys.executable), "-m", "pip", "download", "-q",
                                "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                                *[f"--platform={p}" for p in platforms], "-d", str(REAL_WHEELS), pin], check=True)
                found = sorted(REAL_WHEELS.glob(f"uv-{version}-*{arch}*.whl"))
            wheels += found[:1]
    return wheels


def build_wheel(out: Path, name: str, version: str, files: dict[str, bytes], requires: list[str] = (),
                tag: str = "py3-none-any") -> Path:
    """A minimal valid wheel (PEP 427) holding `files`, with Requires-Dist metadata."""
    stem = f"{name.replace('-', '_')}-{version}"
    dist_info = f"{stem}.dist-info"
    contents = dict(files)
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    metadata += "Summary: sparkfleet test-bed stand-in (testbed/pyindex.py), not the real package\n"
    contents[f"{dist_info}/METADATA"] = metadata.encode()
    contents[f"{dist_info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: sparkfleet-testbed\nRoot-Is-Purelib: false\n"
                                      f"Tag: {tag}\n").encode()
    record = []
    for path, data in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    contents[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{stem}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in sorted(contents.items()):
            archive.writestr(zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return wheel


def _module(name: str, version: str, body: str = "") -> bytes:
    return (f'"""sparkfleet test-bed stand-in for {name} {version} (testbed/pyindex.py). Not the real package."""\n'
            f"__version__ = {version!r}\n{body}").encode()


PEFT_BODY = '''
from importlib import metadata as _metadata

try:
    _torchao = _metadata.version("torchao")
except _metadata.PackageNotFoundError:
    _torchao = None
if _torchao is not None and tuple(int(p) for p in _torchao.split("+")[0].split(".")[:2]) < (0, 16):
    raise ImportError(f"Found an incompatible version of torchao. Found version {_torchao}, "
                      "but only versions above 0.16.0 are supported")
'''


# What unsloth and unsloth_zoo declare and the shipped matrix's unsloth_deps step installs: (name, version, import
# name, what the stand-in declares: the real package's requirements on what this index serves).
UNSLOTH_DEPS = [("triton", "3.6.0", "triton", []), ("cut-cross-entropy", "25.1.1", "cut_cross_entropy",
                                                   ["torch", 'triton; platform_system == "Linux"']),
                ("diffusers", "0.42.1", "diffusers", ["Pillow"]), ("msgspec", "0.23.0", "msgspec", []),
                ("nest-asyncio", "1.6.0", "nest_asyncio", []), ("pillow", "13.0.0", "PIL", []),
                ("protobuf", "7.36.2", "google_protobuf_standin", []), ("sentencepiece", "0.2.3", "sentencepiece", []),
                ("tyro", "1.0.17", "tyro", []), ("wheel", "0.48.0", "wheel", [])]

# The real packages' METADATA (their headers), as PyPI publishes them: what a stand-in at the same pin declares.
REAL_METADATA = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "metadata"
# What this index serves (a requirement on anything else would be one pip cannot meet here).
SERVED = {"torch", "transformers", "trl", "datasets", "peft", "torchao", "bitsandbytes", "hf-transfer", "unsloth",
          "unsloth-zoo", "torchvision", *(name for name, _version, _module, _requires in UNSLOTH_DEPS)}
# Declared by the real package and left out here, so that the shipped stack resolves on this index as on one that
# holds the verified set: trl 1.8.0's datasets>=4.7.0 (advisory pypi-trl-1.8.0-datasets; on PyPI the stack step
# does not resolve).
LEFT_OUT = {("trl", "1.8.0"): {"datasets"}}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def real(name: str, version: str) -> list[str]:
    """The Requires-Dist of the real name==version (tests/fixtures/metadata) that hold on the Spark target
    (Linux, aarch64, no extra) and name a package this index serves, less LEFT_OUT."""
    import email.parser

    headers = email.parser.Parser().parsestr((REAL_METADATA / f"{name}-{version}.METADATA").read_text())
    env = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "aarch64", "extra": ""}
    out = []
    for line in headers.get_all("Requires-Dist") or []:
        requirement, _, marker = line.partition(";")
        wanted = re.match(r"\s*([A-Za-z0-9_.-]+)", requirement).group(1)
        if _canonical(wanted) not in SERVED or _canonical(wanted) in {_canonical(n) for n in
                                                                      LEFT_OUT.get((name, version), ())}:
            continue
        if marker.strip() and not _marker_holds(marker.strip(), env):
            continue
        out.append(requirement.strip())
    return out


def _marker_holds(marker: str, env: dict[str, str]) -> bool:
    """A Requires-Dist marker on the target, evaluated as pip evaluates it (pip's own packaging)."""
    from pip._vendor.packaging.markers import Marker, default_environment

    return Marker(marker).evaluate({**default_environment(), "python_version": "3.12",
                                    "python_full_version": "3.12.0", **env})


def torch_wheel(out: Path, version: str, cuda: str | None, requires: list[str] = ()) -> Path:
    double = TORCH_DOUBLE.read_bytes()
    defaults = json.dumps({"version": version, "cuda": cuda}).encode()
    return build_wheel(out, "torch", version, {"torch/__init__.py": double, "torch/_standin.json": defaults},
                       requires)


def packages(root: Path) -> list[Path]:
    pypi, cu130 = root / "pypi", root / "cu130"
    made = [
        # PyTorch's CUDA aarch64 wheels declare the triton they were built with, on every Linux machine
        # (pytorch/pytorch#165013: `Requires-Dist: triton==3.5.0; platform_system == "Linux"` for 2.9); its own
        # index serves that triton beside it, as this one does.
        torch_wheel(cu130 / "torch", "2.10.0+cu130", "13.0", ['triton==3.6.0; platform_system == "Linux"']),
        build_wheel(cu130 / "triton", "triton", "3.6.0", {"triton/__init__.py": _module("triton", "3.6.0")}),
        # A newer triton on PyPI than the torch build declares: a held step must not take it (matrix propose).
        build_wheel(pypi / "triton", "triton", "3.7.0", {"triton/__init__.py": _module("triton", "3.7.0")}),
        torch_wheel(pypi / "torch", "2.9.1", "12.8"),
        # The build made for torch 2.10.0 (the real one declares torch==2.10.0, numpy and pillow; the last two are
        # not on this stand-in of torch's own index, so it declares torch alone).
        build_wheel(cu130 / "torchvision", "torchvision", "0.25.0+cu130",
                    {"torchvision/__init__.py": _module("torchvision", "0.25.0+cu130", "import torch  # noqa: F401\n")},
                    ["torch==2.10.0"]),
    ]
    for name, version, module, requires in UNSLOTH_DEPS:
        made.append(build_wheel(pypi / name, name, version,
                                {f"{module}/__init__.py": _module(name, version)}, requires))
    plain = [("transformers", "5.13.1", []), ("hf_transfer", "0.1.9", []), ("datasets", "4.3.0", []),
             ("datasets", "4.7.0", []), ("trl", "1.8.0", real("trl", "1.8.0")), ("trl", "1.8.1", ["torchao<0.14"]),
             ("trl", "1.9.0", []), ("trl", "1.10.0", ["datasets>=4.7.0"]),
             ("unsloth", "2026.7.2", real("unsloth", "2026.7.2")),
             ("unsloth_zoo", "2026.7.2", real("unsloth_zoo", "2026.7.2")),
             ("bitsandbytes", "0.49.2", ["torch<3,>=2.3"]), ("torchao", "0.13.0", []), ("torchao", "0.17.0", []),
             ("axolotl", "0.9.0", ["torch==2.9.1"])]
    for name, version, requires in plain:
        body = "import torch  # noqa: F401\n" if name in ("unsloth", "bitsandbytes") else ""
        made.append(build_wheel(pypi / name.replace("_", "-"), name, version,
                                {f"{name}/__init__.py": _module(name, version, body)}, requires))
    made.append(build_wheel(pypi / "peft", "peft", "0.19.1", {"peft/__init__.py": _module("peft", "0.19.1",
                                                                                           PEFT_BODY)},
                            real("peft", "0.19.1")))
    import shutil

    for wheel in installer_wheels():
        (pypi / "uv").mkdir(parents=True, exist_ok=True)
        if not (pypi / "uv" / wheel.name).exists():
            shutil.copyfile(wheel, pypi / "uv" / wheel.name)
        made.append(pypi / "uv" / wheel.name)
    simple_pages(root)
    return made


# The day each release was uploaded, as PyPI's JSON pages say it (PEP 700); releases not named: UPLOADED_DEFAULT.
UPLOADED = {("trl", "1.8.0"): "2026-07-02", ("trl", "1.9.0"): "2026-09-15", ("trl", "1.10.0"): "2026-11-20",
            ("datasets", "4.3.0"): "2026-05-04", ("datasets", "4.7.0"): "2026-10-28",
            ("torchao", "0.13.0"): "2025-09-01", ("torchao", "0.17.0"): "2026-06-22"}
UPLOADED_DEFAULT = "2026-06-01"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


class IndexHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the tree with PyPI's caching headers: files immutable, pages for 10 minutes.

    pip caches what the index says it may (PyPI's files carry max-age of years),
    so a rebuild that needs the same wheel takes it from pip's cache.
    """

    requests: list[str] | None = None

    def end_headers(self):
        immutable = self.path.endswith((".whl", ".tar.gz", ".zip"))
        self.send_header("Cache-Control", "max-age=365000000, immutable, public" if immutable else "max-age=600")
        super().end_headers()

    def send_head(self):
        """PEP 691: a project's JSON page to a client that asks for it (content negotiation, as PyPI)."""
        page = Path(self.translate_path(self.path)) / "index.json"
        if self.path.endswith("/") and SIMPLE_JSON in self.headers.get("Accept", "") and page.is_file():
            body = page.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", SIMPLE_JSON)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return io.BytesIO(body)
        return super().send_head()

    def log_message(self, fmt, *args):
        if self.requests is not None:
            self.requests.append(self.path)
        else:
            sys.stderr.write(f"{self.address_string()} {fmt % args}\n")


def server(root: Path, port: int, requests: list[str] | None = None) -> http.server.ThreadingHTTPServer:
    handler = type("Handler", (IndexHandler,), {"requests": requests})
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(handler, directory=str(root)))


def simple_pages(root: Path) -> None:
    """A PEP 503 page per project, with PEP 658 metadata files as PyPI serves them.

    pip then reads a wheel's METADATA without downloading the wheel (as with
    PyPI), e.g. for `pip install --dry-run --report`. Each link carries the
    wheel's sha256 as PyPI's do (#sha256=...): pip checks it on download and
    the dry-run report names it (what `sparkfleet matrix lock` records).
    """
    for project in sorted(p for p in root.glob("*/*") if p.is_dir()):
        links, files = [], []
        for wheel in sorted(project.glob("*.whl")):
            with zipfile.ZipFile(wheel) as archive:
                meta = next(archive.read(n) for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            (project / f"{wheel.name}.metadata").write_bytes(meta)
            sha = hashlib.sha256(meta).hexdigest()
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            href = f"{wheel.name.replace('+', '%2B')}#sha256={digest}"
            links.append(f'<a href="{href}" data-dist-info-metadata="sha256={sha}" '
                         f'data-core-metadata="sha256={sha}">{wheel.name}</a><br>')
            version = wheel.name.split("-")[1]
            day = UPLOADED.get((project.name.replace("-", "_"), version.split("+")[0])) or UPLOADED.get(
                (project.name, version.split("+")[0]), UPLOADED_DEFAULT)
            files.append({"filename": wheel.name, "url": wheel.name.replace("+", "%2B"), "hashes": {"sha256": digest},
                          "core-metadata": {"sha256": sha}, "size": wheel.stat().st_size,
                          "upload-time": f"{day}T12:00:00.000000Z"})
        (project / "index.html").write_text("<!DOCTYPE html>\n<html><body>\n" + "\n".join(links)
                                            + "\n</body></html>\n")
        if project.parent.name == "pypi":
            versions = sorted({f["filename"].split("-")[1] for f in files})
            (project / "index.json").write_text(json.dumps({"meta": {"api-version": "1.1"}, "name": project.name,
                                                            "versions": versions, "files": files}, indent=1))


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "build":
        root = Path(argv[2])
        for wheel in packages(root):
            print(wheel.relative_to(root))
        return 0
    if len(argv) == 2 and argv[1] == "fetch":
        for wheel in installer_wheels():
            print(wheel)
        return 0
    if len(argv) == 4 and argv[1] == "serve":
        packages(Path(argv[2]))
        server(Path(argv[2]), int(argv[3])).serve_forever()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
