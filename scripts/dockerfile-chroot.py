#!/usr/bin/python3
"""Runs deploy/Dockerfile's stages in debootstrap chroots, for a machine without a Docker
engine: each `FROM debian:<release>[-slim]` becomes a fresh `debootstrap --variant=minbase`
tree, `COPY` copies from the build context (the repository's tracked files), from the CUDA
toolkit (`--from=cuda`, what `--build-context cuda=...` hands over) or from an earlier stage,
`RUN` runs under `chroot` with the stage's WORKDIR, and ARG defaults are substituted. Any other
instruction stops it. Then it runs the image's programs in the last stage: each must start
(its --help) with only the libraries that stage installed.

  scripts/dockerfile-chroot.py [--work DIR] [--cuda /usr/local/cuda] [--mirror URL] [--reuse]

Needs root, debootstrap and the network to a Debian mirror. Slow (two debootstraps and a
build on the build stage's own packages); not part of `make test`.
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def say(msg):
    print(f"dockerfile-chroot: {msg}", flush=True)


def run(cmd, **kw):
    say("$ " + " ".join(shlex.quote(c) for c in cmd))
    subprocess.run(cmd, check=True, **kw)


def instructions(path):
    text = open(path).read()
    text = re.sub(r"\\\n", " ", text)
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        yield word.upper(), rest.strip()


def substitute(text, args):
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)),
                  text)


def copy_into(sources, dest, root, workdir):
    target = dest if dest.startswith("/") else os.path.join(workdir, dest)
    into = root + target
    if len(sources) > 1 or target.endswith("/"):
        os.makedirs(into, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(into), exist_ok=True)
    for src in sources:
        if os.path.isdir(src):
            dst = into if (len(sources) == 1 and not target.endswith("/")) or src.endswith("/") \
                else os.path.join(into, os.path.basename(src.rstrip("/")))
            shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
        elif not os.path.exists(src):
            raise SystemExit(f"dockerfile-chroot: COPY: {src} not found")
        else:
            dst = os.path.join(into, os.path.basename(src)) if os.path.isdir(into) else into
            shutil.copy2(src, dst)


def context_tree(work):
    """The build context: the tracked files (what .dockerignore leaves of a clean checkout)."""
    ctx = os.path.join(work, "context")
    shutil.rmtree(ctx, ignore_errors=True)
    os.makedirs(ctx)
    archive = subprocess.run(["git", "-C", SOURCE_DIR, "ls-files", "-z"], check=True,
                             stdout=subprocess.PIPE).stdout.split(b"\0")
    for rel in filter(None, archive):
        rel = rel.decode()
        src = os.path.join(SOURCE_DIR, rel)
        if not os.path.lexists(src):
            continue
        os.makedirs(os.path.dirname(os.path.join(ctx, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(ctx, rel), follow_symlinks=False)
    return ctx


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/var/tmp/hami-dockerfile-chroot")
    ap.add_argument("--cuda", default="/usr/local/cuda")
    ap.add_argument("--mirror", default="http://deb.debian.org/debian")
    ap.add_argument("--dockerfile", default=os.path.join(SOURCE_DIR, "deploy", "Dockerfile"))
    ap.add_argument("--reuse", action="store_true",
                    help="keep the stages' trees of an earlier run (faster; not a clean build)")
    o = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("dockerfile-chroot: needs root (debootstrap, chroot)")
    os.makedirs(o.work, exist_ok=True)
    ctx = context_tree(o.work)
    args, stages, current = {}, {}, None
    for word, rest in instructions(o.dockerfile):
        if word == "ARG":
            name, _, value = rest.partition("=")
            args.setdefault(name, value)
        elif word == "FROM":
            m = re.fullmatch(r"(\S+)\s+AS\s+(\S+)", substitute(rest, args), re.I)
            image, name = m.group(1), m.group(2)
            root = os.path.join(o.work, "stage-" + name)
            stages[name] = {"root": root, "workdir": "/"}
            current = stages[name]
            if image == "scratch":
                current["root"] = None  # stands for the build context named like the stage
                continue
            rel = re.fullmatch(r"debian:(\w+?)(-slim)?", image)
            if not rel:
                raise SystemExit(f"dockerfile-chroot: FROM {image}: only debian:<release> images")
            if os.path.exists(os.path.join(root, "etc", "debian_version")):
                if o.reuse:
                    say(f"FROM {image}: reusing {root} (--reuse)")
                    continue
                shutil.rmtree(root)
            run(["debootstrap", "--variant=minbase", rel.group(1), root, o.mirror])
        elif word == "COPY":
            parts = shlex.split(substitute(rest, args))
            frm = None
            if parts[0].startswith("--from="):
                frm = parts.pop(0)[len("--from="):]
            *sources, dest = parts
            if frm is None:
                base = ctx
            elif frm in stages and stages[frm]["root"] is None:
                base = o.cuda  # --build-context <name>=<dir>
            elif frm in stages:
                base = stages[frm]["root"]
            else:
                raise SystemExit(f"dockerfile-chroot: COPY --from={frm}: no such stage")
            say(f"COPY {' '.join(sources)} -> {dest}")
            copy_into([os.path.join(base, s.lstrip("/")) for s in sources], dest,
                      current["root"], current["workdir"])
        elif word == "WORKDIR":
            current["workdir"] = rest
            os.makedirs(current["root"] + rest, exist_ok=True)
        elif word == "RUN":
            root = current["root"]
            os.makedirs(os.path.join(root, "proc"), exist_ok=True)
            run(["mount", "-t", "proc", "proc", os.path.join(root, "proc")])
            try:
                run(["chroot", root, "/bin/sh", "-c", f"cd {shlex.quote(current['workdir'])} && {rest}"],
                    env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                         "HOME": "/root", "DEBIAN_FRONTEND": "noninteractive"})
            finally:
                subprocess.run(["umount", os.path.join(root, "proc")])
        elif word == "LABEL":
            pass
        else:
            raise SystemExit(f"dockerfile-chroot: {word}: not handled")
    final = current["root"]
    for prog in ["hami-scheduler", "hami-device-plugin", "hami-monitor", "hami"]:
        run(["chroot", final, f"/usr/local/bin/{prog}", "--help"], stdout=subprocess.DEVNULL)
    lib = os.path.join(final, "opt", "hami", "lib", "libvgpu.so")
    if not os.path.isfile(lib):
        raise SystemExit(f"dockerfile-chroot: {lib} is missing")
    say(f"every stage ran; the image's programs start in {final}")


if __name__ == "__main__":
    sys.exit(main())
