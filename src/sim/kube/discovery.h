// What the simulated API server answers to discovery and to Table requests: pure functions
// from a request (path, Accept header) to a body and its Content-Type. The Content-Type
// decides how a client reads the body (research/kubectl-protocol.md, section 2), so each
// answer carries its own.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kube/resource.h"
#include "kube/time.h"

namespace hami::sim::kube {

struct Rendered {
  int status = 200;
  std::string content_type;
  std::string body;
};

// The version reported at /version: kubectl's dispatcher runs the client of the server's
// minor version, so this must be one it ships (1.32).
inline constexpr std::string_view kServerGitVersion = "v1.32.4-hami-sim";

// GET /version, /api, /apis, /api/v1, /apis/<group>/<version>, /apis/<group>, /openapi/v3 and
// /openapi/v3/<group-version>, /openapi/v2 (404): the answer, or nullopt when `path` is none of
// these. /api and /apis answer in aggregated discovery (apidiscovery.k8s.io v2 or v2beta1)
// when `accept` asks for it, else in the legacy form. `server_address` is host:port for
// serverAddressByClientCIDRs.
std::optional<Rendered> RenderDiscovery(std::string_view path, std::string_view accept,
                                        std::string_view server_address);

inline constexpr std::string_view kTableContentType =
    "application/json;as=Table;v=v1;g=meta.k8s.io";

// Whether the Accept header asks for a meta.k8s.io Table (v1 or v1beta1).
bool WantsTable(std::string_view accept);

// A Table of `objects` of resource `r` with the columns kubectl prints for it (pods: Name,
// Ready, Status, Restarts, Age, and with priority 1 IP, Node; nodes: Name, Status, Roles,
// Age, Version; others: Name, Age, plus their own), each row carrying a PartialObjectMetadata
// of the object (namespace included). `include_columns` false leaves columnDefinitions empty
// (watch events after the first). `resource_version` goes into the Table's metadata.
nlohmann::json RenderTable(const hami::kube::Resource& r,
                           const std::vector<const nlohmann::json*>& objects,
                           std::string_view resource_version, bool include_columns,
                           hami::kube::WallTime now);

}  // namespace hami::sim::kube
