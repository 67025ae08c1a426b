"""Plays the kubelet against the DRA driver's gRPC servers with an independent gRPC
implementation: Debian's python3-grpcio, with stubs generated at run time by grpc_tools from
this folder's own copies of the upstream protos (never the product's). Run by dra_grpcio_test as

    /usr/bin/python3 checks.py PROTO_DIR REGISTRATION_SOCKET DRA_SOCKET OUT_DIR

against a driver whose claims the test fixes (grpcio_test.cc): ml/c (uid u-1) allocated 1 GiB
and 30 cores of hami-gpu-0 with share s-1, ml/gone (uid u-2) absent; hami-gpu-0 unhealthy
("Xid 79", last updated 1765000000) on the health stream. Prints "ok CHECK" per
check and "ok all", exits 0 when every assertion holds, 1 otherwise, 77 when grpcio or
grpc_tools is not installed.
"""

import importlib
import sys

try:
    import grpc
    from grpc_tools import protoc
except ImportError as missing:
    print(f"SKIP: {sys.executable} cannot import grpcio/grpc_tools: {missing}")
    sys.exit(77)

DRIVER = "hami-core-gpu.project-hami.io"
CDI_ID = "k8s.hami-core-gpu.project-hami.io/claim=u-1-hami-gpu-0-s-1"


def expect_eq(what, got, want):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def generate(proto_dir, out_dir, name):
    rc = protoc.main(["grpc_tools.protoc", f"-I{proto_dir}", f"--python_out={out_dir}",
                      f"--grpc_python_out={out_dir}", f"{proto_dir}/{name}.proto"])
    if rc != 0:
        raise AssertionError(f"grpc_tools.protoc failed on {name}.proto: {rc}")
    return importlib.import_module(f"{name}_pb2"), importlib.import_module(f"{name}_pb2_grpc")


def claim(pb, uid, name):
    return pb.Claim(namespace="ml", uid=uid, name=name)


def main():
    proto_dir, reg_socket, dra_socket, out_dir = sys.argv[1:5]
    sys.path.insert(0, out_dir)
    reg, reg_grpc = generate(proto_dir, out_dir, "kubelet_pluginregistration")
    v1, v1_grpc = generate(proto_dir, out_dir, "kubelet_dra_v1")
    b1, b1_grpc = generate(proto_dir, out_dir, "kubelet_dra_v1beta1")
    hp, hp_grpc = generate(proto_dir, out_dir, "kubelet_dra_health_v1alpha1")

    channel = grpc.insecure_channel(f"unix:{reg_socket}")
    grpc.channel_ready_future(channel).result(timeout=20)
    registration = reg_grpc.RegistrationStub(channel)
    info = registration.GetInfo(reg.InfoRequest(), timeout=20)
    expect_eq("type", info.type, "DRAPlugin")
    expect_eq("name", info.name, DRIVER)
    expect_eq("endpoint", info.endpoint, dra_socket)
    expect_eq("supported_versions", list(info.supported_versions),
              ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"])
    registration.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True),
                                          timeout=20)
    print("ok registration")

    dra = grpc.insecure_channel(f"unix:{info.endpoint}")
    grpc.channel_ready_future(dra).result(timeout=20)
    stub = v1_grpc.DRAPluginStub(dra)
    request = v1.NodePrepareResourcesRequest(claims=[claim(v1, "u-1", "c"),
                                                     claim(v1, "u-2", "gone")])
    first = stub.NodePrepareResources(request, timeout=45)
    expect_eq("claims answered", sorted(first.claims.keys()), ["u-1", "u-2"])
    ok = first.claims["u-1"]
    expect_eq("u-1 error", ok.error, "")
    expect_eq("u-1 devices", len(ok.devices), 1)
    device = ok.devices[0]
    expect_eq("request_names", list(device.request_names), ["gpu"])
    expect_eq("pool_name", device.pool_name, "n1")
    expect_eq("device_name", device.device_name, "hami-gpu-0")
    expect_eq("cdi_device_ids", list(device.cdi_device_ids), [CDI_ID])
    expect_eq("share_id", device.share_id, "s-1")
    failed = first.claims["u-2"]
    if "gone" not in failed.error or "not found" not in failed.error:
        raise AssertionError(f"u-2 error: {failed.error!r}")
    expect_eq("u-2 devices", len(failed.devices), 0)
    print("ok prepare_v1")

    again = stub.NodePrepareResources(
        v1.NodePrepareResourcesRequest(claims=[claim(v1, "u-1", "c")]), timeout=45)
    expect_eq("repeat", again.claims["u-1"].SerializeToString(deterministic=True),
              ok.SerializeToString(deterministic=True))
    print("ok prepare_repeat")

    beta = b1_grpc.DRAPluginStub(dra).NodePrepareResources(
        b1.NodePrepareResourcesRequest(claims=[claim(b1, "u-1", "c")]), timeout=45)
    beta_device = beta.claims["u-1"].devices[0]
    expect_eq("v1beta1 device", (list(beta_device.request_names), beta_device.pool_name,
                                 beta_device.device_name, list(beta_device.cdi_device_ids)),
              (["gpu"], "n1", "hami-gpu-0", [CDI_ID]))
    print("ok prepare_v1beta1")

    unprepared = stub.NodeUnprepareResources(
        v1.NodeUnprepareResourcesRequest(claims=[claim(v1, "u-1", "c"),
                                                 claim(v1, "u-9", "never")]), timeout=45)
    expect_eq("unprepare keys", sorted(unprepared.claims.keys()), ["u-1", "u-9"])
    expect_eq("unprepare u-1", unprepared.claims["u-1"].error, "")
    expect_eq("unprepare u-9", unprepared.claims["u-9"].error, "")
    twice = stub.NodeUnprepareResources(
        v1.NodeUnprepareResourcesRequest(claims=[claim(v1, "u-1", "c")]), timeout=45)
    expect_eq("unprepare again", twice.claims["u-1"].error, "")
    print("ok unprepare")

    try:
        stub.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=[v1.Claim(name="x")]),
                                  timeout=45)
        raise AssertionError("a claim without uid was answered")
    except grpc.RpcError as e:
        expect_eq("no uid", e.code(), grpc.StatusCode.INVALID_ARGUMENT)
    print("ok no_uid")

    stream = hp_grpc.DRAResourceHealthStub(dra).NodeWatchResources(
        hp.NodeWatchResourcesRequest(), timeout=20)
    first_health = next(stream)
    expect_eq("health devices", [(d.device.pool_name, d.device.device_name, d.health,
                                  d.last_updated_time, d.message) for d in first_health.devices],
              [("n1", "hami-gpu-0", hp.UNHEALTHY, 1765000000, "Xid 79")])
    stream.cancel()
    print("ok health")
    print("ok all")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as failure:
        print(f"FAIL: {failure}")
        sys.exit(1)
