#include "scheduler/daemon.h"

#include "kube/resource.h"
#include "log/log.h"
#include "scheduler/webhook.h"

namespace hami::scheduler {
namespace {

// The webhook's ensure_claim_template: the template read, created when absent (a create that
// loses a race to another replica reads the winner's), and checked to serve what is wanted.
Status EnsureClaimTemplate(kube::Client& client, const nlohmann::json& wanted) {
  const std::string ns = wanted["metadata"]["namespace"].get<std::string>();
  const std::string name = wanted["metadata"]["name"].get<std::string>();
  auto check = [&](const nlohmann::json& stored) -> Status {
    if (webhook::ClaimTemplateServes(stored, wanted)) return OkStatus();
    return Error(ErrorCode::kConflict,
                 "it exists with another spec (the webhook would write " +
                     wanted["spec"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                     "); delete it so that the webhook writes it again");
  };
  auto got = client.Get(kube::kResourceClaimTemplates, ns, name);
  if (got.ok()) return check(*got);
  if (got.error().code() != ErrorCode::kNotFound) return std::move(got).error();
  auto created = client.Create(kube::kResourceClaimTemplates, ns, wanted);
  if (created.ok()) {
    HAMI_LOG(kInfo, "event=claim_template_created namespace=%s name=%s", ns.c_str(), name.c_str());
    return OkStatus();
  }
  if (created.error().code() != ErrorCode::kConflict) return std::move(created).error();
  auto again = client.Get(kube::kResourceClaimTemplates, ns, name);
  if (!again.ok()) return std::move(again).error();
  return check(*again);
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::Start(kube::Config config, DaemonOptions options) {
  std::unique_ptr<Daemon> d(new Daemon());
  d->options_ = std::move(options);
  const DaemonOptions& o = d->options_;
  d->client_ = HAMI_TRY(kube::Client::Create(std::move(config), o.client));
  d->informers_ = std::make_unique<kube::InformerFactory>(*d->client_);
  kube::EventRecorderOptions eo;
  eo.component = o.scheduler.scheduler_name;
  d->events_ = std::make_unique<kube::EventRecorder>(*d->client_, eo);
  d->scheduler_ = std::make_unique<Scheduler>(*d->client_, *d->informers_, d->events_.get(),
                                              d->metrics_, o.scheduler);
  d->resize_ = std::make_unique<ResizeController>(
      *d->client_, *d->informers_->Get(kube::kPods), d->events_.get(), d->scheduler_->state(),
      [s = d->scheduler_.get()] { return s->Ready(); },
      [s = d->scheduler_.get()](const std::string& node, const std::string& ns,
                                const std::string& name,
                                const std::function<Status(const NodeGpus&)>& decide) {
        return s->WithNodeLocked(node, ns, name, decide);
      },
      o.resize);
  Routes routes = SchedulerRoutes(*d->scheduler_, d->metrics_);
  if (o.webhook) {
    webhook::WebhookContext ctx;
    ctx.device_config = o.scheduler.device_config;
    ctx.scheduler_name = o.scheduler.scheduler_name;
    ctx.mode = o.webhook_mode;
    kube::Client* client = d->client_.get();
    if (o.webhook_mode == webhook::WebhookMode::kDra) {
      ctx.ensure_claim_template = [client](const nlohmann::json& t) {
        return EnsureClaimTemplate(*client, t);
      };
    }
    const ClusterState* state = &d->scheduler_->state();
    ctx.lookup_namespace = [client, state](std::string_view ns) -> Result<webhook::NamespaceView> {
      webhook::NamespaceView view;
      std::tie(view.quota, view.used) = state->QuotaFor(ns);
      auto got = client->Get(kube::kNamespaces, "", ns);
      if (!got.ok()) {
        if (got.error().code() == ErrorCode::kNotFound) return view;
        return std::move(got).error();
      }
      auto meta = kube::ParseObjectMeta(*got, "Namespace");
      if (!meta.ok()) return std::move(meta).error();
      view.labels = std::move(meta->labels);
      return view;
    };
    SchedulerMetrics* metrics = &d->metrics_;
    routes.webhook = [ctx = std::move(ctx), metrics](std::string_view body) {
      auto answer = webhook::Review(body, ctx);
      Answer a;
      if (answer.ok()) {
        a.body = std::move(answer).value();
      } else {
        a.status = answer.error().code() == ErrorCode::kInvalidArgument ? 400 : 500;
        a.body = nlohmann::json{{"Error", answer.error().message()}}.dump(
            -1, ' ', false, nlohmann::json::error_handler_t::replace);
      }
      metrics->CountRequest("webhook", a.status);
      return a;
    };
  }
  d->informers_->Start();
  d->server_ = HAMI_TRY(HttpServer::Start(o.server, std::move(routes)));

  if (o.handshake_enabled) {
    d->handshake_ = std::make_unique<HandshakeLoop>(*d->client_, d->scheduler_->state(),
                                                    d->metrics_, o.handshake);
    Daemon* self = d.get();
    if (o.leader_elect) {
      kube::LeaderElectionConfig lc;
      lc.lease_namespace = o.lease_namespace;
      lc.lease_name = o.lease_name;
      lc.identity = o.leader_identity;
      lc.release_on_cancel = true;
      lc.on_started_leading = [self](std::stop_token stop) {
        self->metrics_.leader.store(true);
        HAMI_LOG(kInfo, "event=leading lease=%s/%s", self->options_.lease_namespace.c_str(),
                 self->options_.lease_name.c_str());
        // The loop reads the informers' view: wait for it first.
        if (self->scheduler_->WaitReady(
                std::chrono::steady_clock::now() + std::chrono::hours(24 * 365), stop)) {
          self->handshake_->Run(stop);
        }
      };
      lc.on_stopped_leading = [self] {
        self->metrics_.leader.store(false);
        HAMI_LOG(kInfo, "event=stopped_leading");
      };
      d->elector_ = HAMI_TRY(kube::LeaderElector::Create(*d->client_, std::move(lc)));
      d->background_ = std::jthread([self](std::stop_token stop) {
        while (!stop.stop_requested()) self->elector_->Run(stop);
      });
    } else {
      d->metrics_.leader.store(true);
      d->background_ = std::jthread([self](std::stop_token stop) {
        if (self->scheduler_->WaitReady(
                std::chrono::steady_clock::now() + std::chrono::hours(24 * 365), stop)) {
          self->handshake_->Run(stop);
        }
      });
    }
  }
  HAMI_LOG(kInfo,
           "event=start http=%s port=%d tls=%d metrics_port=%d leader_elect=%d "
           "gpu_policy=%s node_policy=%s single_node_filter=%d webhook_mode=%s",
           o.server.http_bind.c_str(), d->server_->port(), d->server_->tls() ? 1 : 0,
           d->server_->metrics_port(), o.leader_elect ? 1 : 0,
           d->scheduler_->options().gpu_policy.text.c_str(),
           std::string(NodePolicyName(o.scheduler.node_policy)).c_str(),
           o.scheduler.single_node_filter ? 1 : 0,
           std::string(webhook::WebhookModeName(o.webhook_mode)).c_str());
  return d;
}

Daemon::~Daemon() { Stop(); }

void Daemon::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (background_.joinable()) {
    background_.request_stop();
    background_.join();
  }
  if (server_) server_->Stop();
  resize_.reset();
  if (informers_) informers_->StopAll();
  events_.reset();
}

bool Daemon::WaitReady(std::chrono::steady_clock::time_point deadline) const {
  return scheduler_->WaitReady(deadline);
}

int Daemon::port() const { return server_->port(); }
int Daemon::metrics_port() const { return server_->metrics_port(); }
Scheduler& Daemon::scheduler() { return *scheduler_; }
SchedulerMetrics& Daemon::metrics() { return metrics_; }
kube::Client& Daemon::client() { return *client_; }
ResizeController& Daemon::resize() { return *resize_; }

}  // namespace hami::scheduler
