"""Plays the kubelet against the device plugin's gRPC server with an independent gRPC
implementation: Debian's python3-grpcio, with stubs generated from the project's api.proto by
grpc_tools at run time. Run by plugin_api_grpcio_test as

    /usr/bin/python3 api_grpcio_checks.py PROTO_DIR SOCKET OUT_DIR

against a server whose devices and fake Allocate/PreferFn the test fixes (see
api_grpcio_test.cc). Prints "ok CHECK" per check and "ok all", exits 0 when every assertion
holds, 1 otherwise, 77 when grpcio or grpc_tools is not installed.
"""

import importlib
import sys

try:
    import grpc
    from grpc_tools import protoc
except ImportError as missing:
    print(f"SKIP: {sys.executable} cannot import grpcio/grpc_tools: {missing}")
    sys.exit(77)


def expect_eq(what, got, want):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def generate(proto_dir, out_dir):
    rc = protoc.main(["grpc_tools.protoc", f"-I{proto_dir}", f"--python_out={out_dir}",
                      f"--grpc_python_out={out_dir}", f"{proto_dir}/api.proto"])
    if rc != 0:
        raise AssertionError(f"grpc_tools.protoc failed on {proto_dir}/api.proto: {rc}")
    sys.path.insert(0, out_dir)
    return importlib.import_module("api_pb2"), importlib.import_module("api_pb2_grpc")


def main():
    proto_dir, socket, out_dir = sys.argv[1:4]
    pb, pb_grpc = generate(proto_dir, out_dir)
    channel = grpc.insecure_channel(f"unix:{socket}")
    grpc.channel_ready_future(channel).result(timeout=20)
    stub = pb_grpc.DevicePluginStub(channel)

    options = stub.GetDevicePluginOptions(pb.Empty(), timeout=20)
    expect_eq("pre_start_required", options.pre_start_required, False)
    expect_eq("get_preferred_allocation_available",
              options.get_preferred_allocation_available, True)
    print("ok get_device_plugin_options")

    stream = stub.ListAndWatch(pb.Empty(), timeout=20)
    first = next(stream)
    expect_eq("device IDs", [d.ID for d in first.devices], ["GPU-1111-0", "GPU-1111-1"])
    expect_eq("health", [d.health for d in first.devices], ["Healthy", "Unhealthy"])
    expect_eq("topology of the first", [n.ID for n in first.devices[0].topology.nodes], [1])
    expect_eq("topology of the second", first.devices[1].HasField("topology"), False)
    stream.cancel()
    print("ok list_and_watch")

    request = pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=["GPU-1111-0"])])
    response = stub.Allocate(request, timeout=20)
    expect_eq("containers", len(response.container_responses), 1)
    c = response.container_responses[0]
    expect_eq("envs", dict(c.envs), {"NVIDIA_VISIBLE_DEVICES": "GPU-1111-0",
                                     "CUDA_DEVICE_SM_LIMIT": "30"})
    expect_eq("mounts", [(m.container_path, m.host_path, m.read_only) for m in c.mounts],
              [("/usr/local/vgpu", "/host/containers/u_main", False),
               ("/overrideEnv", "/host/containers/u_main.limits", True)])
    expect_eq("devices", [(d.container_path, d.host_path, d.permissions) for d in c.devices],
              [("/dev/nvidia0", "/dev/nvidia0", "rw")])
    print("ok allocate")

    preferred = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=["a", "b", "c"],
                                               must_include_deviceIDs=[], allocation_size=2)]),
        timeout=20)
    expect_eq("preferred", [list(r.deviceIDs) for r in preferred.container_responses],
              [["b", "c"]])
    print("ok get_preferred_allocation")

    try:
        stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=["GPU-unknown-0"])]), timeout=20)
        raise AssertionError("Allocate of an unknown device succeeded")
    except grpc.RpcError as e:
        expect_eq("error code", e.code(), grpc.StatusCode.NOT_FOUND)
        expect_eq("error message", e.details(), "no binding pod found on node n1")
    print("ok allocate_error")

    stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=["GPU-1111-0"]), timeout=20)
    print("ok pre_start_container")
    print("ok all")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as failure:
        print(f"FAIL: {failure}")
        sys.exit(1)
