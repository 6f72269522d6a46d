"""The ELF dynamic-section reader: real files of this machine against readelf, and crafted broken files."""

from __future__ import annotations

import glob
import re
import struct
import subprocess
from pathlib import Path

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._elf import ElfSkip, read_dynamic_path


def readelf(path: str) -> tuple[list[str], str | None]:
    out = subprocess.run(["readelf", "-dW", path], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", out)
    soname = re.findall(r"\(SONAME\)\s+Library soname: \[(.*?)\]", out)
    return needed, soname[0] if soname else None


SYSTEM_LIBS = sorted(p for p in glob.glob("/usr/lib/x86_64-linux-gnu/lib*.so.*")
                     if re.search(r"/lib(c|m|ssl|crypto|z|stdc\+\+|python3\.\d+|ffi|gcc_s)\.so", p))[:12]


@pytest.mark.parametrize("path", SYSTEM_LIBS)
def test_agrees_with_readelf_on_real_libraries(path):
    info = read_dynamic_path(path)
    assert (info.needed, info.soname) == readelf(path)
    assert info.machine == "x86_64"


def test_reads_headers_only():
    big = max(SYSTEM_LIBS, key=lambda p: Path(p).stat().st_size)
    info = read_dynamic_path(big)
    assert info.bytes_read < 64 * 1024


def _elf_header(ident_class=2, ident_data=1) -> bytes:
    ident = b"\x7fELF" + bytes([ident_class, ident_data, 1]) + b"\0" * 9
    return ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 0, 0, 64, 56, 0, 64, 0, 0)


@pytest.mark.parametrize(("content", "reason"), [
    (b"", "not an ELF file"),
    (b"#!/bin/sh\necho not a library\n" * 4, "not an ELF file"),
    (b"\x7fELF\x02\x01", "truncated: 6 bytes, an ELF header needs 64"),
    (_elf_header(ident_class=1), "32-bit ELF"),
    (_elf_header(ident_data=2), "big-endian ELF"),
    (_elf_header(), "no program headers"),
])
def test_broken_files_are_skipped_with_a_reason(tmp_path, content, reason):
    path = tmp_path / "lib.so"
    path.write_bytes(content)
    with pytest.raises(ElfSkip, match=re.escape(reason)):
        read_dynamic_path(str(path))


def test_a_real_library_cut_short_is_truncated_not_a_crash(tmp_path):
    data = Path(SYSTEM_LIBS[0]).read_bytes()
    for cut in (100, 2000):
        path = tmp_path / f"cut{cut}.so"
        path.write_bytes(data[:cut])
        with pytest.raises(ElfSkip):
            read_dynamic_path(str(path))


def test_an_unreadable_file_is_skipped(tmp_path):
    with pytest.raises(ElfSkip, match="unreadable"):
        read_dynamic_path(str(tmp_path / "missing.so"))
