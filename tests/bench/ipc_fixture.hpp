// Two-process fixtures for the IPC benchmarks (shm_pingpong, plan_roundtrip): a child process,
// the raw shared-memory spin ping-pong that serves as their baseline, control segments with
// bench-unique names, and an interleaved schedule that times a subject round trip and the raw
// one in alternating blocks so both see the same machine noise.
//
// Thread-safety: call from a single-threaded process (fork). The child runs its part and leaves
// with _exit(): it never returns into main() and never runs the destructors of objects it
// inherited (a Segment would unlink its name).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "harness.hpp"
#include "kvtier/base/error.hpp"
#include "kvtier/shm/control_layout.hpp"
#include "kvtier/shm/segment.hpp"

namespace kvtier::bench {

inline void cpu_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Spins (with a CPU pause) until pred() holds; false once `deadline` has passed. The clock is
// read only every 4,096 turns so a waiting side does not hammer it.
template <class Pred>
bool spin_until(Pred pred, Clock::time_point deadline) {
  for (std::uint32_t turn = 1;; ++turn) {
    if (pred()) return true;
    cpu_pause();
    if ((turn & 4095u) == 0 && Clock::now() > deadline) return false;
  }
}

// The raw baseline: two counters on separate cache lines of a MAP_SHARED anonymous page.
struct alignas(64) RawLine {
  std::atomic<std::uint64_t> value{0};
};
struct RawPage {
  RawLine ping;  // written by the parent
  RawLine pong;  // written by the child
};
static_assert(sizeof(RawPage) == 128);

// Owns a MAP_SHARED | MAP_ANONYMOUS mapping holding one RawPage; inherited across fork().
class SharedPage {
 public:
  static Result<SharedPage> create();
  SharedPage(SharedPage&& other) noexcept;
  SharedPage& operator=(SharedPage&&) = delete;
  SharedPage(const SharedPage&) = delete;
  ~SharedPage();
  RawPage& page() const noexcept { return *page_; }

 private:
  explicit SharedPage(RawPage* page) noexcept : page_(page) {}
  RawPage* page_;
};

// A forked child running `body`; its return value is the exit status. The destructor of a child
// not yet waited for kills it (SIGKILL, by pid) and reaps it.
class ChildProcess {
 public:
  static Result<ChildProcess> spawn(const std::function<int()>& body);
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ~ChildProcess();
  // waitpid; kInternal when the child exited non-zero or died of a signal.
  Status wait();

 private:
  explicit ChildProcess(pid_t pid) noexcept : pid_(pid) {}
  pid_t pid_;
};

// A control segment and the layout the daemon side builds its views from (daemon_rings()).
struct BenchSegment {
  shm::Segment segment;
  shm::ControlLayout layout;
};

// Creates "/kvtier.bench<pid>_<tag>.<client_id>.control" with the given ring capacities, as the
// daemon does (create_control_segment, epoch 1). Unlinked when the BenchSegment is destroyed.
Result<BenchSegment> create_bench_control_segment(std::string_view tag, std::uint32_t client_id,
                                                  std::uint32_t score_capacity,
                                                  std::uint32_t plan_capacity);

// One round trip with sequence number `seq` (>= 1, increasing): the parent's side sends and
// waits for the echo, the child's side waits and echoes. False when the peer did not answer
// before the deadline or broke the protocol.
using TripFn = std::function<bool(std::uint64_t seq, Clock::time_point deadline)>;
// Runs in the child after fork(): maps what it needs and returns its echo side (or an error).
using ChildSetup = std::function<Result<TripFn>()>;

struct Schedule {
  int warmup_trips = 2000;  // of each kind, untimed, before the first block
  int rounds = 10;          // each round: one block of subject trips and one of raw trips
  int trips_per_block = 2000;
};

struct PingPongSamples {
  std::vector<double> subject_ns;  // one per timed subject round trip
  std::vector<double> raw_ns;      // one per timed raw round trip
};

// Forks a child that builds its side with `child_setup`, then both run `schedule`: the order of
// the two blocks alternates from round to round. Each trip is timed on its own (two steady_clock
// reads, the same cost in both samples). Errors: fork/segment failures, a side timing out
// (60 s for the whole run), the child failing.
Result<PingPongSamples> run_interleaved_pingpong(const Schedule& schedule,
                                                 const TripFn& parent_trip,
                                                 const ChildSetup& child_setup);

}  // namespace kvtier::bench
