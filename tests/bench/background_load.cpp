// Background CPU load (see background_load.hpp).
#include "background_load.hpp"

#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>

namespace kvtier::bench {
namespace {

// Longer than any benchmark phase; only a spinner whose parent hung reaches it.
constexpr auto kMaxLifetime = std::chrono::minutes(5);

// Pure ALU work between looks at the stop word: the point is to be runnable all the time and to
// compete for the CPU like a compute-bound neighbour, not to stress the memory system.
int spin_body(const std::atomic<std::uint64_t>& stop, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) return 0;  // the parent died before prctl took effect
  const auto deadline = Clock::now() + kMaxLifetime;
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (std::uint32_t turn = 1; stop.load(std::memory_order_relaxed) == 0; ++turn) {
    for (int i = 0; i < 256; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
    do_not_optimize(x);
    if ((turn & 1023u) == 0 && Clock::now() > deadline) return 0;
  }
  return 0;
}

}  // namespace

Result<BackgroundLoad> BackgroundLoad::start(unsigned processes) {
  auto page = SharedPage::create();
  if (!page) return tl::unexpected(page.error());
  BackgroundLoad load(std::move(*page));
  const std::atomic<std::uint64_t>& stop = load.stop_page_.page().ping.value;
  const pid_t parent = ::getpid();
  load.spinners_.reserve(processes);
  for (unsigned i = 0; i < processes; ++i) {
    auto child = ChildProcess::spawn([&] { return spin_body(stop, parent); });
    if (!child) return tl::unexpected(child.error());  // ~BackgroundLoad stops the others
    load.spinners_.push_back(std::move(*child));
  }
  return load;
}

BackgroundLoad::BackgroundLoad(BackgroundLoad&& other) noexcept
    : stop_page_(std::move(other.stop_page_)), spinners_(std::move(other.spinners_)) {}

BackgroundLoad::~BackgroundLoad() {
  // ~ChildProcess would SIGKILL each spinner; the stop word lets them leave on their own first.
  if (!spinners_.empty()) (void)stop();
}

Status BackgroundLoad::stop() {
  stop_page_.page().ping.value.store(1, std::memory_order_relaxed);
  Status result;
  for (ChildProcess& spinner : spinners_) {
    if (auto status = spinner.wait(); !status && result) result = status;
  }
  spinners_.clear();
  return result;
}

unsigned default_load_processes() noexcept {
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<unsigned>(online) : 1u;
}

}  // namespace kvtier::bench
