#include "scheduler/scheduler.h"

#include <algorithm>
#include <charconv>
#include <unordered_set>
#include <utility>

#include "common/cleanup.h"
#include "common/quote.h"
#include "kube/resource.h"
#include "log/log.h"

namespace hami::scheduler {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

// How long past the lock wait a bind may stay between taking the node lock and posting its
// binding before its lock counts as left by a dead scheduler (HolderBinds).
constexpr std::chrono::seconds kDeadBindAfter{10};
constexpr std::string_view kNotReady =
    "hami-scheduler is not ready: its informers of nodes, pods and resourcequotas have not "
    "synced";

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

Answer ErrorAnswer(int status, const std::string& message) {
  return {status, json{{"Error", message}}.dump(-1, ' ', false, json::error_handler_t::replace)};
}

Answer FilterError(int status, const std::string& message) {
  ExtenderFilterResult r;
  r.error = message;
  return {status, EncodeExtenderFilterResult(r)};
}

std::string Key(std::string_view ns, std::string_view name) {
  return std::string(ns) + "/" + std::string(name);
}

// Whether the node's lock, as the informer shows it, is held by a pod other than ns/name.
bool HeldByOther(const ClusterState::NodeInfo& info, std::string_view ns, std::string_view name,
                 kube::WallTime now, std::chrono::seconds timeout) {
  if (!info.lock_present || !info.lock) return false;
  const kube::NodeLock& l = *info.lock;
  if (l.ns == ns && l.pod == name) return false;
  return now - l.time < timeout;
}

}  // namespace

struct Scheduler::Prepared {
  PodRequest request;
  PodConstraints constraints;
  PodPolicy policy;
};

Scheduler::Scheduler(kube::Client& client, kube::InformerFactory& informers,
                     kube::EventRecorder* events, SchedulerMetrics& metrics,
                     SchedulerOptions options)
    : client_(client),
      events_(events),
      metrics_(metrics),
      options_(std::move(options)),
      state_(options_.device_config, options_.node_lock_timeout),
      locker_(client, options_.node_lock_timeout) {
  if (options_.gpu_policy.sort_keys.empty()) {
    options_.gpu_policy = *ParseGpuPolicy("spread", "default");
  }
  nodes_ = informers.Get(kube::kNodes);
  pods_ = informers.Get(kube::kPods);
  quotas_ = informers.Get(kube::kResourceQuotas);
  nodes_->AddHandler(state_.NodeHandler());
  pods_->AddHandler(state_.PodHandler());
  quotas_->AddHandler(state_.QuotaHandler());
  pods_->AddHandler(
      {[this](const kube::ObjectPtr& o) { NotePodNomination(*o); },
       [this](const kube::ObjectPtr&, const kube::ObjectPtr& o) { NotePodNomination(*o); },
       [this](const kube::ObjectPtr& o) {
         state_.Unnominate(kube::MetadataString(*o, "namespace"), kube::MetadataString(*o, "name"));
       }});
}

void Scheduler::NotePodNomination(const json& object) {
  const std::string_view ns = kube::MetadataString(object, "namespace");
  const std::string_view name = kube::MetadataString(object, "name");
  std::string_view node;
  if (auto st = object.find("status"); st != object.end() && st->is_object()) {
    if (auto n = st->find("nominatedNodeName"); n != st->end() && n->is_string()) {
      node = n->get_ref<const std::string&>();
    }
  }
  if (node.empty()) {
    state_.Unnominate(ns, name);
    return;
  }
  // A bound, ended or deleting pod holds its own share or nothing; one whose request does not
  // parse cannot be placed (its filter fails too).
  auto pod = kube::ParsePod(object);
  if (!pod.ok() || !pod->node_name.empty() || pod->IsTerminated() ||
      pod->metadata.deletion_timestamp) {
    state_.Unnominate(ns, name);
    return;
  }
  auto prep = Prepare(*pod);
  if (!prep.ok() || !prep->request.RequestsGpus()) {
    state_.Unnominate(ns, name);
    return;
  }
  NominatedPod n;
  n.key = Key(ns, name);
  n.priority = pod->priority.value_or(0);
  n.request = std::move(prep->request);
  n.constraints = std::move(prep->constraints);
  n.policy = std::move(prep->policy);
  state_.Nominate(std::string(node), std::move(n));
}

bool Scheduler::Ready() const {
  return nodes_->HasSynced() && pods_->HasSynced() && quotas_->HasSynced();
}

bool Scheduler::WaitReady(SteadyClock::time_point deadline, std::stop_token stop) const {
  return nodes_->WaitForSync(deadline, stop) && pods_->WaitForSync(deadline, stop) &&
         quotas_->WaitForSync(deadline, stop);
}

kube::WallTime Scheduler::Now() const {
  return options_.now ? options_.now() : std::chrono::system_clock::now();
}

Result<Scheduler::Prepared> Scheduler::Prepare(const kube::Pod& pod) const {
  Prepared p;
  p.request = HAMI_TRY(ParsePodRequest(pod, options_.device_config));
  if (!p.request.RequestsGpus()) return p;
  p.constraints = HAMI_TRY(ConstraintsForPod(pod.metadata));
  p.policy = HAMI_TRY(PolicyForPod(pod.metadata, options_.gpu_policy, options_.node_policy));
  return p;
}

Answer Scheduler::Filter(std::string_view body) {
  const auto start = SteadyClock::now();
  auto done = [&](Answer a) {
    metrics_.filter_seconds.Observe(SecondsSince(start));
    metrics_.CountRequest("filter", a.status);
    return a;
  };
  auto args = ParseExtenderArgs(body);
  if (!args.ok()) return done(FilterError(400, args.error().message()));
  if (!Ready()) return done(FilterError(503, std::string(kNotReady)));
  auto prep = Prepare(args->pod);
  if (!prep.ok()) return done(FilterError(400, "ExtenderArgs: Pod: " + prep.error().message()));

  const std::vector<std::string>& names = args->Candidates();
  ExtenderFilterResult result;
  std::vector<std::string> fitting;
  if (!prep->request.RequestsGpus()) {
    fitting = names;
  } else {
    const kube::Pod& pod = args->pod;
    Scores scores;
    scores.uid = pod.metadata.uid;
    auto fits =
        state_.FitNodes(pod.metadata.ns, pod.metadata.name, pod.priority.value_or(0), prep->request,
                        prep->constraints, prep->policy, names, Now(), &scores.generation);
    if (!scores.uid.empty()) {
      scores.by_node.reserve(fits.size());
      for (const auto& nf : fits) {
        scores.by_node.emplace(nf.name, nf.fit.fits && !nf.locked ? nf.fit.score : 0);
      }
      RememberScores(std::move(scores));
    }
    const ClusterState::NodeFit* best = nullptr;
    for (const auto& nf : fits) {
      if (!nf.known) {
        result.failed_nodes[nf.name] =
            "hami-scheduler has not seen this node (no Node object in its informer)";
      } else if (nf.fit.fits) {
        fitting.push_back(nf.name);
        if (best == nullptr || nf.fit.score > best->fit.score) best = &nf;
      } else if (nf.fit.unresolvable) {
        result.failed_and_unresolvable_nodes[nf.name] = nf.fit.reason;
      } else {
        result.failed_nodes[nf.name] = nf.fit.reason;
      }
    }
    if (options_.single_node_filter && best != nullptr) {
      for (const std::string& n : fitting) {
        if (n != best->name) {
          result.failed_nodes[n] = "fits, but the single-node filter keeps only " + best->name;
        }
      }
      fitting = {best->name};
    }
  }
  if (args->node_names) result.node_names = fitting;
  if (args->nodes) {
    std::unordered_set<std::string_view> keep(fitting.begin(), fitting.end());
    json list = json::object();
    list["apiVersion"] = "v1";
    list["kind"] = "NodeList";
    list["metadata"] = json::object();
    json items = json::array();
    if (auto it = args->nodes->find("items"); it != args->nodes->end() && it->is_array()) {
      for (auto& item : *it) {
        if (keep.count(kube::MetadataString(item, "name")) != 0) items.push_back(std::move(item));
      }
    }
    list["items"] = std::move(items);
    result.nodes = std::move(list);
  }
  return done({200, EncodeExtenderFilterResult(result)});
}

Answer Scheduler::Prioritize(std::string_view body) {
  const auto start = SteadyClock::now();
  auto done = [&](Answer a) {
    metrics_.prioritize_seconds.Observe(SecondsSince(start));
    metrics_.CountRequest("prioritize", a.status);
    return a;
  };
  auto args = ParseExtenderArgs(body);
  if (!args.ok()) return done(ErrorAnswer(400, args.error().message()));
  if (!Ready()) return done(ErrorAnswer(503, std::string(kNotReady)));
  auto prep = Prepare(args->pod);
  if (!prep.ok()) return done(ErrorAnswer(400, "ExtenderArgs: Pod: " + prep.error().message()));
  const std::vector<std::string>& names = args->Candidates();
  std::vector<HostPriority> list;
  list.reserve(names.size());
  if (!prep->request.RequestsGpus()) {
    for (const std::string& n : names) list.push_back({n, 0});
  } else {
    const kube::Pod& pod = args->pod;
    std::shared_ptr<const Scores> cached;
    if (!pod.metadata.uid.empty()) cached = RecallScores(pod.metadata.uid, state_.generation());
    bool hit = cached != nullptr;
    if (hit) {
      std::lock_guard gate(gate_mu_);  // one lock for every node's Binding()
      for (const std::string& n : names) {
        auto it = cached->by_node.find(n);
        if (it == cached->by_node.end()) {
          hit = false;
          list.clear();
          break;
        }
        list.push_back({n, binding_.count(n) != 0 ? 0 : it->second});
      }
    }
    if (!hit) {
      auto fits = state_.FitNodes(pod.metadata.ns, pod.metadata.name, pod.priority.value_or(0),
                                  prep->request, prep->constraints, prep->policy, names, Now());
      for (const auto& nf : fits) {
        int64_t score = nf.fit.fits ? nf.fit.score : 0;
        if (nf.locked || Binding(nf.name)) score = 0;
        list.push_back({nf.name, score});
      }
    }
  }
  return done({200, EncodeHostPriorityList(list)});
}

Answer Scheduler::Bind(std::string_view body) {
  const auto start = SteadyClock::now();
  auto done = [&](Answer a) {
    metrics_.bind_seconds.Observe(SecondsSince(start));
    metrics_.CountRequest("bind", a.status);
    return a;
  };
  auto args = ParseExtenderBindingArgs(body);
  if (!args.ok()) {
    metrics_.CountBindFailure(BindFailure::kInvalid);
    return done(ErrorAnswer(400, args.error().message()));
  }
  if (!Ready()) return done(ErrorAnswer(503, std::string(kNotReady)));
  BindFailure failure = BindFailure::kApi;
  auto bound = BindPod(*args, failure);
  if (!bound.ok()) {
    metrics_.CountBindFailure(failure);
    return done({200, EncodeExtenderBindingResult(bound.error().message())});
  }
  return done({200, EncodeExtenderBindingResult("")});
}

Answer Scheduler::Preempt(std::string_view body) {
  auto done = [&](Answer a) {
    metrics_.CountRequest("preempt", a.status);
    return a;
  };
  auto args = ParseExtenderPreemptionArgs(body);
  if (!args.ok()) return done(ErrorAnswer(400, args.error().message()));
  if (!Ready()) return done(ErrorAnswer(503, std::string(kNotReady)));
  const kube::Pod& pod = args->pod;
  auto prep = Prepare(pod);
  if (!prep.ok()) {
    return done(ErrorAnswer(400, "ExtenderPreemptionArgs: Pod: " + prep.error().message()));
  }
  // The victims as kube-scheduler named them, where the GPUs have no say.
  auto as_given = [](const NodeVictims& named) {
    NodeVictims v;
    v.num_pdb_violations = named.num_pdb_violations;
    for (const VictimRef& ref : named.pods) {
      if (!ref.uid.empty()) v.pods.push_back({ref.uid, {}, {}, {}});
    }
    return v;
  };
  std::map<std::string, NodeVictims> answer;
  if (!prep->request.RequestsGpus()) {
    for (const auto& [node, named] : args->victims) answer[node] = as_given(named);
    return done({200, EncodeExtenderPreemptionResult(answer)});
  }
  const int32_t priority = pod.priority.value_or(0);
  const std::set<std::string> departing = Departing(pod.metadata.uid);
  auto chosen =
      state_.ChooseVictimsOnNodes(pod.metadata.ns, pod.metadata.name, priority, prep->request,
                                  prep->constraints, prep->policy, args->victims, departing);
  size_t ignored = 0, dropped = 0, answered = 0;
  auto named = args->victims.begin();  // chosen has the nodes of args->victims, in its order
  for (auto& np : chosen) {
    ignored += np.ignored;
    if (named == args->victims.end() || named->first != np.name) {
      named = args->victims.find(np.name);
    }
    NodeVictims v;
    v.num_pdb_violations = named->second.num_pdb_violations;
    ++named;
    switch (np.choice.outcome) {
      case VictimChoice::Outcome::kFitsAlready:  // nothing there needs to go for the GPUs
      case VictimChoice::Outcome::kVictims:
        v.pods.reserve(np.choice.victims.size());
        for (size_t i : np.choice.victims) v.pods.push_back({std::move(np.uids[i]), {}, {}, {}});
        answered += v.pods.size();
        break;
      case VictimChoice::Outcome::kNoHelp:
        HAMI_VLOG(4, "event=preempt_node_dropped pod=%s/%s node=%s reason=%s",
                  pod.metadata.ns.c_str(), pod.metadata.name.c_str(), np.name.c_str(),
                  QuoteInput(np.known ? np.choice.reason : "node not known", 300).c_str());
        break;
    }
    if (v.pods.empty()) {
      ++dropped;
    } else {
      answer.emplace_hint(answer.end(), std::move(np.name), std::move(v));
    }
  }
  std::string text = EncodeExtenderPreemptionResult(answer);
  if (answered > 0) {
    // Once written, the answer gives its UIDs up to the memory of answered victims.
    std::vector<std::string> uids;
    uids.reserve(answered);
    for (auto& [node, v] : answer) {
      for (VictimRef& ref : v.pods) uids.push_back(std::move(ref.uid));
    }
    RememberVictims(pod.metadata.uid, std::move(uids));
  }
  HAMI_LOG(kInfo,
           "event=preempt pod=%s/%s priority=%d nodes=%zu answered=%zu dropped=%zu "
           "unknown_victims=%zu",
           pod.metadata.ns.c_str(), pod.metadata.name.c_str(), int(priority), args->victims.size(),
           answer.size(), dropped, ignored);
  return done({200, std::move(text)});
}

std::set<std::string> Scheduler::Departing(const std::string& uid) {
  std::lock_guard lock(answered_mu_);
  const auto now = SteadyClock::now();
  std::set<std::string> out;
  for (const Answered& a : answered_) {
    if (a.uid == uid && a.expires > now) out.insert(a.victims.begin(), a.victims.end());
  }
  return out;
}

void Scheduler::RememberVictims(const std::string& uid, std::vector<std::string> victims) {
  if (uid.empty()) return;
  Answered a{uid, SteadyClock::now() + options_.preempt_memory, std::move(victims)};
  std::list<Answered> dropped;  // freed outside the lock
  std::lock_guard lock(answered_mu_);
  answered_.push_front(std::move(a));
  if (answered_.size() > 16) dropped.splice(dropped.end(), answered_, std::prev(answered_.end()));
}

bool Scheduler::HolderBinds(const kube::NodeLock& lock, const std::string& node) {
  // The API's copy, not the informer's: the holder may have written its annotations a moment
  // ago.
  auto got = client_.Get(kube::kPods, lock.ns, lock.pod);
  if (!got.ok()) return got.error().code() != ErrorCode::kNotFound;
  // A young lock's holder may not have written its annotations yet (the lock's time is
  // truncated to the second, hence the second added).
  if (Now() - lock.time < options_.node_lock_wait + std::chrono::seconds(1)) return true;
  auto pod = kube::ParseObjectMeta(*got, "Pod");
  if (!pod.ok()) return true;
  const std::string* target = pod->Annotation(kube::kVgpuNodeAnnotation);
  const std::string* phase = pod->Annotation(kube::kBindPhaseAnnotation);
  if (target == nullptr || *target != node || phase == nullptr ||
      *phase != kube::EncodeBindPhase(kube::BindPhase::kAllocating)) {
    return false;
  }
  // Annotated for this node and allocating: bound and waiting for the device plugin, or a bind
  // between its annotations and its binding. A bind that died there (its scheduler killed)
  // leaves the pod unbound with the lock held; other pods would wait out the whole lock timeout
  // for it, and the pod itself can wait behind them. An unbound holder whose lock is older
  // than any bind takes is such a bind: its lock is broken (the pod is bound again later).
  const json* spec_node = nullptr;
  if (auto sp = got->find("spec"); sp != got->end() && sp->is_object()) {
    if (auto nn = sp->find("nodeName"); nn != sp->end() && nn->is_string()) spec_node = &*nn;
  }
  if (spec_node != nullptr && spec_node->get_ref<const std::string&>() == node) return true;
  return Now() - lock.time < options_.node_lock_wait + kDeadBindAfter;
}

void Scheduler::RememberScores(Scores scores) {
  auto shared = std::make_shared<const Scores>(std::move(scores));
  std::shared_ptr<const Scores> dropped;  // freed outside the lock
  std::lock_guard lock(scores_mu_);
  for (auto it = scores_.begin(); it != scores_.end(); ++it) {
    if ((*it)->uid == shared->uid) {
      dropped = std::move(*it);
      scores_.erase(it);
      break;
    }
  }
  scores_.push_front(std::move(shared));
  if (scores_.size() > 64) {
    dropped = std::move(scores_.back());
    scores_.pop_back();
  }
}

std::shared_ptr<const Scheduler::Scores> Scheduler::RecallScores(std::string_view uid,
                                                                 uint64_t generation) {
  std::lock_guard lock(scores_mu_);
  for (const auto& s : scores_) {
    if (s->uid == uid) return s->generation == generation ? s : nullptr;
  }
  return nullptr;
}

bool Scheduler::EnterNode(const std::string& node, SteadyClock::time_point deadline) {
  std::unique_lock lock(gate_mu_);
  if (!gate_cv_.wait_until(lock, deadline, [&] { return binding_.count(node) == 0; })) {
    return false;
  }
  binding_[node] = 1;
  return true;
}

void Scheduler::LeaveNode(const std::string& node) {
  {
    std::lock_guard lock(gate_mu_);
    binding_.erase(node);
  }
  gate_cv_.notify_all();
}

bool Scheduler::Binding(const std::string& node) const {
  std::lock_guard lock(gate_mu_);
  return binding_.count(node) != 0;
}

void Scheduler::Fail(const json* pod, const ExtenderBindingArgs& args, BindFailure failure,
                     const std::string& reason) {
  HAMI_LOG(kWarn, "event=bind_failed pod=%s/%s node=%s reason=%s error=%s",
           args.pod_namespace.c_str(), args.pod_name.c_str(), args.node.c_str(),
           std::string(BindFailureName(failure)).c_str(), QuoteInput(reason, 400).c_str());
  if (events_ == nullptr) return;
  kube::ObjectReference ref;
  if (pod != nullptr) {
    ref = kube::ReferenceToObject(kube::kPods, *pod);
  } else {
    ref.api_version = "v1";
    ref.kind = "Pod";
    ref.ns = args.pod_namespace;
    ref.name = args.pod_name;
    ref.uid = args.pod_uid;
  }
  events_->Record(ref, kube::EventType::kWarning, "BindingFailed", reason);
}

Result<json> Scheduler::TakeNodeLock(const std::string& node_name, const std::string& ns,
                                     const std::string& name, SteadyClock::time_point deadline) {
  auto info = state_.Node(node_name);
  if (!info) {
    return Error(ErrorCode::kNotFound,
                 "node " + node_name + " is not known to hami-scheduler (no Node object seen)");
  }
  json node_obj = *info->object;
  auto holder_binds = [this, &node_name](const kube::NodeLock& l) {
    return HolderBinds(l, node_name);
  };
  std::string busy;
  for (;;) {
    if (SteadyClock::now() >= deadline) {
      return Error(
          ErrorCode::kBusy,
          (busy.empty() ? "node " + node_name + ": the node lock could not be taken" : busy) +
              " (waited " + std::to_string(options_.node_lock_wait.count()) + " ms)");
    }
    auto locked = locker_.TryLock(node_obj, ns, name, Now(), holder_binds);
    if (locked.ok()) return std::move(locked).value();
    const ErrorCode code = locked.error().code();
    if (code == ErrorCode::kConflict) {
      auto fresh = client_.Get(kube::kNodes, "", node_name);
      if (!fresh.ok()) return std::move(fresh).error();
      node_obj = std::move(fresh).value();
      continue;
    }
    if (code != ErrorCode::kBusy) return std::move(locked).error();
    busy = locked.error().message();
    // Another pod holds the lock. Retry at once with a newer Node the informer already has in
    // which the lock is not held; else wait for the informer to show a change of the node.
    auto current = state_.Node(node_name);
    if (!current) return Error(ErrorCode::kNotFound, "node " + node_name + " went away");
    const bool newer = kube::MetadataString(*current->object, "resourceVersion") !=
                       kube::MetadataString(node_obj, "resourceVersion");
    if (!newer || HeldByOther(*current, ns, name, Now(), options_.node_lock_timeout)) {
      if (!state_.WaitNodeChange(node_name, current->generation, deadline)) continue;
      current = state_.Node(node_name);
      if (!current) return Error(ErrorCode::kNotFound, "node " + node_name + " went away");
    }
    node_obj = *current->object;
  }
}

Status Scheduler::WithNodeLocked(const std::string& node_name, const std::string& ns,
                                 const std::string& name,
                                 const std::function<Status(const NodeGpus&)>& decide) {
  if (!Ready()) return Error(ErrorCode::kUnavailable, std::string(kNotReady));
  const auto deadline = SteadyClock::now() + options_.node_lock_wait;
  if (!EnterNode(node_name, deadline)) {
    return Error(ErrorCode::kBusy, "node " + node_name +
                                       ": a bind to this node did not finish within " +
                                       std::to_string(options_.node_lock_wait.count()) + " ms");
  }
  Cleanup leave([&] { LeaveNode(node_name); });
  auto locked = TakeNodeLock(node_name, ns, name, deadline);
  if (!locked.ok()) return std::move(locked).error();
  Cleanup release([&] {
    if (auto s = locker_.Unlock(node_name, ns, name); !s.ok()) {
      HAMI_LOG(kWarn, "event=unlock_failed node=%s pod=%s error=%s", node_name.c_str(),
               Key(ns, name).c_str(), QuoteInput(s.error().message(), 300).c_str());
    }
  });
  // The node's usage as of the lock, as a bind reads it: the view once it has applied every pod
  // change up to the lock's resourceVersion, else the pods bound to the node as the API lists
  // them.
  std::optional<NodeGpus> gpus;
  int64_t lock_rv = 0;
  const std::string_view rv_text = kube::MetadataString(*locked, "resourceVersion");
  auto [rv_end, rv_ec] = std::from_chars(rv_text.data(), rv_text.data() + rv_text.size(), lock_rv);
  const bool numeric = rv_ec == std::errc() && rv_end == rv_text.data() + rv_text.size();
  if (numeric &&
      state_.WaitPodsApplied(lock_rv, SteadyClock::now() + std::chrono::milliseconds(50))) {
    gpus = state_.NodeGpusFresh(node_name, {});
  } else {
    kube::ListOptions lo;
    lo.field_selector = "spec.nodeName=" + node_name;
    auto listed = client_.List(kube::kPods, "", lo);
    if (!listed.ok()) return std::move(listed).error();
    std::vector<PodShare> node_pods;
    if (auto items = listed->find("items"); items != listed->end() && items->is_array()) {
      for (const json& item : *items) {
        auto p = kube::ParsePod(item);
        if (!p.ok()) continue;
        if (auto share = ShareOfPod(*p)) node_pods.push_back(std::move(*share));
      }
    }
    gpus = state_.NodeGpusFresh(node_name, node_pods);
  }
  if (!gpus) return Error(ErrorCode::kNotFound, "node " + node_name + " went away");
  return decide(*gpus);
}

Result<std::string> Scheduler::BindPod(const ExtenderBindingArgs& args, BindFailure& failure) {
  const std::string& ns = args.pod_namespace;
  const std::string& name = args.pod_name;
  const std::string& node_name = args.node;
  const std::string pod_key = Key(ns, name);
  kube::ObjectPtr pod_obj = pods_->store().Get(ns, name);
  auto fail = [&](BindFailure f, std::string reason) -> Error {
    failure = f;
    Fail(pod_obj.get(), args, f, reason);
    return Error(f == BindFailure::kApi ? ErrorCode::kUnavailable : ErrorCode::kInvalidArgument,
                 std::move(reason));
  };
  if (pod_obj == nullptr) {
    auto got = client_.Get(kube::kPods, ns, name);
    if (!got.ok()) {
      return fail(got.error().code() == ErrorCode::kNotFound ? BindFailure::kPodNotFound
                                                             : BindFailure::kApi,
                  "binding pod " + pod_key + ": " + got.error().message());
    }
    pod_obj = std::make_shared<const json>(std::move(got).value());
  }
  auto pod = kube::ParsePod(*pod_obj);
  if (!pod.ok()) return fail(BindFailure::kInvalid, pod.error().message());
  if (!args.pod_uid.empty() && pod->metadata.uid != args.pod_uid) {
    return fail(BindFailure::kPodNotFound, "pod " + pod_key + " is now another pod (uid " +
                                               pod->metadata.uid + ", the binding names " +
                                               args.pod_uid + ")");
  }
  if (!pod->node_name.empty()) {
    if (pod->node_name == node_name) return std::string();  // a retry of a bind that landed
    return fail(BindFailure::kInvalid,
                "pod " + pod_key + " is already bound to node " + pod->node_name);
  }
  auto prep = Prepare(*pod);
  if (!prep.ok()) return fail(BindFailure::kInvalid, prep.error().message());

  const json binding = {
      {"apiVersion", "v1"},
      {"kind", "Binding"},
      {"metadata", {{"name", name}, {"namespace", ns}, {"uid", pod->metadata.uid}}},
      {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node_name}}}};
  if (!prep->request.RequestsGpus()) {
    auto bound = client_.CreateSubresource(kube::kPods, ns, name, "binding", binding);
    if (!bound.ok()) return fail(BindFailure::kApi, bound.error().message());
    return std::string();
  }

  auto info = state_.Node(node_name);
  if (!info) {
    return fail(BindFailure::kNodeUnknown,
                "node " + node_name + " is not known to hami-scheduler (no Node object seen)");
  }
  const auto deadline = SteadyClock::now() + options_.node_lock_wait;
  if (!EnterNode(node_name, deadline)) {
    return fail(BindFailure::kLockBusy,
                "node " + node_name + ": another bind to this node did not finish within " +
                    std::to_string(options_.node_lock_wait.count()) + " ms");
  }
  Cleanup leave([&] { LeaveNode(node_name); });

  // The node lock.
  auto locked = TakeNodeLock(node_name, ns, name, deadline);
  if (!locked.ok()) {
    const ErrorCode code = locked.error().code();
    return fail(code == ErrorCode::kBusy       ? BindFailure::kLockBusy
                : code == ErrorCode::kNotFound ? BindFailure::kNodeUnknown
                                               : BindFailure::kApi,
                locked.error().message());
  }
  const json locked_node = std::move(locked).value();  // the Node as the lock's patch stored it
  bool unlock = true;
  Cleanup release([&] {
    if (!unlock) return;
    if (auto s = locker_.Unlock(node_name, ns, name); !s.ok()) {
      HAMI_LOG(kWarn, "event=unlock_failed node=%s pod=%s error=%s", node_name.c_str(),
               pod_key.c_str(), QuoteInput(s.error().message(), 300).c_str());
    }
  });

  // Fit again against the usage as it is now, counting what another scheduler bound to the
  // node before its lock was released to us: once this view has applied every pod change up to
  // the lock's resourceVersion (at once during a burst, when pod changes stream in), the view
  // alone; else the pods bound to the node as the API lists them (a consistent read).
  ClusterState::NodeFit fresh;
  const int32_t priority = pod->priority.value_or(0);
  int64_t lock_rv = 0;
  const std::string_view rv_text = kube::MetadataString(locked_node, "resourceVersion");
  auto [rv_end, rv_ec] = std::from_chars(rv_text.data(), rv_text.data() + rv_text.size(), lock_rv);
  const bool numeric = rv_ec == std::errc() && rv_end == rv_text.data() + rv_text.size();
  if (numeric &&
      state_.WaitPodsApplied(lock_rv, SteadyClock::now() + std::chrono::milliseconds(50))) {
    metrics_.fresh_read_view.fetch_add(1);
    fresh = std::move(state_.FitNodes(ns, name, priority, prep->request, prep->constraints,
                                      prep->policy, {node_name}, Now())[0]);
  } else {
    metrics_.fresh_read_list.fetch_add(1);
    kube::ListOptions lo;
    lo.field_selector = "spec.nodeName=" + node_name;
    auto listed = client_.List(kube::kPods, "", lo);
    if (!listed.ok()) return fail(BindFailure::kApi, listed.error().message());
    std::vector<PodShare> node_pods;
    if (auto items = listed->find("items"); items != listed->end() && items->is_array()) {
      for (const json& item : *items) {
        auto p = kube::ParsePod(item);
        if (!p.ok()) continue;
        if (auto share = ShareOfPod(*p)) node_pods.push_back(std::move(*share));
      }
    }
    fresh = state_.FitNodeFresh(ns, name, priority, prep->request, prep->constraints, prep->policy,
                                node_name, node_pods, Now());
  }
  const FitResult& fit = fresh.fit;
  if (!fit.fits) {
    return fail(BindFailure::kNoFit,
                "pod " + pod_key + " does not fit node " + node_name + " now: " + fit.reason);
  }
  PodShare share;
  share.ns = ns;
  share.name = name;
  share.uid = pod->metadata.uid;
  share.node = node_name;
  share.devices = fit.devices;
  share.init_containers = pod->init_containers.size();
  state_.Reserve(share, options_.reservation_ttl);
  bool reserved = true;
  Cleanup unreserve([&] {
    if (reserved) state_.Unreserve(ns, name);
  });

  auto text = kube::EncodePodDevices(fit.devices, kube::kDevicesToAllocateAnnotation);
  if (!text.ok()) return fail(BindFailure::kInvalid, text.error().message());
  const std::string now_text = kube::EncodeUnixSeconds(Now());
  json annotations = {
      {std::string(kube::kVgpuNodeAnnotation), node_name},
      {std::string(kube::kVgpuTimeAnnotation), now_text},
      {std::string(kube::kDevicesToAllocateAnnotation), *text},
      {std::string(kube::kDevicesAllocatedAnnotation), *text},
      {std::string(kube::kBindPhaseAnnotation),
       std::string(kube::EncodeBindPhase(kube::BindPhase::kAllocating))},
      {std::string(kube::kBindTimeAnnotation), now_text},
  };
  auto patched = client_.Patch(kube::kPods, ns, name, kube::PatchType::kMerge,
                               json{{"metadata", {{"annotations", annotations}}}});
  if (!patched.ok()) return fail(BindFailure::kApi, patched.error().message());

  auto bound = client_.CreateSubresource(kube::kPods, ns, name, "binding", binding);
  if (!bound.ok()) {
    // Take the annotations back: the pod holds nothing until it is bound.
    json revert = {{std::string(kube::kVgpuNodeAnnotation), nullptr},
                   {std::string(kube::kVgpuTimeAnnotation), nullptr},
                   {std::string(kube::kDevicesToAllocateAnnotation), nullptr},
                   {std::string(kube::kDevicesAllocatedAnnotation), nullptr},
                   {std::string(kube::kBindPhaseAnnotation),
                    std::string(kube::EncodeBindPhase(kube::BindPhase::kFailed))},
                   {std::string(kube::kBindTimeAnnotation), nullptr}};
    auto reverted = client_.Patch(kube::kPods, ns, name, kube::PatchType::kMerge,
                                  json{{"metadata", {{"annotations", revert}}}});
    if (!reverted.ok()) {
      HAMI_LOG(kWarn, "event=revert_failed pod=%s error=%s", pod_key.c_str(),
               QuoteInput(reverted.error().message(), 300).c_str());
    }
    return fail(BindFailure::kApi, bound.error().message());
  }
  // The device plugin releases the lock; the reservation stands until the informer shows the
  // annotations.
  unlock = false;
  reserved = false;
  HAMI_VLOG(4, "event=bound pod=%s node=%s devices=%s", pod_key.c_str(), node_name.c_str(),
            text->c_str());
  return std::string();
}

}  // namespace hami::scheduler
