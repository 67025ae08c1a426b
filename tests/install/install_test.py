#!/usr/bin/python3
"""`cmake --install` of this build: the layout docs/install-host.md promises, written out here
independently of cmake/HamiInstall.cmake; nothing of the build tree left in what is installed;
the `node` component alone; DESTDIR; and the installed `hami` running a program under a limit
on the simulated GPU with nothing but the installed files (and, as root, the installed hami-sim
bringing up a one-node cluster from the installed configuration).

Environment: HAMI_BUILD_DIR (the build tree), HAMI_SOURCE_DIR.
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("HAMI_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BUILD_DIR = os.environ.get("HAMI_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))

NODE = {
    "bin/hami", "bin/hami-scheduler", "bin/hami-device-plugin", "bin/hami-monitor",
    "bin/hami-dra-plugin", "lib/hami/libvgpu.so",
}
SIM = {
    "bin/hami-sim", "bin/hami-sim-pause", "bin/hami-demo", "bin/hami-memory-demo", "bin/hami-sm-demo",
    "lib/hami/sim/libcuda.so.1", "lib/hami/sim/libcuda.so",
    "lib/hami/sim/libnvidia-ml.so.1", "lib/hami/sim/libnvidia-ml.so",
    "share/hami/config/device-config.yaml", "share/hami/config/config.json",
    "share/hami/config/kube-scheduler-config.yaml",
}
LINKS = {"lib/hami/sim/libcuda.so": "libcuda.so.1",
         "lib/hami/sim/libnvidia-ml.so": "libnvidia-ml.so.1"}


def examples():
    # Every manifest under examples/, subfolders (examples/dra/) included.
    root = os.path.join(SOURCE_DIR, "examples")
    found = set()
    for folder, _, files in os.walk(root):
        for f in files:
            if f.endswith(".yaml"):
                rel = os.path.relpath(os.path.join(folder, f), root)
                found.add("share/hami/examples/" + rel)
    return found


def install(prefix, component=None, destdir=None):
    cmd = ["cmake", "--install", BUILD_DIR, "--prefix", prefix]
    if component:
        cmd += ["--component", component]
    env = dict(os.environ)
    env.pop("DESTDIR", None)
    if destdir:
        env["DESTDIR"] = destdir
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}")


def tree(root):
    found = set()
    for dirpath, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            found.add(os.path.relpath(os.path.join(dirpath, name), root))
    return found


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HAMI_", "CUDA_", "LD_", "LIBVGPU"))}
    env["PATH"] = "/usr/bin:/bin"
    return env


class InstallTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hami-install-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_layout(self):
        prefix = os.path.join(self.tmp, "usr", "local")
        install(prefix)
        self.assertEqual(tree(prefix), NODE | SIM | examples())
        for link, target in LINKS.items():
            path = os.path.join(prefix, link)
            self.assertTrue(os.path.islink(path), f"{link} is a link, as in the build")
            self.assertEqual(os.readlink(path), target)
        for rel in NODE | SIM:
            if rel.startswith("bin/"):
                self.assertTrue(os.access(os.path.join(prefix, rel), os.X_OK), rel)

    def test_nothing_points_into_the_build_tree(self):
        prefix = os.path.join(self.tmp, "p")
        install(prefix)
        for rel in sorted(NODE | SIM):
            if not rel.startswith(("bin/", "lib/")) or os.path.islink(os.path.join(prefix, rel)):
                continue
            p = subprocess.run(["readelf", "-d", os.path.join(prefix, rel)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            for line in p.stdout.splitlines():
                if "RPATH" in line or "RUNPATH" in line:
                    self.assertNotIn(os.path.realpath(BUILD_DIR), line,
                                     f"{rel} keeps a run path into the build tree: {line}")

    def test_node_component_alone(self):
        prefix = os.path.join(self.tmp, "node")
        install(prefix, component="node")
        self.assertEqual(tree(prefix), NODE)

    def test_destdir_stages_under_the_prefix(self):
        stage = os.path.join(self.tmp, "stage")
        install("/opt/hami-prefix", component="node", destdir=stage)
        self.assertEqual(tree(os.path.join(stage, "opt", "hami-prefix")), NODE)
        self.assertFalse(os.path.exists("/opt/hami-prefix"))

    def test_installed_hami_runs_a_program_under_a_limit(self):
        # Only the installed files: the build tree's bin/ and lib/ are out of reach (the
        # installed hami looks beside itself), and no HAMI_* variable points anywhere.
        prefix = os.path.join(self.tmp, "usr")
        install(prefix)
        env = clean_env()
        env["HAMI_SIM_STATE"] = os.path.join(self.tmp, "sim.state")
        hami = os.path.join(prefix, "bin", "hami")
        demo = os.path.join(prefix, "bin", "hami-memory-demo")
        p = subprocess.run([hami, "run", "-q", "--memory", "1g", "--", demo, "limit", "1g"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env, cwd=self.tmp, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertIn("an allocation past the limit is refused", p.stdout)
        self.assertNotIn(os.path.realpath(BUILD_DIR), p.stdout)

    @unittest.skipUnless(os.geteuid() == 0,
                         "needs root: the simulated cluster's runtime makes mount and PID namespaces")
    def test_installed_hami_sim_uses_the_installed_configuration(self):
        prefix = os.path.join(self.tmp, "usr")
        install(prefix)
        env = clean_env()
        hami = os.path.join(prefix, "bin", "hami")
        cluster = os.path.join(self.tmp, "cluster")
        up = subprocess.run([hami, "sim", "cluster", "up", "--dir", cluster, "--nodes", "1",
                             "--gpus", "h100-80g:1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=self.tmp, timeout=240)
        try:
            self.assertEqual(up.returncode, 0, up.stdout)
            examples_dir = os.path.realpath(os.path.join(prefix, "share", "hami", "examples"))
            self.assertIn(f"kubectl apply -f {examples_dir}/vgpu-3000m-30.yaml", up.stdout)
            with open(os.path.join(cluster, "cluster.json")) as f:
                self.assertTrue(json.load(f)["nodes"])
            # The configuration the cluster's programs were given is the installed one.
            config = os.path.realpath(os.path.join(prefix, "share", "hami", "config"))
            self.assertIn(f"configuration: {config}/device-config.yaml, {config}/config.json, "
                          f"{config}/kube-scheduler-config.yaml", up.stdout)
        finally:
            subprocess.run([hami, "sim", "cluster", "down", "--dir", cluster],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=120)


if __name__ == "__main__":
    unittest.main(verbosity=2)
