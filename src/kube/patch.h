// JSON document patches as the Kubernetes API applies them: merge patch (RFC 7386), JSON
// patch (RFC 6902) and strategic merge patch (the API's own, keyed list merges). Pure
// functions over nlohmann::json: the simulated API server applies them, tests check them.
#pragma once

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace hami::kube {

// RFC 7386: objects merge recursively, null deletes a key, any other value (lists included)
// replaces. A patch that is not an object replaces the whole document.
nlohmann::json ApplyMergePatch(const nlohmann::json& target, const nlohmann::json& patch);

// RFC 6902 over `target`: add (index or "-"), remove, replace, move, copy, test. Pointers
// unescape ~1 and ~0. The patch must be an array of operation objects. Every error is
// kInvalidArgument: a malformed patch (the message names the operation's index and field), a
// failed `test` ("testing value /metadata/labels/a failed") or a path that does not exist
// (the server answers 422 Invalid).
Result<nlohmann::json> ApplyJsonPatch(const nlohmann::json& target, const nlohmann::json& patch);

// Strategic merge patch for the core objects hami-cpp serves (Pod, Node and the rest): maps
// merge as in a merge patch; lists with a merge key merge element-wise by that key
// (containers, initContainers, env, volumes, imagePullSecrets by name; ports by
// containerPort; volumeMounts by mountPath; conditions and addresses by type; taints by key;
// ownerReferences by uid); finalizers merge as a union; other lists replace. Directives:
// $setElementOrder/<list> (order hint, never stored), {"$patch":"delete", key...} in a list,
// $patch: replace, $deleteFromPrimitiveList/<list>, $retainKeys. Errors name the directive.
Result<nlohmann::json> ApplyStrategicMergePatch(const nlohmann::json& target,
                                                const nlohmann::json& patch);

}  // namespace hami::kube
