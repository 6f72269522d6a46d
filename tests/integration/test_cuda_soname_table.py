"""SONAME_TABLE against NVIDIA's wheels on real PyPI, row by row.

For each source of each row: the wheel's file list (read from the wheel's ZIP central directory with two
HTTP range requests, not the whole wheel) holds lib<library>.so.<soname major>; and where the row says a
cuda-toolkit release pins the wheel, that release's METADATA pins it, in the extra named. The wheel's CUDA
major is thereby NVIDIA's statement (the toolkit release or the -cuNN suffix), not ours.
"""

from __future__ import annotations

import io
import json
import re
import struct
import urllib.parse
import urllib.request
import zipfile
from functools import cache

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._cuda_majors import SONAME_TABLE, TOOLKITS

PYPI = "https://pypi.org/pypi"


def _get(url: str, byte_range: str | None = None) -> bytes:
    request = urllib.request.Request(url, headers={"Range": f"bytes={byte_range}"} if byte_range else {})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read()


@cache
def _project(name: str) -> dict:
    return json.loads(_get(f"{PYPI}/{name}/json"))


def _wheel(name: str, version: str) -> dict:
    files = [f for f in _project(name)["releases"].get(version, []) if f["filename"].endswith(".whl")]
    if not files:
        pytest.fail(f"{name} {version} has no wheel on PyPI: the row's source is wrong")
    pick = next((f for f in files if "aarch64" in f["filename"]), None) or \
        next((f for f in files if "x86_64" in f["filename"]), files[0])
    return {**pick, "url": urllib.parse.urljoin(f"{PYPI}/{name}/json", pick["url"])}


@cache
def wheel_files(name: str, version: str) -> tuple[str, ...]:
    """The file names in a wheel, from its ZIP central directory (the wheel's last bytes)."""
    wheel = _wheel(name, version)
    size = wheel["size"]
    tail = _get(wheel["url"], f"{max(0, size - 65536)}-{size - 1}")
    end = tail.rfind(b"PK\x05\x06")
    assert end >= 0, f"{wheel['filename']}: no ZIP end record"
    _sig, _disk, _cd_disk, _here, _entries, cd_size, cd_offset, _comment = struct.unpack(
        "<IHHHHIIH", tail[end:end + 22])
    directory = _get(wheel["url"], f"{cd_offset}-{cd_offset + cd_size - 1}")
    names, position = [], 0
    while directory[position:position + 4] == b"PK\x01\x02":
        name_len, extra_len, comment_len = struct.unpack("<HHH", directory[position + 28:position + 34])
        names.append(directory[position + 46:position + 46 + name_len].decode())
        position += 46 + name_len + extra_len + comment_len
    return tuple(names)


@cache
def toolkit_pins(version: str) -> dict[str, dict[str, str]]:
    """cuda-toolkit <version>'s METADATA: extra -> {wheel: pinned version}."""
    wheel = _wheel("cuda-toolkit", version)
    archive = zipfile.ZipFile(io.BytesIO(_get(wheel["url"])))
    [meta] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    pins: dict[str, dict[str, str]] = {}
    for line in archive.read(meta).decode().splitlines():
        match = re.match(r"Requires-Dist: ([A-Za-z0-9_.-]+)\s*(?:==|<\d+,>=)\s*([0-9.]+?)\.?\*?;.*extra == '([\w-]+)'",
                         line)
        if match:
            pins.setdefault(match.group(3), {})[match.group(1)] = match.group(2)
    return pins


SOURCES = [(row, source) for row in SONAME_TABLE for source in row.sources]


@pytest.mark.network
@pytest.mark.parametrize(("row", "source"), SOURCES,
                         ids=[f"lib{r.library}.so.{r.soname_major}-{s.wheel}" for r, s in SOURCES])
def test_the_wheel_ships_the_soname_for_its_cuda_major(row, source):
    files = wheel_files(source.wheel, source.version)
    pattern = re.compile(rf"(^|/)lib{re.escape(row.library)}\.so\.{row.soname_major}(\.[0-9.]+)?$")
    shipped = [f for f in files if pattern.search(f)]
    assert shipped, (f"{source.wheel} {source.version} ships no lib{row.library}.so.{row.soname_major}; its "
                     f"libraries: {sorted(f for f in files if '.so' in f)[:20]}")
    if source.toolkit_extra:
        pins = toolkit_pins(TOOLKITS[source.cuda_major]).get(source.toolkit_extra, {})
        assert pins.get(source.wheel) == source.version, (
            f"cuda-toolkit {TOOLKITS[source.cuda_major]} [{source.toolkit_extra}] pins {pins}, the row says "
            f"{source.wheel}=={source.version}")
    else:
        assert source.wheel.endswith(f"-cu{source.cuda_major}")
