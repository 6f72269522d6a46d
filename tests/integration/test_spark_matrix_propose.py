"""`sparkfleet matrix propose` (issue 38): a candidate set worked out on real indexes, built on a canary, proved
by the smoke step, written with its evidence - or nothing written, the stage and the pins to blame named.

The candidate is worked out against the test bed's index (testbed/pyindex.py), which holds newer releases than the
matrix pins: trl 1.10.0, which asks for datasets>=4.7.0 (as the real trl 1.8.0 does), and datasets 4.7.0; its PyPI
tree gives each release's upload day as PyPI's JSON pages do (PEP 691/700), its cu130 tree plain pages only (as
download.pytorch.org). The proof runs on a canary driven locally (this machine: a single box, as an owner drives
one) from an index of real wheels (tests/integration/wheels.py smoke_index: torch 2.13 CPU, transformers, peft, two
torchao releases), where the smoke step really trains and really fails.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from conftest import BIN, REPO, own_checks_accept, run_module

MATRIX = yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text())
TODAY = datetime.date.today().isoformat()


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from indexes import Index

    served = Index(tmp_path_factory.mktemp("pyindex"))
    yield served
    served.close()


def propose(index, **args) -> dict:
    return run_module("spark_matrix_propose", {"matrix": MATRIX, "index_mirrors": index.overrides,
                                               "today": "2026-12-04", **args})


def test_the_newest_set_that_respects_its_closure_is_proposed_with_each_releases_day_and_what_held_it(index):
    result = propose(index)
    assert not result["failed"], result.get("msg")
    # trl's newest (1.10.0) asks for datasets>=4.7.0, and pip alone would move both; but unsloth and unsloth_zoo
    # 2026.7.2 (the --no-deps step) declare datasets<4.4.0 (their real metadata), which the matrix does not accept
    # to break: datasets is held within it, and the newest trl that fits is 1.9.0 (issue 48).
    moved = {r["package"]: (r["old"], r["new"]) for r in result["rows"] if r["moved"]}
    assert moved == {"trl": ("1.8.0", "1.9.0")}
    lines = [" ".join(line.split()) for line in result["lines"]]  # the columns as wide as the longest names
    assert "stack datasets = 4.3.0 (2026-05-04)" in lines
    assert "stack trl 1.8.0 (2026-07-02) -> 1.9.0 (2026-09-15)" in lines
    assert [line for line in result["lines"] if line.startswith("held back:")] == [
        f"held back: datasets!=4.0.*,!=4.1.0,<4.4.0,>=3.4.1 - {who} 2026.7.2 declares datasets!=4.0.*,!=4.1.0,<4.4.0,"
        ">=3.4.1" for who in ("unsloth", "unsloth_zoo")]
    assert result["closure"]["clean"] is True
    assert not [line for line in result["closure"]["lines"] if line.startswith("VIOLATION")], result["closure"]
    assert "torch torch = 2.10.0 (date unknown)" in lines, "the cu130 index gives no dates"
    # PyPI has triton 3.7.0, but the torch build declares triton==3.6.0 (as PyTorch's CUDA aarch64 wheels declare
    # theirs): the held step's triton follows the torch pin, not the newest.
    assert "unsloth_deps triton = 3.6.0 (2026-06-01)" in lines
    candidate = result["candidate"]
    assert (candidate["name"], candidate["last_verified"], candidate["proposed_from"]) == (
        "spark-stack-2026-12-04", "2026-12-04", "unsloth-2026.7.2")
    # The sequence is kept as it is: the steps, their order, their arguments (--no-deps, -U last), their indexes.
    assert [(s["id"], s.get("args"), s["index_url"]) for s in candidate["steps"]] == [
        (s["id"], s.get("args"), s["index_url"]) for s in MATRIX["steps"]]
    assert candidate["steps"][1]["packages"] == ["transformers==5.13.1", "peft==0.19.1", "hf_transfer==0.1.9",
                                                 "datasets==4.3.0", "trl==1.9.0"]
    assert candidate["accepted"] == MATRIX["accepted"], "no deviation beyond the matrix's own"
    assert candidate["steps"][0]["packages"] == ["torch==2.10.0", "torchvision==0.25.0"], \
        "the local label (+cu130) is not pinned"


def test_a_given_set_that_breaks_a_declared_requirement_is_kept_and_written_with_it_as_an_accepted_deviation(index):
    result = propose(index, pins=["datasets==4.7.0"])
    assert not result["failed"] and result["resolves"] is True and result["held"] == []
    assert {r["package"]: r["new"] for r in result["rows"] if r["moved"]} == {"datasets": "4.7.0", "trl": "1.10.0"}
    assert "VIOLATION unsloth 2026.7.2 declares datasets<4.4.0 (of 4 clauses); step stack installs datasets 4.7.0" \
        in result["closure"]["lines"]
    given = [a for a in result["candidate"]["accepted"] if a["requires"] == "datasets"]
    assert [a["declared_by"] for a in given] == ["unsloth==2026.7.2", "unsloth_zoo==2026.7.2"]
    assert given[0]["reason"] == ("pinned as given to matrix propose, outside what unsloth 2026.7.2 declares "
                                  "(datasets!=4.0.*,!=4.1.0,<4.4.0,>=3.4.1)")
    assert result["closure"]["clean"] is True, "written only with them as accepted deviations"


def test_a_given_set_that_does_not_resolve_names_the_resolvers_conflict_and_the_pins_to_blame(index):
    """The step resolved for the Spark (uv, for linux aarch64 CPython 3.12): its own account of the conflict."""
    result = propose(index, pins=["trl==1.10.0", "datasets==4.3.0"])
    assert not result["failed"] and result["resolves"] is False and result["candidate"] is None
    assert result["failure"] == {
        "step": "stack", "status": "conflict",
        "detail": "Because trl>=1.10.0 depends on datasets>=4.7.0 and you require datasets==4.3.0, we can conclude "
                  "that your requirements and trl>=1.10.0 are incompatible. And because you require trl==1.10.0, we "
                  "can conclude that your requirements are unsatisfiable.",
        "blame": ["datasets==4.3.0 (given)", "trl 1.8.0 -> 1.10.0"]}


def test_a_pin_the_matrix_does_not_have_is_refused_before_any_index_is_asked(index):
    before = len(index.requests)
    result = propose(index, pins=["vllm==0.11.0", "trl>=1.9"])
    assert result["failed"]
    assert "vllm is not pinned by the matrix" in result["msg"] and "trl>=1.9" in result["msg"]
    assert len(index.requests) == before


def test_at_the_command_line_a_set_that_does_not_resolve_fails_on_the_controller_and_touches_no_host(index,
                                                                                                       tmp_path):
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    # The mirrors under their old name, for the whole inventory (all's vars): the canary's hostvars hold them, read
    # with the warning that names the new one (a test of the playbook's one expression for both).
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": {
        "spark_venv_index_overrides": index.overrides}, "children": {"sparks": {"hosts": {"spark-01": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    report, before = tmp_path / "report", len(index.requests)
    proc = subprocess.run([str(BIN / "sparkfleet"), "matrix", "propose", "-i", str(inventory), "--canary", "spark-01",
                           "-e", '{"matrix_propose_pins": ["trl==1.10.0", "datasets==4.3.0"]}', "--plain",
                           "--report-dir", str(report)], cwd=tmp_path, capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    assert proc.returncode == 2, proc.stdout[-3000:]
    data = json.loads((report / "report.json").read_text())
    [failure] = data["hosts"]["localhost"]["failures"]
    assert failure["msg"].startswith("the candidate does not resolve (stage resolve), step stack: Because "
                                     "trl>=1.10.0 depends on datasets>=4.7.0 and you require datasets==4.3.0")
    assert "To blame: datasets==4.3.0 (given), trl 1.8.0 -> 1.10.0. Nothing was built or written" in failure["msg"]
    assert "spark-01" not in data["hosts"], "the canary's play never started"
    assert not (inventory / "matrix").exists()
    assert [w for w in data["warnings"] if w.startswith("spark_venv_index_overrides is now spark_venv_index_mirrors")]
    assert len(index.requests) > before, "the candidate was worked out from the mirror the old name set"


# --- the whole command, on a canary driven locally --------------------------------------------------------------

SMOKE_MATRIX = {
    "schema": 1, "name": "cpu-smoke-2026.9", "last_verified": "2026-09-01", "verified_on": ["this machine"],
    "target": {"python": "3.11", "arch": "x86_64", "glibc": "2.36"},
    "steps": [
        {"id": "torch", "why": "torch from its own index", "index_url": "https://download.pytorch.org/whl/cpu",
         "packages": ["torch==2.13.0"]},
        {"id": "stack", "why": "the training stack", "index_url": "https://pypi.org/simple",
         "packages": ["transformers==5.13.1", "peft==0.19.1"]},
        {"id": "torchao", "why": "last: an older torchao breaks peft's LoRA attach",
         "index_url": "https://pypi.org/simple", "args": ["-U"], "packages": ["torchao==0.13.0"]},
        {"id": "uv", "why": "the installer, as the shipped matrix has it", "index_url": "https://pypi.org/simple",
         "installer": True, "args": ["--no-deps"], "packages": ["uv==0.13.9"]},
    ],
    "imports": ["torch", "transformers", "peft", "torchao"], "environment": {}, "components": {},
}


@pytest.fixture(scope="module")
def canary(tmp_path_factory):
    """An inventory of one host driven locally (ansible_connection local, as an owner drives a single box), its
    matrix the smoke step's stack on this machine, its indexes the real wheels' index on 127.0.0.1, and an active
    venv of its own whose every byte the proposals must leave as it was."""
    import wheels
    from pyindex import server

    try:
        root = wheels.smoke_index()
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))
    served = server(root, 0, [])
    threading.Thread(target=served.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{served.server_address[1]}"
    home = tmp_path_factory.mktemp("canary")
    (home / "matrix.yml").write_text(yaml.safe_dump(SMOKE_MATRIX, sort_keys=False))
    active = home / "venvs" / "active-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(active)], check=True)
    (home / "venv").symlink_to(active)
    inventory = home / "inventory"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"sparks": {"hosts": {"canary": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "spark_preflight_require_spark": False, "spark_preflight_min_docker_free_gib": 0,
        "spark_venv_python": "/usr/bin/python3.11",
        "spark_venv_matrix_file": str(home / "matrix.yml"),
        "spark_venv_root": str(home / "venvs"), "spark_venv_link": str(home / "venv"),
        "spark_venv_index_mirrors": {"https://pypi.org/simple": f"{url}/pypi",
                                       "https://download.pytorch.org/whl/cpu": f"{url}/cpu"}}}}}}}))
    yield {"home": home, "inventory": inventory, "active": active}
    served.shutdown()


def tree(path: Path) -> str:
    """Every file, link and mode under path, with its bytes: one digest."""
    digest = hashlib.sha256()
    for item in sorted(path.rglob("*")):
        digest.update(f"{item.relative_to(path)} {item.lstat().st_mode}".encode())
        if item.is_symlink():
            digest.update(os.readlink(item).encode())
        elif item.is_file():
            digest.update(item.read_bytes())
    return digest.hexdigest()


def run_propose(canary, name: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = canary["home"] / "reports" / name
    proc = subprocess.run([str(BIN / "sparkfleet"), "matrix", "propose", "-i", str(canary["inventory"]),
                           "--canary", "canary", "-e", "matrix_propose_require_gpu=false",
                           "-e", f"matrix_propose_root={canary['home'] / 'candidates'}", *extra,
                           "--plain", "--report-dir", str(report)],
                          cwd=canary["home"], capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    return proc, json.loads((report / "report.json").read_text())


@pytest.mark.network
def test_a_candidate_that_learns_is_written_with_its_evidence_and_nothing_else_moves(canary):
    before = tree(canary["home"] / "venvs"), os.readlink(canary["home"] / "venv")
    (canary["home"] / "candidates" / "spark-stack-2026-11-30-0123456789ab").mkdir(parents=True)  # a failed one's
    proc, data = run_propose(canary, "green")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    written = canary["inventory"] / "matrix" / f"spark-stack-{TODAY}.yml"
    matrix = yaml.safe_load(written.read_text())
    assert matrix["steps"][2]["packages"] == ["torchao==0.17.0"], "the newest torchao the index offers"
    assert [s["packages"] for s in matrix["steps"][:2]] == [s["packages"] for s in SMOKE_MATRIX["steps"][:2]]
    assert (matrix["last_verified"], matrix["proposed_from"]) == (TODAY, "cpu-smoke-2026.9")
    evidence = matrix["evidence"]
    assert evidence["canary"]["arch"] == "x86_64" and evidence["gpu_verified"] is False
    smoke = evidence["smoke"]
    assert smoke["device"] == "cpu" and smoke["verdict"] == "ok" and smoke["last_loss"] < smoke["first_loss"]
    assert smoke["seconds_per_step"] > 0 and len(evidence["lock_fingerprint"]) == 64
    # The screen: the diff per pin with its day, what was written and where, and how it was proved.
    assert "torchao torchao      0.13.0 (2025-09-01) -> 0.17.0 (2026-06-22)" in proc.stdout
    assert str(written) in proc.stdout and "not GPU verified" in proc.stdout
    assert data["proposal"]["file"] == str(written)
    assert own_checks_accept(canary["inventory"]) == [], "the matrix written beside the inventory is no variable"
    # The canary's active venv and its link, byte for byte; the candidate venv removed.
    assert (tree(canary["home"] / "venvs"), os.readlink(canary["home"] / "venv")) == before
    # pip's and uv's caches, and uv itself (which built the candidate), are kept for the next candidate
    assert sorted(p.name for p in (canary["home"] / "candidates").iterdir()) == [".installer", ".pip-cache",
                                                                                ".uv-cache"]
    [installer] = (canary["home"] / "candidates" / ".installer").iterdir()
    assert installer.name.startswith("uv-0.13.9-"), "from the lock: named by its wheel's sha256"
    # The matrix check reads the evidence: proved by sparkfleet, on what, how.
    checked = run_module("spark_matrix_check", {"matrix": matrix, "skip_steps": ["torch", "stack", "torchao"]})
    assert f"proved by sparkfleet {evidence['sparkfleet']} on {TODAY} on a host (x86_64) without a GPU" \
        in checked["heading"]


@pytest.mark.network
def test_a_candidate_that_fails_its_smoke_step_writes_nothing_and_names_the_stage_and_the_pin(canary):
    """The set given keeps the old torchao: peft refuses it at the LoRA attach, with peft's own words."""
    # The matrix the green run wrote stays in the inventory's matrix/ folder, which is no inventory source.
    written = sorted((canary["inventory"] / "matrix").glob("*.yml"))
    before = tree(canary["home"] / "venvs"), os.readlink(canary["home"] / "venv")
    # the first propose on a host: its candidates' folder is not there yet (it warned "is not a directory")
    fresh = canary["home"] / "fresh-candidates"
    proc, data = run_propose(canary, "red", "-e", '{"matrix_propose_pins": ["torchao==0.13.0"]}',
                             "-e", f"matrix_propose_root={fresh}")
    assert proc.returncode == 2, proc.stdout[-4000:]
    assert "is not a directory" not in proc.stdout, proc.stdout[-3000:]
    [failure] = data["hosts"]["canary"]["failures"]
    assert "at stage smoke (lora)" in failure["msg"] and "To blame: torchao==0.13.0 (given)" in failure["msg"]
    assert "0.16.0" in failure["msg"], "peft's own words"
    assert sorted((canary["inventory"] / "matrix").glob("*.yml")) == written
    assert (tree(canary["home"] / "venvs"), os.readlink(canary["home"] / "venv")) == before


@pytest.mark.network
def test_check_mode_works_out_the_candidate_and_builds_and_writes_nothing(canary):
    written = sorted((canary["inventory"] / "matrix").glob("*.yml"))
    proc, data = run_propose(canary, "check", "--check")
    assert proc.returncode == 0 and data["check"] is True, proc.stdout[-3000:]
    assert "torchao torchao      0.13.0 (2025-09-01) -> 0.17.0 (2026-06-22)" in proc.stdout
    assert "it was not built, proved or written" in proc.stdout
    assert sorted((canary["inventory"] / "matrix").glob("*.yml")) == written and data["proposal"] is None


def test_the_proof_is_judged_stage_by_stage_and_blames_what_the_failure_names():
    from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._matrix_proposal import judge

    rows = [{"step": "stack", "package": "trl", "old": "1.8.0", "new": "1.10.0", "moved": True},
            {"step": "stack", "package": "datasets", "old": "4.3.0", "new": "4.7.0", "moved": True},
            {"step": "torchao", "package": "torchao", "old": "0.17.0", "new": "0.17.0", "moved": False}]
    built = {"imports": [{"module": "trl", "ok": True}]}
    assert judge({"failed": True, "msg": "step stack failed: No matching distribution for datasets==4.7.0"}, None,
                 None, rows, True)["blame"] == ["datasets 4.3.0 -> 4.7.0"]
    assert judge({"imports": [{"module": "trl", "ok": False, "error": "ImportError: datasets"}]}, None, None, rows,
                 False)["stage"] == "import"
    gpu = {"verdict": "failed", "line": "False 12.8", "hypothesis": "ABI mismatch", "fix": "reinstall"}
    assert judge(built, gpu, None, rows, True)["stage"] == "gpu"
    smoke = {"verdict": "failed", "stage": "learning", "error": "the loss did not fall"}
    unnamed = judge(built, gpu, smoke, rows, False)
    assert (unnamed["stage"], unnamed["blame"]) == ("smoke (learning)", [
        "trl 1.8.0 -> 1.10.0 (not named by the failure)", "datasets 4.3.0 -> 4.7.0 (not named by the failure)"])
    assert judge(built, gpu, {"verdict": "ok"}, rows, False)["ok"] is True
    # Issue 45, item 6: a failure in a pin the candidate keeps (the lab's stand-in transformers, which did not move)
    # blamed every moved pin "(not named by the failure)"; none of them is to blame.
    rows.append({"step": "stack", "package": "transformers", "old": "5.13.1", "new": "5.13.1", "moved": False})
    stand_in = {"verdict": "failed", "stage": "import",
                "error": "ImportError: cannot import name 'LlamaConfig' from 'transformers'"}
    kept = judge(built, gpu, stand_in, rows, False)
    assert kept["blame"] == ["none of the moved pins: the failure names transformers 5.13.1, which the candidate "
                             "keeps at the matrix's version"]
    assert copy.deepcopy(rows) == rows


def test_a_host_list_inventory_is_refused_before_any_index_is_asked(tmp_path):
    """A host list (-i spark-01,) has no directory to write the proposed matrix into: before, the file would have
    gone to /spark-stack-<day>.yml."""
    report = tmp_path / "report"
    proc = subprocess.run([str(BIN / "sparkfleet"), "matrix", "propose", "-i", "spark-01,", "-c", "local",
                           "--canary", "spark-01", "--plain", "--report-dir", str(report)], cwd=tmp_path,
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    assert proc.returncode == 2, proc.stdout[-3000:]
    [failure] = json.loads((report / "report.json").read_text())["hosts"]["localhost"]["failures"]
    assert "is a host list, which has no directory for the proposed matrix" in failure["msg"]


def test_what_the_set_declares_and_no_step_installs_is_added_to_the_held_step_and_a_stale_deviation_left_out(index):
    # As a newer Unsloth does (2026.10.9 newly declares json5 and structlog): here the matrix's held step lacks
    # tyro, which unsloth and unsloth_zoo declare, and accepts a deviation that does not happen (peft declares
    # torch>=1.13.0; torch 2.10.0 meets it).
    matrix = copy.deepcopy(MATRIX)
    held = next(step for step in matrix["steps"] if step.get("hold"))
    held["packages"] = [pin for pin in held["packages"] if not pin.startswith("tyro==")]
    stale = {"declared_by": "peft", "requires": "torch", "reason": "no longer needed"}
    matrix["accepted"] = [*matrix["accepted"], stale]
    result = run_module("spark_matrix_propose", {"matrix": matrix, "index_mirrors": index.overrides,
                                                 "today": "2026-12-04"})
    assert not result["failed"], result.get("msg")
    candidate = next(step for step in result["candidate"]["steps"] if step.get("hold"))
    assert candidate["packages"][-1] == "tyro==1.0.17", "pinned in the held step at what the index resolves"
    assert (result["moved"], result["added"]) == (1, 1)
    assert {r["package"]: (r["old"], r["new"]) for r in result["rows"] if r["added"]} == {"tyro": (None, "1.0.17")}
    lines = [" ".join(line.split()) for line in result["lines"]]
    assert "unsloth_deps tyro new 1.0.17 (2026-06-01)" in lines
    assert "added: tyro - unsloth 2026.7.2, unsloth_zoo 2026.7.2 declare it and no step installed it" in lines
    assert "left out: accepted deviation peft -> torch (the candidate's closure no longer has it)" in lines
    assert stale not in result["candidate"]["accepted"] and result["candidate"]["accepted"] == MATRIX["accepted"]
    assert not [line for line in result["closure"]["lines"] if line.startswith(("MISSING", "note:"))], \
        result["closure"]["lines"]

    # Without a held step the matrix keeps its package lists: what is missing is said, not added.
    matrix["steps"] = [step for step in matrix["steps"] if not step.get("hold")]
    result = run_module("spark_matrix_propose", {"matrix": matrix, "index_mirrors": index.overrides,
                                                 "today": "2026-12-04"})
    assert not result["failed"] and result["added"] == 0, result.get("msg")
    assert [line for line in result["closure"]["lines"] if line.startswith("MISSING unsloth 2026.7.2")] == [
        "MISSING unsloth 2026.7.2 declares, and no step installs: wheel>=0.42.0, tyro, protobuf, "
        "sentencepiece>=0.2.0, diffusers, nest-asyncio"], "triton comes with torch's build (it declares it)"
