"""The stack matrix's rules, pure: validation, fingerprint, staleness, extras policy, the pip commands."""

from __future__ import annotations

import copy
import datetime

import pytest
import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._hash_lock import (
    hashed_requirements,
    lock_from_sequence,
    validate_lock,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._indexes import index_env, uv_env
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._pip_commands import (
    display,
    pip_steps,
    platform_tags,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._secrets import (
    matrix_secrets,
    redact_url,
    url_secrets,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import (
    MatrixError,
    check,
    fingerprint,
    normalize,
    parse_pin,
    pins,
    plan_extras,
    proof,
    staleness,
    validate,
)

from conftest import REPO

MATRIX = yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text())


def test_the_shipped_matrix_is_valid_and_holds_the_users_sequence_verbatim():
    assert validate(MATRIX) == []
    steps = [(s["id"], s.get("args", []), s["packages"]) for s in MATRIX["steps"]]
    assert steps[:4] == [
        ("torch", [], ["torch==2.10.0", "torchvision==0.25.0"]),
        ("stack", [], ["transformers==5.13.1", "peft==0.19.1", "hf_transfer==0.1.9", "datasets==4.3.0",
                       "trl==1.8.0"]),
        ("unsloth", ["--no-deps"], ["unsloth==2026.7.2", "unsloth_zoo==2026.7.2", "bitsandbytes==0.49.2"]),
        ("torchao", ["-U"], ["torchao==0.17.0"]),
    ]
    # Then what Unsloth declares and --no-deps left out, every pin held; the installer last.
    assert steps[4][:2] == ("unsloth_deps", []) and MATRIX["steps"][4]["hold"] is True
    assert {normalize(p.split("==")[0]) for p in steps[4][2]} == {
        "triton", "cut-cross-entropy", "diffusers", "msgspec", "nest-asyncio", "pillow", "protobuf", "sentencepiece",
        "tyro", "wheel"}
    assert steps[5] == ("uv", ["--no-deps"], ["uv==0.13.9"])
    assert [s.get("installer", False) for s in MATRIX["steps"]] == [False] * 5 + [True]
    assert MATRIX["steps"][0]["index_url"] == "https://download.pytorch.org/whl/cu130"
    assert str(MATRIX["last_verified"]) == "2026-07-14"
    assert MATRIX["environment"] == {"TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas", "HF_XET_HIGH_PERFORMANCE": "1",
                                     "UNSLOTH_DISABLE_CPU_FALLBACK": "1"}


def test_pins_are_by_normalized_name():
    assert pins(MATRIX)["unsloth-zoo"] == "unsloth_zoo==2026.7.2"
    assert normalize("Unsloth_Zoo") == normalize("unsloth.zoo") == "unsloth-zoo"


@pytest.mark.parametrize(("change", "error"), [
    (lambda m: m.update(schema=2), "schema is 2; this sparkfleet reads schema 1"),
    (lambda m: m.update(last_verified="2026-13-40"), "last_verified is '2026-13-40': month must be in 1..12"),
    (lambda m: m["steps"][1]["packages"].append("peft==0.20.0"), "peft is already pinned in step stack"),
    (lambda m: m["steps"][0].update(index_url="ftp://x"), "step 1 (torch): index_url is 'ftp://x'"),
    (lambda m: m["steps"][3].update(id="stack"), "step 4 (stack): the id is used twice"),
    (lambda m: m["components"]["vllm"].pop("index_url"), "components.vllm: policy index needs an index_url"),
    (lambda m: m["components"]["xformers"].update(policy="maybe"), "components.xformers: policy is 'maybe'"),
    (lambda m: m.update(environment={"lower": "x"}), "environment is {'lower': 'x'}"),
    (lambda m: m.update(steps=[]), "steps is missing or empty"),
    (lambda m: m["steps"].insert(0, m["steps"].pop()), "step 1 (uv): the installer step must be the last"),
    (lambda m: m["steps"][-1].update(packages=["pip==25.3"]), "pins pip==25.3; expected one pin of uv"),
    (lambda m: m["steps"][-1].update(installer="yes"), "step 6 (uv): installer is 'yes'; expected true"),
    (lambda m: m["steps"][4].update(hold="yes"), "step 5 (unsloth_deps): hold is 'yes'; expected true"),
    (lambda m: m["steps"][4].update(args=["--no-deps"]), "step 5 (unsloth_deps): hold and --no-deps together"),
    (lambda m: m["steps"][4]["packages"].append("flash-attn==2.8.3"),
     "step unsloth_deps: flash-attn is policy refuse in components (skip the pip build on Spark"),
])
def test_validation_names_what_is_wrong(change, error):
    matrix = copy.deepcopy(MATRIX)
    change(matrix)
    assert any(error in e for e in validate(matrix)), validate(matrix)


def test_staleness_is_measured_from_last_verified():
    fresh = staleness(MATRIX, datetime.date(2026, 8, 1), 90)
    assert (fresh["age_days"], fresh["stale"], fresh["message"]) == (18, False, "")
    old = staleness(MATRIX, datetime.date(2026, 11, 30), 90)
    assert (old["age_days"], old["stale"]) == (139, True)
    assert ("last verified on 2026-07-14 (dated, not proved by sparkfleet), 139 days ago (older than 90): renew it "
            "with `sparkfleet matrix propose -i INVENTORY --canary HOST`") in old["message"]
    assert "never updates a pin by itself" in old["message"]
    assert staleness(MATRIX, datetime.date(2026, 10, 12), 90)["stale"] is False  # day 90 is still fresh


EVIDENCE = {"proved_on": "2026-12-04", "sparkfleet": "0.4.0", "proposed_from": "unsloth-2026.7.2",
            "canary": {"host_class": "spark", "simulated": False, "arch": "aarch64", "gpu": "NVIDIA GB10"},
            "gpu_verified": True, "smoke": {"device": "cuda", "verdict": "ok"}, "lock_fingerprint": "ab" * 32}


def test_a_matrix_says_whether_sparkfleet_proved_it_and_on_what():
    """Issue 38: a date alone says little. The staleness and the matrix check say who proved the set, on what."""
    assert proof(MATRIX) == "dated, not proved by sparkfleet"
    proved = {**copy.deepcopy(MATRIX), "evidence": EVIDENCE}
    assert proof(proved) == "proved by sparkfleet 0.4.0 on 2026-12-04 on NVIDIA GB10 (GPU verified)"
    cpu = {**proved, "evidence": {**EVIDENCE, "gpu_verified": False, "smoke": {"device": "cpu", "verdict": "ok"},
                                  "canary": {"host_class": "not-spark", "simulated": False, "arch": "x86_64",
                                             "gpu": None}}}
    assert proof(cpu) == ("proved by sparkfleet 0.4.0 on 2026-12-04 on a host (x86_64) without a GPU (not GPU "
                          "verified: the smoke step ran on the cpu)")
    assert "(proved by sparkfleet 0.4.0 on 2026-12-04" in staleness(proved, datetime.date(2027, 6, 1), 90)["message"]
    assert validate(proved) == []
    broken = {**proved, "evidence": {**EVIDENCE, "gpu_verified": "yes", "proved_on": "last week"}}
    assert validate(broken) == ["evidence.gpu_verified is not true or false",
                                "evidence.proved_on is 'last week'; expected YYYY-MM-DD"]
    assert proof(broken) == "dated, not proved by sparkfleet"


def test_fingerprint_follows_what_is_built_not_the_notes():
    base = fingerprint(MATRIX, [])
    noted = copy.deepcopy(MATRIX)
    noted["steps"][0]["why"] = "reworded"
    noted["last_verified"] = "2026-08-01"
    noted["components"]["flash-attn"]["note"] = "other words"
    assert fingerprint(noted, []) == base
    for change in (lambda m: m["steps"][1]["packages"].__setitem__(4, "trl==1.9.0"),
                   lambda m: m["steps"][2].update(args=[]),
                   lambda m: m["environment"].update(TRITON_PTXAS_PATH="/opt/ptxas"),
                   lambda m: m["target"].update(python="3.13")):
        other = copy.deepcopy(MATRIX)
        change(other)
        assert fingerprint(other, []) != base
    assert fingerprint(MATRIX, plan_extras(MATRIX, ["xformers"])) != base


def test_extras_policy():
    plan = {e["name"]: e for e in plan_extras(MATRIX, ["xformers", "vllm>=0.11", "einops", "nemo_toolkit"])}
    assert plan["xformers"]["env"] == {"TORCH_CUDA_ARCH_LIST": "12.1"}
    assert plan["xformers"]["args"] == ["--no-binary", "xformers", "--no-build-isolation"]
    assert plan["vllm"]["index_url"] == "https://wheels.vllm.ai/nightly"
    assert plan["einops"]["policy"] == "install" and "not in the matrix's component table" in plan["einops"]["says"]
    assert plan["nemo-toolkit"]["policy"] == "warn"
    with pytest.raises(MatrixError, match=r"flash_attn==2.8: refused on Spark: skip the pip build"):
        plan_extras(MATRIX, ["flash_attn==2.8"])
    with pytest.raises(MatrixError, match=r"Peft: already pinned by the matrix \(peft==0.19.1\)"):
        plan_extras(MATRIX, ["Peft"])
    with pytest.raises(MatrixError, match="is not a package requirement"):
        plan_extras(MATRIX, ["  "])


def test_pip_steps_use_the_overrides_hold_the_pins_and_read_as_typed():
    overrides = {"https://pypi.org/simple/": "https://mirror.example/pypi",
                 "https://download.pytorch.org/whl/cu130": "http://127.0.0.1:5090/cu130"}
    steps = pip_steps(MATRIX, plan_extras(MATRIX, ["xformers"]), overrides, "/v/constraints.txt")
    assert [s["id"] for s in steps] == ["torch", "stack", "unsloth", "torchao", "unsloth_deps", "uv",
                                        "extra:xformers"]
    assert steps[0]["args"] == ["torch==2.10.0", "torchvision==0.25.0"]
    # The held step resolves its packages' dependencies with every pin of the matrix a constraint.
    assert steps[4]["args"][:2] == ["--constraint", "/v/constraints.txt"] and "tyro==1.0.17" in steps[4]["args"]
    assert "--no-deps" not in steps[4]["args"]
    assert index_env(steps[0]["indexes"]) == {"PIP_INDEX_URL": "http://127.0.0.1:5090/cu130",
                                              "PIP_TRUSTED_HOST": "127.0.0.1"}
    assert uv_env(steps[0]["indexes"]) == {"UV_DEFAULT_INDEX": "http://127.0.0.1:5090/cu130",
                                           "UV_INDEX_STRATEGY": "unsafe-best-match", "UV_INSECURE_HOST": "127.0.0.1"}
    assert uv_env([*steps[1]["indexes"][:1], "http://127.0.0.1:5090/cu130"])["UV_INDEX"] == \
        "http://127.0.0.1:5090/cu130"
    assert steps[3]["args"] == ["-U", "torchao==0.17.0"] and steps[3]["indexes"] == ["https://mirror.example/pypi"]
    assert "--constraint" in steps[6]["args"] and "/v/constraints.txt" in steps[6]["args"]
    # uv runs the venv's steps and the extras; pip installs uv itself, beside the venvs.
    assert [(s["tool"], s["installer"]) for s in steps] == [("uv", False)] * 5 + [("pip", True), ("uv", False)]
    assert display(steps[2]) == ('uv pip install --index-url https://mirror.example/pypi --no-deps '
                                 '"unsloth==2026.7.2" "unsloth_zoo==2026.7.2" "bitsandbytes==0.49.2"')
    assert display(steps[5]) == 'pip install --index-url https://mirror.example/pypi --no-deps "uv==0.13.9"'
    assert display(steps[6]).startswith("TORCH_CUDA_ARCH_LIST=12.1 uv pip install ")
    without = {**MATRIX, "steps": MATRIX["steps"][:-1]}
    assert {s["tool"] for s in pip_steps(without, [], {}, "/v/c.txt")} == {"pip"}, "no installer step: pip"


def test_an_index_token_reaches_pip_only_through_its_environment_and_is_masked_where_shown():
    token = "planted-index-token-5d1e"
    overrides = {"https://download.pytorch.org/whl/cu130": f"http://ci:{token}@127.0.0.1:5090/cu130",
                 "https://pypi.org/simple/": f"https://{token}@mirror.example/pypi"}
    steps = pip_steps(MATRIX, plan_extras(MATRIX, ["xformers"]), overrides, "/v/constraints.txt")
    assert not any(token in a for s in steps for a in s["args"]), "no token in pip's argv"
    assert index_env(steps[0]["indexes"]) == {"PIP_INDEX_URL": f"http://ci:{token}@127.0.0.1:5090/cu130",
                                              "PIP_TRUSTED_HOST": "127.0.0.1"}, "the host, not 'ci:TOKEN@127.0.0.1'"
    shown = [display(s) for s in steps]
    assert not any(token in line for line in shown), shown
    assert shown[0] == "uv pip install --index-url http://ci:***@127.0.0.1:5090/cu130 \"torch==2.10.0\" \"torchvision==0.25.0\""
    assert "--index-url https://***@mirror.example/pypi" in shown[2]
    assert redact_url("https://pypi.org/simple/") == "https://pypi.org/simple/"


def test_an_extra_from_its_own_index_never_shares_a_pip_command_with_the_matrixs_index():
    steps = pip_steps(MATRIX, plan_extras(MATRIX, ["vllm"]), {}, "/v/constraints.txt")
    own, deps = steps[-2:]
    assert (own["id"], own["indexes"]) == ("extra:vllm", ["https://wheels.vllm.ai/nightly"])
    assert own["args"][0] == "--no-deps" and own["args"][-1] == "vllm"
    assert (deps["id"], deps["indexes"]) == ("extra:vllm:dependencies", [MATRIX["steps"][-1]["index_url"].rstrip("/")])
    assert all(len(s["indexes"]) == 1 for s in steps), "no step asks two indexes at once"
    assert "--extra-index-url" not in " ".join(display(s) for s in steps)


def test_platform_tags_cover_every_glibc_up_to_the_target():
    tags = platform_tags({"arch": "aarch64", "glibc": "2.39", "python": "3.12"})
    assert tags[0] == "manylinux_2_39_aarch64" and "manylinux_2_24_aarch64" in tags  # bitsandbytes' tag
    assert tags[-2:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]


def test_the_credentials_of_index_urls_are_what_a_module_masks():
    assert url_secrets(["https://ci:t0k%2Fen@mirror.example/simple", "https://only-token@m2.example/",
                        "https://pypi.org/simple", None]) == {"ci:t0k%2Fen", "t0k%2Fen", "t0k/en", "only-token"}
    matrix = {"steps": [{"index_url": "https://a:s1@x.example/"}, "not a step"],
              "components": {"vllm": {"index_url": "https://b:s2@y.example/"}}}
    assert matrix_secrets(matrix, {"https://pypi.org/simple": "http://c:s3@127.0.0.1/pypi"}) == {
        "a:s1", "s1", "b:s2", "s2", "c:s3", "s3"}
    assert matrix_secrets("not a matrix", None) == set(), "bad input is refused by the module, not here"


def _sequence(matrix: dict, **changes) -> list[dict]:
    """A matrix check's sequence for `matrix` that resolves every step to its pins (sha256 of their names)."""
    import hashlib

    steps = []
    for step in matrix["steps"]:
        locked = [{"name": parse_pin(spec)[0], "version": parse_pin(spec)[1],
                   "sha256": hashlib.sha256(spec.encode()).hexdigest(), "wheel": f"{parse_pin(spec)[0]}.whl"}
                  for spec in step["packages"]]
        steps.append({"step": step["id"], "status": "resolves", "locked": locked, **changes.get(step["id"], {})})
    return steps


def test_the_lock_holds_each_steps_resolved_set_with_its_hashes_and_the_matrixs_fingerprint():
    matrix = copy.deepcopy(MATRIX)
    lock = lock_from_sequence(matrix, _sequence(matrix))
    assert lock["matrix"] == matrix["name"] and lock["fingerprint"] == fingerprint(check(matrix), [])
    assert list(lock["steps"]) == [s["id"] for s in matrix["steps"]]
    assert lock["steps"]["torch"][0]["name"] == "torch" and len(lock["steps"]["torch"][0]["sha256"]) == 64
    assert validate_lock(lock, matrix) == []
    torch, torchvision = lock["steps"]["torch"]
    assert hashed_requirements(lock["steps"]["torch"]) == (
        f"torch==2.10.0 --hash=sha256:{torch['sha256']}\ntorchvision==0.25.0 --hash=sha256:{torchvision['sha256']}\n")


def test_no_lock_from_a_step_that_did_not_resolve_or_a_wheel_without_a_hash():
    matrix = copy.deepcopy(MATRIX)
    with pytest.raises(MatrixError, match=r"step unsloth: conflict \(Cannot install unsloth\)"):
        lock_from_sequence(matrix, _sequence(matrix, unsloth={"status": "conflict",
                                                              "detail": "Cannot install unsloth"}))
    broken = _sequence(matrix)
    broken[1]["locked"][0]["sha256"] = None
    with pytest.raises(MatrixError, match=r"step stack: the index gave no sha256 for transformers==5.13.1"):
        lock_from_sequence(matrix, broken)
    with pytest.raises(MatrixError, match="step torchao: skipped"):
        lock_from_sequence(matrix, _sequence(matrix, torchao={"status": "skipped"}))


@pytest.mark.parametrize(("change", "error"), [
    (lambda lock: lock.update(fingerprint="0" * 64), "the lock was written for another matrix"),
    (lambda lock: lock["steps"].pop("torchao"), "the lock's steps are"),
    (lambda lock: lock["steps"]["torch"][0].update(version="2.9.1"),
     "the lock does not hold the matrix's pins: torch 2.10.0 (locked 2.9.1)"),
    (lambda lock: lock["steps"]["torch"][0].update(sha256="$(touch /tmp/PWNED)"), "is not name, version and a sha256"),
    (lambda lock: lock["steps"]["torch"][0].update(name="torch\n--index-url http://evil"),
     "is not name, version and a sha256"),
    (lambda lock: lock["steps"]["stack"][0].update(version="5.13.1 --hash=sha256:" + "0" * 64),
     "is not name, version and a sha256"),
    (lambda lock: lock.update(lock_version=2), "lock_version is 2, expected 1"),
])
def test_a_lock_that_does_not_fit_the_matrix_or_carries_a_bad_value_is_refused(change, error):
    matrix = copy.deepcopy(MATRIX)
    lock = lock_from_sequence(matrix, _sequence(matrix))
    change(lock)
    assert any(error in e for e in validate_lock(lock, matrix)), validate_lock(lock, matrix)


def test_a_locked_local_version_holds_a_pin_without_one_and_the_lock_changes_the_fingerprint():
    matrix = copy.deepcopy(MATRIX)
    lock = lock_from_sequence(matrix, _sequence(matrix))
    lock["steps"]["torch"][0]["version"] = "2.10.0+cu130"  # what the cu130 index's wheel says
    assert validate_lock(lock, matrix) == []
    assert fingerprint(check(matrix), [], lock) != fingerprint(check(matrix), [])


def test_hashed_steps_install_the_locked_set_from_the_indexes_the_check_resolved_against():
    matrix = copy.deepcopy(MATRIX)
    lock = lock_from_sequence(matrix, _sequence(matrix))
    steps = pip_steps(check(matrix), [], {}, "/v/constraints.txt", lock, "/v")
    assert steps[0]["args"] == ["--require-hashes", "--no-deps", "-r", "/v/hashes-torch.txt"]
    assert steps[0]["indexes"] == ["https://download.pytorch.org/whl/cu130"]
    assert steps[1]["indexes"] == ["https://pypi.org/simple", "https://download.pytorch.org/whl/cu130"]


def test_a_lock_of_compiled_wheels_for_another_python_is_named_and_pure_wheels_are_not():
    """Issue 45, item 9: the lab's hosts (Python 3.11) warned that the matrix was verified for 3.12 while the hash
    lock, resolved for cp312, held only pure wheels - which install there. A lock with compiled cp312 wheels
    cannot be installed by 3.11's pip: spark_venv refuses it before building, naming the wheels."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._hash_lock import lock_python_mismatch

    pure = {"steps": {"stack": [{"wheel": "trl-1.8.0-py3-none-any.whl"}, {"wheel": "peft-0.19.1-py3-none-any.whl"}]}}
    assert lock_python_mismatch(pure, "3.11") == ([], 2)
    compiled = {"steps": {"torch": [{"wheel": "torch-2.11.0+cu130-cp312-cp312-manylinux_2_28_aarch64.whl"}],
                          "stack": [{"wheel": "hf_transfer-0.1.9-cp38-abi3-manylinux_2_17_aarch64.whl"},
                                    {"wheel": "trl-1.8.0-py3-none-any.whl"}]}}
    # the stable ABI (cp38-abi3) installs on 3.8 and later: only torch's cp312 wheel is refused
    assert lock_python_mismatch(compiled, "3.11") == (["torch-2.11.0+cu130-cp312-cp312-manylinux_2_28_aarch64.whl"], 3)
    assert lock_python_mismatch(compiled, "3.12") == ([], 3)
    assert lock_python_mismatch(compiled, "3.7") == (["torch-2.11.0+cu130-cp312-cp312-manylinux_2_28_aarch64.whl",
                                                      "hf_transfer-0.1.9-cp38-abi3-manylinux_2_17_aarch64.whl"], 3)
    assert lock_python_mismatch(None, "3.11") == ([], 0)
