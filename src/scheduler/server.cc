#include "scheduler/server.h"

#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

namespace hami::scheduler {
namespace {

constexpr char kJson[] = "application/json";
constexpr char kText[] = "text/plain; charset=utf-8";
constexpr char kMetricsType[] = "text/plain; version=0.0.4; charset=utf-8";

std::string JsonError(std::string_view message) {
  return nlohmann::json{{"Error", message}}.dump(-1, ' ', false,
                                                 nlohmann::json::error_handler_t::replace);
}

struct Listener {
  std::unique_ptr<httplib::Server> http;
  std::thread thread;
  int port = 0;

  Status Bind(const std::string& host, int want, std::string_view what) {
    if (want == 0) {
      port = http->bind_to_any_port(host);
      if (port <= 0) {
        return Error(ErrorCode::kIo, std::string(what) + ": cannot bind " + host + ":0");
      }
    } else {
      if (!http->bind_to_port(host, want)) {
        return Error(ErrorCode::kIo, std::string(what) + ": cannot bind " + host + ":" +
                                         std::to_string(want) + " (in use, or not an address " +
                                         "of this host)");
      }
      port = want;
    }
    httplib::Server* s = http.get();
    thread = std::thread([s] { s->listen_after_bind(); });
    for (int i = 0; i < 10000 && !http->is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!http->is_running()) {
      http->stop();
      thread.join();
      return Error(ErrorCode::kTimeout, std::string(what) + ": the listener did not start");
    }
    return OkStatus();
  }

  void Stop() {
    if (!http) return;
    http->stop();
    if (thread.joinable()) thread.join();
  }
};

void Configure(httplib::Server& http, const ServerOptions& options) {
  const size_t threads = size_t(std::max(options.threads, 2));
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_tcp_nodelay(true);
  // kube-scheduler keeps its connection to the extender open; httplib would close it after 5
  // requests, and every fifth request would pay for a new connection on a cold worker thread.
  http.set_keep_alive_max_count(1000);
  http.set_payload_max_length(options.max_body_bytes);
  const size_t max = options.max_body_bytes;
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([max](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string msg;
        switch (res.status) {
          case 413:
            msg = "request body over " + std::to_string(max) + " bytes";
            break;
          case 404:
            msg =
                "no such path (the extender serves POST /filter, /prioritize, /bind, /preempt, "
                "/webhook and GET /healthz, /readyz, /metrics)";
            break;
          case 405:
            msg = "method not allowed on this path";
            break;
          default:
            msg = "the request could not be read (HTTP " + std::to_string(res.status) + ")";
        }
        res.set_content(JsonError(msg), kJson);
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        res.status = 500;
        res.set_content(JsonError("the request handler failed"), kJson);
      });
}

void Post(httplib::Server& http, const char* path, std::function<Answer(std::string_view)> f,
          size_t max) {
  http.Post(path, [f = std::move(f), max](const httplib::Request& req, httplib::Response& res) {
    if (req.body.size() > max) {
      res.status = 413;
      res.set_content(JsonError("request body over " + std::to_string(max) + " bytes"), kJson);
      return;
    }
    Answer a = f(req.body);
    res.status = a.status;
    res.set_content(std::move(a.body), kJson);
  });
  // Another method on a verb's path.
  auto refuse = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "POST");
    res.set_content(JsonError("only POST is served on this path"), kJson);
  };
  http.Get(path, refuse);
  http.Put(path, refuse);
  http.Delete(path, refuse);
}

void Health(httplib::Server& http, const Routes& routes) {
  http.Get("/healthz",
           [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", kText); });
  http.Get("/metrics", [metrics = routes.metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics ? metrics() : std::string(), kMetricsType);
  });
}

}  // namespace

Routes SchedulerRoutes(Scheduler& scheduler, SchedulerMetrics& metrics) {
  Routes r;
  r.filter = [&scheduler](std::string_view b) { return scheduler.Filter(b); };
  r.prioritize = [&scheduler](std::string_view b) { return scheduler.Prioritize(b); };
  r.bind = [&scheduler](std::string_view b) { return scheduler.Bind(b); };
  r.preempt = [&scheduler](std::string_view b) { return scheduler.Preempt(b); };
  r.ready = [&scheduler] { return scheduler.Ready(); };
  r.metrics = [&scheduler, &metrics] {
    return metrics.Render(scheduler.state(), scheduler.Ready());
  };
  return r;
}

struct HttpServer::Impl {
  Listener main;
  Listener metrics;
  bool tls = false;
  bool stopped = false;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { Stop(); }

int HttpServer::port() const { return impl_->main.port; }
int HttpServer::metrics_port() const { return impl_->metrics.port; }
bool HttpServer::tls() const { return impl_->tls; }

void HttpServer::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->main.Stop();
  impl_->metrics.Stop();
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const ServerOptions& options, Routes routes) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return Error(ErrorCode::kInvalidArgument,
                 "--cert-file and --key-file: HTTPS needs both (got cert-file '" +
                     options.cert_file + "', key-file '" + options.key_file + "')");
  }
  auto main_addr = HAMI_TRY(ParseBindAddress(options.http_bind, "--http-bind"));
  std::optional<std::pair<std::string, int>> metrics_addr;
  if (!options.metrics_bind.empty()) {
    metrics_addr = HAMI_TRY(ParseBindAddress(options.metrics_bind, "--metrics-bind-address"));
  }
  struct sigaction old_action {};
  if (sigaction(SIGPIPE, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  auto impl = std::make_unique<Impl>();
  if (!options.cert_file.empty()) {
    for (const std::string& file : {options.cert_file, options.key_file}) {
      if (access(file.c_str(), R_OK) != 0) return Error::FromErrno("HTTPS: " + file);
    }
    auto ssl =
        std::make_unique<httplib::SSLServer>(options.cert_file.c_str(), options.key_file.c_str());
    if (!ssl->is_valid()) {
      return Error(ErrorCode::kInvalidArgument, "HTTPS: certificate " + options.cert_file +
                                                    " and key " + options.key_file +
                                                    " do not make a TLS server (not PEM, or "
                                                    "not a pair)");
    }
    impl->main.http = std::move(ssl);
    impl->tls = true;
  } else {
    impl->main.http = std::make_unique<httplib::Server>();
  }
  httplib::Server& http = *impl->main.http;
  Configure(http, options);
  const size_t max = options.max_body_bytes;
  Post(http, "/filter", routes.filter, max);
  Post(http, "/prioritize", routes.prioritize, max);
  Post(http, "/bind", routes.bind, max);
  if (routes.preempt) Post(http, "/preempt", routes.preempt, max);
  if (routes.webhook) Post(http, "/webhook", routes.webhook, max);
  Health(http, routes);
  http.Get("/readyz", [ready = routes.ready](const httplib::Request&, httplib::Response& res) {
    if (ready && ready()) {
      res.set_content("ok\n", kText);
    } else {
      res.status = 503;
      res.set_content("not ready: the informers have not synced\n", kText);
    }
  });
  HAMI_TRY(impl->main.Bind(main_addr.first, main_addr.second, "--http-bind"));

  if (metrics_addr) {
    impl->metrics.http = std::make_unique<httplib::Server>();
    ServerOptions metrics_options;
    metrics_options.threads = 4;
    Configure(*impl->metrics.http, metrics_options);
    Health(*impl->metrics.http, routes);
    if (auto s =
            impl->metrics.Bind(metrics_addr->first, metrics_addr->second, "--metrics-bind-address");
        !s.ok()) {
      impl->main.Stop();
      return std::move(s).error();
    }
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

}  // namespace hami::scheduler
