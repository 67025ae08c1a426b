"""Checks of the official Kubernetes Python client (Debian's python3-kubernetes) against
`hami sim apiserver`. Run by kube_clients_test as `/usr/bin/python3 python_client_checks.py
CHECK` with KUBECONFIG naming the server's kubeconfig. Prints "ok CHECK" and exits 0 when every
assertion holds; otherwise prints what failed and exits 1. Exits 77 when the client is not
installed.
"""

import json
import sys
import urllib.request

try:
    import urllib3
    from kubernetes import client, config, watch
    from kubernetes.client.rest import ApiException
except ImportError as missing:
    print(f"SKIP: {sys.executable} cannot import the Kubernetes client: {missing}")
    sys.exit(77)


def fail(message):
    raise AssertionError(message)


def expect_eq(what, got, want):
    if got != want:
        fail(f"{what}: got {got!r}, want {want!r}")


def api_exception(call, *args, **kwargs):
    """The ApiException that `call` raises; fails when it returns."""
    try:
        result = call(*args, **kwargs)
    except ApiException as e:
        return e
    fail(f"{call.__name__} succeeded ({type(result).__name__}) where an ApiException was due")


def pod(name, labels=None):
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels or {}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="main", image="busybox")]),
    )


def server_url():
    return client.Configuration.get_default_copy().host


def put_faults(faults):
    """PUT /sim/faults: the simulated server's fault injection (not part of the Kubernetes API)."""
    request = urllib.request.Request(
        server_url() + "/sim/faults",
        data=json.dumps(faults).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        expect_eq("PUT /sim/faults status", response.status, 200)
    with urllib.request.urlopen(server_url() + "/sim/faults", timeout=10) as response:
        return json.loads(response.read())


def check_list_with_label_selector_and_pagination(v1):
    wanted = {f"batch-{i}" for i in range(5)}
    for name in sorted(wanted):
        v1.create_namespaced_pod("default", pod(name, {"batch": "b1"}))
    for name in ("other-0", "other-1"):
        v1.create_namespaced_pod("default", pod(name, {"batch": "b2"}))

    seen = []
    pages = 0
    token = None
    while True:
        kwargs = {"label_selector": "batch=b1", "limit": 2}
        if token:
            kwargs["_continue"] = token
        page = v1.list_namespaced_pod("default", **kwargs)
        pages += 1
        if len(page.items) > 2:
            fail(f"page {pages} has {len(page.items)} items with limit=2")
        if not page.metadata.resource_version:
            fail(f"page {pages} has no metadata.resourceVersion")
        seen += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
        if pages > 5:
            fail("more than 5 pages for 5 pods with limit=2")
    expect_eq("pages", pages, 3)
    expect_eq("names listed (in order, no repeats)", seen, sorted(wanted))

    everything = v1.list_namespaced_pod("default")
    expect_eq("pods without a selector", len(everything.items), 7)
    expect_eq("continue without a limit", everything.metadata._continue, None)
    others = v1.list_namespaced_pod("default", label_selector="batch!=b1")
    expect_eq("pods with batch!=b1", sorted(p.metadata.name for p in others.items),
              ["other-0", "other-1"])


def check_watch_sees_added_modified_deleted_in_order(v1):
    start = v1.list_namespaced_pod("default", label_selector="watched=yes")
    expect_eq("pods before the watch", start.items, [])
    v1.create_namespaced_pod("default", pod("w", {"watched": "yes"}))

    w = watch.Watch()
    events = []
    versions = []
    for event in w.stream(v1.list_namespaced_pod, "default", label_selector="watched=yes",
                          resource_version=start.metadata.resource_version, timeout_seconds=20):
        obj = event["object"]
        events.append(event["type"])
        versions.append(int(obj.metadata.resource_version))
        if len(events) == 1:
            v1.patch_namespaced_pod("w", "default", {"metadata": {"labels": {"step": "two"}}})
        elif len(events) == 2:
            expect_eq("label seen by MODIFIED", obj.metadata.labels.get("step"), "two")
            v1.delete_namespaced_pod("w", "default")
        if event["type"] == "DELETED":
            w.stop()
    expect_eq("watch events", events, ["ADDED", "MODIFIED", "DELETED"])
    if versions != sorted(set(versions)):
        fail(f"resourceVersions of the events do not increase: {versions}")


def check_stale_resource_version_patch_refused_with_409(v1):
    created = v1.create_namespaced_pod("default", pod("stale"))
    old = created.metadata.resource_version
    current = v1.patch_namespaced_pod(
        "stale", "default", {"metadata": {"resourceVersion": old, "labels": {"a": "1"}}})
    if int(current.metadata.resource_version) <= int(old):
        fail(f"a patch with a change kept resourceVersion {old}")
    e = api_exception(v1.patch_namespaced_pod, "stale", "default",
                      {"metadata": {"resourceVersion": old, "labels": {"a": "2"}}})
    expect_eq("status of a patch with a stale resourceVersion", e.status, 409)
    status = json.loads(e.body)
    expect_eq("Status kind", status.get("kind"), "Status")
    expect_eq("Status reason", status.get("reason"), "Conflict")
    expect_eq("label after the refused patch",
              v1.read_namespaced_pod("stale", "default").metadata.labels, {"a": "1"})


def check_read_and_bind_pod(v1):
    v1.create_namespaced_pod("default", pod("bind-me", {"app": "x"}))
    read = v1.read_namespaced_pod("bind-me", "default")
    expect_eq("name", read.metadata.name, "bind-me")
    expect_eq("namespace", read.metadata.namespace, "default")
    expect_eq("labels", read.metadata.labels, {"app": "x"})
    expect_eq("container", read.spec.containers[0].name, "main")
    expect_eq("phase", read.status.phase, "Pending")
    expect_eq("node before binding", read.spec.node_name, None)
    if not read.metadata.uid or not read.metadata.resource_version:
        fail(f"uid {read.metadata.uid!r} or resourceVersion {read.metadata.resource_version!r} "
             "missing")
    if read.metadata.creation_timestamp is None:
        fail("creationTimestamp missing")

    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="bind-me"),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name="node-a"))
    # The API answers a Status, which the generated client cannot decode as a V1Binding.
    response = v1.create_namespaced_pod_binding("bind-me", "default", binding,
                                                _preload_content=False)
    expect_eq("binding status code", response.status, 201)
    expect_eq("binding answer", json.loads(response.data).get("status"), "Success")
    expect_eq("node after binding", v1.read_namespaced_pod("bind-me", "default").spec.node_name,
              "node-a")

    binding.target.name = "node-b"
    e = api_exception(v1.create_namespaced_pod_binding, "bind-me", "default", binding,
                      _preload_content=False)
    expect_eq("status of a second binding", e.status, 409)
    expect_eq("node after the refused binding",
              v1.read_namespaced_pod("bind-me", "default").spec.node_name, "node-a")
    missing = api_exception(v1.read_namespaced_pod, "nobody", "default")
    expect_eq("status of reading a missing pod", missing.status, 404)


def check_too_old_resource_version_raises_410(v1):
    first = v1.create_namespaced_pod("default", pod("churn"))
    for i in range(12):  # more changes than the server's watch window (started with 5)
        v1.patch_namespaced_pod("churn", "default", {"metadata": {"labels": {"n": str(i)}}})
    w = watch.Watch()
    try:
        for event in w.stream(v1.list_namespaced_pod, "default",
                              resource_version=first.metadata.resource_version,
                              timeout_seconds=10):
            fail(f"watch from a version older than the window gave {event['type']}")
    except ApiException as e:
        expect_eq("status of a watch from a too old resourceVersion", e.status, 410)
    else:
        fail("watch from a too old resourceVersion ended without an ApiException")


def api_with_retries(retries):
    """A CoreV1Api whose urllib3 pool retries as `retries` says (False: never)."""
    configuration = client.Configuration.get_default_copy()
    configuration.retries = retries
    return client.CoreV1Api(client.ApiClient(configuration))


def check_injected_429_reaches_the_client(v1):
    v1.create_namespaced_pod("default", pod("busy"))

    faults = put_faults({"rate_429": 1.0, "retry_after_seconds": 1})
    expect_eq("rate_429 after setting it", faults.get("rate_429"), 1.0)
    e = api_exception(api_with_retries(False).list_namespaced_pod, "default")
    expect_eq("status under rate_429 1.0", e.status, 429)
    expect_eq("Retry-After", e.headers.get("Retry-After"), "1")
    expect_eq("Status reason", json.loads(e.body).get("reason"), "TooManyRequests")

    # urllib3 retries a 429 after its Retry-After; with a tenth of the requests refused, every
    # call still succeeds. Stop after the first call that needed a retry (each costs a second).
    put_faults({"rate_429": 0.1, "retry_after_seconds": 1})
    retrying = api_with_retries(urllib3.Retry(total=10, backoff_factor=0))
    refused = 0
    for _ in range(100):
        response = retrying.list_namespaced_pod("default", _preload_content=False)
        expect_eq("status after retries", response.status, 200)
        expect_eq("pods listed after retries",
                  [p["metadata"]["name"] for p in json.loads(response.data)["items"]], ["busy"])
        refused += sum(1 for h in response.retries.history if h.status == 429)
        if refused:
            break
    if not refused:
        fail("100 lists under rate_429 0.1 met no 429")

    faults = put_faults({"rate_429": 0})
    expect_eq("rate_429 after the reset", faults.get("rate_429"), 0)
    names = [p.metadata.name for p in api_with_retries(False).list_namespaced_pod("default").items]
    expect_eq("pods listed after the reset", names, ["busy"])


def check_priority_classes_and_pod_priority(v1):
    sched = client.SchedulingV1Api()
    created = sched.create_priority_class(
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name="gpu-high"), value=1000)
    )
    expect_eq("created value", created.value, 1000)
    expect_eq("defaulted preemptionPolicy", created.preemption_policy, "PreemptLowerPriority")
    names = [c.metadata.name for c in sched.list_priority_class().items]
    for name in ("gpu-high", "system-cluster-critical", "system-node-critical"):
        if name not in names:
            fail(f"{name} not listed: {names}")
    expect_eq("read value", sched.read_priority_class("gpu-high").value, 1000)

    named = pod("named")
    named.spec.priority_class_name = "gpu-high"
    expect_eq("pod priority", v1.create_namespaced_pod("default", named).spec.priority, 1000)
    unknown = pod("unknown")
    unknown.spec.priority_class_name = "nope"
    e = api_exception(v1.create_namespaced_pod, "default", unknown)
    expect_eq("unknown class status", e.status, 403)
    expect_eq("unknown class message", json.loads(e.body)["message"],
              'pods "unknown" is forbidden: no PriorityClass with name nope was found')

    sched.delete_priority_class("gpu-high")
    e = api_exception(sched.read_priority_class, "gpu-high")
    expect_eq("deleted class status", e.status, 404)


def check_dra_resources_through_the_dynamic_client(v1):
    # python3-kubernetes 22.6 predates resource.k8s.io/v1: its DynamicClient finds the kinds
    # through discovery and reads and writes them as the typed APIs would.
    from kubernetes import dynamic

    dyn = dynamic.DynamicClient(client.ApiClient())
    slices = dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
    claims = dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim")
    classes = dyn.resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass")
    templates = dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaimTemplate")
    expect_eq("slices namespaced", slices.namespaced, False)
    expect_eq("claims namespaced", claims.namespaced, True)

    classes.create(body={"metadata": {"name": "hami-core-gpu.project-hami.io"},
                         "spec": {"selectors": [{"cel": {"expression": "true"}}]}})
    slices.create(body={
        "metadata": {"name": "n1-hami-core-gpu"},
        "spec": {"driver": "hami-core-gpu.project-hami.io", "nodeName": "n1",
                 "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "hami-gpu-0", "allowMultipleAllocations": True,
                              "capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "100"}}}]},
    })
    request = {"name": "gpu", "exactly": {"deviceClassName": "hami-core-gpu.project-hami.io",
                                          "capacity": {"requests": {"memory": "3000Mi"}}}}
    templates.create(namespace="default", body={
        "metadata": {"name": "share"}, "spec": {"spec": {"devices": {"requests": [request]}}}})
    created = claims.create(namespace="default", body={
        "metadata": {"name": "c"}, "spec": {"devices": {"requests": [request]}}})
    expect_eq("defaulted count", created.spec.devices.requests[0].exactly.count, 1)

    listed = slices.get(field_selector="spec.nodeName=n1")
    expect_eq("slices of n1", [s.metadata.name for s in listed.items], ["n1-hami-core-gpu"])
    expect_eq("slices of n2", slices.get(field_selector="spec.nodeName=n2").items, [])
    expect_eq("class", classes.get(name="hami-core-gpu.project-hami.io").metadata.name,
              "hami-core-gpu.project-hami.io")
    expect_eq("templates", [t.metadata.name for t in templates.get(namespace="default").items],
              ["share"])

    claim = claims.get(namespace="default", name="c").to_dict()
    claim["status"] = {"allocation": {"devices": {"results": [{
        "request": "gpu", "driver": "hami-core-gpu.project-hami.io", "pool": "n1",
        "device": "hami-gpu-0", "consumedCapacity": {"memory": "3000Mi", "cores": "0"}}]}}}
    dyn.request("PUT", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c/status",
                body=claim)
    read = claims.get(namespace="default", name="c")
    expect_eq("allocated device", read.status.allocation.devices.results[0].device, "hami-gpu-0")

    try:
        slices.create(body={"metadata": {"name": "bad"},
                            "spec": {"nodeName": "n1",
                                     "pool": {"name": "n1", "resourceSliceCount": 1}}})
    except ApiException as e:
        expect_eq("invalid slice status", e.status, 422)
        expect_eq("invalid slice cause", json.loads(e.body)["details"]["causes"][0]["field"],
                  "spec.driver")
    else:
        fail("a slice without a driver was accepted")
    claims.delete(namespace="default", name="c")
    expect_eq("claims after delete", claims.get(namespace="default").items, [])


CHECKS = {name[len("check_"):]: f for name, f in globals().items() if name.startswith("check_")}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CHECKS:
        print(f"usage: {sys.argv[0]} {'|'.join(sorted(CHECKS))}", file=sys.stderr)
        return 2
    name = sys.argv[1]
    config.load_kube_config()
    try:
        CHECKS[name](client.CoreV1Api())
    except (AssertionError, ApiException) as e:
        print(f"FAIL {name}: {type(e).__name__}: {e}")
        return 1
    print(f"ok {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
