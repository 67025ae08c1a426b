#!/usr/bin/python3
"""The rendered deployment applied with the real kubectl to `hami sim apiserver`: every object of
the base and of every overlay is served and applies (twice: the second apply changes nothing
it should not), reads back as applied, and the webhook configuration leaves pod creation
working. Then hami-scheduler, started with the Deployment's own flags, configuration and the
generated certificate, runs against the server: its requests (GET /sim/audit) pass
tests/deploy/rbac_check.py against the rendered RBAC, and the rendered webhook configuration
(called by URL, with its own caBundle) makes the API server send GPU pods to hami-scheduler,
leave pods of hami-system alone and refuse a privileged GPU pod.

Objects of cert-manager.io (overlays/cert-manager) need cert-manager's CRDs, which the simulated
API server does not serve, as a cluster without cert-manager does not: they are the only objects
left out, and the test checks that they are exactly the overlay's Issuer and Certificate.

Environment: HAMI_BIN_DIR (the build's bin/, for `hami` and `hami-scheduler`), HAMI_SOURCE_DIR.
"""

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("HAMI_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BIN_DIR = os.environ.get("HAMI_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
DEPLOY = os.path.join(SOURCE_DIR, "deploy")
KUBECTL = shutil.which("kubectl")
TIMEOUT_S = 60

OVERLAYS = ["base", "overlays/cert-manager", "overlays/generated-certificate",
            "overlays/hostpid-broker", "overlays/env-delivery"]
# What a cluster without cert-manager does not serve.
CERT_MANAGER_GROUP = "cert-manager.io"


def group_of(api_version):
    return api_version.split("/")[0] if "/" in api_version else ""


def describe(obj):
    m = obj["metadata"]
    ns = m.get("namespace")
    return f"{obj['kind']} {ns + '/' if ns else ''}{m['name']}"


class StderrLog:
    """A process's stderr copied to a file line by line, with a wait for a line holding a text:
    the process's own announcement, not a poll."""

    def __init__(self, path):
        self.file = open(path, "w")
        self.lines = []
        self.cond = threading.Condition()
        self.ended = False
        self.thread = None

    def follow(self, stream):
        def copy():
            for line in stream:
                self.file.write(line)
                self.file.flush()
                with self.cond:
                    self.lines.append(line)
                    self.cond.notify_all()
            with self.cond:
                self.ended = True
                self.cond.notify_all()
        self.thread = threading.Thread(target=copy, daemon=True)
        self.thread.start()

    def wait_for(self, text, timeout_s):
        """True once a line holds `text`; False when the stream ended or `timeout_s` passed."""
        with self.cond:
            return self.cond.wait_for(
                lambda: any(text in l for l in self.lines) or self.ended, timeout_s) and \
                any(text in l for l in self.lines)

    def text(self):
        with self.cond:
            return "".join(self.lines)

    def close(self):
        if self.thread is not None:
            self.thread.join(timeout=20)
        self.file.close()


class Server:
    """One `hami sim apiserver` on a free port with its own kubeconfig and kubectl cache."""

    def __init__(self, directory):
        self.dir = directory
        self.kubeconfig = os.path.join(directory, "kubeconfig")
        self.log = open(os.path.join(directory, "apiserver.log"), "w+")
        self.proc = subprocess.Popen(
            [os.path.join(BIN_DIR, "hami"), "sim", "apiserver", "--port", "0",
             "--kubeconfig-out", self.kubeconfig],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        deadline = time.monotonic() + TIMEOUT_S
        self.url = None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("apiserver: "):
                self.url = line[len("apiserver: "):].strip()
                break
        if self.url is None:
            self.stop()
            raise AssertionError("hami sim apiserver printed no 'apiserver: URL' line: " +
                                 self.server_log())

    def server_log(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def env(self):
        env = dict(os.environ)
        env.update({"KUBECONFIG": self.kubeconfig, "HOME": self.dir,
                    "KUBECACHEDIR": os.path.join(self.dir, "kube-cache")})
        return env

    def kubectl(self, *args, input_text=None):
        p = subprocess.run([KUBECTL, "--cache-dir", os.path.join(self.dir, "kube-cache"), *args],
                           input=input_text, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=self.env(), timeout=TIMEOUT_S)
        return p.returncode, p.stdout

    def kubectl_ok(self, *args, input_text=None):
        status, out = self.kubectl(*args, input_text=input_text)
        if status != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: exit {status}:\n{out}")
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log.close()


def served_kinds(server):
    """(group, kind) of every resource the server's discovery lists."""
    out = server.kubectl_ok("api-resources", "--no-headers")
    kinds = set()
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4:
            kinds.add((group_of(cols[-3]), cols[-1]))
    return kinds


@unittest.skipIf(KUBECTL is None, "kubectl is not installed (Debian package kubernetes-client)")
class ApplyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="deploy-apply-")
        # A copy of deploy/ with a generated certificate, so the checkout stays untouched.
        cls.deploy = os.path.join(cls.tmp, "deploy")
        shutil.copytree(DEPLOY, cls.deploy,
                        ignore=shutil.ignore_patterns("certs"))
        # 127.0.0.1 too: the webhook test calls hami-scheduler by URL on loopback.
        subprocess.run([os.path.join(cls.deploy, "gen-webhook-cert.sh"), "--days", "2", "--ip",
                        "127.0.0.1"], check=True, stdout=subprocess.DEVNULL)
        cls.certs = os.path.join(cls.deploy, "overlays", "generated-certificate", "certs")
        cls.rendered = {}
        for o in OVERLAYS:
            p = subprocess.run([KUBECTL, "kustomize", os.path.join(cls.deploy, o)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if p.returncode != 0:
                raise AssertionError(f"kubectl kustomize {o}: {p.stderr}")
            cls.rendered[o] = p.stdout

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def start_server(self, name):
        d = os.path.join(self.tmp, name.replace("/", "_"))
        os.makedirs(d, exist_ok=True)
        server = Server(d)
        self.addCleanup(server.stop)
        return server

    def apply_overlay(self, overlay):
        server = self.start_server(overlay)
        objs = [o for o in yaml.safe_load_all(self.rendered[overlay]) if o]
        served = served_kinds(server)
        left_out = [o for o in objs if group_of(o["apiVersion"]) == CERT_MANAGER_GROUP]
        wanted = [o for o in objs if group_of(o["apiVersion"]) != CERT_MANAGER_GROUP]
        unserved = sorted({f"{o['kind']} ({o['apiVersion']})" for o in wanted
                           if (group_of(o["apiVersion"]), o["kind"]) not in served})
        self.assertEqual(unserved, [], f"{overlay}: kinds the simulated API server does not serve")
        path = os.path.join(server.dir, "manifests.yaml")
        with open(path, "w") as f:
            yaml.safe_dump_all(wanted, f)
        out = server.kubectl_ok("apply", "-f", path)
        for o in wanted:
            self.assertRegex(out, rf"(?m)^[a-z0-9.-]+/{re.escape(o['metadata']['name'])} created$",
                             f"{overlay}: {describe(o)} was not created:\n{out}")
        # A second apply of the same manifests: nothing to create, nothing refused.
        again = server.kubectl_ok("apply", "-f", path)
        self.assertNotIn(" created", again, f"{overlay}: the second apply created objects")
        got = json.loads(server.kubectl_ok("get", "-f", path, "-o", "json"))
        self.assertEqual(len(got["items"]), len(wanted))
        by_name = {(i["kind"], i["metadata"]["name"]): i for i in got["items"]}
        for o in wanted:
            item = by_name.get((o["kind"], o["metadata"]["name"]))
            self.assertIsNotNone(item, f"{overlay}: {describe(o)} does not read back")
            for key in ("spec", "rules", "roleRef", "subjects", "webhooks", "data"):
                if key in o and key != "spec":
                    self.assertEqual(item.get(key), o[key], f"{overlay}: {describe(o)}.{key}")
            if o["kind"] in ("Deployment", "DaemonSet"):
                self.assertEqual(
                    [c.get("command") for c in item["spec"]["template"]["spec"]["containers"]],
                    [c.get("command") for c in o["spec"]["template"]["spec"]["containers"]],
                    f"{overlay}: {describe(o)}'s containers")
        return server, objs, left_out

    def test_every_overlay_applies(self):
        for overlay in OVERLAYS:
            with self.subTest(overlay=overlay):
                server, objs, left_out = self.apply_overlay(overlay)
                if overlay in ("base", "overlays/generated-certificate"):
                    self.assertEqual(left_out, [])
                else:
                    # overlays/cert-manager and those built on it.
                    self.assertIn(overlay, OVERLAYS)
                if overlay in ("overlays/cert-manager", "overlays/hostpid-broker",
                               "overlays/env-delivery"):
                    self.assertEqual(sorted(describe(o) for o in left_out),
                                     ["Certificate hami-system/hami-scheduler-serving",
                                      "Issuer hami-system/hami-selfsigned"])
                # The webhook (a service reference) does not stand in the way of a pod.
                server.kubectl_ok("create", "-f", "-", input_text=json.dumps({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "after-apply", "namespace": "default"},
                    "spec": {"containers": [{"name": "main", "image": "busybox"}]}}))

    def start_scheduler(self, server, objs):
        """hami-scheduler with the rendered Deployment's flags, its /config and /tls mounts as
        files, on loopback ports; returns (process, extender port, log file) once it serves."""
        deployment = next(o for o in objs if o["kind"] == "Deployment")
        container = next(c for c in deployment["spec"]["template"]["spec"]["containers"]
                         if c["name"] == "hami-scheduler")
        root = os.path.join(server.dir, "pod")
        for o in objs:
            if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("hami-device-config"):
                os.makedirs(os.path.join(root, "config"), exist_ok=True)
                for k, v in o["data"].items():
                    with open(os.path.join(root, "config", k), "w") as f:
                        f.write(v)
        argv = [os.path.join(BIN_DIR, "hami-scheduler")]
        for a in container["command"][1:]:
            a = a.replace("=/config/", "=" + root + "/config/").replace("=/tls/", "=" + self.certs + "/")
            if a.startswith("--http-bind="):
                a = "--http-bind=127.0.0.1:0"
            if a.startswith("--metrics-bind-address="):
                a = "--metrics-bind-address=127.0.0.1:0"
            argv.append(a)
        argv += ["--kubeconfig", server.kubeconfig]
        log = StderrLog(os.path.join(server.dir, "scheduler.log"))
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        log.follow(proc.stderr)
        self.addCleanup(self.stop_scheduler, proc, log)
        line = proc.stdout.readline()
        m = re.match(r"hami-scheduler: serving on port (\d+)", line)
        if m is None:
            proc.wait(timeout=TIMEOUT_S)
            raise AssertionError(f"hami-scheduler did not start: {line}{log.text()}")
        return proc, int(m.group(1)), log

    @staticmethod
    def stop_scheduler(proc, log):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
        proc.stdout.close()
        log.close()

    @staticmethod
    def read_log(log):
        return log.text()[-6000:]

    def wait_ready(self, proc, port):
        ctx = ssl.create_default_context(cafile=os.path.join(self.certs, "ca.crt"))
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx,
                                            timeout=5) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError:
                pass  # 503 until the informers have synced
            time.sleep(0.2)  # polling an observable condition (/readyz), not a wait
        raise AssertionError("hami-scheduler did not become ready")

    def test_scheduler_with_the_deployments_flags_stays_within_its_rbac(self):
        overlay = "overlays/generated-certificate"
        server, objs, _ = self.apply_overlay(overlay)
        server.kubectl_ok("delete", "--raw", "/sim/audit")
        proc, port, log = self.start_scheduler(server, objs)
        self.wait_ready(proc, port)
        # Until it has taken the lease (its log says so): its steady state (informers, leader
        # election).
        self.assertTrue(log.wait_for("event=leading", TIMEOUT_S),
                        "hami-scheduler did not take the lease: " + self.read_log(log))
        self.assertIsNone(proc.poll(), "hami-scheduler exited: " + self.read_log(log))
        self.stop_scheduler(proc, log)
        self.assertEqual(proc.returncode, 0)
        audit = json.loads(server.kubectl_ok("get", "--raw", "/sim/audit"))
        verbs = {(r["verb"], r["resource"]) for r in audit["requests"]
                 if r["user_agent"] == "hami-scheduler"}
        for want in (("list", "nodes"), ("watch", "pods"), ("list", "resourcequotas"),
                     ("create", "leases")):
            self.assertIn(want, verbs)
        audit_path = os.path.join(server.dir, "audit.json")
        with open(audit_path, "w") as f:
            json.dump(audit, f)
        manifests = os.path.join(server.dir, "all.yaml")
        with open(manifests, "w") as f:
            f.write(self.rendered[overlay])
        p = subprocess.run([sys.executable, os.path.join(HERE, "rbac_check.py"), "--manifests",
                            manifests, "--audit", audit_path, "--component", "hami-scheduler"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertIn("0 errors", p.stdout)

    def test_webhook_with_the_generated_certificate_mutates_and_refuses_pods(self):
        overlay = "overlays/generated-certificate"
        server, objs, _ = self.apply_overlay(overlay)
        proc, port, log = self.start_scheduler(server, objs)
        self.wait_ready(proc, port)
        # The rendered webhook, called by URL (the simulated API server has no Service
        # network): the same caBundle, which must verify the served certificate.
        webhook = next(o for o in objs if o["kind"] == "MutatingWebhookConfiguration")
        cc = webhook["webhooks"][0]["clientConfig"]
        self.assertIn("caBundle", cc)
        cc.pop("service")
        cc["url"] = f"https://127.0.0.1:{port}/webhook"
        server.kubectl_ok("replace", "-f", "-", input_text=json.dumps(webhook))

        def pod(name, ns, privileged=False):
            c = {"name": "main", "image": "busybox",
                 "resources": {"limits": {"nvidia.com/gpumem": "3000"}}}
            if privileged:
                c["securityContext"] = {"privileged": True}
            return json.dumps({"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": name, "namespace": ns},
                               "spec": {"containers": [c]}})

        server.kubectl_ok("create", "-f", "-", input_text=pod("gpu", "default"))
        got = json.loads(server.kubectl_ok("get", "pod", "gpu", "-n", "default", "-o", "json"))
        self.assertEqual(got["spec"].get("schedulerName"), "hami-scheduler", self.read_log(log))
        self.assertEqual(got["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1")
        # hami-system is labelled hami.io/webhook=ignore: not sent to the webhook.
        server.kubectl_ok("create", "-f", "-", input_text=pod("gpu", "hami-system"))
        got = json.loads(server.kubectl_ok("get", "pod", "gpu", "-n", "hami-system", "-o", "json"))
        self.assertNotEqual(got["spec"].get("schedulerName"), "hami-scheduler")
        self.assertNotIn("nvidia.com/gpu", got["spec"]["containers"][0]["resources"]["limits"])
        status, out = server.kubectl("create", "-f", "-",
                                     input_text=pod("privileged", "default", privileged=True))
        self.assertNotEqual(status, 0, out)
        self.assertIn('admission webhook "vgpu.hami.io" denied the request', out)
        self.assertIn("privileged", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
