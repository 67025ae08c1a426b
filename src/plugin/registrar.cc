#include "plugin/registrar.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>

#include "common/clock.h"
#include "log/log.h"

namespace hami::plugin {
namespace {

constexpr uint32_t kWatchMask = IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM |
                                IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

}  // namespace

std::string RegistrarCounters::ToKeyValues() const {
  return "serves=" + std::to_string(serves) + " serve_failures=" + std::to_string(serve_failures) +
         " registrations=" + std::to_string(registrations) +
         " register_failures=" + std::to_string(register_failures) +
         " kubelet_restarts=" + std::to_string(kubelet_restarts) +
         " socket_losses=" + std::to_string(socket_losses) +
         " registered=" + std::to_string(int(registered));
}

Registrar::Registrar(DevicePluginService* service, RegistrarOptions options)
    : service_(service), options_(std::move(options)) {}

Registrar::~Registrar() { Stop(); }

std::string Registrar::plugin_socket() const { return dir_ + "/" + options_.socket_name; }

RegistrarCounters Registrar::Counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

bool Registrar::WaitForRegistrations(uint64_t count, int64_t timeout_ms) const {
  return WaitForCounters([&](const RegistrarCounters& c) { return c.registrations >= count; },
                         timeout_ms);
}

bool Registrar::WaitForCounters(const std::function<bool(const RegistrarCounters&)>& condition,
                                int64_t timeout_ms) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [&] { return condition(counters_); });
}

Status Registrar::Start() {
  const std::string& kubelet = options_.kubelet_socket;
  const size_t slash = kubelet.rfind('/');
  if (kubelet.empty() || kubelet[0] != '/' || slash + 1 == kubelet.size()) {
    return Error(ErrorCode::kInvalidArgument,
                 "kubelet socket '" + kubelet + "' is not an absolute path to a socket file");
  }
  dir_ = slash == 0 ? "" : kubelet.substr(0, slash);
  kubelet_name_ = kubelet.substr(slash + 1);
  const std::string& name = options_.socket_name;
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." ||
      name == kubelet_name_) {
    return Error(ErrorCode::kInvalidArgument,
                 "plugin socket name '" + name + "' is not a file name beside " + kubelet);
  }
  if (options_.backoff.initial_ms <= 0 || options_.backoff.max_ms < options_.backoff.initial_ms) {
    return Error(ErrorCode::kInvalidArgument,
                 "registration backoff " + std::to_string(options_.backoff.initial_ms) + ".." +
                     std::to_string(options_.backoff.max_ms) +
                     " ms: the first wait must be positive and at most the longest");
  }
  inotify_fd_.Reset(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!inotify_fd_.valid()) return Error::FromErrno("inotify_init1");
  const std::string watched = dir_.empty() ? "/" : dir_;
  if (inotify_add_watch(inotify_fd_.get(), watched.c_str(), kWatchMask) < 0) {
    return Error::FromErrno("watching the device-plugins directory " + watched);
  }
  wake_fd_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid()) return Error::FromErrno("eventfd");
  thread_ = std::thread([this] { Run(); });
  return OkStatus();
}

void Registrar::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (register_context_ != nullptr) register_context_->TryCancel();
  }
  if (wake_fd_.valid()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_.get(), &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  StopServing();
}

void Registrar::Failed(const std::string& what, const Error& error) {
  std::lock_guard lock(mu_);
  if (what == "serve") {
    ++counters_.serve_failures;
  } else {
    ++counters_.register_failures;
  }
  counters_.last_error = error.message();
  changed_.notify_all();
}

bool Registrar::Serve() {
  auto server = ServeDevicePlugin(plugin_socket(), service_);
  if (!server.ok()) {
    Failed("serve", server.error());
    return false;
  }
  server_ = std::move(*server);
  HAMI_LOG(kInfo, "event=serving socket=%s resource=%s", plugin_socket().c_str(),
           service_->resource_name().c_str());
  std::lock_guard lock(mu_);
  ++counters_.serves;
  changed_.notify_all();
  return true;
}

bool Registrar::Register() {
  auto stub = v1beta1::Registration::NewStub(UnixChannel(options_.kubelet_socket));
  v1beta1::RegisterRequest request;
  request.set_version(kApiVersion);
  request.set_endpoint(options_.socket_name);
  request.set_resource_name(service_->resource_name());
  *request.mutable_options() = service_->PluginOptions();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(options_.register_timeout_ms));
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    register_context_ = &ctx;
  }
  v1beta1::Empty empty;
  grpc::Status status = stub->Register(&ctx, request, &empty);
  {
    std::lock_guard lock(mu_);
    register_context_ = nullptr;
  }
  if (!status.ok()) {
    Failed("register", FromGrpcStatus(status, "Register with " + options_.kubelet_socket));
    return false;
  }
  HAMI_LOG(kInfo, "event=registered kubelet=%s endpoint=%s resource=%s",
           options_.kubelet_socket.c_str(), options_.socket_name.c_str(),
           service_->resource_name().c_str());
  std::lock_guard lock(mu_);
  ++counters_.registrations;
  counters_.registered = true;
  counters_.last_error.clear();
  changed_.notify_all();
  return true;
}

void Registrar::StopServing() {
  if (!server_) return;
  server_->Stop(options_.stop_grace_ms);
  server_.reset();
  std::lock_guard lock(mu_);
  counters_.registered = false;
}

bool Registrar::ReadEvents() {
  alignas(inotify_event) char buffer[16 * 1024];
  bool kubelet_created = false;
  bool own_socket_touched = false;
  bool watch_lost = false;
  for (;;) {
    const ssize_t n = read(inotify_fd_.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buffer + off);
      off += ssize_t(sizeof(inotify_event) + e->len);
      if (e->mask & IN_Q_OVERFLOW) {
        kubelet_created = true;  // events were lost: assume the worst
        continue;
      }
      if (e->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
        watch_lost = true;
        continue;
      }
      if (e->len == 0) continue;
      const std::string name(e->name);
      if (name == kubelet_name_ && (e->mask & (IN_CREATE | IN_MOVED_TO))) kubelet_created = true;
      if (name == options_.socket_name) own_socket_touched = true;
    }
  }
  if (watch_lost) {
    HAMI_LOG(kError,
             "event=directory_gone dir=%s error=the device-plugins directory was removed or "
             "moved; kubelet restarts are no longer seen until the plugin restarts",
             dir_.c_str());
  }
  const bool socket_lost = own_socket_touched && server_ && !server_->SocketIntact();
  if (!kubelet_created && !socket_lost) return false;
  std::lock_guard lock(mu_);
  if (kubelet_created) {
    ++counters_.kubelet_restarts;
    HAMI_LOG(kInfo, "event=kubelet_socket_created socket=%s action=serve_and_register",
             options_.kubelet_socket.c_str());
  }
  if (socket_lost) {
    ++counters_.socket_losses;
    HAMI_LOG(kWarn, "event=socket_lost socket=%s action=serve_and_register",
             plugin_socket().c_str());
  }
  counters_.registered = false;  // serving and registering again
  changed_.notify_all();
  return true;
}

void Registrar::Run() {
  backoff_ms_ = options_.backoff.initial_ms;
  int64_t next_attempt_ns = 0;  // -1: nothing to do until an event
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
    }
    if (next_attempt_ns >= 0 && MonotonicNs() >= next_attempt_ns) {
      const bool served = server_ != nullptr || Serve();
      bool registered = false;
      if (served) {
        std::lock_guard lock(mu_);
        registered = counters_.registered;
      }
      if (served && !registered) registered = Register();
      if (served && registered) {
        next_attempt_ns = -1;
        backoff_ms_ = options_.backoff.initial_ms;
      } else {
        {
          std::lock_guard lock(mu_);
          if (stopping_) break;
          HAMI_LOG(kWarn, "event=%s socket=%s error=%s retry_in_ms=%lld",
                   served ? "register_failed" : "serve_failed",
                   served ? options_.kubelet_socket.c_str() : plugin_socket().c_str(),
                   counters_.last_error.c_str(), static_cast<long long>(backoff_ms_));
        }
        next_attempt_ns = MonotonicNs() + backoff_ms_ * 1'000'000;
        backoff_ms_ = std::min(backoff_ms_ * 2, options_.backoff.max_ms);
      }
    }
    int timeout_ms = -1;
    if (next_attempt_ns >= 0) {
      const int64_t left_ns = std::max<int64_t>(0, next_attempt_ns - MonotonicNs());
      timeout_ms = int((left_ns + 999'999) / 1'000'000);
    }
    pollfd fds[2] = {{wake_fd_.get(), POLLIN, 0}, {inotify_fd_.get(), POLLIN, 0}};
    const int r = poll(fds, 2, timeout_ms);
    if (r < 0 && errno != EINTR) {
      HAMI_LOG(kError, "event=poll_failed errno=%d", errno);
      break;
    }
    if (fds[0].revents != 0) break;
    if ((fds[1].revents & POLLIN) && ReadEvents()) {
      StopServing();
      next_attempt_ns = 0;
      backoff_ms_ = options_.backoff.initial_ms;
    }
  }
}

}  // namespace hami::plugin
