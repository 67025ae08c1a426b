// Applies each case of a patch corpus with the API server's patch functions (kube/patch.h)
// and prints one JSON line per case, in order:
//   {"name":..., "ok":true, "doc":<the patched document>}
//   {"name":..., "ok":false, "error":"<message>"}
// A case is {"name", "kind": "json" (RFC 6902) or "merge" (RFC 7386), "doc", "patch"}.
// patch_oracle_test.py compares these results with an independent implementation.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "kube/patch.h"

namespace {

using nlohmann::json;

int Fail(const std::string& message) {
  std::fprintf(stderr, "patch_oracle_apply: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return Fail("usage: patch_oracle_apply CORPUS.json");
  std::ifstream in(argv[1]);
  if (!in) return Fail(std::string("cannot open ") + argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  const json corpus = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!corpus.is_array()) return Fail(std::string(argv[1]) + ": not a JSON array of cases");
  for (const json& c : corpus) {
    if (!c.is_object() || !c.contains("name") || !c.contains("kind") || !c.contains("doc") ||
        !c.contains("patch")) {
      return Fail("a case lacks name, kind, doc or patch: " + c.dump());
    }
    json out = {{"name", c["name"]}};
    const std::string kind = c["kind"].is_string() ? c["kind"].get<std::string>() : "";
    if (kind == "merge") {
      out["ok"] = true;
      out["doc"] = hami::kube::ApplyMergePatch(c["doc"], c["patch"]);
    } else if (kind == "json") {
      auto patched = hami::kube::ApplyJsonPatch(c["doc"], c["patch"]);
      out["ok"] = patched.ok();
      if (patched.ok()) {
        out["doc"] = *patched;
      } else if (patched.error().code() != hami::ErrorCode::kInvalidArgument) {
        return Fail("case " + c["name"].dump() +
                    ": an error other than kInvalidArgument: " + patched.error().message());
      } else {
        out["error"] = patched.error().message();
      }
    } else {
      return Fail("case " + c["name"].dump() + ": kind " + c["kind"].dump() +
                  " is neither \"json\" nor \"merge\"");
    }
    std::cout << out.dump() << '\n';
  }
  std::cout.flush();
  return std::cout ? 0 : Fail("cannot write the results");
}
