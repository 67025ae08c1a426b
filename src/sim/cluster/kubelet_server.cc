#include "sim/cluster/kubelet_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "common/strings.h"
#include "sim/cluster/cri_config.h"

namespace hami::sim::cluster {

namespace {

void Log(const std::string& line) {
  std::fprintf(stderr, "sim-node %s\n", line.c_str());
  std::fflush(stderr);
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : " ") + p;
  return out;
}

std::string Quote(const std::string& v) {
  if (!v.empty() && v.find_first_of(" \t\"\\=") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

KubeletParsed Refuse(int status, std::string message) {
  KubeletParsed p;
  p.refusal = {status, std::move(message)};
  return p;
}

}  // namespace

KubeletParsed ParseKubeletExec(std::string_view path,
                               const std::vector<std::pair<std::string, std::string>>& params) {
  std::vector<std::string_view> parts = SplitString(path, '/', false);
  // "/exec/ns/pod/container" splits into "", "exec", ns, pod, [uid,] container.
  if ((parts.size() != 5 && parts.size() != 6) || !parts[0].empty() || parts[1] != "exec") {
    return Refuse(404, "unknown path " + std::string(path) +
                           ": the simulated kubelet serves /exec/{namespace}/{pod}/{container}");
  }
  for (size_t i = 2; i < parts.size(); ++i) {
    if (parts[i].empty()) {
      return Refuse(404, "unknown path " + std::string(path) + ": an empty path segment");
    }
  }
  KubeletExecRequest r;
  r.ns = parts[2];
  r.pod = parts[3];
  if (parts.size() == 6) r.uid = parts[4];
  r.container = parts.back();
  for (const auto& [key, value] : params) {
    if (key == "command") r.command.push_back(value);
  }
  // The kubelet reads each flag as req.FormValue(name) == "1": the first value counts.
  auto first = [&](const char* name) -> std::string {
    for (const auto& [key, value] : params) {
      if (key == name) return value;
    }
    return "";
  };
  r.stdin = first("input") == "1";
  r.stdout = first("output") == "1";
  r.stderr = first("error") == "1";
  r.tty = first("tty") == "1";
  if (r.tty) r.stderr = false;  // merged into stdout
  if (!r.stdin && !r.stdout && !r.stderr) {
    return Refuse(400, "you must specify at least 1 of stdin, stdout, stderr");
  }
  if (r.command.empty()) return Refuse(400, "missing command: give at least one command= argument");
  KubeletParsed p;
  p.request = std::move(r);
  return p;
}

std::string PickRunningContainer(const std::vector<cri::v1::Container>& listed) {
  const cri::v1::Container* best = nullptr;
  for (const cri::v1::Container& c : listed) {
    if (c.state() != cri::v1::CONTAINER_RUNNING) continue;
    if (best == nullptr || c.created_at() > best->created_at()) best = &c;
  }
  return best != nullptr ? best->id() : "";
}

cri::v1::ExecRequest CriExecRequest(const KubeletExecRequest& r, const std::string& container_id) {
  cri::v1::ExecRequest out;
  out.set_container_id(container_id);
  for (const std::string& a : r.command) out.add_cmd(a);
  out.set_tty(r.tty);
  out.set_stdin(r.stdin);
  out.set_stdout(r.stdout);
  out.set_stderr(r.stderr);
  return out;
}

struct KubeletServer::Impl {
  cri::CriClient* cri = nullptr;
  std::string node;
  httplib::Server http;
  std::thread thread;
  int port = 0;
  bool stopped = false;

  void Exec(const httplib::Request& req, httplib::Response& res);
};

void KubeletServer::Impl::Exec(const httplib::Request& req, httplib::Response& res) {
  std::vector<std::pair<std::string, std::string>> params(req.params.begin(), req.params.end());
  KubeletParsed parsed = ParseKubeletExec(req.path, params);
  auto answer = [&](int status, const std::string& text) {
    res.status = status;
    res.set_content(text, "text/plain; charset=utf-8");
  };
  if (!parsed.request) {
    Log("event=exec_refused node=" + node + " path=" + Quote(req.path) +
        " error=" + Quote(parsed.refusal.message));
    return answer(parsed.refusal.status, parsed.refusal.message);
  }
  const KubeletExecRequest& r = *parsed.request;
  const std::string who =
      " node=" + node + " pod=" + r.ns + "/" + r.pod + " container=" + r.container;
  cri::v1::ContainerFilter filter;
  filter.mutable_state()->set_state(cri::v1::CONTAINER_RUNNING);
  auto& labels = *filter.mutable_label_selector();
  labels[kPodNamespaceLabel] = r.ns;
  labels[kPodNameLabel] = r.pod;
  labels[kContainerNameLabel] = r.container;
  if (!r.uid.empty()) labels[kPodUidLabel] = r.uid;
  auto listed = cri->ListContainers(filter);
  if (!listed.ok()) {
    Log("event=exec_failed" + who + " error=" + Quote(listed.error().message()));
    return answer(500, listed.error().message());
  }
  const std::string id = PickRunningContainer(*listed);
  if (id.empty()) {
    Log("event=exec_failed" + who + " error=container_not_running");
    return answer(500, "container not found (\"" + r.container + "\")");
  }
  auto url = cri->Exec(CriExecRequest(r, id));
  if (!url.ok()) {
    Log("event=exec_failed" + who + " error=" + Quote(url.error().message()));
    return answer(url.error().code() == ErrorCode::kNotFound ? 404 : 500, url.error().message());
  }
  Log("event=exec" + who + " container_id=" + id.substr(0, 12) + " command=" +
      Quote(Join(r.command)) + " stdin=" + (r.stdin ? "1" : "0") + " tty=" + (r.tty ? "1" : "0"));
  res.status = 302;
  res.set_header("Location", *url);
}

KubeletServer::KubeletServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

KubeletServer::~KubeletServer() { Stop(); }

Result<std::unique_ptr<KubeletServer>> KubeletServer::Start(cri::CriClient& cri, std::string node,
                                                            int port) {
  auto impl = std::make_unique<Impl>();
  impl->cri = &cri;
  impl->node = std::move(node);
  Impl* self = impl.get();
  httplib::Server& http = impl->http;
  http.new_task_queue = [] { return new httplib::ThreadPool(8); };
  auto exec = [self](const httplib::Request& req, httplib::Response& res) { self->Exec(req, res); };
  http.Get("/exec/.*", exec);
  http.Post("/exec/.*", exec);
  http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain; charset=utf-8");
  });
  if (port == 0) {
    impl->port = http.bind_to_any_port("127.0.0.1");
    if (impl->port <= 0) {
      return Error(ErrorCode::kIo, "the kubelet server: cannot bind 127.0.0.1:0");
    }
  } else {
    if (!http.bind_to_port("127.0.0.1", port)) {
      return Error(ErrorCode::kIo,
                   "the kubelet server: cannot bind 127.0.0.1:" + std::to_string(port));
    }
    impl->port = port;
  }
  impl->thread = std::thread([self] { self->http.listen_after_bind(); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!http.is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      http.stop();
      impl->thread.join();
      return Error(ErrorCode::kTimeout, "the kubelet server: the listener did not start");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Log("event=kubelet_server node=" + impl->node + " port=" + std::to_string(impl->port));
  return std::unique_ptr<KubeletServer>(new KubeletServer(std::move(impl)));
}

void KubeletServer::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int KubeletServer::port() const { return impl_->port; }

}  // namespace hami::sim::cluster
