"""One entry for every binary format splitter reads: ELF (Linux) and Mach-O (macOS), by magic."""

from __future__ import annotations

from splitter.binaries import elf, macho
from splitter.binaries.elf import analyse_elf, is_elf
from splitter.binaries.macho import analyse_macho, is_macho
from splitter.binaries.stamps import Spans
from splitter.model import BinaryInfo


def is_binary(data: bytes) -> bool:
    """Whether `data` (at least its first 4 bytes) starts an ELF or thin Mach-O file."""
    return is_elf(data) or is_macho(data)


def analyse_binary(path: str, data: bytes, registrations: bool = True) -> BinaryInfo:
    """Analyse `data` with the reader its magic names (the caller checked is_binary)."""
    if is_macho(data):
        return analyse_macho(path, data, registrations)
    return analyse_elf(path, data, registrations)


def stamp_layout(path: str, data: bytes) -> tuple[Spans, Spans]:
    """(link stamps, read-only string sections) of the binary `data`, by its format."""
    if is_macho(data):
        return macho.stamp_layout(path, data)
    return elf.stamp_layout(path, data)


def exported_symbols(path: str, data: bytes) -> frozenset[str]:
    """The symbols the binary `data` exports to the programs and libraries linked with it."""
    if is_macho(data):
        return macho.exported_symbols(path, data)
    return elf.exported_symbols(path, data)


def analyse_with_exports(path: str, data: bytes) -> tuple[BinaryInfo, tuple[str, ...]]:
    """analyse_binary(path, data) and the names the binary exports as C and C++ spell them
    (Mach-O's leading underscore set aside): what third-party patterns are matched against."""
    if is_macho(data):
        return macho.analyse_with_exports(path, data)
    return analyse_elf(path, data), elf.exported_names(path, data)


def code_spans(path: str, data: bytes) -> Spans:
    """Where the binary `data` holds machine code, as (offset, length) spans: what a search
    for the strings other projects' code leaves (splitter.plan.thirdparty) can skip."""
    if is_macho(data):
        return macho.code_spans(path, data)
    return elf.code_spans(data)
