"""Derived images, built for real: FROM a locked base digest, on this machine's Docker engine, for linux/arm64.

The lab's emulated hosts cannot run build steps, so the host here is this machine itself (local connection, a
non-Spark by override that runs arm64 images under qemu, its GPU simulated), through the real `sparkfleet pin`,
`provision` (site.yml's preflight and images) and `refresh`. The base is a stand-in for nvidia/pytorch (NVIDIA's
image is out of reach): the test bed's aarch64 Debian with a Python distribution installed the way NGC ships its
own. The extra system package is real: Debian bookworm's `tree` for arm64 (fetched once from Debian's archive
into .cache/tests), served to the build from a signed apt repository on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import store
import thishost
import yaml
from fake_http import FakeHTTP
from pyindex import build_wheel
from thishost import HOST, lock_of, sparkfleet

pytestmark = [pytest.mark.testbed, pytest.mark.network]
TREE_DEB = "tree_2.1.0-1_arm64.deb"
TREE_URL = f"http://deb.debian.org/debian/pool/main/t/tree/{TREE_DEB}"
CACHE = store.ROOT / "tests" / "debs"  # testbed/store.py: kept outside the clone


def run(*cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def apt_repo(tmp_path_factory):
    """A flat apt repository on 127.0.0.1 holding Debian's real arm64 `tree` package."""
    deb = CACHE / TREE_DEB
    if not deb.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(TREE_URL, timeout=60) as response:  # unreachable: the run fails, loudly
            data = response.read()
        (CACHE / f".{TREE_DEB}.{os.getpid()}").write_bytes(data)
        (CACHE / f".{TREE_DEB}.{os.getpid()}").rename(deb)
    root = tmp_path_factory.mktemp("apt")
    shutil.copy(deb, root / TREE_DEB)
    packages = run("apt-ftparchive", "packages", ".", cwd=root).stdout
    (root / "Packages").write_text(packages)
    (root / "Release").write_text(run("apt-ftparchive", "release", ".", cwd=root).stdout)
    # Signed like any real repository, with a key made for this test only; the base trusts it by signed-by.
    gnupg = tmp_path_factory.mktemp("gnupg")
    gpg = ("gpg", "--homedir", str(gnupg), "--batch", "--quiet", "--yes")
    run(*gpg, "--passphrase", "", "--quick-gen-key", "sparkfleet derived-image test <noreply@localhost>", "ed25519",
        "sign", "never")
    run(*gpg, "--clearsign", "-o", str(root / "InRelease"), str(root / "Release"))
    run(*gpg, "-abs", "-o", str(root / "Release.gpg"), str(root / "Release"))
    (root / "key.asc").write_text(run(*gpg, "--armor", "--export").stdout)
    with FakeHTTP.folder(root) as server:
        yield server.url


def push_base(work: Path, registry: str, apt_url: str, marker: str) -> str:
    """The stand-in nvidia/pytorch:25.11-py3: aarch64 Debian, apt pointed at apt_url only, einops 0.8.1 installed."""
    work.mkdir(parents=True)
    wheel = build_wheel(work / "wheels", "einops", "0.8.1", {"einops/__init__.py": b"__version__ = '0.8.1'\n"})
    run(sys.executable, "-m", "pip", "install", "-q", "--isolated", "--no-deps", "--target", str(work / "site"),
        str(wheel))
    (work / "sources.list").write_text(f"deb [signed-by=/etc/apt/keyrings/derived-test.asc] {apt_url} ./\n")
    with urllib.request.urlopen(f"{apt_url}/key.asc", timeout=10) as response:
        (work / "derived-test.asc").write_bytes(response.read())
    (work / "marker").write_text(marker)
    (work / "Dockerfile").write_text(
        "FROM sparkfleet/host-plain:latest\n"
        "COPY sources.list /etc/apt/sources.list\n"
        "COPY derived-test.asc /etc/apt/keyrings/derived-test.asc\n"
        "COPY marker /etc/sparkfleet-standin-base\n"
        "COPY site/ /usr/local/lib/python3.11/dist-packages/\n")
    tag = f"{registry}/nvidia/pytorch:25.11-py3"
    run("docker", "build", "-q", "--platform", "linux/arm64", "-t", tag, str(work),
        env={**os.environ, "DOCKER_BUILDKIT": "0"})
    run("docker", "push", tag)
    digest = run("docker", "image", "inspect", "--format", "{{index .RepoDigests 0}}", tag).stdout.strip()
    run("docker", "image", "rm", tag)
    return digest.split("@")[1]


@pytest.fixture
def inventory(tmp_path, anon, apt_repo) -> Path:
    inv = thishost.inventory(
        tmp_path, anon.host, spark_images_build_network="host",
        spark_images_derived=[{"name": "ngc-tree", "base": "ngc", "apt_packages": ["tree"],
                               "dockerfile": "COPY motd /etc/motd.d/sparkfleet\n", "files": {"motd": "files/motd"},
                               "launcher": "spark-ngc-tree"}])
    (inv / "files").mkdir()
    (inv / "files" / "motd").write_text("derived for the audio project\n")
    yield inv
    images = run("docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "sparkfleet/ngc-tree").stdout
    for ref in images.split():
        subprocess.run(["docker", "image", "rm", "-f", ref], capture_output=True, check=False)
    for image_id in set(run("docker", "image", "ls", "-q", f"{anon.host}/nvidia/pytorch").stdout.split()):
        subprocess.run(["docker", "image", "rm", "-f", image_id], capture_output=True, check=False)


def derived_tags() -> set[str]:
    return set(run("docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "sparkfleet/ngc-tree")
               .stdout.split())


def launcher_ref(tmp_path: Path) -> str:
    return (tmp_path / "bin" / "spark-ngc-tree").read_text().rstrip().split()[-2]


def test_a_derived_image_is_built_once_from_the_locked_digest_refused_when_it_upgrades_and_rebuilt_on_refresh(
        tmp_path, inventory, anon, apt_repo):
    base = push_base(tmp_path / "base1", anon.host, apt_repo, "one")
    proc, _ = sparkfleet(inventory, tmp_path / "pin", "pin")
    assert proc.returncode == 0, proc.stdout[-4000:]
    locked = lock_of(inventory)["ngc"]
    assert locked["index_digest"] == base
    recipe = locked["derived"]["ngc-tree"]["recipe"]
    assert locked["derived"]["ngc-tree"]["tag"] == f"sparkfleet/ngc-tree:{recipe[7:19]}"

    # Check mode says it would build, and builds nothing.
    provision = ("provision", "-t", "spark_preflight,spark_images")
    proc, report = sparkfleet(inventory, tmp_path / "check", *provision, "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "Build each derived image" in proc.stdout and not derived_tags()

    # Built on the host FROM the locked digest, for arm64, with the real package, run by ID by its launcher.
    proc, report = sparkfleet(inventory, tmp_path / "p1", *provision)
    assert proc.returncode == 0, proc.stdout[-4000:]
    tag = f"sparkfleet/ngc-tree:{recipe[7:19]}"
    image = json.loads(run("docker", "image", "inspect", tag).stdout)[0]
    assert image["Architecture"] == "arm64"
    assert image["Config"]["Labels"]["io.sparkfleet.recipe"] == recipe, "the host's hash is the lock's"
    assert launcher_ref(tmp_path) == image["Id"]
    assert f"built FROM\n# {anon.host}/nvidia/pytorch@{base}" in (tmp_path / "bin" / "spark-ngc-tree").read_text()
    out = run("docker", "run", "--rm", image["Id"], "sh", "-c", "tree --version; cat /etc/motd.d/sparkfleet").stdout
    assert "tree v2.1.0" in out and "derived for the audio project" in out
    assert {"name": "ngc-tree", "ref": image["Id"], "tag": recipe[7:19],
            "source": f"derived from ngc ({tag})"} in report["hosts"][HOST]["images"]

    # Converged: nothing is built again.
    proc, report = sparkfleet(inventory, tmp_path / "p2", *provision)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert report["hosts"][HOST]["counts"]["changed"] == 0, proc.stdout[-3000:]
    assert launcher_ref(tmp_path) == image["Id"]

    # A recipe that would replace what the base ships is refused before building; nothing is lost.
    main = inventory / "group_vars" / "all" / "main.yml"
    config = yaml.safe_load(main.read_text())
    good = config["spark_images_derived"][0]
    config["spark_images_derived"][0] = {**good, "dockerfile": good["dockerfile"] + "RUN pip install einops==0.8.0\n"}
    main.write_text(yaml.safe_dump(config))
    proc, report = sparkfleet(inventory, tmp_path / "p3", *provision)
    assert proc.returncode == 2, proc.stdout[-4000:]
    assert any("pip package einops is already in the base image (einops==0.8.1)" in f["msg"]
               for f in report["hosts"][HOST]["failures"])
    assert derived_tags() == {tag}, "nothing was built"
    assert launcher_ref(tmp_path) == image["Id"], "the launcher still runs the image that was built"
    config["spark_images_derived"][0] = good
    main.write_text(yaml.safe_dump(config))

    # The base's tag moves: the refresh rebuilds the derived image on the new digest and checks the host as it
    # checks a base. This machine's Docker has no nvidia runtime (true, and the check says so), so the host is
    # rolled back: the launcher runs the derived image built on the verified base again, the lock is unchanged.
    moved = push_base(tmp_path / "base2", anon.host, apt_repo, "two")
    locked_text = (inventory / "group_vars" / "all" / "spark_images_lock.yml").read_text()
    proc, report = sparkfleet(inventory, tmp_path / "refresh", "refresh")
    assert proc.returncode == 2, proc.stdout[-4000:]
    assert "does not list the nvidia runtime" in report["hosts"][HOST]["refresh_failure"]
    assert not [w for w in report["warnings"] if "is not in the lock" in w], "the refresh writes the lock after"
    rebuilt = derived_tags() - {tag}
    assert len(rebuilt) == 1, derived_tags()
    new_image = json.loads(run("docker", "image", "inspect", rebuilt.pop()).stdout)[0]
    assert new_image["Config"]["Labels"]["io.sparkfleet.recipe"] != recipe
    assert run("docker", "run", "--rm", new_image["Id"], "cat", "/etc/sparkfleet-standin-base").stdout == "two"
    assert f"FROM {anon.host}/nvidia/pytorch@{moved}" in (tmp_path / "build" / "ngc-tree" / ".sparkfleet.Dockerfile"
                                                           ).read_text()
    assert launcher_ref(tmp_path) == image["Id"], "rolled back to the derived image on the verified base"
    assert (inventory / "group_vars" / "all" / "spark_images_lock.yml").read_text() == locked_text


def test_a_derived_image_whose_base_is_not_locked_is_refused(tmp_path, inventory, anon, apt_repo):
    push_base(tmp_path / "base", anon.host, apt_repo, "unlocked")
    proc, report = sparkfleet(inventory, tmp_path / "p", "provision", "-t", "spark_preflight,spark_images")
    assert proc.returncode == 2, proc.stdout[-4000:]
    (failure,) = report["hosts"][HOST]["failures"]
    assert "derived image ngc-tree: its base 'ngc' is not in the lock (locked here: none)" in failure["msg"]
    assert not derived_tags()
    assert not (tmp_path / "bin" / "spark-ngc-tree").exists()
