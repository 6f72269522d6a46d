"""spark_matrix_check and playbooks/matrix_check.yml: every pin asked of its index, nothing installed."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import subprocess
import sys

import pytest
import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import inert_load
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _closure as closure
from ansible_collections.sparkfleet.spark.plugins.modules.spark_matrix_check import closure_steps

from conftest import BIN, REPO, ansible_env, run_module

MATRIX = yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text())


@pytest.fixture(scope="module")
def shipped_on_pypi():
    """The shipped matrix asked of pypi.org once for the tests that read it (each pin, the sequence, the closure's
    input): the cu130 torch index is download.pytorch.org, which this machine cannot reach, so its step is skipped
    here and checked on a Spark."""
    return run_module("spark_matrix_check", {"matrix": MATRIX, "skip_steps": ["torch"], "timeout": 60})


@pytest.fixture(scope="module")
def on_the_test_bed(pyindex):
    """The shipped matrix checked once against the test bed's index, for the tests that read its rows and its
    sequence: the result, and what the index was asked for it."""
    before = len(pyindex.requests)
    result = run_module("spark_matrix_check", {"matrix": MATRIX, "index_mirrors": pyindex.overrides,
                                               "today": "2026-08-01"})
    return result, pyindex.requests[before:]


def test_every_pin_of_the_matrix_is_on_the_test_beds_index(on_the_test_bed):
    result, requests = on_the_test_bed
    assert not result["failed"], result.get("msg")
    assert [(r["package"], r["status"]) for r in result["rows"]][:3] == [
        ("torch", "available"), ("torchvision", "available"), ("transformers", "available")]
    assert result["missing"] == [] and result["unasked_indexes"] == []
    assert result["staleness"]["stale"] is False
    assert requests and not any(r.endswith(".whl") for r in requests), "metadata only: no wheel is downloaded"


def test_an_index_token_is_in_no_row_and_no_unasked_index(pyindex):
    token = "planted-index-token-9a27"
    overrides = {up: mine.replace("http://", f"http://ci:{token}@", 1) for up, mine in pyindex.overrides.items()}
    overrides["https://download.pytorch.org/whl/cu130"] = f"http://ci:{token}@127.0.0.1:9/cu130"
    result = run_module("spark_matrix_check", {"matrix": MATRIX, "index_mirrors": overrides, "timeout": 3})
    assert {r["package"]: r["status"] for r in result["rows"]}["transformers"] == "available", "the token worked"
    assert result["unasked_indexes"] == ["http://ci:***@127.0.0.1:9/cu130"]
    assert token not in str({k: v for k, v in result.items() if not k.startswith("_")})


def test_the_sequence_resolves_step_by_step_on_the_test_beds_index(on_the_test_bed):
    result = on_the_test_bed[0]
    steps = {s["step"]: s for s in result["sequence"]}
    assert [s["status"] for s in result["sequence"]] == ["resolves"] * 6, result["table"]
    assert result["conflicts"] == []
    # The installer (uv, the real wheels) resolves for the target: its aarch64 wheel.
    assert steps["uv"]["installs"] == ["uv==0.13.9"] and "aarch64" in steps["uv"]["locked"][0]["wheel"]
    # peft needs torch: the cu130 torch the first step installed satisfies it, not PyPI's.
    assert "torch==2.10.0+cu130" in steps["stack"]["installs"]
    assert steps["stack"]["constraints"] == ["torch==2.10.0", "torchvision==0.25.0"]
    # Unsloth's dependencies resolve with every pin of the matrix held, and what the earlier steps installed.
    held = steps["unsloth_deps"]
    assert {"transformers==5.13.1", "torch==2.10.0", "torchao==0.17.0", "uv==0.13.9"} <= set(held["constraints"])
    assert "tyro==1.0.17" in held["installs"] and "torch==2.10.0+cu130" in held["installs"]
    assert steps["unsloth"]["installs"] == ["bitsandbytes==0.49.2", "unsloth==2026.7.2", "unsloth-zoo==2026.7.2"]
    assert "stack resolves" in " ".join(" ".join(result["table"]).split())
    # What each package declares, as its index publishes it, for the closure (issue 48).
    declared = {d["name"]: d for s in result["sequence"] for d in s["declared"]}
    assert any(r.startswith("transformers") and "<=5.5.0" in r for r in declared["unsloth"]["requires_dist"])


def test_a_package_a_later_step_moves_is_a_note_of_the_step_and_a_violation_of_the_closure(pyindex):
    """trl 1.8.1 (a test-bed construction) pulls an old torchao in the stack step; the last step moves it on purpose
    (-U torchao): a note of the step, and in the closure a requirement the set breaks, which the matrix does not
    accept (issue 48)."""
    matrix = copy.deepcopy(MATRIX)
    matrix["steps"][1]["packages"] = [p.replace("trl==1.8.0", "trl==1.8.1") for p in matrix["steps"][1]["packages"]]
    result = run_module("spark_matrix_check", {"matrix": matrix, "index_mirrors": pyindex.overrides})
    steps = {s["step"]: s for s in result["sequence"]}
    assert steps["stack"]["notes"] == ["installs torchao 0.13.0, which step torchao then moves to 0.17.0"]
    judged = run_module("spark_matrix_check", {"matrix": matrix, "closure_of": result["sequence"]})
    assert [f["text"] for f in judged["closure"]["unaccepted"]] == [
        "trl 1.8.1 declares torchao<0.14; step torchao installs torchao 0.17.0"]
    assert judged["table"][0].startswith("the declared closure")


def test_dropping_no_deps_makes_unsloth_ask_for_another_transformers(pyindex):
    """The user's rule: without --no-deps, the installer re-resolves Unsloth's tree, and what it declares (the real
    unsloth 2026.7.2's trl<=0.24.0, transformers<=5.5.0) cannot be met with the matrix's pins."""
    matrix = copy.deepcopy(MATRIX)
    unsloth = next(s for s in matrix["steps"] if s["id"] == "unsloth")
    unsloth["args"] = [a for a in unsloth.get("args", []) if a != "--no-deps"]
    result = run_module("spark_matrix_check", {"matrix": matrix, "index_mirrors": pyindex.overrides})
    steps = {s["step"]: s for s in result["sequence"]}
    assert steps["unsloth"]["status"] == "conflict"
    assert steps["torchao"]["status"] == "resolves"
    [conflict] = result["conflicts"]
    assert conflict == (
        "step unsloth: Because all versions of unsloth depend on one of: trl>=0.18.2,<0.19.0, trl>0.19.0,<=0.24.0 and "
        "trl==1.8.0, we can conclude that all versions of unsloth cannot be used. And because you require "
        "unsloth==2026.7.2, we can conclude that your requirements are unsatisfiable."), conflict
    assert result["missing"] == [], "every pin exists; it is the sequence that does not resolve"


def test_a_missing_pin_and_an_unreachable_index_are_told_apart(pyindex):
    matrix = copy.deepcopy(MATRIX)
    matrix["steps"][1]["packages"][4] = "trl==9.9.9"
    overrides = {**pyindex.overrides, "https://download.pytorch.org/whl/cu130": "http://127.0.0.1:9/cu130"}
    result = run_module("spark_matrix_check", {"matrix": matrix, "index_mirrors": overrides, "timeout": 3})
    rows = {r["package"]: r for r in result["rows"]}
    assert rows["trl"]["status"] == "missing"
    assert rows["trl"]["detail"] == "no wheel for this target; the index offers 1.8.0, 1.8.1, 1.9.0, 1.10.0"
    # the index that does not answer: each of its step's pins says so (asked once for the step, not once a pin)
    assert rows["torch"]["status"] == rows["torchvision"]["status"] == "unreachable"
    assert "Connection refused" in rows["torch"]["detail"] and rows["torchvision"]["detail"] == rows["torch"]["detail"]
    assert result["missing"] == ["trl==9.9.9 (stack)"]
    assert result["unasked_indexes"] == ["http://127.0.0.1:9/cu130"]
    assert result["staleness"]["stale"] is True  # today, 2026-11-30 or later


def test_the_playbook_fails_on_a_missing_pin_and_says_which(pyindex, tmp_path):
    matrix = copy.deepcopy(MATRIX)
    matrix["steps"][3]["packages"] = ["torchao==0.99.0"]
    candidate = tmp_path / "candidate.yml"
    candidate.write_text(yaml.safe_dump(matrix))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "playbooks/matrix_check.yml",
                           "-e", f"matrix_check_file={candidate}",
                           "-e", "{\"matrix_check_index_mirrors\": " + __import__("json").dumps(pyindex.overrides)
                           + "}"],
                          cwd=REPO, capture_output=True, text=True, env=ansible_env(), check=False)
    assert proc.returncode == 2
    assert "no wheel for the target: torchao==0.99.0 (torchao)" in proc.stdout
    assert re.search(r"torchao +torchao +0\.99\.0 +missing ", proc.stdout), proc.stdout[-3000:]
    assert "the sequence does not resolve: step torchao: torchao==0.99.0: no wheel for this target" in proc.stdout


@pytest.mark.network
def test_the_real_pins_exist_on_real_pypi_for_cp312_aarch64(shipped_on_pypi):
    """The matrix's PyPI pins, asked of pypi.org (metadata only)."""
    result = shipped_on_pypi
    rows = {r["package"]: r for r in result["rows"]}
    assert result["missing"] == [] and result["unasked_indexes"] == [], result["table"]
    assert rows["torch"]["status"] == "skipped"
    # The two packages with native code have aarch64 wheels of their own.
    assert "manylinux_2_24_aarch64" in rows["bitsandbytes"]["wheel"]
    assert "aarch64" in rows["hf_transfer"]["wheel"]
    assert rows["unsloth"]["wheel"] == "unsloth-2026.7.2-py3-none-any.whl"


@pytest.mark.network
def test_the_torch_steps_pins_exist_as_aarch64_wheels_on_real_pypi():
    """The torch step's pins, which the test above skips (its index, download.pytorch.org, cannot be reached from
    here): pypi.org serves the same torch and torchvision releases' aarch64 wheels. Asked of pypi.org for cp312
    aarch64 (metadata only): each pin is there at its version, as an aarch64 wheel (issue 71: they were never
    asked)."""
    step = next(s for s in MATRIX["steps"] if s["id"] == "torch")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--quiet", "--report",
                           "-", "--ignore-installed", "--no-deps", "--only-binary=:all:", "--platform",
                           "manylinux_2_28_aarch64", "--python-version", MATRIX["target"]["python"], "--index-url",
                           "https://pypi.org/simple", *step["packages"]],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = {item["metadata"]["name"]: (item["metadata"]["version"], item["download_info"]["url"])
             for item in json.loads(proc.stdout)["install"]}
    assert {name: version for name, (version, _url) in found.items()} == dict(
        p.split("==") for p in step["packages"]), found
    assert all("aarch64" in url for _version, url in found.values()), found


@pytest.mark.network
def test_the_real_sequence_against_real_pypi(shipped_on_pypi):
    """Each pin exists, but the stack step as written does not resolve on real PyPI: trl 1.8.0's
    published metadata asks for datasets>=4.7.0 and the matrix pins datasets==4.3.0 (a release's
    metadata never changes). The steps after it resolve with the earlier pins held."""
    result = shipped_on_pypi
    steps = {s["step"]: s for s in result["sequence"]}
    assert steps["torch"]["status"] == "skipped"
    assert steps["stack"]["status"] == "conflict", result["table"]
    assert result["conflicts"] == ["step stack: Because trl==1.8.0 depends on datasets>=4.7.0 and you require "
                                   "datasets==4.3.0, we can conclude that your requirements and trl==1.8.0 are "
                                   "incompatible. And because you require trl==1.8.0, we can conclude that your "
                                   "requirements are unsatisfiable."]
    assert steps["unsloth"]["status"] == steps["torchao"]["status"] == "resolves"
    assert steps["torchao"]["constraints"][0] == "torch==2.10.0", "a skipped step's pins still hold"


def _inventory(tmp_path, pyindex):
    """An owner's inventory whose venv indexes are the test bed's (its mirrors, as group_vars give them)."""
    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n    spark-01:\n")
    (inventory / "group_vars" / "all" / "main.yml").write_text(
        yaml.safe_dump({"spark_venv_index_mirrors": pyindex.overrides}))
    return inventory


def _lock_run(pyindex, candidate, *flags: str, inventory=None) -> subprocess.CompletedProcess:
    """The lock of `candidate` (-e matrix_check_file), or, where it is None, of the matrix the inventory's
    group_vars/all name (spark_venv_matrix_file)."""
    inventory = inventory or _inventory(candidate.parent, pyindex)
    named = ["-e", f"matrix_check_file={candidate}"] if candidate else []
    return subprocess.run([str(BIN / "ansible-playbook"), "playbooks/matrix_check.yml", "-i", str(inventory),
                           *flags, *named, "-e", '{"matrix_lock": true}'],
                          cwd=REPO, capture_output=True, text=True, env=ansible_env(), check=False)


def test_matrix_lock_records_every_resolved_wheel_with_the_sha256_of_its_bytes(pyindex, tmp_path):
    """`sparkfleet matrix lock` = the playbook with matrix_lock: the lock, written with the inventory (never into
    sparkfleet's own matrix/, shared by every inventory and read-only in a pip install), holds each step's resolved
    set through the inventory's mirrors, each sha256 that of the wheel file the index serves; a second run changes
    nothing.

    The matrix locked is the one the inventory's venvs are built from (spark_venv_matrix_file in group_vars/all, as
    the renewal after `matrix propose` sets it), and spark_venv takes the lock. It was sparkfleet's own matrix
    whatever the inventory named: the provision refused the lock ("written for another matrix ... run sparkfleet
    matrix lock") and running that again changed nothing."""
    matrix = {**MATRIX, "name": "spark-stack-2026-12-01"}
    renewed = tmp_path / "matrix" / "spark-stack-2026-12-01.yml"
    renewed.parent.mkdir()
    renewed.write_text(yaml.safe_dump(matrix))
    inventory = _inventory(tmp_path, pyindex)
    (inventory / "group_vars" / "all" / "venv.yml").write_text(yaml.safe_dump({"spark_venv_matrix_file": str(renewed)}))
    written = inventory / "group_vars" / "all" / "spark_venv_lock.yml"
    ours = sorted(p.name for p in (REPO / "matrix").iterdir())
    checked = _lock_run(pyindex, None, "--check", inventory=inventory)
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert not written.exists(), "check mode wrote the lock"
    first = _lock_run(pyindex, None, inventory=inventory)
    assert first.returncode == 0, first.stdout[-3000:]
    assert f"The hash lock of {matrix['name']} is changed in {written}" in first.stdout
    assert sorted(p.name for p in (REPO / "matrix").iterdir()) == ours, "the lock went into sparkfleet's matrix/"
    lock = inert_load(written.read_text())["spark_venv_lock"]
    assert lock["matrix"] == matrix["name"]
    taken = run_module("spark_venv", {"matrix": matrix, "lock": lock, "root": str(tmp_path / "venvs"),
                                      "link": str(tmp_path / "venv"), "python": sys.executable,
                                      "index_mirrors": pyindex.overrides}, "--check")
    assert not taken["failed"] and taken["changed"] is True, taken.get("msg")
    assert sorted(lock["steps"]) == ["stack", "torch", "torchao", "unsloth", "unsloth_deps", "uv"]
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in pyindex.root.rglob("*.whl")}
    for entries in lock["steps"].values():
        for entry in entries:
            assert files[entry["wheel"]] == entry["sha256"], entry
    assert {e["name"] for e in lock["steps"]["stack"]} >= {"transformers", "peft", "trl", "torch"}
    again = _lock_run(pyindex, None, inventory=inventory)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-2000:]
    assert f"is unchanged in {written}" in again.stdout


def test_a_matrix_file_the_inventory_names_that_is_not_there_is_refused_before_any_index_is_asked(pyindex,
                                                                                                   tmp_path):
    """A spark_venv_matrix_file mistyped in group_vars/all: the check says which setting names which path, before
    any index is asked, and writes no lock (it failed inside the advisories' argument check, naming no setting)."""
    inventory = _inventory(tmp_path, pyindex)
    missing = tmp_path / "matrix" / "spark-stack-2026-12-01.yml"
    (inventory / "group_vars" / "all" / "venv.yml").write_text(yaml.safe_dump({"spark_venv_matrix_file": str(missing)}))
    before = len(pyindex.requests)
    proc = _lock_run(pyindex, None, inventory=inventory)
    said = " ".join(proc.stdout.split())
    assert proc.returncode == 2, said[-2000:]
    assert (f"The stack matrix {missing} does not exist on this machine; it is the inventory's "
            "spark_venv_matrix_file (group_vars/all)") in said, said[-2000:]
    assert len(pyindex.requests) == before, "no index was asked"
    assert not (inventory / "group_vars" / "all" / "spark_venv_lock.yml").exists()


def test_no_lock_is_written_when_a_step_does_not_resolve_and_the_old_one_stays(pyindex, tmp_path):
    matrix = copy.deepcopy(MATRIX)
    matrix["steps"][3]["packages"] = ["torchao==0.99.0"]
    candidate = tmp_path / "spark-stack.yml"
    candidate.write_text(yaml.safe_dump(matrix))
    inventory = _inventory(tmp_path, pyindex)
    written = inventory / "group_vars" / "all" / "spark_venv_lock.yml"
    written.write_text("# the reviewed lock\n")
    proc = _lock_run(pyindex, candidate, inventory=inventory)
    assert proc.returncode == 2
    assert written.read_text() == "# the reviewed lock\n"


@pytest.mark.network
def test_the_shipped_matrix_on_real_pypi_lists_its_closure_accepted_deviations_and_the_trl_datasets_pair(
        shipped_on_pypi):
    """Issue 48's done-when: the shipped matrix asked of pypi.org (the cu130 torch index skipped: this machine
    cannot reach it) - the stack step does not resolve (trl 1.8.0 asks for datasets>=4.7.0), and the closure,
    from each pin's own metadata there, names Unsloth's transformers and trl ranges as accepted deviations and
    trl's datasets as the one the matrix does not accept."""
    result = shipped_on_pypi
    steps = {s["step"]: s for s in result["sequence"]}
    assert steps["stack"]["status"] == "conflict", steps["stack"]
    judged = run_module("spark_matrix_check", {"matrix": MATRIX, "closure_of": result["sequence"]})
    lines = judged["closure_lines"]
    assert any(line.startswith("ACCEPTED unsloth 2026.7.2 declares transformers<=5.5.0") for line in lines), lines
    assert any(line.startswith("ACCEPTED unsloth_zoo 2026.7.2 declares trl<=0.24.0") for line in lines), lines
    assert [f["text"] for f in judged["closure"]["unaccepted"]] == [
        "trl 1.8.0 declares datasets>=4.7.0; step stack installs datasets 4.3.0"], lines
    # What Unsloth's --no-deps step leaves out is installed by the held step; what is still said missing is what
    # the stack step would bring, were it to resolve (accelerate, numpy, ...).
    missing = [line for line in lines if line.startswith("MISSING unsloth")]
    assert missing and not any(name in line.split(": ", 1)[1].replace(",", " ").split() for line in missing
                               for name in ("tyro", "torchvision", "diffusers", "msgspec", "sentencepiece")), missing
    assert steps["unsloth_deps"]["status"] == "unjudged", "what it would find installed is not known"


@pytest.mark.network
def test_on_real_pypi_with_a_stack_that_resolves_nothing_unsloth_declares_is_missing():
    """Issue 48, against pypi.org's real metadata: with datasets raised to 4.7.0 (so trl 1.8.0's stack step
    resolves), every step resolves, the held step with every pin and everything the earlier steps installed as
    constraints, and the closure has no MISSING line at all: what unsloth and unsloth_zoo 2026.7.2 declare is
    installed. What remains is the price of that datasets: Unsloth's datasets<4.4.0, not accepted."""
    matrix = copy.deepcopy(MATRIX)
    matrix["steps"][1]["packages"][3] = "datasets==4.7.0"
    result = run_module("spark_matrix_check", {"matrix": matrix, "skip_steps": ["torch"], "timeout": 60})
    assert [s["status"] for s in result["sequence"]] == ["skipped"] + ["resolves"] * 5, result["table"]
    held = {s["step"]: s for s in result["sequence"]}["unsloth_deps"]
    installed_by_stack = set(result["sequence"][1]["installs"])
    assert {c for c in held["constraints"] if c.startswith("huggingface")} <= installed_by_stack
    # The closure of a set this large, judged here (its metadata would not fit a module's command line).
    judged = closure.judge(closure_steps(matrix, result["sequence"]), matrix["target"], matrix.get("accepted"))
    assert not [line for line in judged["lines"] if line.startswith("MISSING")], judged["lines"]
    assert sorted(f["text"].split(" (of")[0] for f in judged["unaccepted"]) == [
        "unsloth 2026.7.2 declares datasets<4.4.0", "unsloth_zoo 2026.7.2 declares datasets<4.4.0"]
    # Asked alone (the playbook asks step by step, for its progress), the held step asks the steps before it again
    # and holds what they installed: the same answer, not PyPI's newest huggingface_hub 2.x (which transformers
    # 5.13.1 and datasets refuse).
    alone = run_module("spark_matrix_check", {"matrix": matrix, "skip_steps": ["torch"], "timeout": 60,
                                              "step": "unsloth_deps"})
    assert [s["step"] for s in alone["sequence"]] == ["unsloth_deps"]
    assert alone["sequence"][0]["installs"] == held["installs"]
    assert not any(i.startswith("huggingface-hub==2.") for i in held["installs"]), held["installs"]
