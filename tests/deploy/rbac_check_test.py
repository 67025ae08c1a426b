#!/usr/bin/python3
"""tests/deploy/rbac_check.py on the rendered base and hand-made audits: each component's
requests that the roles grant pass, one they do not is named, grants nobody used are warned
about (errors with --strict), and bad input is refused naming the file and the field."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("HAMI_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
CHECKER = os.path.join(HERE, "rbac_check.py")
KUBECTL = shutil.which("kubectl")


def req(ua, verb, resource, group="", subresource="", namespace="", name=""):
    return {"user_agent": ua, "verb": verb, "group": group, "resource": resource,
            "subresource": subresource, "namespace": namespace, "name": name}


# What the three components do on a working cluster, one request per grant of the base.
SCHEDULER = [
    req("hami-scheduler", "list", "nodes"), req("hami-scheduler", "watch", "nodes"),
    req("hami-scheduler", "get", "nodes", name="node-1"),
    req("hami-scheduler", "patch", "nodes", name="node-1"),
    req("hami-scheduler", "list", "pods"), req("hami-scheduler", "watch", "pods"),
    req("hami-scheduler", "get", "pods", namespace="default", name="p"),
    req("hami-scheduler", "patch", "pods", namespace="default", name="p"),
    req("hami-scheduler", "create", "pods", subresource="binding", namespace="default", name="p"),
    req("hami-scheduler", "list", "resourcequotas"),
    req("hami-scheduler", "watch", "resourcequotas"),
    req("hami-scheduler", "get", "namespaces", name="default"),
    req("hami-scheduler", "create", "events", namespace="default"),
    req("hami-scheduler", "patch", "events", namespace="default", name="p.1"),
    req("hami-scheduler", "create", "leases", group="coordination.k8s.io",
        namespace="hami-system"),
    req("hami-scheduler", "get", "leases", group="coordination.k8s.io",
        namespace="hami-system", name="hami-scheduler"),
    req("hami-scheduler", "update", "leases", group="coordination.k8s.io",
        namespace="hami-system", name="hami-scheduler"),
    # The webhook in DRA mode: the claim template a rewritten pod names.
    req("hami-scheduler", "get", "resourceclaimtemplates", group="resource.k8s.io",
        namespace="default", name="hami-0123456789abcdef"),
    req("hami-scheduler", "create", "resourceclaimtemplates", group="resource.k8s.io",
        namespace="default"),
]
PLUGIN = [
    req("hami-device-plugin", "get", "nodes", name="node-1"),
    req("hami-device-plugin", "patch", "nodes", name="node-1"),
    req("hami-device-plugin", "patch", "nodes", subresource="status", name="node-1"),
    req("hami-device-plugin", "list", "pods"),
    req("hami-device-plugin", "patch", "pods", namespace="default", name="p"),
]
MONITOR = [
    req("hami-monitor", "list", "pods"), req("hami-monitor", "watch", "pods"),
    req("hami-monitor", "create", "events", namespace="default"),
    req("hami-monitor", "patch", "events", namespace="default", name="p.2"),
]
OTHERS = [req("kubectl", "create", "pods", namespace="default"),
          req("kube-scheduler", "list", "nodes")]


@unittest.skipIf(KUBECTL is None, "kubectl is not installed (Debian package kubernetes-client)")
class RbacCheckTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="rbac-check-")
        cls.manifests = os.path.join(cls.dir, "base.yaml")
        with open(cls.manifests, "w") as f:
            subprocess.run([KUBECTL, "kustomize", os.path.join(SOURCE_DIR, "deploy", "base")],
                           stdout=f, check=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def run_check(self, requests, *flags, manifests=None, audit_text=None):
        audit = os.path.join(self.dir, "audit.json")
        with open(audit, "w") as f:
            f.write(audit_text if audit_text is not None else json.dumps({"requests": requests}))
        p = subprocess.run([sys.executable, CHECKER, "--manifests", manifests or self.manifests,
                            "--audit", audit, *flags],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return p.returncode, p.stdout

    def test_every_grant_used_and_nothing_else_passes_strict(self):
        status, out = self.run_check(SCHEDULER + PLUGIN + MONITOR + OTHERS, "--strict")
        self.assertEqual(status, 0, out)
        self.assertIn("0 errors, 0 warnings", out)
        # kube-scheduler's cluster roles are named, and not counted.
        self.assertIn("ClusterRole system:kube-scheduler is defined by the cluster", out)
        self.assertIn("requests of other clients, not checked: kube-scheduler 1, kubectl 1", out)

    def test_request_not_granted_is_named_with_its_component_and_service_account(self):
        extra = [req("hami-device-plugin", "update", "nodes", name="node-1"),
                 req("hami-device-plugin", "update", "nodes", name="node-2"),
                 req("hami-monitor", "delete", "pods", namespace="default", name="victim"),
                 req("hami-scheduler", "update", "pods", subresource="status",
                     namespace="ns1", name="p")]
        status, out = self.run_check(SCHEDULER + PLUGIN + MONITOR + extra)
        self.assertEqual(status, 1, out)
        self.assertIn("error: hami-device-plugin (ServiceAccount hami-system/hami-device-plugin): "
                      "update nodes (2 requests, e.g. all namespaces or cluster scope, name node-1) "
                      "is not granted by its roles", out)
        # The monitor shares the plugin's ServiceAccount: neither role grants delete.
        self.assertIn("error: hami-monitor (ServiceAccount hami-system/hami-device-plugin): "
                      "delete pods (1 requests, e.g. namespace default, name victim)", out)
        self.assertIn("error: hami-scheduler (ServiceAccount hami-system/hami-scheduler): "
                      "update pods/status", out)
        self.assertIn("3 errors", out)

    def test_role_binding_grants_only_in_its_namespace_and_resource_names_hold(self):
        wrong = [req("hami-scheduler", "get", "leases", group="coordination.k8s.io",
                     namespace="kube-system", name="hami-scheduler"),
                 req("hami-scheduler", "update", "leases", group="coordination.k8s.io",
                     namespace="hami-system", name="someone-else")]
        status, out = self.run_check(SCHEDULER + PLUGIN + MONITOR + wrong)
        self.assertEqual(status, 1, out)
        self.assertIn("get leases.coordination.k8s.io (1 requests, e.g. namespace kube-system, "
                      "name hami-scheduler) is not granted", out)
        self.assertIn("update leases.coordination.k8s.io (1 requests, e.g. namespace "
                      "hami-system, name someone-else) is not granted", out)

    def test_unused_grant_is_a_warning_and_an_error_with_strict(self):
        without_watch = [r for r in MONITOR if r["verb"] != "watch"]
        status, out = self.run_check(SCHEDULER + PLUGIN + without_watch)
        self.assertEqual(status, 0, out)
        self.assertIn("warning: ServiceAccount hami-system/hami-device-plugin: ClusterRole "
                      "hami-monitor grants watch pods, which no request used", out)
        status, out = self.run_check(SCHEDULER + PLUGIN + without_watch, "--strict")
        self.assertEqual(status, 1, out)
        self.assertIn("error: ServiceAccount hami-system/hami-device-plugin: ClusterRole "
                      "hami-monitor grants watch pods", out)

    def test_a_grant_used_by_the_other_program_of_the_service_account_counts(self):
        # list pods is granted to the plugin and to the monitor by two roles; each role's rule
        # must be used by a request that it matches, whichever program made it.
        status, out = self.run_check(SCHEDULER + PLUGIN + MONITOR, "--strict")
        self.assertEqual(status, 0, out)

    def test_programs_sharing_a_service_account_share_its_grants(self):
        # The API server authorizes the ServiceAccount, not the program: the plugin's watch of
        # pods is granted by the monitor's role, since both run as hami-device-plugin.
        status, out = self.run_check(SCHEDULER + PLUGIN + MONITOR +
                                     [req("hami-device-plugin", "watch", "pods")], "--strict")
        self.assertEqual(status, 0, out)

    def test_component_without_requests_is_a_warning(self):
        status, out = self.run_check(SCHEDULER + PLUGIN)
        self.assertEqual(status, 0, out)
        self.assertIn("warning: hami-monitor (ServiceAccount hami-system/hami-device-plugin): "
                      "made no requests", out)

    def test_component_no_workload_runs_is_an_error_and_map_names_it(self):
        manifests = os.path.join(self.dir, "rbac-only.yaml")
        with open(self.manifests) as f, open(manifests, "w") as out:
            import yaml
            docs = [d for d in yaml.safe_load_all(f) if d and d["kind"] != "DaemonSet"]
            yaml.safe_dump_all(docs, out)
        status, out = self.run_check(SCHEDULER + PLUGIN + MONITOR, manifests=manifests)
        self.assertEqual(status, 1, out)
        self.assertIn("error: hami-device-plugin: made 5 requests but no workload in the "
                      "manifests runs it", out)
        status, out = self.run_check(SCHEDULER + PLUGIN + MONITOR, "--strict",
                                     "--map", "hami-device-plugin=hami-system/hami-device-plugin",
                                     "--map", "hami-monitor=hami-system/hami-device-plugin",
                                     manifests=manifests)
        self.assertEqual(status, 0, out)

    def test_an_audit_that_dropped_requests_is_a_warning(self):
        audit = json.dumps({"requests": SCHEDULER + PLUGIN + MONITOR, "dropped": 12})
        status, out = self.run_check(None, audit_text=audit)
        self.assertEqual(status, 0, out)
        self.assertIn("warning: the audit log dropped its 12 oldest requests", out)
        status, out = self.run_check(None, "--strict", audit_text=audit)
        self.assertEqual(status, 1, out)

    def test_wildcard_rule_is_reported(self):
        manifests = os.path.join(self.dir, "wildcard.yaml")
        with open(self.manifests) as f:
            text = f.read()
        with open(manifests, "w") as f:
            f.write(text.replace(
                "  resources:\n  - resourcequotas\n", "  resources:\n  - '*'\n"))
        status, out = self.run_check(SCHEDULER + PLUGIN + MONITOR, "--strict",
                                     manifests=manifests)
        self.assertEqual(status, 1, out)
        self.assertIn("ClusterRole hami-scheduler rules[2] has a wildcard", out)

    def test_bad_input_is_refused_naming_file_and_field(self):
        status, out = self.run_check(None, audit_text="{not json")
        self.assertEqual(status, 2, out)
        self.assertIn("audit.json: not JSON", out)
        status, out = self.run_check(None, audit_text='{"requests": [{"verb": "get"}]}')
        self.assertEqual(status, 2, out)
        self.assertIn("audit.json: requests[0].user_agent: missing", out)
        status, out = self.run_check(None, audit_text='{"items": []}')
        self.assertEqual(status, 2, out)
        self.assertIn('expected an object with a "requests" list', out)
        status, out = self.run_check([], manifests=os.path.join(self.dir, "absent.yaml"))
        self.assertEqual(status, 2, out)
        self.assertIn("absent.yaml: cannot read", out)
        bad = os.path.join(self.dir, "bad.yaml")
        with open(bad, "w") as f:
            f.write("a: [\n")
        status, out = self.run_check([], manifests=bad)
        self.assertEqual(status, 2, out)
        self.assertIn("bad.yaml: not YAML", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
