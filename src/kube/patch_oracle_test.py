#!/usr/bin/python3
"""The API server's patch functions (src/kube/patch.h) checked against outside implementations.

  patch_oracle_test.py APPLY CORPUS

APPLY: the patch_oracle_apply program (applies every case with kube/patch.h); CORPUS:
patch_oracle_corpus.json, a list of {"name", "kind", "doc", "patch"} cases.

- kind "json" (RFC 6902 JSON Patch): the oracle is python3-jsonpatch (Debian), applied to the
  same document and patch.
- kind "merge" (RFC 7386 merge patch): jsonpatch has none, so the oracle is the RFC's own
  algorithm (section 2), written out below.

A case passes when both produce equal documents or both refuse the patch. Equality is JSON's:
objects ignore member order, numbers compare by value (1 equals 1.0), and a boolean is never
a number (Python's True == 1 is not used). A case may carry "oracle_wrong": {"rfc": <the
document, or "refuse">, "why": "..."} where jsonpatch itself departs from the RFC: the product
is then held to the RFC's answer, and the case fails once jsonpatch stops departing, so that
the note is dropped. Every disagreement is printed with the case's name; any fails the test.
jsonpatch missing fails the test too (scripts/setup.sh installs it).

Strategic merge patch has no outside implementation here (it is the Go API machinery's) and
is not checked.
"""

import json
import subprocess
import sys

try:
    import jsonpatch
except ImportError as e:
    print(f"FAIL: cannot import jsonpatch ({e}): it is the oracle for RFC 6902; run "
          "scripts/setup.sh, which installs Debian's python3-jsonpatch for /usr/bin/python3")
    sys.exit(1)

REFUSE = "refuse"


def merge_patch(target, patch):
    """RFC 7386 section 2, step by step."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge_patch(result.get(name), value)
    return result


def json_patch(doc, patch):
    try:
        return jsonpatch.apply_patch(doc, patch, in_place=False)
    except Exception as e:  # noqa: BLE001 jsonpatch refuses some patches with TypeError
        return Refusal(f"{type(e).__name__}: {e}")


class Refusal:
    def __init__(self, why):
        self.why = why


def same(a, b):
    """JSON equality: no bool/number confusion, numbers by value, objects unordered."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) or isinstance(b, (int, float)):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(same(a[k], b[k]) for k in a))
    if isinstance(a, list) or isinstance(b, list):
        return (isinstance(a, list) and isinstance(b, list) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b)))
    return type(a) is type(b) and a == b


def show(outcome):
    if isinstance(outcome, Refusal):
        return f"refused ({outcome.why})"
    return json.dumps(outcome, sort_keys=True)


def agree(x, y):
    if isinstance(x, Refusal) or isinstance(y, Refusal):
        return isinstance(x, Refusal) and isinstance(y, Refusal)
    return same(x, y)


def main():
    if len(sys.argv) != 3:
        print("usage: patch_oracle_test.py APPLY CORPUS")
        sys.exit(2)
    program, corpus_path = sys.argv[1:]
    with open(corpus_path, encoding="utf-8") as f:
        corpus = json.load(f)
    run = subprocess.run([program, corpus_path], capture_output=True, text=True, check=False)
    if run.returncode != 0:
        print(f"FAIL: {program} exited with {run.returncode}: {run.stderr.strip()}")
        sys.exit(1)
    lines = run.stdout.splitlines()
    if len(lines) != len(corpus):
        print(f"FAIL: {program} printed {len(lines)} results for {len(corpus)} cases")
        sys.exit(1)

    problems = []
    counts = {"json": 0, "merge": 0}
    for case, line in zip(corpus, lines):
        name, kind = case["name"], case["kind"]
        got = json.loads(line)
        if got["name"] != name:
            problems.append(f"{name}: the program answered for {got['name']}")
            continue
        counts[kind] += 1
        product = got["doc"] if got["ok"] else Refusal(got["error"])
        if kind == "merge":
            oracle, oracle_name = merge_patch(case["doc"], case["patch"]), "RFC 7386's algorithm"
        else:
            oracle, oracle_name = json_patch(case["doc"], case["patch"]), "python3-jsonpatch"
        wrong = case.get("oracle_wrong")
        if wrong:
            rfc = Refusal("per the RFC") if wrong["rfc"] == REFUSE else wrong["rfc"]
            if not agree(product, rfc):
                problems.append(f"{name}: the product gives {show(product)}, the RFC "
                                f"{show(rfc)} ({wrong['why']})")
            if agree(oracle, rfc):
                problems.append(f"{name}: {oracle_name} now follows the RFC here; drop the "
                                "case's oracle_wrong note")
            else:
                print(f"known oracle departure: {name}: {oracle_name} gives {show(oracle)}; "
                      f"{wrong['why']}")
        elif not agree(product, oracle):
            problems.append(f"{name}: the product gives {show(product)}, {oracle_name} "
                            f"{show(oracle)}")

    for p in problems:
        print(f"DISAGREE: {p}")
    if problems:
        print(f"FAIL: {len(problems)} disagreement(s) in {len(corpus)} cases")
        sys.exit(1)
    print(f"ok: {counts['json']} JSON patch cases agree with python3-jsonpatch "
          f"{getattr(jsonpatch, '__version__', '?')}, {counts['merge']} merge patch cases "
          "with RFC 7386's algorithm")


if __name__ == "__main__":
    main()
