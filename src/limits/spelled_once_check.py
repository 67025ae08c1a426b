#!/usr/bin/python3
"""Every variable of limits/vocabulary.def is spelled in one place: no string literal in the
product's code (src/, and the demo programs of demo/) outside src/limits/ names one. Writers use the vocabulary's Set* functions,
readers its Parse* functions and Name()/KeyName(). Comments may name variables freely.

Not checked: tests and fuzz targets (they feed the product literal input on purpose) and the
simulator (src/sim/), which reads CUDA_VISIBLE_DEVICES with code of its own so that it checks
the product instead of agreeing with it.

Usage: spelled_once_check.py SOURCE_ROOT; exits 1 listing every literal found.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
vocabulary = (root / "src/limits/vocabulary.def").read_text()
names = re.findall(r'^HAMI_LIMIT_KEY\(\w+,\s*"([A-Z0-9_]+?)(?:_<i>)?"', vocabulary, re.M)
if len(names) < 10:
    sys.exit(f"read only {len(names)} names from vocabulary.def; is the row format changed?")
pattern = re.compile("|".join(sorted(set(names), key=len, reverse=True)))


def code_only(text):
    """`text` with comments blanked and string literals kept (line numbers preserved)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


found = []
for path in sorted(p for d in ("src", "demo") for p in (root / d).rglob("*")):
    rel = path.relative_to(root).as_posix()
    if path.suffix not in (".cc", ".h", ".def", ".c") or not path.is_file():
        continue
    if rel.startswith(("src/limits/", "src/sim/")) or re.search(r"_(test|fuzz)\.cc$", rel):
        continue
    code = code_only(path.read_text(errors="replace"))
    for number, line in enumerate(code.split("\n"), 1):
        for literal in re.findall(r'"(?:[^"\\]|\\.)*"', line):
            for name in pattern.findall(literal):
                found.append(f"{rel}:{number}: {name} spelled in {literal}")

if found:
    print("variables of limits/vocabulary.def spelled outside it (use limits::Set*, Parse*, "
          "Name or KeyName):")
    print("\n".join(found))
    sys.exit(1)
print(f"{len(names)} variables, each spelled only in src/limits/")
