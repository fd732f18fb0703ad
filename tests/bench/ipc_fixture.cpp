// Two-process fixtures (see ipc_fixture.hpp).
#include "ipc_fixture.hpp"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <new>
#include <string>
#include <utility>

#include "kvtier/shm/control_segment.hpp"

namespace kvtier::bench {
namespace {

constexpr auto kRunTimeout = std::chrono::seconds(60);

bool raw_ping(RawPage& page, std::uint64_t seq, Clock::time_point deadline) {
  page.ping.value.store(seq, std::memory_order_release);
  return spin_until([&] { return page.pong.value.load(std::memory_order_acquire) == seq; },
                    deadline);
}

bool raw_pong(RawPage& page, std::uint64_t seq, Clock::time_point deadline) {
  if (!spin_until([&] { return page.ping.value.load(std::memory_order_acquire) == seq; },
                  deadline)) {
    return false;
  }
  page.pong.value.store(seq, std::memory_order_release);
  return true;
}

// The block order of round `round`: the subject first on even rounds, the raw trips first on
// odd ones. Parent and child derive it from the same rule.
bool subject_first(int round) { return round % 2 == 0; }

// The child's whole run; returns its exit status.
int child_main(RawPage& page, const Schedule& schedule, const ChildSetup& child_setup) {
  auto echo = child_setup();
  if (!echo) return 3;
  const auto deadline = Clock::now() + kRunTimeout;
  std::uint64_t raw_seq = 0;
  std::uint64_t subject_seq = 0;
  const auto run_raw = [&](int trips) {
    for (int i = 0; i < trips; ++i) {
      if (!raw_pong(page, ++raw_seq, deadline)) return false;
    }
    return true;
  };
  const auto run_subject = [&](int trips) {
    for (int i = 0; i < trips; ++i) {
      if (!(*echo)(++subject_seq, deadline)) return false;
    }
    return true;
  };
  if (!run_raw(schedule.warmup_trips) || !run_subject(schedule.warmup_trips)) return 4;
  for (int round = 0; round < schedule.rounds; ++round) {
    const bool ok = subject_first(round)
                        ? run_subject(schedule.trips_per_block) && run_raw(schedule.trips_per_block)
                        : run_raw(schedule.trips_per_block) && run_subject(schedule.trips_per_block);
    if (!ok) return 5;
  }
  return 0;
}

}  // namespace

// --- SharedPage ---------------------------------------------------------------------------------

Result<SharedPage> SharedPage::create() {
  void* memory = ::mmap(nullptr, sizeof(RawPage), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return os_error("mmap shared page");
  return SharedPage(new (memory) RawPage{});
}

SharedPage::SharedPage(SharedPage&& other) noexcept : page_(other.page_) { other.page_ = nullptr; }

SharedPage::~SharedPage() {
  if (page_ != nullptr) ::munmap(page_, sizeof(RawPage));
}

// --- ChildProcess -------------------------------------------------------------------------------

Result<ChildProcess> ChildProcess::spawn(const std::function<int()>& body) {
  std::fflush(nullptr);  // nothing buffered may be written twice
  const pid_t pid = ::fork();
  if (pid < 0) return os_error("fork");
  if (pid == 0) ::_exit(body());
  return ChildProcess(pid);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : pid_(other.pid_) { other.pid_ = -1; }

ChildProcess::~ChildProcess() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
}

Status ChildProcess::wait() {
  int status = 0;
  const pid_t pid = pid_;
  pid_ = -1;
  if (::waitpid(pid, &status, 0) < 0) return os_error("waitpid");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  return make_error(Errc::kInternal,
                    "bench child " + std::to_string(pid) +
                        (WIFEXITED(status) ? " exited with " + std::to_string(WEXITSTATUS(status))
                                           : " died of signal " + std::to_string(WTERMSIG(status))));
}

// --- segments -----------------------------------------------------------------------------------

Result<BenchSegment> create_bench_control_segment(std::string_view tag, std::uint32_t client_id,
                                                  std::uint32_t score_capacity,
                                                  std::uint32_t plan_capacity) {
  auto layout = shm::ControlLayout::make(score_capacity, plan_capacity);
  if (!layout) return tl::unexpected(layout.error());
  const std::string prefix = "bench" + std::to_string(::getpid()) + "_" + std::string(tag);
  auto name = shm::segment_name(prefix, client_id, shm::SegmentKind::kControl);
  if (!name) return tl::unexpected(name.error());
  auto segment = shm::create_control_segment(*name, *layout, /*epoch=*/1, client_id);
  if (!segment) return tl::unexpected(segment.error());
  return BenchSegment{std::move(*segment), *layout};
}

// --- interleaved schedule -----------------------------------------------------------------------

Result<PingPongSamples> run_interleaved_pingpong(const Schedule& schedule,
                                                 const TripFn& parent_trip,
                                                 const ChildSetup& child_setup) {
  auto shared = SharedPage::create();
  if (!shared) return tl::unexpected(shared.error());
  RawPage& page = shared->page();
  auto child = ChildProcess::spawn([&] { return child_main(page, schedule, child_setup); });
  if (!child) return tl::unexpected(child.error());

  const auto deadline = Clock::now() + kRunTimeout;
  const TripFn raw_trip = [&page](std::uint64_t seq, Clock::time_point until) {
    return raw_ping(page, seq, until);
  };
  std::uint64_t raw_seq = 0;
  std::uint64_t subject_seq = 0;
  PingPongSamples samples;
  const auto total = static_cast<std::size_t>(schedule.rounds) *
                     static_cast<std::size_t>(schedule.trips_per_block);
  samples.subject_ns.reserve(total);
  samples.raw_ns.reserve(total);
  // Same loop for both kinds, so their timing overhead (clock reads, the std::function call) is
  // identical; `out` == nullptr for the warm-up.
  const auto run_block = [&](const TripFn& trip, std::uint64_t& seq, int trips,
                             std::vector<double>* out) {
    for (int i = 0; i < trips; ++i) {
      const auto start = Clock::now();
      if (!trip(++seq, deadline)) return false;
      const auto end = Clock::now();
      if (out != nullptr) out->push_back(std::chrono::duration<double, std::nano>(end - start).count());
    }
    return true;
  };
  bool ok = run_block(raw_trip, raw_seq, schedule.warmup_trips, nullptr) &&
            run_block(parent_trip, subject_seq, schedule.warmup_trips, nullptr);
  for (int round = 0; ok && round < schedule.rounds; ++round) {
    const int n = schedule.trips_per_block;
    ok = subject_first(round) ? run_block(parent_trip, subject_seq, n, &samples.subject_ns) &&
                                    run_block(raw_trip, raw_seq, n, &samples.raw_ns)
                              : run_block(raw_trip, raw_seq, n, &samples.raw_ns) &&
                                    run_block(parent_trip, subject_seq, n, &samples.subject_ns);
  }
  if (!ok) {  // ~ChildProcess kills the child if it is still there
    return make_error(Errc::kUnavailable, "ping-pong: the peer did not answer in time");
  }
  if (auto status = child->wait(); !status) return tl::unexpected(status.error());
  return samples;
}

}  // namespace kvtier::bench
