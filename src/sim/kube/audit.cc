#include "sim/kube/audit.h"

#include <algorithm>
#include <cctype>

namespace hami::sim::kube {

std::string AuditVerb(std::string_view method, bool collection, bool watch) {
  if (method == "GET" || method == "HEAD") {
    if (watch) return "watch";
    return collection ? "list" : "get";
  }
  if (method == "POST") return "create";
  if (method == "PUT") return "update";
  if (method == "PATCH") return "patch";
  if (method == "DELETE") return collection ? "deletecollection" : "delete";
  std::string out(method);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string AuditUserAgent(std::string_view header) {
  const size_t end = header.find_first_of("/ ");
  return std::string(header.substr(0, end));
}

AuditLog::AuditLog(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void AuditLog::Record(AuditEntry entry) {
  std::lock_guard lock(mu_);
  if (entries_.size() >= capacity_) {
    entries_.pop_front();
    ++dropped_;
  }
  entries_.push_back(std::move(entry));
}

nlohmann::json AuditLog::ToJson(std::string_view user_agent) const {
  nlohmann::json requests = nlohmann::json::array();
  std::lock_guard lock(mu_);
  for (const AuditEntry& e : entries_) {
    if (!user_agent.empty() && e.user_agent != user_agent) continue;
    requests.push_back({{"user_agent", e.user_agent},
                        {"verb", e.verb},
                        {"group", e.group},
                        {"resource", e.resource},
                        {"subresource", e.subresource},
                        {"namespace", e.ns},
                        {"name", e.name}});
  }
  return {{"requests", std::move(requests)}, {"dropped", dropped_}};
}

void AuditLog::Clear() {
  std::lock_guard lock(mu_);
  entries_.clear();
  dropped_ = 0;
}

size_t AuditLog::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

uint64_t AuditLog::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

}  // namespace hami::sim::kube
