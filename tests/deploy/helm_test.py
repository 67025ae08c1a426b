#!/usr/bin/python3
"""deploy/helm/hami-cpp checked with the real helm against the kustomize deploy: `helm lint
--strict` passes; for each setting of the chart, `helm template` renders the same objects as
`kubectl kustomize` renders for the overlay, component or kustomization that stands for it,
object by object and field by field; values with no kustomize counterpart (scheduler policies,
the GPU core policy, another namespace) change exactly what they should; bad values are refused
naming the value. On `hami sim apiserver` the render applies, and `helm install --dry-run=server`
renders NOTES.txt from what the server holds and refuses namespace.create=true once the
namespace exists.

What the comparison leaves out, and why (nothing else is normalized):
- Helm's labels `helm.sh/chart` and `app.kubernetes.io/managed-by` in each object's
  metadata.labels (the test checks their values, then removes them).
- kustomize's content-hash suffix on the generated ConfigMaps (`hami-device-config-<hash>`,
  `hami-kube-scheduler-config-<hash>`) and on overlays/generated-certificate's Secret
  (`hami-scheduler-tls-<hash>`): in their names and in the pod templates' volumes that name
  them. The chart's names are fixed.
- The chart's `checksum/...` annotations on pod templates, which stand in for those hashes.
  test_checksums_roll_the_pods_whenever_kustomize_renames holds them to the same property: a
  checksum changes between two settings exactly when kustomize's name does.
- overlays/generated-certificate's Secret itself: with webhook.certificate=secret the chart uses
  a Secret made beforehand and renders none.
- The line breaks kustomize puts into that overlay's caBundle (the Secret's base64, wrapped):
  the API server decodes the field ignoring them; the test compares the base64 of the bytes.

Environment: HAMI_HELM (the helm binary; default scripts/setup.sh's
/opt/hami-tools/helm-3.17.1/helm, else helm on PATH), HAMI_BIN_DIR (the build's bin/, for
hami-scheduler and `hami sim apiserver`; the checks that run them skip without it),
HAMI_SOURCE_DIR.
"""

import base64
import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("HAMI_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BIN_DIR = os.environ.get("HAMI_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
DEPLOY = os.path.join(SOURCE_DIR, "deploy")
CHART = os.path.join(DEPLOY, "helm", "hami-cpp")
KUBECTL = shutil.which("kubectl")
SETUP_HELM = "/opt/hami-tools/helm-3.17.1/helm"  # where scripts/setup.sh installs it


def find_helm():
    if os.environ.get("HAMI_HELM"):
        return os.environ["HAMI_HELM"]
    if os.access(SETUP_HELM, os.X_OK):
        return SETUP_HELM
    return shutil.which("helm")


HELM = find_helm()
NAMESPACE = "hami-system"
RELEASE = "hami-cpp"
HELM_LABELS = {"helm.sh/chart": "hami-cpp-0.1.0", "app.kubernetes.io/managed-by": "Helm"}
# kustomize's generated objects (kind, name before the hash) and the chart's pod-template
# annotation that stands for each one's hash.
GENERATED = {("ConfigMap", "hami-device-config"): "checksum/device-config",
             ("ConfigMap", "hami-kube-scheduler-config"): "checksum/kube-scheduler-config",
             ("Secret", "hami-scheduler-tls"): "checksum/webhook-ca-bundle"}
WORKLOADS = ("Deployment", "DaemonSet")


def describe(obj):
    m = obj["metadata"]
    ns = m.get("namespace")
    return f"{obj['kind']} {ns + '/' if ns else ''}{m['name']}"


def key_of(obj):
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def diff(a, b, path=""):
    """The paths at which `a` (the chart's) and `b` (kustomize's) differ, each with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            p = f"{path}.{k}" if path else str(k)
            if k not in b:
                out.append(f"{p}: only in the chart: {a[k]!r:.300}")
            elif k not in a:
                out.append(f"{p}: only in kustomize: {b[k]!r:.300}")
            else:
                out.extend(diff(a[k], b[k], p))
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = []
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items in the chart, {len(b)} in kustomize")
        for i, (x, y) in enumerate(zip(a, b)):
            out.extend(diff(x, y, f"{path}[{i}]"))
        return out
    if isinstance(a, str) and isinstance(b, str) and a != b and "\n" in a + b:
        # A file's text: the first line that differs.
        la, lb = a.split("\n"), b.split("\n")
        for i, (x, y) in enumerate(zip(la, lb)):
            if x != y:
                return [f"{path}: line {i + 1}: chart {x!r}, kustomize {y!r}"]
        return [f"{path}: {len(la)} lines in the chart, {len(lb)} in kustomize"]
    if a != b or type(a) is not type(b):
        return [f"{path}: chart {a!r:.300}, kustomize {b!r:.300}"]
    return []


def pod_template(obj):
    return obj["spec"]["template"]


def volumes(obj):
    return pod_template(obj)["spec"].get("volumes", [])


def run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


class Setting:
    """One chart setting and the kustomize tree that stands for it: an overlay of deploy/, or a
    kustomization of the test's own (resources, components and images, as deploy/README.md
    shows)."""

    def __init__(self, name, values, overlay=None, kustomization=None):
        self.name = name
        self.values = values
        self.overlay = overlay
        self.kustomization = kustomization


def merge(into, values):
    for k, v in values.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            merge(into[k], v)
        else:
            into[k] = v
    return into


BROKER = {"devicePlugin": {"hostPIDBroker": {"enabled": True}}}
ENV = {"limitDelivery": "env"}
IMAGES_VALUES = {"image": {"repository": "registry.example.com/gpu/hami-cpp", "tag": "0.2.0"},
                 "scheduler": {"kubeScheduler": {"image": {"tag": "v1.31.6"}}}}
IMAGES_KUSTOMIZE = [{"name": "hami-cpp", "newName": "registry.example.com/gpu/hami-cpp",
                     "newTag": "0.2.0"},
                    {"name": "registry.k8s.io/kube-scheduler", "newTag": "v1.31.6"}]


def secret_values(ca_bundle):
    return {"webhook": {"certificate": "secret", "caBundle": ca_bundle}}


@unittest.skipIf(HELM is None, "helm is not installed (scripts/setup.sh installs it at "
                 f"{SETUP_HELM}; or set HAMI_HELM)")
@unittest.skipIf(KUBECTL is None, "kubectl is not installed (Debian package kubernetes-client)")
class HelmChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="deploy-helm-")
        # Two copies of deploy/, each with a certificate of its own for
        # overlays/generated-certificate, so the checkout stays untouched.
        cls.deploys = []
        cls.ca_bundles = []
        for i in range(2):
            d = os.path.join(cls.tmp, f"deploy{i}")
            shutil.copytree(DEPLOY, d, ignore=shutil.ignore_patterns("certs"))
            subprocess.run([os.path.join(d, "gen-webhook-cert.sh"), "--days", "2"], check=True,
                           stdout=subprocess.DEVNULL)
            with open(os.path.join(d, "overlays", "generated-certificate", "certs", "ca.crt"),
                      "rb") as f:
                cls.ca_bundles.append(base64.b64encode(f.read()).decode())
            cls.deploys.append(d)
        cls.env = dict(os.environ)
        cls.env.update({"HELM_CACHE_HOME": os.path.join(cls.tmp, "helm-cache"),
                        "HELM_CONFIG_HOME": os.path.join(cls.tmp, "helm-config"),
                        "HELM_DATA_HOME": os.path.join(cls.tmp, "helm-data"),
                        "KUBECONFIG": os.path.join(cls.tmp, "no-kubeconfig")})
        ca = cls.ca_bundles[0]
        cls.settings = [
            Setting("cert-manager", {}, overlay="overlays/cert-manager"),
            Setting("secret", secret_values(ca), overlay="overlays/generated-certificate"),
            Setting("hostpid-broker", BROKER, overlay="overlays/hostpid-broker"),
            Setting("env-delivery", ENV, overlay="overlays/env-delivery"),
            Setting("hostpid-broker+env-delivery", merge(copy.deepcopy(BROKER), ENV),
                    kustomization={"resources": ["overlays/cert-manager"],
                                   "components": ["components/hostpid-broker",
                                                  "components/env-delivery"]}),
            Setting("images", IMAGES_VALUES,
                    kustomization={"resources": ["overlays/cert-manager"],
                                   "images": IMAGES_KUSTOMIZE}),
            Setting("secret+hostpid-broker+env-delivery+images",
                    merge(merge(merge(secret_values(ca), BROKER), ENV), IMAGES_VALUES),
                    kustomization={"resources": ["overlays/generated-certificate"],
                                   "components": ["components/hostpid-broker",
                                                  "components/env-delivery"],
                                   "images": IMAGES_KUSTOMIZE}),
        ]
        cls.rendered = {}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    # ---- Rendering --------------------------------------------------------------------------

    def helm(self, *args):
        return run([HELM, *args], env=self.env, timeout=120)

    def values_file(self, values):
        fd, path = tempfile.mkstemp(suffix=".yaml", dir=self.tmp)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(values, f)
        return path

    def helm_template(self, values, namespace=NAMESPACE):
        p = self.helm("template", RELEASE, CHART, "-n", namespace, "-f", self.values_file(values))
        self.assertEqual(p.returncode, 0, f"helm template with {values}: {p.stderr}")
        return p.stdout

    def chart_objects(self, values, namespace=NAMESPACE):
        return [o for o in yaml.safe_load_all(self.helm_template(values, namespace)) if o]

    def kustomize_objects(self, setting, deploy=None):
        deploy = deploy or self.deploys[0]
        if setting.overlay:
            path = os.path.join(deploy, setting.overlay)
        else:
            path = os.path.join(self.tmp, "kustomizations", os.path.basename(deploy),
                                setting.name)
            os.makedirs(path, exist_ok=True)
            k = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
            for field in ("resources", "components"):
                if field in setting.kustomization:
                    k[field] = [os.path.relpath(os.path.join(deploy, r), path)
                                for r in setting.kustomization[field]]
            if "images" in setting.kustomization:
                k["images"] = setting.kustomization["images"]
            with open(os.path.join(path, "kustomization.yaml"), "w") as f:
                yaml.safe_dump(k, f)
        p = run([KUBECTL, "kustomize", path], timeout=120)
        self.assertEqual(p.returncode, 0, f"kubectl kustomize {path}: {p.stderr}")
        return [o for o in yaml.safe_load_all(p.stdout) if o]

    def render_pair(self, setting, deploy=None):
        """(chart, kustomize) objects for a setting, each normalized, and what normalization
        took out: the chart's checksum annotations per workload, kustomize's hashed names per
        workload."""
        cache_key = (setting.name, deploy)
        if cache_key not in self.rendered:
            chart = self.chart_objects(merge({"namespace": {"create": True}},
                                             copy.deepcopy(setting.values)))
            kust = self.kustomize_objects(setting, deploy)
            self.rendered[cache_key] = (self.normalize_chart(chart),
                                        self.normalize_kustomize(kust))
        (chart, checksums), (kust, hashed) = copy.deepcopy(self.rendered[cache_key])
        return chart, checksums, kust, hashed

    # ---- Normalization (the module's docstring lists all of it) -----------------------------

    def normalize_chart(self, objs):
        checksums = {}
        for o in objs:
            labels = o["metadata"].get("labels", {})
            for k, v in HELM_LABELS.items():
                self.assertEqual(labels.pop(k, None), v, f"{describe(o)}: label {k}")
            if o["kind"] in WORKLOADS:
                meta = pod_template(o)["metadata"]
                ann = meta.get("annotations", {})
                checksums[o["metadata"]["name"]] = {k: ann.pop(k) for k in list(ann)
                                                    if k.startswith("checksum/")}
                if not ann:
                    meta.pop("annotations", None)
        return objs, checksums

    def normalize_kustomize(self, objs):
        renamed = {}
        for o in objs:
            for kind, name in GENERATED:
                m = re.fullmatch(rf"{re.escape(name)}-[a-z0-9]{{10}}", o["metadata"]["name"])
                if o["kind"] == kind and m:
                    renamed[o["metadata"]["name"]] = name
                    o["metadata"]["name"] = name
        for o in objs:
            if o["kind"] == "MutatingWebhookConfiguration":
                for hook in o["webhooks"]:
                    cc = hook["clientConfig"]
                    if "caBundle" in cc:
                        cc["caBundle"] = base64.b64encode(base64.b64decode(cc["caBundle"])).decode()
        hashed = {}
        for o in objs:
            if o["kind"] not in WORKLOADS:
                continue
            refs = hashed.setdefault(o["metadata"]["name"], {})
            for v in volumes(o):
                for kind, source, field in (("ConfigMap", "configMap", "name"),
                                            ("Secret", "secret", "secretName")):
                    if source in v and v[source][field] in renamed:
                        refs[(kind, renamed[v[source][field]])] = v[source][field]
                        v[source][field] = renamed[v[source][field]]
        return objs, hashed

    # ---- The chart itself -------------------------------------------------------------------

    def test_lint_strict_passes_for_every_setting(self):
        p = self.helm("lint", "--strict", CHART)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("0 chart(s) failed", p.stdout)
        for s in self.settings:
            with self.subTest(setting=s.name):
                p = self.helm("lint", "--strict", CHART, "-f", self.values_file(s.values))
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_chart_version_and_files_are_the_kustomize_trees(self):
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        self.assertEqual((chart["apiVersion"], chart["name"], chart["version"],
                          chart["appVersion"]), ("v2", "hami-cpp", "0.1.0", "0.1.0"))
        # The image tag the base deploys is the chart's appVersion.
        with open(os.path.join(DEPLOY, "base", "kustomization.yaml")) as f:
            images = {i["name"]: i for i in yaml.safe_load(f)["images"]}
        self.assertEqual(images["hami-cpp"]["newTag"], chart["appVersion"])
        with open(os.path.join(CHART, "values.yaml")) as f:
            values = yaml.safe_load(f)
        self.assertEqual(values["scheduler"]["kubeScheduler"]["image"]["tag"],
                         images["registry.k8s.io/kube-scheduler"]["newTag"])
        # The configuration files are copies, kept byte for byte.
        for copied, source in (("device-config.yaml", "base/config/device-config.yaml"),
                               ("config.json", "base/config/config.json"),
                               ("kube-scheduler-config.yaml",
                                "base/config/kube-scheduler-config.yaml"),
                               ("env-delivery/device-config.yaml",
                                "components/env-delivery/device-config.yaml")):
            with open(os.path.join(CHART, "files", copied)) as a, \
                    open(os.path.join(DEPLOY, source)) as b:
                self.assertEqual(a.read(), b.read(),
                                 f"deploy/helm/hami-cpp/files/{copied} differs from "
                                 f"deploy/{source}: copy it over")

    # ---- Chart against kustomize ------------------------------------------------------------

    def test_every_setting_renders_the_objects_kustomize_renders(self):
        for s in self.settings:
            with self.subTest(setting=s.name):
                chart, _, kust, _ = self.render_pair(s)
                only_kustomize = {key_of(o) for o in kust} - {key_of(o) for o in chart}
                if s.values.get("webhook", {}).get("certificate") == "secret":
                    # The Secret made beforehand: kustomize generates it, the chart uses it.
                    self.assertIn(("Secret", NAMESPACE, "hami-scheduler-tls"), only_kustomize)
                    only_kustomize.discard(("Secret", NAMESPACE, "hami-scheduler-tls"))
                self.assertEqual(sorted(only_kustomize), [], f"{s.name}: objects the chart lacks")
                extra = {key_of(o) for o in chart} - {key_of(o) for o in kust}
                self.assertEqual(sorted(extra), [], f"{s.name}: objects only the chart has")
                self.assertFalse([o for o in chart if o["kind"] == "Secret"])
                by_key = {key_of(o): o for o in kust}
                problems = []
                for o in chart:
                    d = diff(o, by_key[key_of(o)])
                    if d:
                        problems.append(f"{describe(o)}:\n    " + "\n    ".join(d))
                if problems:
                    self.fail(f"{s.name}: the chart and kustomize differ:\n" + "\n".join(problems))

    def test_checksums_roll_the_pods_whenever_kustomize_renames(self):
        """For each workload and each generated object it mounts, the chart's checksum
        annotation changes between two settings exactly when kustomize's hashed name does."""
        pairs = [(s, None) for s in self.settings]
        # The same settings with another certificate: a new Secret name, a new caBundle.
        pairs += [(s, self.deploys[1]) for s in self.settings
                  if s.values.get("webhook", {}).get("certificate") == "secret"]
        rows = []
        for s, deploy in pairs:
            if deploy is not None:
                s = Setting(s.name + " (another certificate)",
                            merge(copy.deepcopy(s.values), secret_values(self.ca_bundles[1])),
                            s.overlay, s.kustomization)
            _, checksums, _, hashed = self.render_pair(s, deploy)
            self.assertEqual(sorted(checksums), sorted(hashed), s.name)
            for workload, refs in hashed.items():
                # One annotation for each generated object the workload mounts, and no other.
                self.assertEqual(sorted(GENERATED[r] for r in refs), sorted(checksums[workload]),
                                 f"{s.name}: {workload}")
            rows.append((s.name, checksums, hashed))
        compared = 0
        for i, (name_a, sums_a, hashed_a) in enumerate(rows):
            for name_b, sums_b, hashed_b in rows[i + 1:]:
                for workload in hashed_a:
                    for ref in set(hashed_a[workload]) & set(hashed_b[workload]):
                        renamed = hashed_a[workload][ref] != hashed_b[workload][ref]
                        annotation = GENERATED[ref]
                        resummed = sums_a[workload][annotation] != sums_b[workload][annotation]
                        self.assertEqual(resummed, renamed,
                                         f"{workload}'s {ref[1]} between {name_a} and {name_b}: "
                                         f"kustomize renames it: {renamed}, the chart's checksum "
                                         f"changes: {resummed}")
                        compared += renamed
        self.assertGreater(compared, 0, "no setting changed a generated object")

    def test_without_namespace_create_only_the_namespace_is_left_out(self):
        default = self.chart_objects({})
        created = self.chart_objects({"namespace": {"create": True}})
        self.assertEqual(sorted(map(key_of, created)),
                         sorted(list(map(key_of, default)) + [("Namespace", "", NAMESPACE)]))
        by_key = {key_of(o): o for o in default}
        for o in created:
            if o["kind"] != "Namespace":
                self.assertEqual(o, by_key[key_of(o)], describe(o))

    # ---- Values without a kustomize counterpart ---------------------------------------------

    def changes(self, values):
        """Paths at which the chart's render with `values` differs from its default render."""
        default, _ = self.normalize_chart(self.chart_objects({}))
        changed, _ = self.normalize_chart(self.chart_objects(values))
        self.assertEqual(sorted(map(key_of, changed)), sorted(map(key_of, default)))
        by_key = {key_of(o): o for o in default}
        out = []
        for o in changed:
            out += [f"{describe(o)}: {d}" for d in diff(o, by_key[key_of(o)])]
        return out

    def device_config(self, values):
        cm = next(o for o in self.chart_objects(values) if o["kind"] == "ConfigMap"
                  and o["metadata"]["name"] == "hami-device-config")
        return cm["data"]["device-config.yaml"]

    def test_gpu_core_policy_sets_only_that_key_of_device_config(self):
        base = yaml.safe_load(self.device_config({}))["nvidia"]
        self.assertEqual(base["gpuCorePolicy"], "default")
        for policy in ("force", "disable"):
            with self.subTest(policy=policy):
                values = {"devices": {"nvidia": {"gpuCorePolicy": policy}}}
                changes = self.changes(values)
                self.assertEqual(len(changes), 1, changes)
                self.assertTrue(changes[0].startswith(
                    f"ConfigMap {NAMESPACE}/hami-device-config: data.device-config.yaml:"),
                    changes)
                got = yaml.safe_load(self.device_config(values))["nvidia"]
                self.assertEqual(got.pop("gpuCorePolicy"), policy)
                self.assertEqual(got, {k: v for k, v in base.items() if k != "gpuCorePolicy"})
                # And with env delivery, on that file.
                both = yaml.safe_load(self.device_config(merge(copy.deepcopy(values), ENV)))
                self.assertEqual((both["nvidia"]["gpuCorePolicy"], both["nvidia"]["limitDelivery"]),
                                 (policy, "env"))

    def test_scheduler_policies_set_only_the_schedulers_flags(self):
        values = {"scheduler": {"defaultSchedulerPolicy": {"nodeSchedulerPolicy": "spread",
                                                           "gpuSchedulerPolicy": "binpack,numa"}}}
        changes = self.changes(values)
        prefix = f"Deployment {NAMESPACE}/hami-scheduler: spec.template.spec.containers[1].command"
        self.assertEqual(len(changes), 2, changes)
        self.assertTrue(any(c.startswith(prefix) and "'--node-scheduler-policy=spread'" in c
                            for c in changes), changes)
        self.assertTrue(any(c.startswith(prefix) and "'--gpu-scheduler-policy=binpack,numa'" in c
                            for c in changes), changes)

    def test_gpu_scheduler_policies_the_chart_takes_are_those_hami_scheduler_takes(self):
        scheduler = os.path.join(BIN_DIR, "hami-scheduler")
        if not os.access(scheduler, os.X_OK):
            self.skipTest(f"{scheduler} is not built")
        missing = os.path.join(self.tmp, "no-kubeconfig")
        for policy in ("spread", "binpack", "binpack,numa", "topology-aware,mutex,numa",
                       "mutex", "binpack,spread", "numa,numa", "pack", "binpack,"):
            with self.subTest(policy=policy):
                values = {"scheduler": {"defaultSchedulerPolicy": {"gpuSchedulerPolicy": policy}}}
                p = self.helm("template", RELEASE, CHART, "-n", NAMESPACE, "-f",
                              self.values_file(values))
                # The program checks its flags before it reads the kubeconfig.
                q = run([scheduler, "--gpu-scheduler-policy", policy, "--kubeconfig", missing],
                        timeout=30)
                program_takes = f"kubeconfig {missing}" in q.stdout + q.stderr
                self.assertEqual(p.returncode == 0, program_takes,
                                 f"{policy}: helm: {p.stderr.strip()}; hami-scheduler: "
                                 f"{(q.stdout + q.stderr).strip()}")

    def test_rendered_device_configs_are_read_by_hami_scheduler(self):
        scheduler = os.path.join(BIN_DIR, "hami-scheduler")
        if not os.access(scheduler, os.X_OK):
            self.skipTest(f"{scheduler} is not built")
        missing = os.path.join(self.tmp, "no-kubeconfig")
        for values in ({"devices": {"nvidia": {"gpuCorePolicy": "force"}}},
                       merge({"devices": {"nvidia": {"gpuCorePolicy": "disable"}}}, ENV)):
            with self.subTest(values=values):
                path = os.path.join(self.tmp, "device-config.yaml")
                with open(path, "w") as f:
                    f.write(self.device_config(values))
                q = run([scheduler, "--device-config-file", path, "--kubeconfig", missing],
                        timeout=30)
                self.assertIn(f"kubeconfig {missing}", q.stdout + q.stderr)

    def test_another_namespace_replaces_hami_system_everywhere(self):
        ns = "gpu-sharing"
        for certificate in ({}, secret_values(self.ca_bundles[0])):
            with self.subTest(certificate=certificate.get("webhook", {}).get("certificate",
                                                                             "cert-manager")):
                values = merge({"namespace": {"create": True}}, copy.deepcopy(certificate))
                text = self.helm_template(values, namespace=ns)
                self.assertNotIn(NAMESPACE, text)
                objs = [o for o in yaml.safe_load_all(text) if o]
                for o in objs:
                    if o["kind"] == "Namespace":
                        self.assertEqual(o["metadata"]["name"], ns)
                    elif o["kind"] not in ("ClusterRole", "ClusterRoleBinding",
                                           "MutatingWebhookConfiguration"):
                        self.assertEqual(o["metadata"]["namespace"], ns, describe(o))
                    for subject in o.get("subjects", []):
                        if subject["kind"] == "ServiceAccount":
                            self.assertEqual(subject["namespace"], ns, describe(o))
                by_name = {(o["kind"], o["metadata"]["name"]): o for o in objs}
                hook = by_name[("MutatingWebhookConfiguration", "hami-webhook")]
                self.assertEqual(hook["webhooks"][0]["clientConfig"]["service"]["namespace"], ns)
                cm = by_name[("ConfigMap", "hami-kube-scheduler-config")]
                sched_cfg = yaml.safe_load(cm["data"]["kube-scheduler-config.yaml"])
                self.assertEqual(sched_cfg["leaderElection"]["resourceNamespace"], ns)
                command = pod_template(by_name[("Deployment", "hami-scheduler")])["spec"][
                    "containers"][1]["command"]
                self.assertIn(f"--leader-elect-namespace={ns}", command)
                if not certificate:
                    self.assertEqual(
                        hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
                        f"{ns}/hami-scheduler-serving")
                    cert = by_name[("Certificate", "hami-scheduler-serving")]
                    self.assertIn(f"hami-scheduler.{ns}.svc", cert["spec"]["dnsNames"])

    # ---- Refused values ---------------------------------------------------------------------

    def test_bad_values_are_refused_naming_the_value(self):
        ca = self.ca_bundles[0]
        cases = [
            ({"limitDelivery": "envv"}, "limitDelivery must be one of the following"),
            ({"webhook": {"certificate": "foo"}},
             "webhook.certificate must be one of the following"),
            # With the certificate made beforehand, the base64 of a PEM certificate.
            ({"webhook": {"certificate": "secret"}}, "webhook.caBundle: Does not match pattern"),
            ({"webhook": {"certificate": "secret",
                          "caBundle": base64.b64encode(b"not a certificate").decode()}},
             "webhook.caBundle: Does not match pattern"),
            ({"webhook": {"certificate": "secret", "caBundle": ca[:-4] + "%%%%"}},
             "webhook.caBundle: Does not match pattern"),
            # cert-manager injects the CA: a caBundle would be ignored.
            ({"webhook": {"caBundle": ca}},
             "webhook.caBundle: String length must be less than or equal to 0"),
            ({"devices": {"nvidia": {"gpuCorePolicy": "forced"}}},
             "devices.nvidia.gpuCorePolicy must be one of the following"),
            ({"scheduler": {"defaultSchedulerPolicy": {"nodeSchedulerPolicy": "pack"}}},
             "scheduler.defaultSchedulerPolicy.nodeSchedulerPolicy must be one of the following"),
            ({"scheduler": {"defaultSchedulerPolicy": {"gpuSchedulerPolicy": "binpack,spread"}}},
             "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy: Must not validate the schema"),
            ({"scheduler": {"defaultSchedulerPolicy": {"gpuSchedulerPolicy": "numa,mutex,numa"}}},
             "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy: Must not validate the schema"),
            ({"scheduler": {"defaultSchedulerPolicy": {"gpuSchedulerPolicy": "fast"}}},
             "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy: Does not match pattern"),
            ({"devicePlugin": {"hostPID": False}},
             "devicePlugin.hostPID must be one of the following: true"),
            ({"devicePlugin": {"hostPIDBroker": {"enabled": "yes"}}},
             "devicePlugin.hostPIDBroker.enabled: Invalid type"),
            ({"image": {"pullPolicy": "Sometimes"}},
             "image.pullPolicy must be one of the following"),
            ({"limitDeliverry": "env"}, "Additional property limitDeliverry is not allowed"),
            ({"namespace": {"create": "yes"}}, "namespace.create: Invalid type"),
        ]
        for values, message in cases:
            with self.subTest(values=values):
                path = self.values_file(values)
                for command in (["template", RELEASE, CHART, "-n", NAMESPACE, "-f", path],
                                ["lint", "--strict", CHART, "-f", path]):
                    p = self.helm(*command)
                    self.assertNotEqual(p.returncode, 0, f"helm {command[0]} took {values}")
                    self.assertIn(message, p.stdout + p.stderr, command[0])

    # ---- Applied to the simulated API server ------------------------------------------------

    def test_render_applies_to_the_simulated_api_server(self):
        if not os.access(os.path.join(BIN_DIR, "hami"), os.X_OK):
            self.skipTest(f"{BIN_DIR}/hami is not built")
        sys.path.insert(0, HERE)
        from apply_test import Server, served_kinds, group_of
        d = os.path.join(self.tmp, "apiserver")
        os.makedirs(d)
        server = Server(d)
        self.addCleanup(server.stop)
        env = dict(self.env, KUBECONFIG=server.kubeconfig, HOME=d)
        # The certificate made beforehand: cert-manager's kinds are not served there.
        values = merge(merge(secret_values(self.ca_bundles[0]), BROKER), ENV)

        def dry_run_install(namespace_create):
            # Helm's server-side dry run: the objects checked against what the server holds,
            # NOTES.txt rendered with lookup answering from it. The server publishes no OpenAPI
            # document to validate against.
            v = merge(copy.deepcopy(values), {"namespace": {"create": namespace_create}})
            return run([HELM, "install", RELEASE, CHART, "-n", NAMESPACE, "-f",
                        self.values_file(v), "--dry-run=server", "--disable-openapi-validation"],
                       env=env, timeout=120)

        def notes():
            p = dry_run_install(False)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            return p.stdout[p.stdout.index("NOTES:"):]

        def apply(objs):
            path = os.path.join(d, "objects.yaml")
            with open(path, "w") as f:
                yaml.safe_dump_all(objs, f)
            out = server.kubectl_ok("apply", "-f", path)
            for o in objs:
                self.assertRegex(out, rf"(?m)^[a-z0-9.-]+/{re.escape(o['metadata']['name'])} "
                                 "created$", f"{describe(o)} was not created:\n{out}")
            again = server.kubectl_ok("apply", "-f", path)
            self.assertNotIn(" created", again)
            self.assertNotIn(" configured", again)

        objs = [o for o in yaml.safe_load_all(
            self.helm_template(merge({"namespace": {"create": True}}, copy.deepcopy(values))))
            if o]
        served = served_kinds(server)
        self.assertEqual([describe(o) for o in objs
                          if (group_of(o["apiVersion"]), o["kind"]) not in served], [])
        label = (f"kubectl label namespace {NAMESPACE} hami.io/webhook=ignore "
                 "pod-security.kubernetes.io/enforce=privileged")
        self.assertIn(label, notes(), "no namespace yet: the notes say how to label it")
        # The namespace, labelled as the chart renders it: the notes no longer ask for labels.
        namespace = [o for o in objs if o["kind"] == "Namespace"]
        apply(namespace)
        self.assertNotIn(label, notes())
        self.assertIn("rollout status daemonset/hami-device-plugin", notes())
        # namespace.create=true is for rendering only: Helm does not take over a namespace that
        # exists already (values.yaml and the chart's README.md say so).
        p = dry_run_install(True)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertIn(f'Namespace "{NAMESPACE}" in namespace "" exists and cannot be imported '
                      "into the current release", p.stderr)
        # Everything else; the dry runs above created nothing.
        apply([o for o in objs if o["kind"] != "Namespace"])

if __name__ == "__main__":
    unittest.main(verbosity=2)
