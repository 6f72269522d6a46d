"""What sparkfleet writes into an inventory is data, never a template (issue 56, item 1).

Ansible loads group_vars as variables and renders their strings when a play uses them: text a registry, an index or
a hand edit put into the image lock would run as root on the controller, even under --check. Each writer of a file
under an inventory is walked here with a payload in every string it writes (a Jinja expression, a statement and a
comment): the file is loaded by real Ansible of every core the collection admits, the variable used whole, and the
payload must come back as the text it was, with nothing run. A new writer (a YAML dump anywhere in plugins/,
playbooks/, roles/ or src/) fails the walk until it has its row here.

The hostile registry and the hand edit are then tried through the CLI, as an owner meets them.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import MARKERS, inert_load
from ansible_collections.sparkfleet.spark.plugins.module_utils.images import _lock
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _hash_lock
from ansible_cores import CORES, core_bin
from fake_http import FakeHTTP

from conftest import BIN, REPO, ansible_env

D = "sha256:" + "a" * 64


@pytest.fixture
def proof():
    """Where a payload that ran leaves its mark: lower-case letters, digits and '-' only, so a writer that changes
    the text on its way (a registry's error code lower-cased, '_' made a space) still touches this very path."""
    path = Path(f"/tmp/sparkfleet-proof-{uuid.uuid4().hex}")
    yield path
    path.unlink(missing_ok=True)


def payloads(proof: Path) -> list[str]:
    """A template of each kind Jinja has; the first two touch `proof` if rendered, the third vanishes."""
    return [f"{{{{ lookup('pipe', 'touch {proof}') }}}}",
            f"{{% set _x = lookup('pipe', 'touch {proof}') %}}{{{{ _x }}}}",
            "{# a comment rendering would drop #}"]


def _in_every_string(value: object, payload: str) -> object:
    """`value` with a payload appended to every string, keys too (a writer must keep every one inert)."""
    if isinstance(value, dict):
        return {_in_every_string(k, payload): _in_every_string(v, payload) for k, v in value.items()}
    if isinstance(value, list):
        return [_in_every_string(v, payload) for v in value]
    return value + payload if isinstance(value, str) else value


def _image_lock(payload: str) -> tuple[str, dict]:
    # A tag and a date that YAML would read as a float and a timestamp: Ansible reads a tagged scalar's type anew,
    # ignoring its quotes ('25.10' !unsafe is the float 25.1), so they must come back as the text they are.
    lock = {"ngc": {"requested": "nvcr.io/nvidia/pytorch:25.10", "registry": "nvcr.io",
                    "repository": "nvidia/pytorch", "tag": "25.10", "index_digest": D,
                    "digests": {"linux/arm64": D}, "media_type": "application/vnd.oci.image.index.v1+json",
                    "platforms": ["linux/arm64"], "sizes": {"linux/arm64": 1},
                    "fallback": {"wanted": "25.11-py3", "used": "25.09-py3", "reasons": ["404 manifest unknown"]},
                    "resolved_at": "2026-12-05T00:00:00+00:00", "derived": {}}}
    lock = _in_every_string(lock, payload)
    return _lock.render(lock), {_lock.VARIABLE: lock}


def _hash_lock_file(payload: str) -> tuple[str, dict]:
    lock = _in_every_string({"lock_version": 1, "matrix": "spark-stack", "fingerprint": "f" * 64,
                             "target": {"python": "3.12", "platform": "linux/aarch64"},
                             "steps": {"torch": [{"name": "torch", "version": "2.10.0", "sha256": "0" * 64,
                                                  "wheel": "torch-2.10.0-cp312-cp312-linux_aarch64.whl"}]}},
                            payload)
    return _hash_lock.render(lock, "spark-stack.yml" + payload), {"spark_venv_lock": lock}


# Every writer of a file under an inventory: where it is written from, the file's name in group_vars/all (Ansible
# loads it as variables there) and how it writes a payload-laden value. `proposal` is a matrix proposed by `matrix
# propose` (playbooks/matrix_propose.yml, to_nice_yaml): written to the inventory's matrix/ folder, which Ansible
# never loads as variables, and read back only through lookup('file') | from_yaml, whose strings no core renders:
# its row proves that reading, not the file's tags.
WRITERS = {
    "plugins/module_utils/images/_lock.py": ("spark_images_lock.yml", _image_lock),
    "plugins/module_utils/venv/_hash_lock.py": ("spark_venv_lock.yml", _hash_lock_file),
    "playbooks/matrix_propose.yml": ("proposal", None),
}
_DUMPS = re.compile(r"to_nice_yaml|to_yaml|yaml\.(safe_)?dump|inert_dump\(")


def test_every_yaml_writer_of_the_collection_and_the_cli_is_walked_here():
    found = sorted(str(path.relative_to(REPO)) for folder in ("plugins", "playbooks", "roles", "src")
                   for path in (REPO / folder).rglob("*") if path.suffix in (".py", ".yml", ".yaml")
                   and path.name != "_yaml.py" and _DUMPS.search(path.read_text()))
    assert found == sorted(WRITERS), (
        f"files that write YAML: {found}; walked by this test: {sorted(WRITERS)}. A new writer must write through "
        "module_utils/common/_yaml.py's inert_dump() (or never under group_vars/host_vars) and have its row in "
        "WRITERS of tests/integration/test_inert_writes.py")


def _play(tmp_path: Path, core: str, files: dict[str, str], use: str) -> tuple[subprocess.CompletedProcess, object]:
    """Run a play on localhost of an inventory whose group_vars/all holds `files`; `use` is rendered and its value
    written as JSON (what the play made of it) to out.json."""
    inv = tmp_path / f"inv-{core}"
    (inv / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
    for name, text in files.items():
        (inv / "group_vars" / "all" / name).write_text(text)
    out = tmp_path / f"out-{core}.json"
    play = tmp_path / f"play-{core}.yml"
    play.write_text(json.dumps([{"hosts": "all", "gather_facts": False, "tasks": [
        {"ansible.builtin.debug": {"msg": use}},
        {"ansible.builtin.debug": {"var": "hostvars[inventory_hostname]"}},
        {"ansible.builtin.copy": {"content": "{{ (" + use.strip("{} ") + ") | to_json }}", "dest": str(out),
                                  "mode": "0600"}}]}]))
    bin_dir = core_bin(core)
    run = subprocess.run([str(bin_dir / "ansible-playbook"), "-i", str(inv), str(play),
                          "-e", f"ansible_python_interpreter={bin_dir / 'python'}"],
                         env=ansible_env(PATH=f"{bin_dir}:/usr/bin:/bin"), capture_output=True, text=True,
                         check=False, cwd=tmp_path)
    return run, json.loads(out.read_text()) if out.is_file() else None


@pytest.mark.parametrize("core", list(CORES))
@pytest.mark.parametrize("writer", sorted(w for w in WRITERS if WRITERS[w][1]))
def test_what_a_writer_writes_comes_back_as_it_was_written_text_a_number_a_date(writer, core, tmp_path):
    """No payload: every value, loaded by Ansible from group_vars, is what was written - a tag '25.10' stays text (it
    came back as the float 25.1 when every string was tagged !unsafe), a date stays text, a size a number."""
    name, make = WRITERS[writer]
    text, want = make("")
    run, got = _play(tmp_path, core, {name: text}, "{{ " + next(iter(want)) + " }}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert got == next(iter(want.values())), f"{writer}: not what was written, on ansible-core {core}"


@pytest.mark.parametrize("core", list(CORES))
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_payload_in_every_string_a_writer_takes_comes_back_as_text_and_never_runs(writer, core, tmp_path, proof):
    name, make = WRITERS[writer]
    for payload in ["".join(payloads(proof))]:  # each kind in every string, one run
        if make is None:  # the proposal: a matrix file read through lookup | from_yaml
            matrix = _in_every_string({"name": "proposed", "steps": [{"id": "torch", "packages": ["torch==2.10.0"],
                                                                       "why": "torchvision declares it"}]}, payload)
            (tmp_path / "proposed.yml").write_text(yaml.safe_dump(matrix, sort_keys=False))
            files, want = {}, matrix
            use = "{{ lookup('ansible.builtin.file', '" + str(tmp_path / "proposed.yml") + "') | from_yaml }}"
        else:
            text, want = make(payload)
            files = {name: text}
            use = "{{ " + next(iter(want)) + " }}"
        run, got = _play(tmp_path, core, files, use)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        assert not proof.exists(), f"{writer}: {payload!r} ran as a template on ansible-core {core}"
        assert got == (want if make is None else next(iter(want.values()))), \
            f"{writer}: the value did not come back as written on ansible-core {core}"


def test_a_hand_edited_lock_with_a_template_is_refused_before_it_can_run(tmp_path, proof):
    """A lock without tags, edited by hand: the plan reads the variable unrendered and refuses it, and the CLI's own
    check before a run refuses it (exit 4), naming the field; nothing runs."""
    text, _unused = _image_lock("")
    lock = inert_load(text)
    lock[_lock.VARIABLE]["ngc"]["note"] = payloads(proof)[0]
    lock[_lock.VARIABLE]["ngc"]["fallback"]["reasons"] = [payloads(proof)[1]]
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text("sparks:\n  hosts:\n    spark-1:\n      ansible_connection: local\n")
    (inv / "group_vars" / "all" / "spark_images_lock.yml").write_text(yaml.safe_dump(lock))

    problems = _lock.problems(lock[_lock.VARIABLE], "lock.yml")
    assert any("ngc.note" in p and "would run as a template" in p for p in problems), problems
    assert any("'note', which is no field of the lock" in p for p in problems), problems
    assert any("ngc.fallback.reasons.0" in p for p in problems), problems

    play = tmp_path / "read.yml"
    play.write_text(json.dumps([{"hosts": "sparks", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "sparkfleet.spark.spark_images", "tasks_from": "read_lock.yml"}}]}]))
    run = subprocess.run([str(core_bin(next(reversed(CORES))) / "ansible-playbook"), "-i", str(inv), str(play)],
                         env=ansible_env(), capture_output=True, text=True, check=False, cwd=tmp_path)
    assert run.returncode != 0 and "would run as a template" in " ".join(run.stdout.split()), run.stdout[-3000:]
    assert not proof.exists(), "the plan rendered the hand-edited lock"

    cli = subprocess.run([str(BIN / "sparkfleet"), "provision", "--check", "-i",
                          str(inv), "--plain", "--report-dir", str(tmp_path / "report")],
                         env=ansible_env(), capture_output=True, text=True, check=False, cwd=tmp_path)
    said = " ".join((cli.stdout + cli.stderr).split())
    assert cli.returncode == 4, said[-3000:]
    assert "would run as a template" in said and "note" in said, said[-3000:]
    assert not proof.exists(), "sparkfleet provision --check rendered the hand-edited lock"


@pytest.mark.testbed
def test_a_registry_that_answers_with_a_template_never_gets_it_run(anon, tmp_path, proof):
    """The review's case: the newer tag answered 404 with template code for its error codes, the older one served;
    pin writes the fallback, then provision --check, verify and refresh --check run on the lock, and nothing the
    registry said runs."""
    from oci_push import push
    from thishost import HOST, inventory, sparkfleet

    push(anon.url, "nvidia/pytorch:25.09-py3", ["amd64", "arm64"], seed="inert")

    def answer(request):
        if request.path.endswith("/manifests/25.11-py3"):
            return 404, {}, {"errors": [{"code": p, "message": p} for p in payloads(proof)]}
        forwarded = urllib.request.Request(f"{anon.url}{request.path}", method=request.command,
                                           headers={k: v for k, v in request.headers.items()
                                                    if k.lower() in ("accept", "authorization")})
        try:
            with urllib.request.urlopen(forwarded, timeout=10) as reply:
                return reply.status, {k: v for k, v in reply.headers.items()
                                      if k.lower() in ("content-type", "docker-content-digest")}, reply.read()
        except urllib.error.HTTPError as exc:
            return exc.code, {"Content-Type": exc.headers.get("Content-Type", "application/json")}, exc.read()

    with FakeHTTP(answer) as hostile:
        inv = inventory(tmp_path, hostile.host, spark_images_catalog=[
            {"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3", "25.09-py3"],
             "launcher": "spark-ngc"}])
        pin, _report = sparkfleet(inv, tmp_path / "pin", "pin")
        assert pin.returncode == 0, pin.stdout[-3000:]
        text = (inv / "group_vars" / "all" / "spark_images_lock.yml").read_text()
        reasons = inert_load(text)[_lock.VARIABLE]["ngc"]["fallback"]["reasons"]
        assert reasons and all("(an error code not of the spec)" in r for r in reasons), reasons
        assert not [m for m in MARKERS if m in text], text
        from conftest import own_checks_accept

        assert own_checks_accept(inv) == [], "the lock pin wrote is one every command accepts"
        for args in (("provision", "--check"), ("verify",), ("refresh", "--check")):
            run, report = sparkfleet(inv, tmp_path / "-".join(args), *args)
            said = " ".join((run.stdout + run.stderr).split())
            assert not proof.exists(), f"sparkfleet {' '.join(args)} ran what the registry said"
            # Each reads the lock as it is (a run that refused it, 'two image locks', hid a lock Ansible read
            # otherwise): whatever else the host says, no failure is the lock's.
            failures = [f["msg"] for host in (report.get("hosts") or {}).values() for f in host.get("failures") or []]
            assert run.returncode != 4 and not [m for m in failures if "lock" in m], said[-3000:]
        assert HOST in run.stdout
