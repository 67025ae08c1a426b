#include "sim/kubelet/kubelet.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "log/log.h"
#include "sim/kubelet/convert.h"

namespace hami::sim::kubelet {
namespace {

std::chrono::system_clock::time_point DeadlineIn(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

std::chrono::steady_clock::time_point SteadyDeadlineIn(int64_t ms) {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
}

// A channel to a Unix socket with a subchannel pool of its own, so that dialling a plugin
// again after a restart connects at once instead of inheriting another channel's backoff.
std::shared_ptr<grpc::Channel> UnixSocketChannel(const std::string& path) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel("unix:" + path, grpc::InsecureChannelCredentials(), args);
}

// Serves `service` on the Unix socket `path`, replacing a stale socket there (anything else at
// the path is refused); the inode it bound goes to `inode`.
Result<std::unique_ptr<grpc::Server>> ServeUnixSocket(const std::string& path,
                                                      grpc::Service* service, ino_t* inode) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Error(ErrorCode::kInvalidArgument,
                   path + ": exists and is not a socket; refusing to replace it");
    }
    if (unlink(path.c_str()) != 0) return Error::FromErrno("removing the stale socket " + path);
  } else if (errno != ENOENT) {
    return Error::FromErrno(path);
  }
  std::unique_ptr<grpc::Server> server;
  try {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
    builder.RegisterService(service);
    server = builder.BuildAndStart();
  } catch (const std::exception& e) {
    return Error(ErrorCode::kIo, "serving gRPC on " + path + ": " + e.what());
  }
  if (!server) {
    return Error(ErrorCode::kIo, "serving gRPC on " + path +
                                     ": the server did not start (is the directory there?)");
  }
  if (lstat(path.c_str(), &st) != 0) return Error::FromErrno("the socket gRPC bound at " + path);
  *inode = st.st_ino;
  return server;
}

// The kubelet's IsExtendedResourceName, in short: "<domain>/<name>", both parts non-empty,
// outside the kubernetes.io domain.
bool IsExtendedResourceName(const std::string& name) {
  const size_t slash = name.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == name.size()) return false;
  if (name.find('/', slash + 1) != std::string::npos) return false;
  const std::string domain = name.substr(0, slash);
  return domain != "kubernetes.io" && !(domain.size() > 14 && domain.ends_with(".kubernetes.io"));
}

}  // namespace

class Kubelet::RegistrationService final : public v1beta1::Registration::Service {
 public:
  explicit RegistrationService(Kubelet* kubelet) : kubelet_(kubelet) {}
  grpc::Status Register(grpc::ServerContext* /*context*/, const v1beta1::RegisterRequest* request,
                        v1beta1::Empty* /*response*/) override {
    return kubelet_->Register(*request);
  }

 private:
  Kubelet* const kubelet_;
};

// One plugin endpoint the kubelet dialled. `connected` is guarded by the kubelet's mu_.
struct Kubelet::Connection {
  std::string resource;
  std::string endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
  grpc::ClientContext watch_context;  // of the ListAndWatch stream; TryCancel ends it
  std::thread thread;
  bool connected = true;
};

Kubelet::Kubelet(KubeletOptions options)
    : options_(std::move(options)), service_(std::make_unique<RegistrationService>(this)) {}

Kubelet::~Kubelet() { Stop(); }

std::string Kubelet::socket_path() const { return options_.dir + "/" + kKubeletSocketName; }

bool Kubelet::running() const {
  std::lock_guard lock(mu_);
  return server_ != nullptr;
}

Status Kubelet::Start() {
  {
    std::lock_guard lock(mu_);
    if (server_) return OkStatus();
    accepting_ = true;
  }
  if (options_.clean_directory_on_start) {
    DIR* d = opendir(options_.dir.c_str());
    if (d == nullptr) return Error::FromErrno("kubelet device-plugins directory " + options_.dir);
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == kKubeletSocketName) continue;
      const std::string path = options_.dir + "/" + name;
      struct stat st;
      if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
        HAMI_LOG(kInfo, "event=removed_socket path=%s", path.c_str());
        unlink(path.c_str());
      }
    }
    closedir(d);
  }
  ino_t inode = 0;
  auto server = ServeUnixSocket(socket_path(), service_.get(), &inode);
  if (!server.ok()) {
    std::lock_guard lock(mu_);
    accepting_ = false;
    return std::move(server).error().Context("simulated kubelet");
  }
  std::lock_guard lock(mu_);
  server_ = std::move(*server);
  server_inode_ = inode;
  HAMI_LOG(kInfo, "event=serving socket=%s", socket_path().c_str());
  return OkStatus();
}

void Kubelet::Stop() {
  std::unique_ptr<grpc::Server> server;
  ino_t inode = 0;
  std::map<std::string, std::shared_ptr<Connection>> connections;
  {
    std::lock_guard lock(mu_);
    accepting_ = false;
    server = std::move(server_);
    inode = server_inode_;
  }
  // Register handlers still running finish first (they see accepting_ false and add nothing).
  if (server) {
    server->Shutdown(DeadlineIn(1000));
    server->Wait();
    // gRPC removes the path it listened on; what is there now is removed only if still ours.
    struct stat st;
    if (lstat(socket_path().c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == inode) {
      unlink(socket_path().c_str());
    }
  }
  {
    std::lock_guard lock(mu_);
    connections.swap(connections_);
  }
  for (auto& [resource, connection] : connections) Disconnect(connection);
  changed_.notify_all();
}

Status Kubelet::Restart() {
  Stop();
  return Start();
}

void Kubelet::Reject(const std::string& message) {
  HAMI_LOG(kWarn, "event=registration_refused error=%s", message.c_str());
  std::lock_guard lock(mu_);
  ++rejected_;
  last_rejection_ = message;
  changed_.notify_all();
}

grpc::Status Kubelet::Register(const v1beta1::RegisterRequest& request) {
  auto refuse = [&](grpc::StatusCode code, const std::string& message) {
    Reject(message);
    return grpc::Status(code, message);
  };
  if (request.version() != kApiVersion) {
    return refuse(grpc::StatusCode::UNKNOWN,
                  "requested API version \"" + request.version() +
                      "\" is not supported by kubelet. Supported versions are [\"" + kApiVersion +
                      "\"]");
  }
  if (!IsExtendedResourceName(request.resource_name())) {
    return refuse(grpc::StatusCode::UNKNOWN,
                  "the ResourceName \"" + request.resource_name() + "\" is invalid");
  }
  const std::string& endpoint = request.endpoint();
  if (endpoint.empty() || endpoint.find('/') != std::string::npos || endpoint == "." ||
      endpoint == "..") {
    return refuse(grpc::StatusCode::UNKNOWN,
                  "endpoint \"" + endpoint + "\" is not a socket file name in " + options_.dir);
  }

  auto connection = std::make_shared<Connection>();
  connection->resource = request.resource_name();
  connection->endpoint = endpoint;
  const std::string path = options_.dir + "/" + endpoint;
  connection->channel = UnixSocketChannel(path);
  if (!connection->channel->WaitForConnected(DeadlineIn(options_.dial_timeout_ms))) {
    return refuse(grpc::StatusCode::UNKNOWN,
                  "failed to dial device plugin: " + path + " did not accept a connection");
  }
  connection->stub = v1beta1::DevicePlugin::NewStub(connection->channel);
  v1beta1::DevicePluginOptions plugin_options;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(options_.call_timeout_ms));
    grpc::Status s =
        connection->stub->GetDevicePluginOptions(&ctx, v1beta1::Empty(), &plugin_options);
    if (!s.ok()) {
      return refuse(grpc::StatusCode::UNKNOWN,
                    ErrorOfStatus(s, "GetDevicePluginOptions of " + path).message());
    }
  }

  std::shared_ptr<Connection> old;
  {
    std::lock_guard lock(mu_);
    if (!accepting_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the kubelet is stopping");
    }
    auto it = connections_.find(connection->resource);
    if (it != connections_.end()) old = std::move(it->second);
    connections_[connection->resource] = connection;
    RegisteredPlugin& p = plugins_[connection->resource];
    p.resource_name = connection->resource;
    p.endpoint = endpoint;
    p.version = request.version();
    p.pre_start_required = plugin_options.pre_start_required();
    p.get_preferred_allocation_available = plugin_options.get_preferred_allocation_available();
    ++p.registrations;
    ++registrations_;
    connection->thread = std::thread([this, c = connection.get()] { WatchLoop(c); });
  }
  changed_.notify_all();
  if (old) Disconnect(std::move(old));
  HAMI_LOG(kInfo, "event=registered resource=%s endpoint=%s preferred_allocation=%d",
           connection->resource.c_str(), endpoint.c_str(),
           int(plugin_options.get_preferred_allocation_available()));
  return grpc::Status::OK;
}

void Kubelet::WatchLoop(Connection* c) {
  auto reader = c->stub->ListAndWatch(&c->watch_context, v1beta1::Empty());
  v1beta1::ListAndWatchResponse response;
  while (reader->Read(&response)) {
    std::vector<Device> devices = DevicesOf(response);
    {
      std::lock_guard lock(mu_);
      DeviceState& state = devices_[c->resource];
      state.devices = std::move(devices);
      ++state.generation;
    }
    changed_.notify_all();
  }
  grpc::Status s = reader->Finish();
  HAMI_LOG(kInfo, "event=list_and_watch_ended resource=%s endpoint=%s status=%s %s",
           c->resource.c_str(), c->endpoint.c_str(), StatusCodeText(s.error_code()).c_str(),
           s.error_message().c_str());
  {
    std::lock_guard lock(mu_);
    c->connected = false;
  }
  changed_.notify_all();
}

void Kubelet::Disconnect(std::shared_ptr<Connection> connection) {
  connection->watch_context.TryCancel();
  if (connection->thread.joinable()) connection->thread.join();
}

std::shared_ptr<Kubelet::Connection> Kubelet::ConnectionFor(const std::string& resource) const {
  std::lock_guard lock(mu_);
  auto it = connections_.find(resource);
  return it == connections_.end() ? nullptr : it->second;
}

uint64_t Kubelet::registrations() const {
  std::lock_guard lock(mu_);
  return registrations_;
}

uint64_t Kubelet::rejected_registrations() const {
  std::lock_guard lock(mu_);
  return rejected_;
}

std::string Kubelet::last_rejection() const {
  std::lock_guard lock(mu_);
  return last_rejection_;
}

bool Kubelet::WaitForRegistrations(uint64_t count, int64_t timeout_ms) const {
  std::unique_lock lock(mu_);
  return changed_.wait_until(lock, SteadyDeadlineIn(timeout_ms),
                             [&] { return registrations_ >= count; });
}

std::optional<RegisteredPlugin> Kubelet::Plugin(const std::string& resource) const {
  std::lock_guard lock(mu_);
  auto it = plugins_.find(resource);
  if (it == plugins_.end()) return std::nullopt;
  return it->second;
}

std::vector<Device> Kubelet::Devices(const std::string& resource) const {
  std::lock_guard lock(mu_);
  auto it = devices_.find(resource);
  return it == devices_.end() ? std::vector<Device>{} : it->second.devices;
}

uint64_t Kubelet::DeviceGeneration(const std::string& resource) const {
  std::lock_guard lock(mu_);
  auto it = devices_.find(resource);
  return it == devices_.end() ? 0 : it->second.generation;
}

bool Kubelet::Connected(const std::string& resource) const {
  std::lock_guard lock(mu_);
  auto it = connections_.find(resource);
  return it != connections_.end() && it->second->connected;
}

Result<std::vector<Device>> Kubelet::WaitForDevices(const std::string& resource,
                                                    uint64_t after_generation,
                                                    int64_t timeout_ms) const {
  std::unique_lock lock(mu_);
  const bool arrived = changed_.wait_until(lock, SteadyDeadlineIn(timeout_ms), [&] {
    auto it = devices_.find(resource);
    return it != devices_.end() && it->second.generation > after_generation;
  });
  if (!arrived) {
    return Error(ErrorCode::kTimeout, "no ListAndWatch response for " + resource + " after #" +
                                          std::to_string(after_generation) + " within " +
                                          std::to_string(timeout_ms) + " ms");
  }
  return devices_.at(resource).devices;
}

bool Kubelet::WaitForDevicesMatching(
    const std::string& resource, const std::function<bool(const std::vector<Device>&)>& condition,
    int64_t timeout_ms) const {
  std::unique_lock lock(mu_);
  return changed_.wait_until(lock, SteadyDeadlineIn(timeout_ms), [&] {
    auto it = devices_.find(resource);
    return it != devices_.end() && condition(it->second.devices);
  });
}

Result<std::vector<ContainerAllocation>> Kubelet::Allocate(
    const std::string& resource, const std::vector<std::vector<std::string>>& containers) {
  std::shared_ptr<Connection> c = ConnectionFor(resource);
  if (!c) {
    return Error(ErrorCode::kNotFound, "no device plugin is registered for " + resource);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(options_.call_timeout_ms));
  v1beta1::AllocateResponse response;
  grpc::Status s = c->stub->Allocate(&ctx, AllocateRequestOf(containers), &response);
  if (!s.ok()) return ErrorOfStatus(s, "Allocate for " + resource);
  if (response.container_responses_size() != int(containers.size())) {
    return Error(ErrorCode::kCorrupt, "Allocate for " + resource + ": the plugin answered " +
                                          std::to_string(response.container_responses_size()) +
                                          " containers for " + std::to_string(containers.size()) +
                                          " requested");
  }
  std::vector<ContainerAllocation> out;
  for (const v1beta1::ContainerAllocateResponse& r : response.container_responses()) {
    out.push_back(AllocationOf(r));
  }
  return out;
}

Result<std::vector<std::vector<std::string>>> Kubelet::GetPreferredAllocation(
    const std::string& resource, const std::vector<PreferredRequest>& containers) {
  std::shared_ptr<Connection> c = ConnectionFor(resource);
  if (!c) {
    return Error(ErrorCode::kNotFound, "no device plugin is registered for " + resource);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(options_.call_timeout_ms));
  v1beta1::PreferredAllocationResponse response;
  grpc::Status s = c->stub->GetPreferredAllocation(&ctx, PreferredRequestOf(containers), &response);
  if (!s.ok()) return ErrorOfStatus(s, "GetPreferredAllocation for " + resource);
  return PreferredIdsOf(response);
}

Result<AllocatedContainer> Kubelet::AllocateContainer(const std::string& pod_uid,
                                                      const std::string& container,
                                                      const std::string& resource, int count) {
  if (count <= 0) {
    return Error(ErrorCode::kInvalidArgument, "container " + container + " requests " +
                                                  std::to_string(count) + " " + resource +
                                                  ": the count must be positive");
  }
  std::lock_guard serialize(allocate_mu_);
  const std::pair<std::string, std::string> key{pod_uid, container};
  std::vector<std::string> chosen;
  std::vector<std::string> available;
  bool offered = false;
  {
    std::lock_guard lock(mu_);
    auto& held = allocated_[resource];
    if (auto it = held.find(key); it != held.end()) {
      chosen = it->second;  // a retried admission reuses what the container was given
    } else {
      std::set<std::string> in_use;
      for (const auto& [k, ids] : held) in_use.insert(ids.begin(), ids.end());
      auto dit = devices_.find(resource);
      if (dit != devices_.end()) {
        for (const Device& d : dit->second.devices) {
          if (d.healthy() && !in_use.contains(d.id)) available.push_back(d.id);
        }
      }
      if (int(available.size()) < count) {
        return Error(ErrorCode::kUnavailable,
                     "requested number of devices unavailable for " + resource +
                         ". Requested: " + std::to_string(count) +
                         ", Available: " + std::to_string(available.size()));
      }
      auto pit = plugins_.find(resource);
      offered = pit != plugins_.end() && pit->second.get_preferred_allocation_available;
    }
  }
  if (chosen.empty()) {
    if (offered) {
      auto preferred =
          HAMI_TRY(GetPreferredAllocation(resource, {PreferredRequest{available, {}, count}}));
      if (!preferred.empty()) {
        for (const std::string& id : preferred[0]) {
          if (int(chosen.size()) == count) break;
          if (std::find(available.begin(), available.end(), id) != available.end() &&
              std::find(chosen.begin(), chosen.end(), id) == chosen.end()) {
            chosen.push_back(id);
          }
        }
      }
    }
    for (const std::string& id : available) {
      if (int(chosen.size()) == count) break;
      if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
    }
  }
  auto responses = HAMI_TRY(Allocate(resource, {chosen}));
  {
    std::lock_guard lock(mu_);
    allocated_[resource][key] = chosen;
  }
  return AllocatedContainer{std::move(chosen), std::move(responses[0])};
}

void Kubelet::ReleasePod(const std::string& pod_uid) {
  std::lock_guard lock(mu_);
  for (auto& [resource, held] : allocated_) {
    std::erase_if(held, [&](const auto& entry) { return entry.first.first == pod_uid; });
  }
}

}  // namespace hami::sim::kubelet
