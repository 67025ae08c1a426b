#include "sim/kubelet/dra.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "draapi/dra_v1.grpc.pb.h"
#include "draapi/dra_v1beta1.grpc.pb.h"
#include "draapi/registration.grpc.pb.h"
#include "log/log.h"
#include "sim/kubelet/convert.h"

namespace hami::sim::kubelet {
namespace {

namespace reg = ::pluginregistration;
namespace v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace v1beta1dra = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

constexpr int64_t kRegistrationTimeoutMs = 10'000;

std::chrono::system_clock::time_point DeadlineIn(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

std::shared_ptr<grpc::Channel> UnixChannel(const std::string& path) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A plugin's socket appears at bind(), a moment before it listens: retry soon.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel("unix:" + path, grpc::InsecureChannelCredentials(), args);
}

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "\"" : ", \"") + s + "\"";
  return "[" + out + "]";
}

bool IsSocket(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// The manager's own reading of a prepared device, per API version.
DraDevice DeviceOf(const v1::Device& d, const std::string& driver) {
  DraDevice out;
  out.driver = driver;
  out.request_names.assign(d.request_names().begin(), d.request_names().end());
  out.pool = d.pool_name();
  out.device = d.device_name();
  out.cdi_device_ids.assign(d.cdi_device_ids().begin(), d.cdi_device_ids().end());
  if (d.has_share_id()) out.share_id = d.share_id();
  return out;
}

DraDevice DeviceOf(const v1beta1dra::Device& d, const std::string& driver) {
  DraDevice out;
  out.driver = driver;
  out.request_names.assign(d.request_names().begin(), d.request_names().end());
  out.pool = d.pool_name();
  out.device = d.device_name();
  out.cdi_device_ids.assign(d.cdi_device_ids().begin(), d.cdi_device_ids().end());
  return out;
}

template <typename Request>
Request RequestOf(const std::vector<DraClaim>& claims) {
  Request request;
  for (const DraClaim& c : claims) {
    auto* out = request.add_claims();
    out->set_namespace_(c.ns);
    out->set_uid(c.uid);
    out->set_name(c.name);
  }
  return request;
}

// Checks that `answered` (the response's claim UIDs) are exactly those of `claims`: a UID not
// asked for refuses the whole answer; a claim left out gets an error of its own.
template <typename Map>
std::optional<std::string> UnaskedUid(const Map& answered, const std::vector<DraClaim>& claims) {
  for (const auto& [uid, entry] : answered) {
    if (std::none_of(claims.begin(), claims.end(),
                     [&](const DraClaim& c) { return c.uid == uid; })) {
      return uid;
    }
  }
  return std::nullopt;
}

}  // namespace

struct DraManager::Connection {
  DraPlugin plugin;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::DRAPlugin::Stub> v1_stub;
  std::unique_ptr<v1beta1dra::DRAPlugin::Stub> v1beta1_stub;
};

DraManager::DraManager(DraManagerOptions options) : options_(std::move(options)) {}

DraManager::~DraManager() { Stop(); }

Status DraManager::Start() {
  if (watcher_.joinable()) return OkStatus();
  std::error_code ec;
  std::filesystem::create_directories(options_.registry_dir, ec);
  if (ec) {
    return Error(ErrorCode::kIo,
                 "the plugins-registry directory " + options_.registry_dir + ": " + ec.message());
  }
  UniqueFd in(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!in.valid()) return Error::FromErrno("inotify_init1 for " + options_.registry_dir);
  if (inotify_add_watch(in.get(), options_.registry_dir.c_str(),
                        IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) {
    return Error::FromErrno("watching the plugins-registry directory " + options_.registry_dir);
  }
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return Error::FromErrno("eventfd for the DRA manager");
  inotify_ = std::move(in);
  wake_ = std::move(wake);
  watcher_ = std::thread([this] { WatchLoop(); });
  HAMI_LOG(kInfo, "event=dra_watching dir=%s", options_.registry_dir.c_str());
  return OkStatus();
}

void DraManager::Stop() {
  if (!watcher_.joinable()) return;
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
  watcher_.join();
  inotify_.Reset();
  wake_.Reset();
  std::lock_guard lock(mu_);
  plugins_.clear();
  changed_.notify_all();
}

void DraManager::WatchLoop() {
  // The sockets already there, as the watcher's first walk of the directory finds them.
  std::error_code ec;
  std::vector<std::string> existing;
  for (auto it = std::filesystem::directory_iterator(options_.registry_dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    existing.push_back(it->path().filename().string());
  }
  std::sort(existing.begin(), existing.end());
  for (const std::string& name : existing) {
    if (!name.starts_with(".") && IsSocket(options_.registry_dir + "/" + name)) {
      Register(options_.registry_dir + "/" + name);
    }
  }
  alignas(inotify_event) char buf[4096];
  for (;;) {
    pollfd fds[2] = {{inotify_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      HAMI_LOG(kError, "event=dra_watch_failed error=%s", strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    ssize_t n = read(inotify_.get(), buf, sizeof(buf));
    if (n <= 0) continue;
    for (char* p = buf; p < buf + n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(p);
      p += sizeof(inotify_event) + e->len;
      if (e->len == 0) continue;
      const std::string name = e->name;
      if (name.starts_with(".")) continue;
      const std::string path = options_.registry_dir + "/" + name;
      if (e->mask & (IN_DELETE | IN_MOVED_FROM)) {
        Deregister(path);
      } else if ((e->mask & (IN_CREATE | IN_MOVED_TO)) && IsSocket(path)) {
        Register(path);
      }
    }
  }
}

void DraManager::Reject(const std::string& message) {
  HAMI_LOG(kWarn, "event=dra_registration_refused error=\"%s\"", message.c_str());
  std::lock_guard lock(mu_);
  ++rejected_;
  last_rejection_ = message;
  changed_.notify_all();
}

void DraManager::Register(const std::string& socket) {
  auto channel = UnixChannel(socket);
  auto stub = reg::Registration::NewStub(channel);
  reg::PluginInfo info;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(kRegistrationTimeoutMs));
    ctx.set_wait_for_ready(true);
    grpc::Status s = stub->GetInfo(&ctx, reg::InfoRequest(), &info);
    if (!s.ok()) {
      Reject(ErrorOfStatus(s, "GetInfo on " + socket).message());
      return;
    }
  }
  std::string error;
  std::string version;
  if (info.type() != kDraPluginType) {
    error = "plugin type \"" + info.type() + "\" is not \"" + kDraPluginType + "\"";
  } else if (info.name().empty()) {
    error = "the plugin gave no name";
  } else if (info.endpoint().empty()) {
    error = "plugin " + info.name() + " gave no endpoint";
  } else {
    for (const std::string& v : info.supported_versions()) {
      if (v == kDraV1Service || v == kDraV1beta1Service) {
        version = v;
        break;
      }
    }
    if (version.empty()) {
      error = "plugin " + info.name() + ": none of its supported versions " +
              Joined({info.supported_versions().begin(), info.supported_versions().end()}) +
              " is known to this kubelet (" + kDraV1Service + ", " + kDraV1beta1Service + ")";
    }
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(kRegistrationTimeoutMs));
  reg::RegistrationStatus status;
  status.set_plugin_registered(error.empty());
  status.set_error(error);
  reg::RegistrationStatusResponse ignored;
  if (!error.empty()) {
    Reject(socket + ": " + error);
    (void)stub->NotifyRegistrationStatus(&ctx, status, &ignored);
    return;
  }
  auto connection = std::make_shared<Connection>();
  connection->plugin = {info.name(), info.endpoint(), version, socket, 0};
  connection->channel = UnixChannel(info.endpoint());
  if (version == kDraV1Service) {
    connection->v1_stub = v1::DRAPlugin::NewStub(connection->channel);
  } else {
    connection->v1beta1_stub = v1beta1dra::DRAPlugin::NewStub(connection->channel);
  }
  {
    std::lock_guard lock(mu_);
    connection->plugin.registrations = ++registrations_[info.name()];
    plugins_[info.name()] = connection;
    changed_.notify_all();
  }
  HAMI_LOG(kInfo, "event=dra_registered driver=%s endpoint=%s version=%s", info.name().c_str(),
           info.endpoint().c_str(), version.c_str());
  grpc::Status notified = stub->NotifyRegistrationStatus(&ctx, status, &ignored);
  if (!notified.ok()) {
    HAMI_LOG(kWarn, "event=dra_notify_failed driver=%s error=\"%s\"", info.name().c_str(),
             notified.error_message().c_str());
  }
}

void DraManager::Deregister(const std::string& socket) {
  std::lock_guard lock(mu_);
  for (auto it = plugins_.begin(); it != plugins_.end();) {
    if (it->second->plugin.registration == socket) {
      HAMI_LOG(kInfo, "event=dra_deregistered driver=%s socket=%s", it->first.c_str(),
               socket.c_str());
      it = plugins_.erase(it);
    } else {
      ++it;
    }
  }
  changed_.notify_all();
}

std::optional<DraPlugin> DraManager::Plugin(const std::string& driver) const {
  std::lock_guard lock(mu_);
  auto it = plugins_.find(driver);
  if (it == plugins_.end()) return std::nullopt;
  return it->second->plugin;
}

uint64_t DraManager::rejected_registrations() const {
  std::lock_guard lock(mu_);
  return rejected_;
}

std::string DraManager::last_rejection() const {
  std::lock_guard lock(mu_);
  return last_rejection_;
}

bool DraManager::WaitForPlugin(const std::string& driver, int64_t timeout_ms) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [&] { return plugins_.contains(driver); });
}

bool DraManager::WaitForNoPlugin(const std::string& driver, int64_t timeout_ms) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [&] { return !plugins_.contains(driver); });
}

bool DraManager::WaitForRejections(uint64_t count, int64_t timeout_ms) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [&] { return rejected_ >= count; });
}

std::shared_ptr<DraManager::Connection> DraManager::ConnectionFor(const std::string& driver) const {
  std::lock_guard lock(mu_);
  auto it = plugins_.find(driver);
  return it == plugins_.end() ? nullptr : it->second;
}

namespace {

// One NodePrepareResources call of one driver: per claim UID, its devices or its error.
template <typename Stub, typename Request, typename Response>
std::map<std::string, PreparedClaim> CallPrepare(Stub& stub, const std::string& driver,
                                                 const std::vector<DraClaim>& claims,
                                                 int64_t timeout_ms) {
  std::map<std::string, PreparedClaim> out;
  auto fail_all = [&](const std::string& error) {
    for (const DraClaim& c : claims) out[c.uid].error = error;
    return out;
  };
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(timeout_ms));
  Response response;
  grpc::Status s = stub.NodePrepareResources(&ctx, RequestOf<Request>(claims), &response);
  if (!s.ok()) return fail_all(ErrorOfStatus(s, driver + ": NodePrepareResources").message());
  if (auto uid = UnaskedUid(response.claims(), claims)) {
    return fail_all(driver + ": NodePrepareResources answered for claim UID " + *uid +
                    ", which was not asked for; the answer is ignored");
  }
  for (const DraClaim& c : claims) {
    auto it = response.claims().find(c.uid);
    if (it == response.claims().end()) {
      out[c.uid].error = driver + ": NodePrepareResources skipped claim " + c.ns + "/" + c.name +
                         " (" + c.uid + ")";
      continue;
    }
    if (!it->second.error().empty()) {
      out[c.uid].error = driver + ": " + it->second.error();
      continue;
    }
    for (const auto& d : it->second.devices()) out[c.uid].devices.push_back(DeviceOf(d, driver));
  }
  return out;
}

template <typename Stub, typename Request, typename Response>
std::map<std::string, std::string> CallUnprepare(Stub& stub, const std::string& driver,
                                                 const std::vector<DraClaim>& claims,
                                                 int64_t timeout_ms) {
  std::map<std::string, std::string> errors;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(timeout_ms));
  Response response;
  grpc::Status s = stub.NodeUnprepareResources(&ctx, RequestOf<Request>(claims), &response);
  if (!s.ok()) {
    const std::string e = ErrorOfStatus(s, driver + ": NodeUnprepareResources").message();
    for (const DraClaim& c : claims) errors[c.uid] = e;
    return errors;
  }
  if (auto uid = UnaskedUid(response.claims(), claims)) {
    for (const DraClaim& c : claims) {
      errors[c.uid] = driver + ": NodeUnprepareResources answered for claim UID " + *uid +
                      ", which was not asked for; the answer is ignored";
    }
    return errors;
  }
  for (const DraClaim& c : claims) {
    auto it = response.claims().find(c.uid);
    if (it == response.claims().end()) {
      errors[c.uid] = driver + ": NodeUnprepareResources skipped claim " + c.ns + "/" + c.name +
                      " (" + c.uid + ")";
    } else if (!it->second.error().empty()) {
      errors[c.uid] = driver + ": " + it->second.error();
    }
  }
  return errors;
}

// The drivers of `claims` in order of first appearance, each with its claims.
std::vector<std::pair<std::string, std::vector<DraClaim>>> ByDriver(
    const std::vector<DraClaim>& claims) {
  std::vector<std::pair<std::string, std::vector<DraClaim>>> out;
  for (const DraClaim& c : claims) {
    for (const std::string& d : c.drivers) {
      auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == d; });
      if (it == out.end()) {
        out.emplace_back(d, std::vector<DraClaim>{});
        it = out.end() - 1;
      }
      it->second.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::map<std::string, PreparedClaim> DraManager::Prepare(const std::string& pod_uid,
                                                         const std::vector<DraClaim>& claims) {
  std::lock_guard lock(claims_mu_);
  std::map<std::string, PreparedClaim> out;
  std::vector<DraClaim> to_send;
  for (const DraClaim& c : claims) {
    auto known = prepared_.find(c.uid);
    if (known != prepared_.end()) {
      known->second.pods.insert(pod_uid);
      out[c.uid].devices = known->second.devices;
      continue;
    }
    if (std::any_of(to_send.begin(), to_send.end(),
                    [&](const DraClaim& s) { return s.uid == c.uid; })) {
      continue;
    }
    to_send.push_back(c);
    out[c.uid];
  }
  std::map<std::string, std::vector<std::string>> errors;  // by claim UID
  for (const auto& [driver, driver_claims] : ByDriver(to_send)) {
    std::shared_ptr<Connection> conn = ConnectionFor(driver);
    std::map<std::string, PreparedClaim> answer;
    if (conn == nullptr) {
      for (const DraClaim& c : driver_claims) {
        answer[c.uid].error = "DRA driver " + driver + " is not registered on this node";
      }
    } else if (conn->v1_stub) {
      answer = CallPrepare<v1::DRAPlugin::Stub, v1::NodePrepareResourcesRequest,
                           v1::NodePrepareResourcesResponse>(*conn->v1_stub, driver, driver_claims,
                                                             options_.call_timeout_ms);
    } else {
      answer = CallPrepare<v1beta1dra::DRAPlugin::Stub, v1beta1dra::NodePrepareResourcesRequest,
                           v1beta1dra::NodePrepareResourcesResponse>(
          *conn->v1beta1_stub, driver, driver_claims, options_.call_timeout_ms);
    }
    for (auto& [uid, claim] : answer) {
      if (!claim.error.empty()) errors[uid].push_back(claim.error);
      auto& devices = out[uid].devices;
      devices.insert(devices.end(), claim.devices.begin(), claim.devices.end());
    }
  }
  for (const DraClaim& c : to_send) {
    PreparedClaim& p = out[c.uid];
    auto e = errors.find(c.uid);
    if (e != errors.end()) {
      for (const std::string& text : e->second) p.error += (p.error.empty() ? "" : "; ") + text;
      p.devices.clear();
      HAMI_LOG(kWarn, "event=dra_prepare_failed claim=%s/%s uid=%s error=\"%s\"", c.ns.c_str(),
               c.name.c_str(), c.uid.c_str(), p.error.c_str());
      continue;
    }
    prepared_[c.uid] = Prepared{c, p.devices, {pod_uid}};
    HAMI_LOG(kInfo, "event=dra_prepared claim=%s/%s uid=%s devices=%zu", c.ns.c_str(),
             c.name.c_str(), c.uid.c_str(), p.devices.size());
  }
  return out;
}

std::map<std::string, std::string> DraManager::Unprepare(const std::string& pod_uid) {
  std::lock_guard lock(claims_mu_);
  std::vector<DraClaim> to_send;
  for (auto& [uid, p] : prepared_) {
    p.pods.erase(pod_uid);
    if (p.pods.empty()) to_send.push_back(p.claim);
  }
  std::map<std::string, std::string> errors;
  for (const auto& [driver, driver_claims] : ByDriver(to_send)) {
    std::shared_ptr<Connection> conn = ConnectionFor(driver);
    std::map<std::string, std::string> answer;
    if (conn == nullptr) {
      for (const DraClaim& c : driver_claims) {
        answer[c.uid] = "DRA driver " + driver + " is not registered on this node";
      }
    } else if (conn->v1_stub) {
      answer = CallUnprepare<v1::DRAPlugin::Stub, v1::NodeUnprepareResourcesRequest,
                             v1::NodeUnprepareResourcesResponse>(
          *conn->v1_stub, driver, driver_claims, options_.call_timeout_ms);
    } else {
      answer = CallUnprepare<v1beta1dra::DRAPlugin::Stub, v1beta1dra::NodeUnprepareResourcesRequest,
                             v1beta1dra::NodeUnprepareResourcesResponse>(
          *conn->v1beta1_stub, driver, driver_claims, options_.call_timeout_ms);
    }
    for (const auto& [uid, e] : answer) {
      std::string& text = errors[uid];
      text += (text.empty() ? "" : "; ") + e;
    }
  }
  for (const DraClaim& c : to_send) {
    auto e = errors.find(c.uid);
    if (e != errors.end()) {
      HAMI_LOG(kWarn, "event=dra_unprepare_failed claim=%s/%s uid=%s error=\"%s\"", c.ns.c_str(),
               c.name.c_str(), c.uid.c_str(), e->second.c_str());
      continue;
    }
    prepared_.erase(c.uid);
    HAMI_LOG(kInfo, "event=dra_unprepared claim=%s/%s uid=%s", c.ns.c_str(), c.name.c_str(),
             c.uid.c_str());
  }
  return errors;
}

std::set<std::string> DraManager::PreparedClaims() const {
  std::lock_guard lock(claims_mu_);
  std::set<std::string> out;
  for (const auto& [uid, p] : prepared_) out.insert(uid);
  return out;
}

}  // namespace hami::sim::kubelet
