"""The Mach-O load commands LLVM's libObject checks (llvm/lib/Object/MachOObjectFile.cpp,
LLVM 14), as tables: their names, sizes, the strings they name and the blobs they place in
the file, and the thread states it knows. splitter.binaries.machocheck walks a file by them.

Values are mach-o/loader.h's; the names and phrases are LLVM's, so that a refusal reads as
LLVM's and can be searched.
"""

from __future__ import annotations

LC_SEGMENT, LC_SYMTAB, LC_THREAD, LC_UNIXTHREAD, LC_DYSYMTAB = 0x1, 0x2, 0x4, 0x5, 0xB
LC_ID_DYLIB, LC_TWOLEVEL_HINTS, LC_SEGMENT_64 = 0xD, 0x16, 0x19
LC_LINKER_OPTION, LC_NOTE, LC_BUILD_VERSION = 0x2D, 0x31, 0x32
# LC_SYMSEG, LC_LOADFVMLIB, LC_IDFVMLIB, LC_FVMFILE, LC_PREPAGE, LC_PREBOUND_DYLIB,
# LC_PREBIND_CKSUM: LLVM reads none of them and refuses each. Its source lists LC_IDENT (0x8)
# too; llvm-objdump-14 and llvm-otool-14 accept a file holding one but read every load
# command after it as a copy of it (`cmd ?(0x00000008)`), so they list none of the later
# LC_LOAD_DYLIBs or LC_RPATHs. ld64 never writes it: refused.
OBSOLETE = frozenset({0x3, 0x6, 0x7, 0x8, 0x9, 0xA, 0x10, 0x17})

# Commands naming a string by the u32 after cmd and cmdsize: name, struct size, the struct's
# and the offset field's names, what the string is.
_DYLIB = (24, "dylib_command struct", "name", "library name")
_DYLINKER = (12, "dylinker_command struct", "name", "dyld name")
STRINGS: dict[int, tuple[str, int, str, str, str]] = {
    0xC: ("LC_LOAD_DYLIB", *_DYLIB),
    0x80000018: ("LC_LOAD_WEAK_DYLIB", *_DYLIB),
    0x20: ("LC_LAZY_LOAD_DYLIB", *_DYLIB),
    0x8000001F: ("LC_REEXPORT_DYLIB", *_DYLIB),
    0x80000023: ("LC_LOAD_UPWARD_DYLIB", *_DYLIB),
    LC_ID_DYLIB: ("LC_ID_DYLIB", *_DYLIB),
    0xF: ("LC_ID_DYLINKER", *_DYLINKER),
    0xE: ("LC_LOAD_DYLINKER", *_DYLINKER),
    0x27: ("LC_DYLD_ENVIRONMENT", *_DYLINKER),
    0x8000001C: ("LC_RPATH", 12, "rpath_command struct", "path", "library name"),
    0x12: ("LC_SUB_FRAMEWORK", 12, "sub_framework_command", "umbrella", "umbrella name"),
    0x13: ("LC_SUB_UMBRELLA", 12, "sub_umbrella_command", "sub_umbrella", "sub_umbrella name"),
    0x15: ("LC_SUB_LIBRARY", 12, "sub_library_command", "sub_library", "sub_library name"),
    0x14: ("LC_SUB_CLIENT", 12, "sub_client_command", "client", "client name"),
}

# A blob a command places: its offset field, the phrase of its extent (`{}` is "_64" in a
# 64-bit file), the size of one counted entry (32-bit, 64-bit), what LLVM calls the blob
# (None: not checked for overlaps). The command holds (offset, count) u32 pairs in this order.
Blob = tuple[str, str, tuple[int, int], str | None]
_DYLD_INFO: tuple[Blob, ...] = tuple(
    (f"{kind}_off", f"{kind}_size field", (1, 1), f"dyld {kind.replace('_', ' ')} info")
    for kind in ("rebase", "bind", "weak_bind", "lazy_bind", "export")
)
_DYSYMTAB: tuple[Blob, ...] = (
    (
        "tocoff",
        "ntoc field times sizeof(struct dylib_table_of_contents)",
        (8, 8),
        "table of contents",
    ),
    ("modtaboff", "nmodtab field times sizeof(struct dylib_module{})", (52, 56), "module table"),
    (
        "extrefsymoff",
        "nextrefsyms field times sizeof(struct dylib_reference)",
        (4, 4),
        "reference table",
    ),
    ("indirectsymoff", "nindirectsyms field times sizeof(uint32_t)", (4, 4), "indirect table"),
    (
        "extreloff",
        "nextrel field times sizeof(struct relocation_info)",
        (8, 8),
        "external relocation table",
    ),
    (
        "locreloff",
        "nlocrel field times sizeof(struct relocation_info)",
        (8, 8),
        "local relocation table",
    ),
)
_LINKEDIT = {
    0x29: ("LC_DATA_IN_CODE", "data in code info"),
    0x2E: ("LC_LINKER_OPTIMIZATION_HINT", "linker optimization hints"),
    0x26: ("LC_FUNCTION_STARTS", "function starts data"),
    0x1E: ("LC_SEGMENT_SPLIT_INFO", "split info data"),
    0x2B: ("LC_DYLIB_CODE_SIGN_DRS", "code signing RDs data"),
    0x1D: ("LC_CODE_SIGNATURE", "code signature data"),
}
# How LLVM words a command of the wrong size: LEAST checks "cmdsize too small" before the
# command's uniqueness and "has incorrect cmdsize" after; EXACT only the latter, first;
# EXACT_LOAD the same, worded "load command N <name> has incorrect cmdsize".
LEAST, EXACT, EXACT_LOAD = 0, 1, 2
_ENCRYPTION = "LC_ENCRYPTION_INFO and or LC_ENCRYPTION_INFO_64"
_VERSION_MIN = (
    "LC_VERSION_MIN_MACOSX, LC_VERSION_MIN_IPHONEOS, LC_VERSION_MIN_TVOS or LC_VERSION_MIN_WATCHOS"
)
# Commands of one size, each allowed once in its group: name, the group as LLVM's "more than
# one ... command" names it, size, wording (above), where the blob pairs start, the blobs.
Sized = tuple[str, str, int, int, int, tuple[Blob, ...]]
SIZED: dict[int, Sized] = {
    LC_SYMTAB: (
        "LC_SYMTAB",
        "LC_SYMTAB",
        24,
        LEAST,
        8,
        (
            ("symoff", "nsyms field times sizeof(struct nlist{})", (12, 16), "symbol table"),
            ("stroff", "strsize field", (1, 1), "string table"),
        ),
    ),
    LC_DYSYMTAB: ("LC_DYSYMTAB", "LC_DYSYMTAB", 80, LEAST, 32, _DYSYMTAB),
    0x22: ("LC_DYLD_INFO", "LC_DYLD_INFO and or LC_DYLD_INFO_ONLY", 48, LEAST, 8, _DYLD_INFO),
    0x80000022: (
        "LC_DYLD_INFO_ONLY",
        "LC_DYLD_INFO and or LC_DYLD_INFO_ONLY",
        48,
        LEAST,
        8,
        _DYLD_INFO,
    ),
    **{
        command: (name, name, 16, LEAST, 8, (("dataoff", "datasize field", (1, 1), blob),))
        for command, (name, blob) in _LINKEDIT.items()
    },
    0x1B: ("LC_UUID", "LC_UUID", 24, EXACT, 0, ()),
    0x2A: ("LC_SOURCE_VERSION", "LC_SOURCE_VERSION", 16, EXACT, 0, ()),
    0x80000028: ("LC_MAIN", "LC_MAIN", 24, EXACT, 0, ()),
    0x11: ("LC_ROUTINES", "LC_ROUTINES and or LC_ROUTINES_64", 40, EXACT, 0, ()),
    0x1A: ("LC_ROUTINES_64", "LC_ROUTINES_64 and or LC_ROUTINES", 72, EXACT, 0, ()),
    0x21: (
        "LC_ENCRYPTION_INFO",
        _ENCRYPTION,
        20,
        EXACT,
        8,
        (("cryptoff", "cryptsize field", (1, 1), None),),
    ),
    0x2C: (
        "LC_ENCRYPTION_INFO_64",
        _ENCRYPTION,
        24,
        EXACT,
        8,
        (("cryptoff", "cryptsize field", (1, 1), None),),
    ),
    LC_TWOLEVEL_HINTS: (
        "LC_TWOLEVEL_HINTS",
        "LC_TWOLEVEL_HINTS",
        16,
        EXACT_LOAD,
        8,
        (("offset", "nhints times sizeof(struct twolevel_hint) field", (4, 4), "two level hints"),),
    ),
    0x24: ("LC_VERSION_MIN_MACOSX", _VERSION_MIN, 16, EXACT_LOAD, 0, ()),
    0x25: ("LC_VERSION_MIN_IPHONEOS", _VERSION_MIN, 16, EXACT_LOAD, 0, ()),
    0x2F: ("LC_VERSION_MIN_TVOS", _VERSION_MIN, 16, EXACT_LOAD, 0, ()),
    0x30: ("LC_VERSION_MIN_WATCHOS", _VERSION_MIN, 16, EXACT_LOAD, 0, ()),
}

# Thread state flavors LLVM knows, by CPU type: flavor -> (name, size in bytes); the count a
# flavor must give is its size in u32s.
_ARM64 = {6: ("ARM_THREAD_STATE64", 272)}
THREAD_STATES: dict[int, dict[int, tuple[str, int]]] = {
    7: {1: ("x86_THREAD_STATE32", 64)},
    0x01000007: {
        7: ("x86_THREAD_STATE", 176),
        8: ("x86_FLOAT_STATE", 532),
        9: ("x86_EXCEPTION_STATE", 24),
        4: ("x86_THREAD_STATE64", 168),
        6: ("x86_EXCEPTION_STATE64", 16),
    },
    12: {1: ("ARM_THREAD_STATE", 68)},
    0x0100000C: _ARM64,
    0x0200000C: _ARM64,
    18: {1: ("PPC_THREAD_STATE", 160)},
}
