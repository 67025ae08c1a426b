// CallCensus: which driver calls that allocate or free memory are in flight in this process,
// and how many have begun, for the rare reader that must know that none ran across a window
// (a module load is measured only across a window in which none did: modules.h).
//
// The writers are every allocation and free, so a call's entry and exit cost two plain stores
// to a counter of its own thread, no locked instruction. The reader pays instead: it issues
// a process-wide memory barrier (membarrier(2), private expedited) before it sums the
// counters, which makes every store a thread made before the barrier visible to it. So a
// call whose driver work took effect before the reader's barrier has its entry counted.
// Where membarrier is not available (an old kernel, a seccomp profile that forbids it), the
// writers fall back to sequentially consistent read-modify-writes, and the reader to plain
// loads: the same answers, at the old cost.
//
// Threads take a counter from a fixed table on their first call and give it back when they
// exit; a counter keeps its count when another thread takes it over, so the sum of begun
// calls never goes down. More threads than the table holds share one overflow counter,
// updated with read-modify-writes. The table (16 KiB) is made by the first call of the
// process, not with the census: a process that never allocates never writes its pages.
//
// Thread safety: Enter/Exit from any thread; Read from any thread. ResetInForkChild only from
// a pthread_atfork child handler (the child's one thread).
#pragma once

#include <atomic>
#include <cstdint>

namespace hami::vgpu {

class CallCensus {
 public:
  // What a reader sees.
  struct Count {
    uint64_t begun = 0;      // calls entered, ever (never decreases)
    uint64_t in_flight = 0;  // entered and not yet exited
    bool operator==(const Count&) const = default;
  };

  CallCensus();
  ~CallCensus();
  CallCensus(const CallCensus&) = delete;
  CallCensus& operator=(const CallCensus&) = delete;

  void Enter() {
    Counter* c = Mine();
    if (fenced_.load(std::memory_order_relaxed) || c == &overflow_) {
      c->begun.fetch_add(1, std::memory_order_seq_cst);
      c->in_flight.fetch_add(1, std::memory_order_seq_cst);
      return;
    }
    // Only this thread writes its counter: plain stores, ordered before the driver call by
    // the compiler; the reader's barrier orders them for the processor.
    c->begun.store(c->begun.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    c->in_flight.store(c->in_flight.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  void Exit() {
    Counter* c = Mine();
    if (fenced_.load(std::memory_order_relaxed) || c == &overflow_) {
      c->in_flight.fetch_sub(1, std::memory_order_seq_cst);
      return;
    }
    std::atomic_signal_fence(std::memory_order_seq_cst);
    c->in_flight.store(c->in_flight.load(std::memory_order_relaxed) - 1, std::memory_order_release);
  }

  // The barrier, then the sums.
  Count Read();

  // Whether the cheap writers are in use (false: membarrier was unavailable).
  bool asymmetric() const { return !fenced_.load(std::memory_order_relaxed); }
  // Makes the writers use read-modify-writes from now on (tests; and when a barrier fails).
  void UseFences() { fenced_.store(true, std::memory_order_seq_cst); }

  // The child of fork has one thread, so only its own counter can be in flight; the others'
  // counts stay (the sum never goes down) and their counters become free.
  void ResetInForkChild();

  static constexpr int kCounters = 256;

 private:
  struct alignas(64) Counter {
    std::atomic<uint64_t> begun{0};
    std::atomic<uint64_t> in_flight{0};
    std::atomic<bool> taken{false};
  };

  struct Held {
    CallCensus* census;
    Counter* counter;
  };

  Counter* Mine() {
    const Held& h = t_held_;
    return h.census == this ? h.counter : Take();
  }
  Counter* Take();
  static void Give(void* counter);

  // This thread's counter (and whose it is: a process has one census, tests several).
  __attribute__((tls_model("initial-exec"))) static inline constinit thread_local Held t_held_{
      nullptr, nullptr};

  std::atomic<bool> fenced_{false};
  // 0: membarrier not asked yet; 1: registered; 2: unavailable.
  std::atomic<int> barrier_{0};
  unsigned key_ = 0;  // pthread_key_t: gives a thread's counter back when it exits
  bool key_made_ = false;
  // kCounters of them, made by the first Take (null until then; the overflow counter stands
  // in if they cannot be made). Never replaced once published.
  std::atomic<Counter*> counters_{nullptr};
  Counter overflow_;
  Counter* Counters();  // the table, made if need be; null when it cannot be
};

}  // namespace hami::vgpu
