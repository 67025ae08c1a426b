#!/usr/bin/python3
"""src/nvml/nvml.h's struct layouts checked against pynvml's ctypes structures.

nvml.h is written by hand and used by both the simulated NVML and libvgpu, so a wrong size or
offset there would be shared by both ends and pass every other test. pynvml (Debian's
python3-pynvml, NVIDIA's Python bindings) declares the same structs independently, as ctypes
classes, and ctypes lays them out by the platform's C rules.

  nvml_layout_test.py DUMP HEADER PYNVML_DIR

DUMP: the nvml_layout_dump program (prints what the C++ compiler made of nvml.h); HEADER:
src/nvml/nvml.h; PYNVML_DIR: where scripts/setup.sh unpacked pynvml (a pynvml installed the
ordinary way is used when that directory does not hold one).

Fails when a struct that pynvml also declares differs in size, in its fields' names and order,
or in a field's offset or size (naming struct and field); when the dump leaves out a struct or
a field nvml.h declares; or when pynvml cannot be imported. A struct without a pynvml
counterpart is listed as unchecked.
"""

import ctypes
import os
import re
import subprocess
import sys

# nvml.h's name -> pynvml's names for the same layout, the first one present is used. pynvml
# names the current PCI layout without the c_ prefix, and the legacy one (the unversioned and
# _v2 nvmlDeviceGetPciInfo) nvmlPciInfo_v2_t; it calls the _v2 process info, the layout the
# _v2 and _v3 queries take, c_nvmlProcessInfo_t.
COUNTERPARTS = {
    "nvmlMemory_t": ["c_nvmlMemory_t"],
    "nvmlMemory_v2_t": ["c_nvmlMemory_v2_t"],
    "nvmlUtilization_t": ["c_nvmlUtilization_t"],
    "nvmlBAR1Memory_t": ["c_nvmlBAR1Memory_t"],
    "nvmlProcessInfo_v1_t": ["c_nvmlProcessInfo_v1_t"],
    "nvmlProcessInfo_v2_t": ["c_nvmlProcessInfo_v2_t", "c_nvmlProcessInfo_t"],
    "nvmlProcessDetail_v1_t": ["c_nvmlProcessDetail_v1_t"],
    "nvmlProcessDetailList_v1_t": ["c_nvmlProcessDetailList_v1_t"],
    "nvmlProcessUtilizationSample_t": ["c_nvmlProcessUtilizationSample_t"],
    "nvmlProcessUtilizationInfo_v1_t": ["c_nvmlProcessUtilizationInfo_v1_t"],
    "nvmlProcessesUtilizationInfo_v1_t": ["c_nvmlProcessesUtilizationInfo_v1_t"],
    "nvmlAccountingStats_t": ["c_nvmlAccountingStats_t"],
    "nvmlPciInfo_t": ["nvmlPciInfo_t", "c_nvmlPciInfo_t"],
    "hamiNvmlPciInfoLegacy_t": ["nvmlPciInfo_v2_t", "c_nvmlPciInfo_v2_t"],
    "nvmlEventData_t": ["c_nvmlEventData_t"],
    "hamiNvmlEventDataLegacy_t": [],  # pynvml has only the current layout
}


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def import_pynvml(directory):
    if os.path.isdir(directory):
        sys.path.insert(0, directory)
    try:
        import pynvml  # noqa: PLC0415 (the path is only known here)
    except ImportError as e:
        fail(f"cannot import pynvml ({e}); it is the oracle for nvml.h's layouts: run "
             f"scripts/setup.sh, which unpacks Debian's python3-pynvml under {directory}")
    return pynvml


def header_structs(path):
    """struct name -> field names in order, from the `typedef struct x_st { ... } name;` blocks."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"//[^\n]*", "", f.read())
    out = {}
    for m in re.finditer(r"typedef\s+struct\s+\w+\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        body, name = m.group(1), m.group(2)
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if not decl:
                continue
            field = re.search(r"(\w+)\s*(\[[^\]]*\]\s*)*$", decl)
            if not field:
                fail(f"{path}: cannot read a field of {name} from '{decl}'")
            fields.append(field.group(1))
        out[name] = fields
    if not out:
        fail(f"{path}: no struct found; has the header's form changed?")
    return out


def dumped_layouts(program):
    """struct name -> (size, [(field, offset, size)]) as the C++ compiler laid them out."""
    run = subprocess.run([program], capture_output=True, text=True, check=False)
    if run.returncode != 0:
        fail(f"{program} exited with {run.returncode}: {run.stderr.strip()}")
    out = {}
    for line in run.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "size":
            out.setdefault(parts[1], [None, []])[0] = int(parts[2])
        elif len(parts) == 5 and parts[0] == "field":
            out.setdefault(parts[1], [None, []])[1].append(
                (parts[2], int(parts[3]), int(parts[4])))
        else:
            fail(f"{program}: unexpected line '{line}'")
    return out


def ctypes_layout(cls):
    return ctypes.sizeof(cls), [(name, getattr(cls, name).offset, getattr(cls, name).size)
                                for name, *_ in cls._fields_]


def main():
    if len(sys.argv) != 4:
        fail("usage: nvml_layout_test.py DUMP HEADER PYNVML_DIR")
    program, header, pynvml_dir = sys.argv[1:]
    pynvml = import_pynvml(pynvml_dir)
    print(f"oracle: {pynvml.__file__}")

    declared = header_structs(header)
    dumped = dumped_layouts(program)
    problems = []
    for name, fields in declared.items():
        if name not in dumped:
            problems.append(f"{name}: declared in nvml.h, missing from nvml_layout_dump.cc")
            continue
        listed = [f for f, _, _ in dumped[name][1]]
        if listed != fields:
            problems.append(f"{name}: nvml.h declares fields {fields}, nvml_layout_dump.cc "
                            f"prints {listed}")
    for name in dumped:
        if name not in declared:
            problems.append(f"{name}: printed by nvml_layout_dump.cc, not declared in nvml.h")
    for name in COUNTERPARTS:
        if name not in declared:
            problems.append(f"{name}: in this script's COUNTERPARTS, not declared in nvml.h")

    checked, unchecked = [], []
    for name in declared:
        candidates = COUNTERPARTS.get(name, [])
        present = [c for c in candidates if isinstance(getattr(pynvml, c, None), type)
                   and issubclass(getattr(pynvml, c), ctypes.Structure)]
        if not present or name not in dumped:
            unchecked.append(f"{name} (pynvml has none of {candidates})" if candidates
                             else f"{name} (no pynvml counterpart)")
            continue
        oracle = present[0]
        size, fields = dumped[name]
        want_size, want_fields = ctypes_layout(getattr(pynvml, oracle))
        if size != want_size:
            problems.append(f"{name}: {size} bytes in nvml.h, {want_size} in pynvml's {oracle}")
        ours = {f: (off, sz) for f, off, sz in fields}
        theirs = {f: (off, sz) for f, off, sz in want_fields}
        for field, (off, sz) in ours.items():
            if field not in theirs:
                problems.append(f"{name}.{field}: not a field of pynvml's {oracle} "
                                f"(it has {[f for f, _, _ in want_fields]})")
            elif theirs[field] != (off, sz):
                problems.append(f"{name}.{field}: offset {off} size {sz} in nvml.h, offset "
                                f"{theirs[field][0]} size {theirs[field][1]} in pynvml's {oracle}")
        for field, _, _ in want_fields:
            if field not in ours:
                problems.append(f"{name}: pynvml's {oracle} has field {field}, "
                                "the dump of nvml.h does not")
        if [f for f, _, _ in fields if f in theirs] != [f for f, _, _ in want_fields if f in ours]:
            problems.append(f"{name}: fields in another order than pynvml's {oracle}")
        checked.append(f"{name} = {oracle}")

    for line in checked:
        print(f"checked: {line}")
    for line in unchecked:
        print(f"unchecked: {line}")
    if problems:
        for p in problems:
            print(f"MISMATCH: {p}")
        fail(f"{len(problems)} difference(s) between nvml.h and pynvml or the dump")
    if not checked:
        fail("no struct of nvml.h has a pynvml counterpart; is pynvml the package it should be?")
    print(f"ok: {len(checked)} struct(s) match pynvml, {len(unchecked)} unchecked")


if __name__ == "__main__":
    main()
