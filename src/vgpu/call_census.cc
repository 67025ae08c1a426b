#include "vgpu/call_census.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <new>
#include <span>

namespace hami::vgpu {

namespace {

long Membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0u, 0); }

}  // namespace

static_assert(sizeof(pthread_key_t) <= sizeof(unsigned));

CallCensus::CallCensus() {
  pthread_key_t key;
  if (pthread_key_create(&key, &CallCensus::Give) == 0) {
    key_ = unsigned(key);
    key_made_ = true;
  }
}

CallCensus::~CallCensus() {
  if (key_made_) pthread_key_delete(pthread_key_t(key_));
  if (t_held_.census == this) t_held_ = Held{nullptr, nullptr};
  delete[] counters_.load(std::memory_order_acquire);
}

CallCensus::Counter* CallCensus::Counters() {
  Counter* table = counters_.load(std::memory_order_acquire);
  if (table != nullptr) return table;
  auto* made = new (std::nothrow) Counter[kCounters];
  if (made == nullptr) return nullptr;
  if (!counters_.compare_exchange_strong(table, made, std::memory_order_acq_rel)) {
    delete[] made;  // another thread's stands
    return table;
  }
  return made;
}

CallCensus::Counter* CallCensus::Take() {
  Counter* mine = &overflow_;
  // Without a key a counter could never be given back: every thread shares the overflow.
  Counter* table = key_made_ ? Counters() : nullptr;
  if (table != nullptr) {
    for (Counter& c : std::span(table, kCounters)) {
      bool expected = false;
      if (!c.taken.load(std::memory_order_relaxed) &&
          c.taken.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
        if (pthread_setspecific(pthread_key_t(key_), &c) != 0) {
          c.taken.store(false, std::memory_order_release);
          break;
        }
        mine = &c;
        break;
      }
    }
  }
  t_held_ = Held{this, mine};
  return mine;
}

// Runs on the exiting thread. A call it still makes (from a later thread-exit destructor)
// goes to the overflow counter, never to one another thread may have taken by then.
void CallCensus::Give(void* counter) {
  auto* c = static_cast<Counter*>(counter);
  if (t_held_.counter == c && t_held_.census != nullptr) {
    t_held_.counter = &t_held_.census->overflow_;
  }
  c->taken.store(false, std::memory_order_release);
}

CallCensus::Count CallCensus::Read() {
  bool complete = true;
  if (!fenced_.load(std::memory_order_seq_cst)) {
    int state = barrier_.load(std::memory_order_acquire);
    if (state == 0) {
      const long cmds = Membarrier(MEMBARRIER_CMD_QUERY);
      const bool ok = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
                      Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
      state = ok ? 1 : 2;
      barrier_.store(state, std::memory_order_release);
    }
    if (state != 1 || Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
      // No barrier: from now on the writers fence themselves; what they stored before may
      // not be visible yet, so this reading cannot say that nothing is in flight.
      UseFences();
      complete = false;
    }
  }
  Count out;
  // After the barrier: a table a writer made and counted in is seen.
  if (const Counter* table = counters_.load(std::memory_order_acquire); table != nullptr) {
    for (const Counter& c : std::span(table, kCounters)) {
      out.begun += c.begun.load(std::memory_order_acquire);
      out.in_flight += c.in_flight.load(std::memory_order_acquire);
    }
  }
  out.begun += overflow_.begun.load(std::memory_order_seq_cst);
  out.in_flight += overflow_.in_flight.load(std::memory_order_seq_cst);
  if (!complete) out.in_flight += 1;
  return out;
}

void CallCensus::ResetInForkChild() {
  Counter* mine = t_held_.census == this ? t_held_.counter : nullptr;
  if (Counter* table = counters_.load(std::memory_order_relaxed); table != nullptr) {
    for (Counter& c : std::span(table, kCounters)) {
      if (&c == mine) continue;
      c.in_flight.store(0, std::memory_order_relaxed);
      c.taken.store(false, std::memory_order_relaxed);
    }
  }
  overflow_.in_flight.store(mine == &overflow_ ? overflow_.in_flight.load() : 0,
                            std::memory_order_relaxed);
  // The child's address space starts unregistered for membarrier: register again.
  barrier_.store(0, std::memory_order_relaxed);
}

}  // namespace hami::vgpu
