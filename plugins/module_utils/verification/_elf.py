# Copyright: sparkfleet contributors
# Apache License 2.0
"""A small ELF reader: DT_NEEDED and DT_SONAME, and names in the read-only data.

read_dynamic reads the ELF header, the program headers, the PT_DYNAMIC segment
and the few strings it names -- a few kilobytes per file whatever the file's
size, which is what makes scanning a 5 GB CUDA PyTorch environment take seconds.
read_rodata_matches also reads the .rodata sections (where a C string literal
given to dlopen() lies), up to a byte limit per file, and returns what a
pattern matches there.
Anything it cannot read (not ELF, truncated, 32-bit, big-endian, unreadable)
raises ElfSkip with a reason; it never raises anything else on bad input.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

ELF_MAGIC = b"\x7fELF"
_ELFCLASS64 = 2
_ELFDATA2LSB = 1
_PT_LOAD = 1
_PT_DYNAMIC = 2
_DT_NULL = 0
_DT_NEEDED = 1
_DT_STRTAB = 5
_DT_STRSZ = 10
_DT_SONAME = 14
_DT_RPATH = 15
_DT_RUNPATH = 29
_MAX_DYNAMIC_ENTRIES = 4096
_MAX_NAME = 4096
_SHT_PROGBITS = 1
_SHF_WRITE = 0x1
_SHF_EXECINSTR = 0x4
_MAX_SECTIONS = 65279  # below SHN_LORESERVE; a larger e_shnum is a broken file
_MAX_SHSTRTAB = 1 << 20
_CHUNK = 1 << 20

MACHINES = {3: "x86", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv"}


class ElfSkip(Exception):
    """The file is not something this reader handles; str() is the reason."""


@dataclass
class DynamicInfo:
    machine: str
    soname: str | None = None
    needed: list[str] = field(default_factory=list)
    runpath: list[str] = field(default_factory=list)
    bytes_read: int = 0


@dataclass
class RodataMatches:
    matches: list[str] = field(default_factory=list)  # unique, in the order found
    bytes_read: int = 0  # of .rodata (the section table and names not counted)
    truncated: bool = False  # the limit stopped the reading before the sections' end
    sections: int = 0  # .rodata sections found


class _Reader:
    def __init__(self, handle, size: int) -> None:
        self.handle = handle
        self.size = size
        self.bytes_read = 0

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ElfSkip(f"truncated: needs bytes {offset}..{offset + length}, file has {self.size}")
        self.handle.seek(offset)
        data = self.handle.read(length)
        self.bytes_read += len(data)
        if len(data) != length:
            raise ElfSkip(f"truncated: short read at {offset}")
        return data

    def cstring(self, offset: int) -> str:
        chunks = b""
        while len(chunks) < _MAX_NAME:
            chunk = self.read(offset + len(chunks), min(256, self.size - offset - len(chunks)))
            end = chunk.find(b"\0")
            if end >= 0:
                return (chunks + chunk[:end]).decode("utf-8", "replace")
            chunks += chunk
            if offset + len(chunks) >= self.size:
                raise ElfSkip("truncated: unterminated string in the dynamic string table")
        raise ElfSkip("a dynamic string is longer than 4096 bytes")


def read_dynamic(handle, size: int) -> DynamicInfo:
    """Read the dynamic section of an open binary file of `size` bytes."""
    reader = _Reader(handle, size)
    if size < 64:
        head = reader.read(0, min(size, 4)) if size else b""
        if head != ELF_MAGIC[: len(head)] or not head:
            raise ElfSkip("not an ELF file")
        raise ElfSkip(f"truncated: {size} bytes, an ELF header needs 64")
    ident = reader.read(0, 16)
    if ident[:4] != ELF_MAGIC:
        raise ElfSkip("not an ELF file")
    if ident[4] != _ELFCLASS64:
        raise ElfSkip("32-bit ELF (ELFCLASS32); CUDA wheels are 64-bit")
    if ident[5] != _ELFDATA2LSB:
        raise ElfSkip("big-endian ELF; Spark and x86_64 wheels are little-endian")
    header = reader.read(16, 48)
    (_e_type, e_machine, _version, _entry, e_phoff, _shoff, _flags, _ehsize, e_phentsize,
     e_phnum, _shentsize, _shnum, _shstrndx) = struct.unpack("<HHIQQQIHHHHHH", header)
    if e_phentsize < 56 or e_phnum == 0:
        raise ElfSkip("no program headers (not a shared object or executable)")
    table = reader.read(e_phoff, e_phentsize * e_phnum)
    loads: list[tuple[int, int, int]] = []
    dynamic: tuple[int, int] | None = None
    for index in range(e_phnum):
        p_type, _pf, p_offset, p_vaddr, _pa, p_filesz, _memsz, _align = struct.unpack_from(
            "<IIQQQQQQ", table, index * e_phentsize)
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    info = DynamicInfo(machine=MACHINES.get(e_machine, f"machine {e_machine}"))
    if dynamic is None:
        info.bytes_read = reader.bytes_read
        return info  # statically linked: nothing needed
    count = min(dynamic[1] // 16, _MAX_DYNAMIC_ENTRIES)
    entries = reader.read(dynamic[0], count * 16)
    tags: list[tuple[int, int]] = []
    strtab = None
    for index in range(count):
        tag, value = struct.unpack_from("<qQ", entries, index * 16)
        if tag == _DT_NULL:
            break
        if tag == _DT_STRTAB:
            strtab = value
        tags.append((tag, value))
    if strtab is None:
        raise ElfSkip("dynamic section without a string table")
    strtab_offset = _vaddr_to_offset(strtab, loads)
    for tag, value in tags:
        if tag == _DT_NEEDED:
            info.needed.append(reader.cstring(strtab_offset + value))
        elif tag == _DT_SONAME:
            info.soname = reader.cstring(strtab_offset + value)
        elif tag in (_DT_RUNPATH, _DT_RPATH):
            info.runpath.extend(p for p in reader.cstring(strtab_offset + value).split(":") if p)
    info.bytes_read = reader.bytes_read
    return info


def _vaddr_to_offset(vaddr: int, loads: list[tuple[int, int, int]]) -> int:
    for p_vaddr, p_offset, p_filesz in loads:
        if p_vaddr <= vaddr < p_vaddr + p_filesz:
            return vaddr - p_vaddr + p_offset
    raise ElfSkip("the dynamic string table lies outside every loadable segment")


def read_rodata_matches(handle, size: int, pattern, limit: int, overlap: int = 256) -> RodataMatches:
    """What the compiled bytes regex `pattern` matches in the .rodata sections, reading at most `limit` bytes.

    .rodata* is where a C string literal lies (dlopen("libcudart.so.12")); other read-only sections
    (.nv_fatbin, the GPU code, often most of a CUDA library's bytes) are not read. Sections are read in
    1 MiB chunks that overlap by `overlap` bytes, so a match across a chunk boundary is found; a match
    must be shorter than `overlap`. Files without a section table have nothing to read (sections == 0).
    """
    reader = _Reader(handle, size)
    header = reader.read(0, 64)
    if header[:4] != ELF_MAGIC or header[4] != _ELFCLASS64 or header[5] != _ELFDATA2LSB:
        raise ElfSkip("not a 64-bit little-endian ELF file")
    e_shoff, = struct.unpack_from("<Q", header, 40)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", header, 58)
    found = RodataMatches()
    if e_shoff == 0 or e_shnum == 0 or e_shentsize < 64 or e_shnum > _MAX_SECTIONS or e_shstrndx >= e_shnum:
        return found  # stripped of its section table (or extended numbering): nothing to read
    table = reader.read(e_shoff, e_shentsize * e_shnum)
    sections = [struct.unpack_from("<IIQQQQIIQQ", table, index * e_shentsize) for index in range(e_shnum)]
    names = sections[e_shstrndx]
    names_data = reader.read(names[4], min(names[5], _MAX_SHSTRTAB))
    seen: dict[str, None] = {}
    budget = limit
    for sh_name, sh_type, sh_flags, _addr, sh_offset, sh_size, *_rest in sections:
        end = names_data.find(b"\0", sh_name)
        name = names_data[sh_name:end if end >= 0 else len(names_data)]
        if sh_type != _SHT_PROGBITS or sh_flags & (_SHF_WRITE | _SHF_EXECINSTR) or not (
                name == b".rodata" or name.startswith(b".rodata.")):
            continue
        found.sections += 1
        position, stop = sh_offset, sh_offset + sh_size
        while position < stop:
            if budget <= 0:
                found.truncated = True
                break
            length = min(_CHUNK, stop - position, budget)
            chunk = reader.read(position, length)
            budget -= length
            found.bytes_read += length
            for match in pattern.finditer(chunk):
                seen.setdefault(match.group(0).decode("ascii", "replace"), None)
            if position + length >= stop:
                break
            position += max(length - overlap, 1)
    found.matches = list(seen)
    return found


def read_rodata_matches_path(path: str, pattern, limit: int) -> RodataMatches:
    """read_rodata_matches on a path; unreadable files become ElfSkip."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            return read_rodata_matches(handle, handle.tell(), pattern, limit)
    except OSError as exc:
        raise ElfSkip(f"unreadable: {exc.strerror or exc}") from exc
    except struct.error as exc:
        raise ElfSkip(f"malformed ELF structure: {exc}") from exc


def read_dynamic_path(path: str) -> DynamicInfo:
    """read_dynamic on a path; unreadable files become ElfSkip."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            return read_dynamic(handle, size)
    except OSError as exc:
        raise ElfSkip(f"unreadable: {exc.strerror or exc}") from exc
    except struct.error as exc:
        raise ElfSkip(f"malformed ELF structure: {exc}") from exc
