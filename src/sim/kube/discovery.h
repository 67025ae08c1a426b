// What the simulated API server answers to discovery and to Table requests: pure functions
// from a request (path, Accept header) to a body and its Content-Type. The Content-Type
// decides how a client reads the body (research/kubectl-protocol.md, section 2), so each
// answer carries its own.
#pragma once

#include <chrono>
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
// when `accept` asks for it, else in the legacy form: the first media type of `accept` that
// names one of the three decides (a bare application/json or */* means legacy). A query
// string on `path` is ignored, and so is one trailing "/". `server_address` is host:port for
// serverAddressByClientCIDRs. Every resource comes from hami::kube::AllResources(). Pure and
// thread-safe.
std::optional<Rendered> RenderDiscovery(std::string_view path, std::string_view accept,
                                        std::string_view server_address);

inline constexpr std::string_view kTableContentType =
    "application/json;as=Table;v=v1;g=meta.k8s.io";

// Whether the Accept header asks for a meta.k8s.io Table (v1 or v1beta1).
bool WantsTable(std::string_view accept);

// A Table of `objects` of resource `r` with the columns and cells the real API server gives
// kubectl (pods: Name, Ready, Status, Restarts, Age, and with priority 1 IP, Node, Nominated
// Node, Readiness Gates; nodes: Name, Status, Roles, Age, Version, and with priority 1
// Internal-IP, External-IP, OS-Image, Kernel-Version, Container-Runtime; events: Last Seen,
// Type, Reason, Object, Message and more with priority 1; namespaces: Name, Status, Age;
// configmaps: Name, Data, Age; resourcequotas: Name, Age, Request, Limit; leases: Name,
// Holder, Age; secrets: Name, Type, Data, Age; serviceaccounts: Name, Secrets, Age; services:
// Name, Type, Cluster-IP, External-IP, Port(s), Age, and Selector with priority 1;
// deployments: Name, Ready, Up-to-date, Available, Age, and Containers, Images, Selector;
// daemonsets: Name, Desired, Current, Ready, Up-to-date, Available, Node Selector, Age, and
// Containers, Images, Selector; clusterroles and roles: Name, Created At; bindings: Name, Role,
// Age, and Users, Groups, ServiceAccounts; mutatingwebhookconfigurations: Name, Webhooks, Age;
// priorityclasses: Name, Value, Global-Default, Age, PreemptionPolicy; resourceclaims: Name,
// State (pending, allocated,reserved, ...), Age; resourceslices: Name, Node, Driver, Pool, Age;
// any other: Name, Age), each row carrying what `row_object` says (the request's includeObject):
// a PartialObjectMetadata with the object's whole metadata (namespace included; the default),
// the whole object with its kind and apiVersion (kubectl asks for it to --sort-by a field), or
// nothing. `include_columns` false leaves
// columnDefinitions empty (watch events after the first). `resource_version` goes into the
// Table's metadata. Ages count from `now`. Objects are read defensively: a missing or
// mistyped field renders as the API's default (empty, 0, "<none>", "<unknown>"), never
// throws. Pure and thread-safe.
enum class TableRowObject { kMetadata, kObject, kNone };

// includeObject's value: "" and "Metadata", "Object", "None"; nullopt for any other.
std::optional<TableRowObject> ParseIncludeObject(std::string_view value);

nlohmann::json RenderTable(const hami::kube::Resource& r,
                           const std::vector<const nlohmann::json*>& objects,
                           std::string_view resource_version, bool include_columns,
                           hami::kube::WallTime now,
                           TableRowObject row_object = TableRowObject::kMetadata);

// A duration as kubectl prints ages (apimachinery's HumanDuration): "0s".."119s", "2m5s",
// "9m", "179m", "3h4m", "7h", "47h", "2d3h", "7d", "364d", "2y5d", "8y"; "0s" for less than
// two seconds in the future (clock skew), "<invalid>" beyond.
std::string FormatAge(std::chrono::system_clock::duration d);

}  // namespace hami::sim::kube
