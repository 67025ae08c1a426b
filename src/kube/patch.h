// JSON document patches as the Kubernetes API applies them: merge patch (RFC 7386), JSON
// patch (RFC 6902) and strategic merge patch (the API's own, keyed list merges). Pure
// functions over nlohmann::json: the simulated API server applies them, tests check them.
//
// Thread safety: pure functions, safe from any thread. Cost: one copy of the target, then the
// patch is applied in place; a failed patch leaves nothing half-applied (the target is const).
// Recursion follows the patch's nesting, so whoever parses a request body bounds its depth.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "common/result.h"

namespace hami::kube {

// RFC 7386: objects merge recursively, null deletes a key, any other value (lists included)
// replaces. A patch that is not an object replaces the whole document.
nlohmann::json ApplyMergePatch(const nlohmann::json& target, const nlohmann::json& patch);

// RFC 6902 over `target`: add (index or "-"), remove, replace, move, copy, test. Pointers
// unescape ~1 and ~0. The patch must be an array of operation objects. Every error is
// kInvalidArgument: a malformed patch (the message names the operation's index and field), a
// failed `test` ("testing value /metadata/labels/a failed") or a path that does not exist
// (the server answers 422 Invalid). Numbers compare by value in `test` (1 equals 1.0);
// array indices have no leading zeros; removing the whole document is an error.
Result<nlohmann::json> ApplyJsonPatch(const nlohmann::json& target, const nlohmann::json& patch);

// Strategic merge patch for the core objects hami-cpp serves (Pod, Node and the rest): maps
// merge as in a merge patch; lists with a merge key merge element-wise by that key
// (containers, initContainers, ephemeralContainers, env, volumes, imagePullSecrets by name;
// ports by containerPort, but a Service's /spec/ports by port; volumeMounts by mountPath;
// conditions and addresses by type; taints by key; ownerReferences by uid; a webhook
// configuration's webhooks and a service account's secrets by name); finalizers merge as a
// union; other lists replace. A list's rule goes by its field name wherever it appears (but
// for /spec/ports). A merged element keeps its place, a new one
// is appended in patch order; a value the target lacks is taken from the patch with its
// directives applied and its nulls dropped. Directives:
//   $setElementOrder/<list>: order hint (never stored); the elements it names take its order
//     in the places such elements hold, the others stay where they are;
//   {"$patch":"delete", <key>: v} in a keyed list: removes the element with that key;
//   {"$patch":"replace"} in a list: the list becomes the patch's other elements;
//   $patch: replace in an object: the object becomes the patch's other fields;
//   $patch: delete in an object: removes the object from its parent;
//   $deleteFromPrimitiveList/<list>: removes those values from the list;
//   $retainKeys: [fields]: drops the target's other fields; the patch may set only those.
// No directive is ever stored. The patch must be an object; every error is kInvalidArgument
// naming the directive or the element and its place ("at /spec/containers: element 0 has no
// merge key \"name\""); an unknown "$..." key is an error.
Result<nlohmann::json> ApplyStrategicMergePatch(const nlohmann::json& target,
                                                const nlohmann::json& patch);

}  // namespace hami::kube
