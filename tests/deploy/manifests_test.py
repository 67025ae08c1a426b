#!/usr/bin/python3
"""deploy/ rendered by the real `kubectl kustomize` and checked against the code it deploys:
the objects the base must have and their key fields, every overlay's change, each container's
flags against its binary's --help, the configuration files read by the programs that read them,
gen-webhook-cert.sh's certificates, the Dockerfile's sources and targets, and the Grafana
dashboard's metric names against the metrics the code exports.

Environment: HAMI_BIN_DIR (the build's bin/), HAMI_LIB_DIR (its lib/), HAMI_BUILD_DIR,
HAMI_SOURCE_DIR.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("HAMI_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BUILD_DIR = os.environ.get("HAMI_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
BIN_DIR = os.environ.get("HAMI_BIN_DIR", os.path.join(BUILD_DIR, "bin"))
DEPLOY = os.path.join(SOURCE_DIR, "deploy")
KUBECTL = shutil.which("kubectl")
NAMESPACE = "hami-system"
HAMI_RESOURCES = ["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
                  "nvidia.com/gpucores", "nvidia.com/priority"]


def render(path):
    p = subprocess.run([KUBECTL, "kustomize", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise AssertionError(f"kubectl kustomize {path}: {p.stderr}")
    return [o for o in yaml.safe_load_all(p.stdout) if o]


def find(objs, kind, name=None, prefix=None):
    hits = [o for o in objs if o["kind"] == kind and
            (name is None or o["metadata"]["name"] == name) and
            (prefix is None or o["metadata"]["name"].startswith(prefix))]
    if len(hits) != 1:
        raise AssertionError(f"expected one {kind} {name or prefix or ''}, found {len(hits)}")
    return hits[0]


def containers(workload):
    return {c["name"]: c for c in workload["spec"]["template"]["spec"]["containers"]}


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def mounts_of(container):
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}


def host_paths(workload):
    return {v["name"]: v["hostPath"]["path"]
            for v in workload["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}


@unittest.skipIf(KUBECTL is None, "kubectl is not installed (Debian package kubernetes-client)")
class ManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="deploy-manifests-")
        cls.deploy = os.path.join(cls.tmp, "deploy")
        shutil.copytree(DEPLOY, cls.deploy, ignore=shutil.ignore_patterns("certs"))
        subprocess.run([os.path.join(cls.deploy, "gen-webhook-cert.sh"), "--days", "2"],
                       check=True, stdout=subprocess.DEVNULL)
        cls.base = render(os.path.join(cls.deploy, "base"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    # ---- The base ---------------------------------------------------------------------------

    def test_base_has_every_object_in_hami_system(self):
        names = sorted((o["kind"], o["metadata"]["name"]) for o in self.base)
        want = [("ClusterRole", "hami-device-plugin"), ("ClusterRole", "hami-monitor"),
                ("ClusterRole", "hami-scheduler"),
                ("ClusterRoleBinding", "hami-device-plugin"),
                ("ClusterRoleBinding", "hami-kube-scheduler"),
                ("ClusterRoleBinding", "hami-kube-scheduler-volumes"),
                ("ClusterRoleBinding", "hami-monitor"), ("ClusterRoleBinding", "hami-scheduler"),
                ("DaemonSet", "hami-device-plugin"), ("Deployment", "hami-scheduler"),
                ("MutatingWebhookConfiguration", "hami-webhook"), ("Namespace", "hami-system"),
                ("Role", "hami-scheduler-leader-election"),
                ("RoleBinding", "hami-scheduler-leader-election"),
                ("Service", "hami-monitor"), ("Service", "hami-scheduler"),
                ("ServiceAccount", "hami-device-plugin"), ("ServiceAccount", "hami-scheduler")]
        config_maps = [n for k, n in names if k == "ConfigMap"]
        self.assertEqual([n for n in names if n[0] != "ConfigMap"], want)
        self.assertEqual(len(config_maps), 2)
        self.assertTrue(any(n.startswith("hami-device-config-") for n in config_maps))
        self.assertTrue(any(n.startswith("hami-kube-scheduler-config-") for n in config_maps))
        cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding",
                          "MutatingWebhookConfiguration"}
        for o in self.base:
            if o["kind"] not in cluster_scoped:
                self.assertEqual(o["metadata"].get("namespace"), NAMESPACE, o["metadata"])

    def test_config_maps_hold_the_config_files_unchanged(self):
        device = find(self.base, "ConfigMap", prefix="hami-device-config-")
        sched = find(self.base, "ConfigMap", prefix="hami-kube-scheduler-config-")
        for cm, files in ((device, ["device-config.yaml", "config.json"]),
                          (sched, ["kube-scheduler-config.yaml"])):
            self.assertEqual(sorted(cm["data"]), sorted(files))
            for f in files:
                with open(os.path.join(DEPLOY, "base", "config", f)) as src:
                    self.assertEqual(cm["data"][f], src.read(), f)

    def test_kube_scheduler_configuration_names_hami_scheduler_as_its_extender(self):
        with open(os.path.join(DEPLOY, "base", "config", "kube-scheduler-config.yaml")) as f:
            c = yaml.safe_load(f)
        self.assertEqual(c["apiVersion"], "kubescheduler.config.k8s.io/v1")
        self.assertEqual(c["kind"], "KubeSchedulerConfiguration")
        self.assertEqual(c["profiles"][0]["schedulerName"], "hami-scheduler")
        self.assertTrue(c["leaderElection"]["leaderElect"])
        self.assertEqual(c["leaderElection"]["resourceNamespace"], NAMESPACE)
        e = c["extenders"][0]
        self.assertEqual((e["urlPrefix"], e["filterVerb"], e["prioritizeVerb"], e["preemptVerb"],
                          e["bindVerb"], e["weight"], e["httpTimeout"], e["nodeCacheCapable"],
                          e["enableHTTPS"]),
                         ("https://127.0.0.1:443", "filter", "prioritize", "preempt", "bind", 1,
                          "30s", True, True))
        self.assertEqual(e["managedResources"],
                         [{"name": r, "ignoredByScheduler": True} for r in HAMI_RESOURCES])
        # The extender is the hami-scheduler container's HTTPS port in the same pod.
        sched = containers(find(self.base, "Deployment", "hami-scheduler"))["hami-scheduler"]
        self.assertIn("--http-bind=:443", sched["command"])
        # And hami-scheduler's own configuration names the same resources.
        with open(os.path.join(DEPLOY, "base", "config", "device-config.yaml")) as f:
            d = yaml.safe_load(f)["nvidia"]
        self.assertEqual([d["resourceCountName"], d["resourceMemoryName"],
                          d["resourceMemoryPercentageName"], d["resourceCoreName"],
                          d["resourcePriorityName"]], HAMI_RESOURCES)

    def test_scheduler_deployment(self):
        d = find(self.base, "Deployment", "hami-scheduler")
        spec = d["spec"]["template"]["spec"]
        self.assertEqual(spec["serviceAccountName"], "hami-scheduler")
        c = containers(d)
        self.assertEqual(sorted(c), ["hami-scheduler", "kube-scheduler"])
        self.assertRegex(c["kube-scheduler"]["image"], r"^registry\.k8s\.io/kube-scheduler:v1\.32\.\d+$")
        self.assertIn("--config=/kube-scheduler/kube-scheduler-config.yaml",
                      c["kube-scheduler"]["command"])
        h = c["hami-scheduler"]
        for flag in ("--leader-elect", "--leader-elect-namespace=hami-system",
                     "--cert-file=/tls/tls.crt", "--key-file=/tls/tls.key",
                     "--device-config-file=/config/device-config.yaml",
                     "--metrics-bind-address=:9395"):
            self.assertIn(flag, h["command"])
        self.assertEqual(h["livenessProbe"]["httpGet"]["path"], "/healthz")
        self.assertEqual(h["readinessProbe"]["httpGet"]["path"], "/readyz")
        self.assertEqual(h["readinessProbe"]["httpGet"]["scheme"], "HTTPS")
        for name in c:
            self.assertIn("requests", c[name]["resources"])
            self.assertIn("memory", c[name]["resources"]["limits"])
        self.assertEqual(mounts_of(h), {"/config": "device-config", "/tls": "tls"})
        volumes = {v["name"]: v for v in spec["volumes"]}
        self.assertEqual(volumes["tls"]["secret"]["secretName"], "hami-scheduler-tls")
        svc = find(self.base, "Service", "hami-scheduler")
        self.assertEqual(sorted((p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]),
                         [("https", 443, "https"), ("metrics", 9395, "metrics")])
        ports = {p["name"]: p["containerPort"] for p in h["ports"]}
        self.assertEqual(ports, {"https": 443, "metrics": 9395})

    def test_device_plugin_daemonset(self):
        ds = find(self.base, "DaemonSet", "hami-device-plugin")
        spec = ds["spec"]["template"]["spec"]
        self.assertTrue(spec["hostPID"])
        self.assertEqual(spec["nodeSelector"], {"gpu": "on"})
        self.assertEqual(spec["serviceAccountName"], "hami-device-plugin")
        c = containers(ds)
        self.assertEqual(sorted(c), ["device-plugin", "monitor"])
        plugin, monitor = c["device-plugin"], c["monitor"]
        self.assertTrue(plugin["securityContext"]["privileged"])
        self.assertEqual(plugin["command"][0], "hami-device-plugin")
        self.assertIn("--vgpu-library=/opt/hami/lib/libvgpu.so", plugin["command"])
        for container in (plugin, monitor):
            env = env_of(container)
            self.assertEqual(env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"],
                             "spec.nodeName")
            self.assertEqual(env["HOOK_PATH"]["value"], "/usr/local")
            # The hook directory is mounted where it is on the host: the plugin hands host
            # paths to the kubelet.
            self.assertEqual(host_paths(ds)[mounts_of(container)["/usr/local/vgpu"]],
                             "/usr/local/vgpu")
        self.assertNotIn("LIBVGPU_HOSTPID_BROKER", env_of(plugin))
        paths = {path: host_paths(ds).get(vol) for path, vol in mounts_of(plugin).items()}
        self.assertEqual(paths["/var/lib/kubelet/device-plugins"], "/var/lib/kubelet/device-plugins")
        self.assertEqual(paths["/tmp/vgpulock"], "/tmp/vgpulock")
        self.assertEqual(paths["/config"], None)  # the ConfigMap
        self.assertEqual(monitor["command"][0], "hami-monitor")
        self.assertIn("--metrics-bind-address=:9394", monitor["command"])
        self.assertEqual(env_of(monitor)["HAMI_RESYNC_INTERVAL"]["value"], "5m")
        self.assertEqual({p["name"]: p["containerPort"] for p in monitor["ports"]},
                         {"metrics": 9394})
        self.assertEqual(monitor["livenessProbe"]["httpGet"]["path"], "/healthz")
        self.assertEqual(monitor["readinessProbe"]["httpGet"]["path"], "/readyz")
        svc = find(self.base, "Service", "hami-monitor")
        self.assertEqual(svc["spec"]["clusterIP"], "None")
        self.assertEqual(svc["spec"]["selector"], ds["spec"]["selector"]["matchLabels"])
        self.assertEqual([(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]],
                         [(9394, "metrics")])

    def test_webhook_configuration(self):
        w = find(self.base, "MutatingWebhookConfiguration", "hami-webhook")
        self.assertEqual(len(w["webhooks"]), 1)
        h = w["webhooks"][0]
        self.assertEqual(h["admissionReviewVersions"], ["v1"])
        self.assertEqual(h["sideEffects"], "NoneOnDryRun")
        self.assertIn(h["failurePolicy"], ("Ignore", "Fail"))
        self.assertEqual(h["clientConfig"]["service"],
                         {"name": "hami-scheduler", "namespace": NAMESPACE, "path": "/webhook",
                          "port": 443})
        self.assertEqual(h["rules"], [{"apiGroups": [""], "apiVersions": ["v1"],
                                       "operations": ["CREATE"], "resources": ["pods"],
                                       "scope": "Namespaced"}])
        ignore = {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn",
                                        "values": ["ignore"]}]}
        self.assertEqual(h["namespaceSelector"], ignore)
        self.assertEqual(h["objectSelector"], ignore)
        ns = find(self.base, "Namespace", NAMESPACE)
        self.assertEqual(ns["metadata"]["labels"]["hami.io/webhook"], "ignore")
        # The DaemonSet is privileged: Pod Security admission must let it in.
        self.assertEqual(ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
                         "privileged")

    def test_rbac_has_no_wildcards_and_no_secret_access(self):
        for o in self.base:
            if o["kind"] not in ("Role", "ClusterRole"):
                continue
            for rule in o["rules"]:
                for key in ("apiGroups", "resources", "verbs"):
                    self.assertNotIn("*", rule[key], f"{o['kind']} {o['metadata']['name']}")
                self.assertNotIn("secrets", rule["resources"])

    # ---- Overlays ---------------------------------------------------------------------------

    def test_cert_manager_overlay_issues_the_certificate_and_injects_its_ca(self):
        objs = render(os.path.join(self.deploy, "overlays", "cert-manager"))
        cert = find(objs, "Certificate", "hami-scheduler-serving")
        self.assertEqual(cert["spec"]["secretName"], "hami-scheduler-tls")
        self.assertIn("hami-scheduler.hami-system.svc", cert["spec"]["dnsNames"])
        issuer = find(objs, "Issuer", cert["spec"]["issuerRef"]["name"])
        self.assertEqual(issuer["metadata"]["namespace"], NAMESPACE)
        w = find(objs, "MutatingWebhookConfiguration", "hami-webhook")
        self.assertEqual(w["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
                         "hami-system/hami-scheduler-serving")
        self.assertEqual(len(objs), len(self.base) + 2)

    def test_generated_certificate_overlay_serves_a_certificate_the_ca_bundle_verifies(self):
        objs = render(os.path.join(self.deploy, "overlays", "generated-certificate"))
        secret = find(objs, "Secret", prefix="hami-scheduler-tls-")
        self.assertEqual(secret["type"], "kubernetes.io/tls")
        d = find(objs, "Deployment", "hami-scheduler")
        vols = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
        self.assertEqual(vols["tls"]["secret"]["secretName"], secret["metadata"]["name"])
        w = find(objs, "MutatingWebhookConfiguration", "hami-webhook")
        bundle = w["webhooks"][0]["clientConfig"]["caBundle"]
        self.assertEqual(bundle, secret["data"]["ca.crt"])
        import base64
        work = os.path.join(self.tmp, "verify")
        os.makedirs(work, exist_ok=True)
        for key in ("ca.crt", "tls.crt"):
            with open(os.path.join(work, key), "wb") as f:
                f.write(base64.b64decode(secret["data"][key]))
        with open(os.path.join(work, "bundle.crt"), "wb") as f:
            f.write(base64.b64decode(bundle))
        for name in ("hami-scheduler.hami-system.svc", "hami-scheduler.hami-system.svc.cluster.local"):
            p = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(work, "bundle.crt"),
                                "-verify_hostname", name, "-purpose", "sslserver",
                                os.path.join(work, "tls.crt")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.assertEqual(p.returncode, 0, p.stdout)
        p = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(work, "bundle.crt"),
                            "-verify_hostname", "evil.example.com", os.path.join(work, "tls.crt")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertNotEqual(p.returncode, 0, "the certificate must not be valid for other names")

    def test_gen_webhook_cert_keeps_files_refuses_bad_arguments_and_protects_the_key(self):
        script = os.path.join(self.deploy, "gen-webhook-cert.sh")
        out = os.path.join(self.tmp, "certs-test")
        p = subprocess.run([script, "--out", out], stdout=subprocess.PIPE, text=True, check=True)
        self.assertIn("wrote", p.stdout)
        self.assertEqual(os.stat(os.path.join(out, "tls.key")).st_mode & 0o777, 0o600)
        with open(os.path.join(out, "tls.crt")) as f:
            first = f.read()
        p = subprocess.run([script, "--out", out], stdout=subprocess.PIPE, text=True, check=True)
        self.assertIn("already holds certificates; kept", p.stdout)
        with open(os.path.join(out, "tls.crt")) as f:
            self.assertEqual(f.read(), first)
        subprocess.run([script, "--out", out, "--force"], stdout=subprocess.DEVNULL, check=True)
        with open(os.path.join(out, "tls.crt")) as f:
            self.assertNotEqual(f.read(), first)
        for args, message in ((["--days", "0"], "--days: '0' is not a positive whole number"),
                              (["--namespace", "Bad_NS"], "--namespace: 'Bad_NS' is not a DNS label"),
                              (["--ip", "10.0.0.256"], "--ip: '10.0.0.256' is not an IPv4 address"),
                              (["--bogus"], "unknown argument '--bogus'")):
            p = subprocess.run([script, "--out", out, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            self.assertEqual(p.returncode, 1)
            self.assertIn(message, p.stderr)

    def test_hostpid_broker_overlay_sets_the_gate_and_mounts_the_socket_directory(self):
        objs = render(os.path.join(self.deploy, "overlays", "hostpid-broker"))
        ds = find(objs, "DaemonSet", "hami-device-plugin")
        self.assertTrue(ds["spec"]["template"]["spec"]["hostPID"])
        plugin = containers(ds)["device-plugin"]
        self.assertEqual(env_of(plugin)["LIBVGPU_HOSTPID_BROKER"]["value"], "1")
        volume = mounts_of(plugin)["/var/run/hami/hostpid"]
        self.assertEqual(host_paths(ds)[volume], "/var/run/hami/hostpid")
        # The rest of the container is the base's.
        base_plugin = containers(find(self.base, "DaemonSet", "hami-device-plugin"))["device-plugin"]
        self.assertEqual(plugin["command"], base_plugin["command"])
        self.assertEqual(set(env_of(plugin)) - set(env_of(base_plugin)), {"LIBVGPU_HOSTPID_BROKER"})
        self.assertNotIn("LIBVGPU_HOSTPID_BROKER", env_of(containers(ds)["monitor"]))

    def test_env_delivery_overlay_changes_only_limit_delivery(self):
        objs = render(os.path.join(self.deploy, "overlays", "env-delivery"))
        cm = find(objs, "ConfigMap", prefix="hami-device-config-")
        base_cm = find(self.base, "ConfigMap", prefix="hami-device-config-")
        self.assertNotEqual(cm["metadata"]["name"], base_cm["metadata"]["name"])
        self.assertEqual(cm["data"]["config.json"], base_cm["data"]["config.json"])
        env_cfg = yaml.safe_load(cm["data"]["device-config.yaml"])["nvidia"]
        base_cfg = yaml.safe_load(base_cm["data"]["device-config.yaml"])["nvidia"]
        self.assertEqual(env_cfg.pop("limitDelivery"), "env")
        self.assertEqual(base_cfg.pop("limitDelivery"), "file")
        self.assertEqual(env_cfg, base_cfg)
        for kind in ("Deployment", "DaemonSet"):
            w = find(objs, kind, None, prefix="hami-")
            names = [v["configMap"]["name"] for v in w["spec"]["template"]["spec"]["volumes"]
                     if "configMap" in v and v["configMap"]["name"].startswith("hami-device-config")]
            self.assertEqual(names, [cm["metadata"]["name"]])

    # ---- The programs ------------------------------------------------------------------------

    def program(self, name):
        path = os.path.join(BIN_DIR, name)
        self.assertTrue(os.access(path, os.X_OK), f"{path} is not built")
        return path

    def test_every_flag_in_the_manifests_is_one_the_program_takes(self):
        helps = {}
        overlays = ["base", "dra", "dra-all-nodes"] + [
            os.path.join("overlays", o)
            for o in sorted(os.listdir(os.path.join(self.deploy, "overlays")))]
        for overlay in overlays:
            for o in render(os.path.join(self.deploy, overlay)):
                if o["kind"] not in ("Deployment", "DaemonSet"):
                    continue
                for c in containers(o).values():
                    prog = c["command"][0]
                    if prog == "kube-scheduler":
                        continue  # not ours: its image is registry.k8s.io's
                    if prog not in helps:
                        p = subprocess.run([self.program(prog), "--help"], stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True)
                        self.assertEqual(p.returncode, 0, p.stdout)
                        helps[prog] = set(re.findall(r"(--[a-z][a-z0-9-]*)", p.stdout))
                    for arg in c["command"][1:] + c.get("args", []):
                        flag = arg.split("=", 1)[0]
                        self.assertIn(flag, helps[prog], f"{overlay}: {prog} has no flag {flag}")
        self.assertEqual(sorted(helps),
                         ["hami-device-plugin", "hami-dra-plugin", "hami-monitor", "hami-scheduler"])

    def test_dra_overlays_add_the_driver_and_switch_the_webhook_only_when_asked(self):
        def scheduler_command(objs):
            d = [o for o in objs if o["kind"] == "Deployment" and
                 o["metadata"]["name"] == "hami-scheduler"]
            self.assertEqual(len(d), 1)
            return containers(d[0])["hami-scheduler"]["command"]

        dra = render(os.path.join(self.deploy, "dra"))
        classes = [o for o in dra if o["kind"] == "DeviceClass"]
        self.assertEqual([c["metadata"]["name"] for c in classes],
                         ["hami-core-gpu.project-hami.io"])
        self.assertEqual(classes[0]["apiVersion"], "resource.k8s.io/v1")
        self.assertEqual(classes[0]["spec"]["extendedResourceName"], "nvidia.com/gpu")
        self.assertIn("hami-dra-plugin", [o["metadata"]["name"] for o in dra
                                           if o["kind"] == "DaemonSet"])
        # While nodes migrate, pods asking for gpumem keep the device plugin's path.
        self.assertFalse([a for a in scheduler_command(dra) if a.startswith("--webhook-mode")])
        everywhere = render(os.path.join(self.deploy, "dra-all-nodes"))
        self.assertIn("--webhook-mode=dra", scheduler_command(everywhere))
        self.assertEqual(len([o for o in everywhere if o["kind"] == "DeviceClass"]), 1)

    def test_configuration_files_are_read_by_the_programs(self):
        cfg = os.path.join(DEPLOY, "base", "config")
        env_cfg = os.path.join(DEPLOY, "components", "env-delivery", "device-config.yaml")
        # Each program reads its file before it needs the API server: with an unreadable
        # kubeconfig the error must be the kubeconfig's, not the file's.
        missing = os.path.join(self.tmp, "no-kubeconfig")
        for argv in ([self.program("hami-scheduler"), "--device-config-file",
                      os.path.join(cfg, "device-config.yaml")],
                     [self.program("hami-scheduler"), "--device-config-file", env_cfg],
                     [self.program("hami"), "sim", "kube-scheduler", "--config",
                      os.path.join(cfg, "kube-scheduler-config.yaml")]):
            p = subprocess.run(argv + ["--kubeconfig", missing], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=30)
            self.assertNotEqual(p.returncode, 0, p.stdout)
            self.assertIn(f"kubeconfig {missing}", p.stdout, argv)
        # A bad key is refused naming it, so the check above would see one.
        bad = os.path.join(self.tmp, "bad-device-config.yaml")
        with open(bad, "w") as f:
            f.write("nvidia:\n  limitDelivery: files\n")
        p = subprocess.run([self.program("hami-scheduler"), "--device-config-file", bad,
                            "--kubeconfig", missing], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
        self.assertIn("limitDelivery", p.stdout)
        with open(os.path.join(cfg, "config.json")) as f:
            nodes = json.load(f)["nodeconfig"]
        self.assertEqual([n["name"] for n in nodes], ["gpu-node-example"])

    # ---- Dockerfile --------------------------------------------------------------------------

    def test_dockerfile_sources_and_targets_exist(self):
        with open(os.path.join(DEPLOY, "Dockerfile")) as f:
            text = f.read()
        lines = re.sub(r"\\\n", " ", text).splitlines()
        stages = re.findall(r"(?im)^FROM\s+\S+\s+AS\s+(\S+)", text)
        self.assertEqual(stages, ["cuda", "build", "runtime"])
        built = []
        for line in lines:
            m = re.search(r"--target\s+(.+?)(?:&&|$)", line)
            if m:
                built = m.group(1).split()
        self.assertEqual(sorted(built),
                         ["hami", "hami-device-plugin", "hami-dra-plugin", "hami-monitor",
                          "hami-scheduler", "vgpu"])
        p = subprocess.run(["cmake", "--build", BUILD_DIR, "--target", "help"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        targets = set(re.findall(r"^([A-Za-z0-9_.+-]+):", p.stdout, re.M))
        for t in built:
            self.assertIn(t, targets, f"the Dockerfile builds {t}, which is no CMake target")
        copies = [l.split()[1:] for l in lines if re.match(r"^COPY\s", l)]
        self.assertTrue(copies)
        # What the build stage installs (cmake --install ... --prefix /opt/hami-install
        # --component node), installed from this build into a temporary prefix.
        m = re.search(r"cmake --install build-ship --prefix (\S+) --component (\S+)", text)
        self.assertIsNotNone(m, "the build stage installs with cmake --install")
        prefix, component = m.group(1), m.group(2)
        staged = tempfile.mkdtemp(prefix="hami-image-install-")
        self.addCleanup(shutil.rmtree, staged, True)
        p = subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix", staged,
                            "--component", component],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(p.returncode, 0, p.stdout)
        cuda_root = os.environ.get("CUDAToolkit_ROOT", "/usr/local/cuda")
        from_cuda = set()
        for args in copies:
            stage = None
            if args[0].startswith("--from="):
                stage = args[0][len("--from="):]
                args = args[1:]
            *sources, dest = args
            for src in sources:
                if stage is None:
                    path = os.path.join(SOURCE_DIR, src)
                elif stage == "build":
                    self.assertTrue(src.startswith(prefix + "/"), src)
                    path = os.path.join(staged, src[len(prefix) + 1:])
                elif stage == "cuda":
                    # --build-context cuda=<toolkit>: paths relative to the toolkit's root.
                    self.assertFalse(src.startswith("/"), src)
                    path = os.path.join(cuda_root, src)
                    from_cuda.add(src)
                else:
                    self.fail(f"COPY from unknown stage {stage}")
                self.assertTrue(os.path.exists(path), f"COPY {src}: {path} does not exist")
        # The toolkit files the build reads are the ones copied: every toolkit header that
        # src/ and demo/ include, the typedef headers the generator reads, the stub, and what
        # those headers include in turn.
        with open(os.path.join(SOURCE_DIR, "scripts", "gen_cuda_api.py")) as f:
            m = re.search(r"for h in \(([^)]*)\)", f.read())
        self.assertIsNotNone(m, "scripts/gen_cuda_api.py names the typedef headers it reads")
        wanted = {"include/" + h for h in re.findall(r"'([^']+\.h)'", m.group(1))
                  if os.path.isfile(os.path.join(cuda_root, "include", h))}
        self.assertIn("include/cudaTypedefs.h", wanted)
        wanted.add("lib64/stubs/libcuda.so")
        for root in ("src", "demo"):
            for dirpath, _, files in os.walk(os.path.join(SOURCE_DIR, root)):
                for name in files:
                    if not name.endswith((".cc", ".h", ".c")) or name.endswith("_test.cc"):
                        continue
                    with open(os.path.join(dirpath, name), errors="replace") as f:
                        for inc in re.findall(r"^#include <([^>]+)>", f.read(), re.M):
                            if os.path.isfile(os.path.join(cuda_root, "include", inc)):
                                wanted.add("include/" + inc)
        todo = [w for w in wanted if w.endswith(".h")]
        while todo:
            with open(os.path.join(cuda_root, todo.pop()), errors="replace") as f:
                for inc in re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', f.read(), re.M):
                    if (os.path.isfile(os.path.join(cuda_root, "include", inc))
                            and "include/" + inc not in wanted):
                        wanted.add("include/" + inc)
                        todo.append("include/" + inc)
        self.assertEqual(from_cuda, wanted,
                         "the Dockerfile copies from the CUDA toolkit exactly what the build reads")
        # The build stage installs only the build's own packages.
        self.assertRegex(text, r"scripts/setup\.sh --build-only")
        self.assertRegex(text, r"cmake --preset ship")
        # What the runtime stage installs covers what the binaries link.
        runtime = text[text.index("AS runtime"):]
        installed = set(re.findall(r"^\s+(lib[a-z0-9+.-]+|ca-certificates)\s*\\?$", runtime, re.M))
        self.assertTrue(installed)
        base = {"libc6", "libstdc++6", "libgcc-s1", "zlib1g"}
        for pkg in installed:
            q = subprocess.run(["dpkg-query", "-W", "-f=${Depends}", pkg], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            self.assertEqual(q.returncode, 0, f"the runtime stage installs {pkg}: {q.stderr}")
        # apt installs what those packages depend on, and so on down: the whole closure.
        deps = set(base)
        todo = list(installed)
        while todo:
            q = subprocess.run(["dpkg-query", "-W", "-f=${Pre-Depends},${Depends}", todo.pop()],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if q.returncode != 0:
                continue  # an alternative this machine does not have; another one provides
            for d in q.stdout.replace("|", ",").split(","):
                name = d.strip().split(":")[0].split()[0] if d.strip() else ""
                if name and name not in deps:
                    deps.add(name)
                    todo.append(name)
        for binary in ["hami-scheduler", "hami-device-plugin", "hami-monitor", "hami"]:
            needed = self.needed_packages(os.path.join(BIN_DIR, binary))
            for lib, pkg in needed.items():
                # A sanitizer build's runtime is its own; the image is built without one.
                if re.match(r"^lib(a|ub|t|l)san\.so", lib):
                    continue
                self.assertTrue(pkg in installed or pkg in deps,
                                f"{binary} links {lib} (package {pkg}), which the runtime stage "
                                f"does not install")

    def needed_packages(self, path):
        self.assertTrue(os.path.exists(path), f"{path} is not built")
        p = subprocess.run(["objdump", "-p", path], stdout=subprocess.PIPE, text=True, check=True)
        needed = re.findall(r"^\s+NEEDED\s+(\S+)", p.stdout, re.M)
        ldd = subprocess.run(["ldd", path], stdout=subprocess.PIPE, text=True, check=True).stdout
        where = dict(re.findall(r"^\s+(\S+) => (/\S+)", ldd, re.M))
        out = {}
        for lib in needed:
            if lib.startswith("ld-linux"):
                continue  # the dynamic loader (libc6), which ldd lists without a path
            self.assertIn(lib, where, f"{path}: {lib} is not found by ldd")
            real = os.path.realpath(where[lib])
            q = subprocess.run(["dpkg", "-S", real], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
            if q.returncode != 0:
                q = subprocess.run(["dpkg", "-S", where[lib]], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
            self.assertEqual(q.returncode, 0, f"{path}: {lib} ({real}) belongs to no package")
            out[lib] = q.stdout.split(":")[0]
        return out

    # ---- Grafana -----------------------------------------------------------------------------

    def test_dashboard_is_valid_and_names_only_exported_metrics(self):
        with open(os.path.join(DEPLOY, "grafana", "hami-dashboard.json")) as f:
            dash = json.load(f)
        self.assertTrue(dash["title"])
        exprs = []

        def walk(panels):
            for p in panels:
                exprs.extend(t["expr"] for t in p.get("targets", []))
                walk(p.get("panels", []))

        walk(dash["panels"])
        exprs.extend(v["definition"] for v in dash["templating"]["list"] if "definition" in v)
        self.assertGreater(len(exprs), 10)
        used = set()
        for e in exprs:
            used |= set(re.findall(r"\bhami_[a-z0-9_]+", e))
        exported = set()
        for path in glob.glob(os.path.join(SOURCE_DIR, "src", "**", "*.cc"), recursive=True) + \
                glob.glob(os.path.join(SOURCE_DIR, "src", "**", "*.h"), recursive=True):
            if path.endswith("_test.cc") or "/sim/" in path:
                continue
            with open(path, errors="replace") as f:
                exported |= set(re.findall(r'"(hami_[a-z0-9_]+)', f.read()))
        for name in sorted(used):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            self.assertTrue(name in exported or base in exported,
                            f"the dashboard uses {name}, which no source in src/ exports")
        # Both daemons' metrics are shown.
        self.assertIn("hami_vgpu_memory_used_bytes", used)
        self.assertIn("hami_gpu_memory_allocated_bytes", used)
        ids = []

        def collect(panels):
            for p in panels:
                ids.append(p["id"])
                collect(p.get("panels", []))

        collect(dash["panels"])
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique")


if __name__ == "__main__":
    unittest.main(verbosity=2)
