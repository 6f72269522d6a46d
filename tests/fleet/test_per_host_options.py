"""Every option the roles' argument specs declare is set per host in the fleet's test (tests/fleet/host_vars, so
that the fleet provisions hosts that differ in it), or is named here with the reason it is not and where it is
proved per host instead (issue 35). A new option fails this test until it is placed."""

from __future__ import annotations

from pathlib import Path

import yaml

from conftest import REPO

HOST_VARS = Path(__file__).parent / "host_vars"
FIXTURE_SET = {"spark_container_runtime_gpg_key_fingerprint", "spark_advisories_file"}  # own_settings(): this
# machine's key and a file of its own, written by test_fleet.py's fixture for sparkfleet-fleet-3

NOT_VARIED = {
    "spark_preflight_simulated": "true on every lab host: its GPU is a stand-in, and a host that said otherwise "
                                 "would be reported verified",
    "spark_verify_can_run_containers": "false on every lab host: qemu-user cannot start their containers",
    "spark_verify_expected_cuda_major": "the stand-in driver reports CUDA 13; another value is a failed "
                                        "verification (tests/modules/test_spark_gpu_verify.py)",
    "spark_verify_images": "worked out per host from what it pulled (spark_images_pinned)",
    "spark_verify_launchers": "worked out per host from what it pulled (spark_images_pinned)",
    "spark_verify_pythons": "worked out per host from its venv (spark_venv_active)",
    "spark_verify_smoke": "needs a venv: tests/integration/test_spark_smoke_train.py and the venv lab",
    "spark_verify_fleet_record_dir": "the controller's record of the inventory, one folder for the fleet",
    "spark_images_lock_file": "the fleet's one lock, written on the controller by pin",
    "spark_images_registry_replacements": "where the fleet's images live, recorded in the one lock; a host's own "
                                       "way to them is spark_images_mirrors (varied on host 3)",
    "spark_images_registry_credentials": "given with -e in the fleet's runs (extra vars outrank host_vars); a "
                                         "vaulted one in test_fleet.py test 7",
    "spark_images_plain_http": "the controller's resolution of the fleet's tags (once per fleet)",
    "spark_images_platform": "every lab host is aarch64; an amd64 host: tests/integration/test_platform_boundary.py",
    "spark_images_derived": "an emulated build takes minutes: tests/integration/test_spark_image_build.py",
    "spark_images_build_dir": "only with spark_images_derived (test_spark_image_build.py)",
    "spark_images_build_network": "only with spark_images_derived (test_spark_image_build.py)",
    "spark_images_derived_read_base": "only with spark_images_derived (test_spark_image_build.py)",
    "spark_container_runtime_install_docker": "the lab hosts have Docker; installing it would replace their own",
    "spark_container_runtime_daemon_json": "where the host's dockerd reads its configuration: the default on the lab",
    "spark_clusters": "the fleet is no cluster: tests/cluster/test_cluster_lab.py (two nodes of their own)",
    "spark_cluster_packages": "read only on a cluster's nodes (tests/cluster)",
    "spark_cluster_rollback_seconds": "read only on a cluster's nodes (tests/cluster)",
    "spark_cluster_key_type": "read only on a cluster's nodes (tests/cluster)",
    "spark_advisories_images": "set by the role that includes spark_advisories",
    "spark_advisories_packages": "set by the role that includes spark_advisories",
    "spark_advisories_playbooks": "set by the role that includes spark_advisories",
}
VENV = ("the lab fleet builds no venv (an emulated build takes minutes): tests/integration/test_spark_venv.py builds "
        "on three hosts driven locally, each with its own root and link, the third with its own wheelhouse, keep, age "
        "limit and strictness, pip environment, verify timeout and policy; tests/integration/test_per_host_settings.py "
        "judges require_hashes, the lock file, mirrors and the matrix file per host")


def options() -> set[str]:
    return {name for path in (REPO / "roles").glob("*/meta/argument_specs.yml")
            for entry in yaml.safe_load(path.read_text())["argument_specs"].values()
            for name in (entry.get("options") or {})}


def varied() -> set[str]:
    return FIXTURE_SET | {name for path in HOST_VARS.glob("*.yml") for name in yaml.safe_load(path.read_text())}


def test_every_role_option_differs_between_the_fleets_hosts_or_says_why_not():
    declared = options()
    placed = varied() | set(NOT_VARIED) | {o for o in declared if o.startswith("spark_venv_")}  # VENV says where
    assert sorted(declared - placed) == [], "set it in tests/fleet/host_vars, or say in NOT_VARIED why not"
    assert sorted((varied() | set(NOT_VARIED)) - declared) == [], "no longer an option of any role"
    assert not varied() & set(NOT_VARIED)


def test_the_fleets_host_settings_are_valid_for_the_roles():
    """A value the role's argument spec would refuse proves nothing about per-host handling."""
    specs = {name: spec for path in (REPO / "roles").glob("*/meta/argument_specs.yml")
             for entry in yaml.safe_load(path.read_text())["argument_specs"].values()
             for name, spec in (entry.get("options") or {}).items()}
    kinds = {"bool": bool, "int": int, "float": (int, float), "str": str, "path": str, "list": list, "dict": dict}
    for path in HOST_VARS.glob("*.yml"):
        for name, value in yaml.safe_load(path.read_text()).items():
            expected = kinds[specs[name]["type"]]
            fits = isinstance(value, bool) if expected is bool else (
                isinstance(value, expected) and not isinstance(value, bool))
            assert fits, (path, name, value)
            assert "choices" not in specs[name] or value in specs[name]["choices"], (path, name, value)
