// The simulated node's own CDI reader (Container Device Interface, research/dra.md §6): spec
// files, qualified device names, and the resolution of a container's CDI device IDs into the
// edits a runtime applies. This is the one place the simulated kubelet does a container
// runtime's job: the kubelet hands CDI IDs to the runtime (CRI ContainerConfig.CDI_devices) and
// the runtime resolves them, but the node's containerd (1.6) has no CDI support, so the node
// resolves them itself and gives the container the result as plain envs, mounts and devices
// (sim/cluster/node_agent.h). Written from the CDI specification, apart from the DRA driver's
// writer (dra/cdi.h), which it checks.
//
// Spec files: *.json and *.yaml directly in each directory (no recursion; other names are
// ignored), the directories in priority order, lowest first (/etc/cdi, then /var/run/cdi): when
// two directories define the same device, the later one's wins; two files of one directory
// that define the same device are a conflict, and the device cannot be resolved.
// A spec is refused, naming the file and the field, when:
//   - cdiVersion is missing, is not one of 0.3.0 0.4.0 0.5.0 0.6.0 0.7.0 0.8.0 1.0.0 1.1.0
//     (0.1.0 and 0.2.0 are no longer supported), or is older than a field it uses needs:
//     mounts[].type 0.4.0; deviceNodes[].hostPath and a device name starting with a digit
//     0.5.0; annotations (the spec's or a device's) and a class with a dot 0.6.0; intelRdt and
//     additionalGids 0.7.0; netDevices 1.1.0;
//   - kind is not "<vendor>/<class>" (each starts with a letter, holds [A-Za-z0-9._-], ends
//     alphanumeric); devices is missing or empty; a device has no valid name ([A-Za-z0-9_.:-],
//     starting and ending alphanumeric), a duplicate name, or no containerEdits;
//   - any object holds a field the specification does not define, or a field has the wrong
//     type; an env entry is not "KEY=VALUE"; a device node or mount lacks its required paths.
// A spec that is refused does not stop the others: its error is reported with any device that
// could not be resolved.
//
// Resolution: a fully qualified ID "<vendor>/<class>=<name>"; a spec's own containerEdits are
// applied once for all the devices of that spec a container gets, before the first of them,
// then each device's edits, in the order of the IDs. Env "K=V" (a later value of a key wins);
// mounts: hostPath and containerPath, read-only when options hold "ro" (other options are not
// expressible in CRI and are dropped), a type other than "bind" refused; device nodes: path,
// hostPath (default: path), permissions. Hooks, intelRdt, additionalGids and netDevices are
// refused with an error naming the file and the device: the node cannot apply them, and a
// container is never started without edits it was given.
//
// Thread safety: pure functions but for reading the directories.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "sim/kubelet/types.h"

namespace hami::sim::cluster {

inline constexpr char kCdiStaticDir[] = "/etc/cdi";
inline constexpr char kCdiDynamicDir[] = "/var/run/cdi";

struct CdiQualifiedName {
  std::string vendor, cls, name;
};

// Parses "<vendor>/<class>=<name>"; kInvalidArgument naming the part that is wrong.
Result<CdiQualifiedName> ParseCdiQualifiedName(std::string_view id);

// Edits as a spec or a device writes them.
struct CdiContainerEdits {
  std::vector<std::string> env;  // "K=V"
  struct DeviceNode {
    std::string path, host_path, permissions;
  };
  std::vector<DeviceNode> device_nodes;
  struct Mount {
    std::string host_path, container_path, type;
    std::vector<std::string> options;
  };
  std::vector<Mount> mounts;
  // What the node cannot apply, named for the error (e.g. "hooks", "netDevices").
  std::vector<std::string> unsupported;
};

struct CdiSpec {
  std::string path;     // the file
  std::string version;  // cdiVersion
  std::string vendor, cls;
  CdiContainerEdits edits;
  std::vector<std::pair<std::string, CdiContainerEdits>> devices;  // name -> edits, in order
};

// Parses and validates one spec (`yaml`: YAML, else JSON). Errors name `path` and the field.
Result<CdiSpec> ParseCdiSpec(std::string_view text, bool yaml, const std::string& path);

// What a container gets from its CDI devices.
struct CdiEdits {
  std::map<std::string, std::string> env;
  std::vector<kubelet::Mount> mounts;
  std::vector<kubelet::DeviceSpec> devices;
};

// Reads every spec in `dirs` (priority order, lowest first) and resolves `ids` (see the top of
// this file). An error names the ID, and for an unknown one the directories searched and the
// specs that failed to load.
Result<CdiEdits> ResolveCdiDevices(const std::vector<std::string>& dirs,
                                   const std::vector<std::string>& ids);

}  // namespace hami::sim::cluster
