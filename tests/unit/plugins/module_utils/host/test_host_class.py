"""The parsers and the classification behind spark_preflight, on recorded outputs."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._host_class import (
    CLASS_AARCH64_OTHER,
    CLASS_NOT_SPARK,
    CLASS_SPARK,
    HEALTH_FIELDS,
    classify,
    parse_cuda_banner,
    parse_dgx_release,
    parse_gpu_query,
    parse_health,
    parse_meminfo,
    parse_os_release,
)

from conftest import DOUBLES, NVSMI

GB10_QUERY = (NVSMI / "recordings" / "gb10" / "query.csv").read_text()
GB10_BANNER = (NVSMI / "recordings" / "gb10" / "banner.txt").read_text()
H200_QUERY = (NVSMI / "recordings" / "h200" / "query.csv").read_text()
H200_BANNER = (NVSMI / "recordings" / "h200" / "banner.txt").read_text()
DRIVER_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


def test_gb10_recording_parses_to_one_spark_gpu():
    gpus, problems = parse_gpu_query(GB10_QUERY)
    assert gpus == [{"index": 0, "name": "NVIDIA GB10", "compute_cap": "12.1",
                     "driver_version": "580.95.05"}]
    assert problems == []
    assert parse_cuda_banner(GB10_BANNER) == "13.0"


def test_h200_recording_parses():
    gpus, _errors = parse_gpu_query(H200_QUERY)
    assert [(g["name"], g["compute_cap"]) for g in gpus] == [("NVIDIA H200", "9.0")]
    assert parse_cuda_banner(H200_BANNER) == "13.0"


@pytest.mark.parametrize("field", ["[N/A]", "[Not Supported]", "N/A", " [n/a] "])
def test_unavailable_fields_become_none(field):
    gpus, problems = parse_gpu_query(f"NVIDIA GB10, {field}, {field}\n")
    assert problems == []
    assert gpus[0]["compute_cap"] is None
    assert gpus[0]["driver_version"] is None


def test_several_gpus_and_a_comma_in_the_name():
    gpus, _errors = parse_gpu_query("NVIDIA H200, 9.0, 580.82.07\nNVIDIA A, B, 8.0, 580.82.07\n")
    assert [g["name"] for g in gpus] == ["NVIDIA H200", "NVIDIA A, B"]
    assert [g["index"] for g in gpus] == [0, 1]


@pytest.mark.parametrize("garbage", [
    DRIVER_FAILED,
    "garbage\n",
    "NVIDIA GB10, twelve, 580\n",
    "\x00\x01binary",
])
def test_garbage_is_reported_not_guessed(garbage):
    gpus, problems = parse_gpu_query(garbage)
    assert gpus == []
    assert problems and all(p.startswith("line ") for p in problems)


@pytest.mark.parametrize("text", ["", DRIVER_FAILED, "CUDA Version: N/A", "garbage"])
def test_banner_without_cuda_version(text):
    assert parse_cuda_banner(text) is None


def _gpus(query: str) -> list[dict]:
    return parse_gpu_query(query)[0]


def test_a_gb10_on_aarch64_with_cuda_13_is_a_spark():
    assert classify("aarch64", _gpus(GB10_QUERY), "13.0") == (CLASS_SPARK, [])


def test_gb10_without_a_capability_is_recognised_by_name():
    assert classify("aarch64", _gpus("NVIDIA GB10, [N/A], 580.95.05"), "13.0")[0] == CLASS_SPARK


def test_an_h200_box_is_not_a_spark_and_says_why():
    host_class, reasons = classify("x86_64", _gpus(H200_QUERY), "13.0")
    assert host_class == CLASS_NOT_SPARK
    assert reasons == [
        "architecture is x86_64, a DGX Spark is aarch64",
        "GPU is NVIDIA H200 (compute capability 9.0), a DGX Spark has an NVIDIA GB10 "
        "(compute capability 12.1)",
    ]


def test_an_aarch64_host_without_a_gpu_is_aarch64_other():
    host_class, reasons = classify("aarch64", [], None)
    assert host_class == CLASS_AARCH64_OTHER
    assert reasons == ["no NVIDIA GPU reported by nvidia-smi, a DGX Spark has one GB10"]


@pytest.mark.parametrize("cuda", ["12.8", None])
def test_a_gb10_whose_driver_is_not_cuda_13_is_refused(cuda):
    host_class, reasons = classify("aarch64", _gpus(GB10_QUERY), cuda)
    assert host_class == CLASS_AARCH64_OTHER
    assert "a DGX Spark's driver supports CUDA 13" in reasons[0]
    assert (cuda or "no CUDA version") in reasons[0]


def test_a_gb10_capability_that_is_not_12_1_is_not_a_spark():
    host_class, _reasons = classify("aarch64", _gpus("NVIDIA GB10, 12.0, 580.95.05"), "13.0")
    assert host_class == CLASS_AARCH64_OTHER


def test_dgx_release_recording():
    dgx = parse_dgx_release((DOUBLES / "dgx-release").read_text())
    assert (dgx["name"], dgx["swbuild_version"], dgx["ota_version"]) == ("DGX Spark", "7.4.0", "7.4.0")


def test_dgx_release_tolerates_comments_and_junk():
    dgx = parse_dgx_release("# comment\n\nDGX_NAME='DGX Spark'\nnot a line\n=x\nDGX_SWBUILD_VERSION=7.2.3\n")
    assert (dgx["name"], dgx["swbuild_version"], dgx["ota_version"]) == ("DGX Spark", "7.2.3", None)


@pytest.mark.parametrize(("text", "expected"), [
    ('PRETTY_NAME="Ubuntu 24.04.3 LTS"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n'
     "VERSION_CODENAME=noble\nUBUNTU_CODENAME=noble\n",
     {"id": "ubuntu", "id_like": "debian", "version_id": "24.04", "codename": "noble",
      "pretty_name": "Ubuntu 24.04.3 LTS"}),
    ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
     "VERSION_CODENAME=bookworm\n",
     {"id": "debian", "id_like": None, "version_id": "12", "codename": "bookworm",
      "pretty_name": "Debian GNU/Linux 12 (bookworm)"}),
    ("", {"id": None, "id_like": None, "version_id": None, "codename": None, "pretty_name": None}),
])
def test_os_release(text, expected):
    assert parse_os_release(text) == expected


def test_meminfo_in_bytes():
    mem = parse_meminfo("MemTotal:       127564352 kB\nMemAvailable:   120000000 kB\nHugePages_Total: 0\n")
    assert mem["MemTotal"] == 127564352 * 1024
    assert mem["MemAvailable"] == 120000000 * 1024
    assert mem["HugePages_Total"] == 0


def test_health_from_the_h100_s_recorded_answer_and_each_way_it_can_be_read():
    """The real answer (recordings/h100/health.csv), a slowdown named by its field with no bit (as nvidia-smi may
    print on a driver that maps it so), two GPUs, and lines that are not the fields asked for."""
    gpus, problems = parse_health((NVSMI / "recordings" / "h100" / "health.csv").read_text())
    assert problems == [] and gpus == [{"index": 0, "clock_event_mask": "0x0000000000000001",
                                        "clock_event_reasons": ["gpu_idle"], "temperature_c": 40,
                                        "memory_temperature_c": 52}]
    gpus, problems = parse_health("0x0000000000000000, Not Active, Active, Not Active, Not Active, 88, 70\n"
                                  "0x0000000000000084, Not Active, Not Active, Not Active, Not Active, 60, [N/A]\n")
    assert [g["clock_event_reasons"] for g in gpus] == [["sw_thermal_slowdown"],
                                                        ["sw_power_cap", "hw_power_brake_slowdown"]]
    assert [g["index"] for g in gpus] == [0, 1] and gpus[1]["memory_temperature_c"] is None
    gpus, problems = parse_health("0x1, 40\nzz, Not Active, Not Active, Not Active, Not Active, 40, 52\n")
    assert gpus == []
    fields = ", ".join(HEALTH_FIELDS)
    assert problems[0] == f"line 1: expected {len(HEALTH_FIELDS)} comma-separated fields ({fields}), got '0x1, 40'"
    assert problems[1] == "line 2: clocks_event_reasons.active 'zz' is not a hexadecimal bitmask"
