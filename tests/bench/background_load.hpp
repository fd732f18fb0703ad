// A fixed background CPU load for the benchmarks that compare a figure on an idle machine with
// the same figure on a busy one: N child processes at normal priority, each busy-spinning (no
// CPU pause, no system calls) until stop() or the end of the owner.
//
// Thread-safety: start from a single-threaded process (it forks, see ipc_fixture.hpp). One
// owner thread; stop() and the destructor are not concurrent.
#pragma once

#include <utility>
#include <vector>

#include "ipc_fixture.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::bench {

class BackgroundLoad {
 public:
  // Forks `processes` spinners; they inherit nothing they use but one shared stop word. Each
  // also dies with the parent (PR_SET_PDEATHSIG) and after `kMaxLifetime` whatever happens, so a
  // crashed benchmark leaves no spinner behind. Errors: mmap or fork failures (the spinners
  // already started are stopped).
  static Result<BackgroundLoad> start(unsigned processes);

  BackgroundLoad(BackgroundLoad&& other) noexcept;
  BackgroundLoad& operator=(BackgroundLoad&&) = delete;
  BackgroundLoad(const BackgroundLoad&) = delete;
  ~BackgroundLoad();

  // Raises the stop word and reaps every spinner; kInternal when one did not exit cleanly.
  Status stop();

 private:
  explicit BackgroundLoad(SharedPage stop_page) noexcept : stop_page_(std::move(stop_page)) {}

  SharedPage stop_page_;  // ping.value != 0: stop
  std::vector<ChildProcess> spinners_;
};

// Processes the loaded phases start: one per online CPU (sysconf), at least 1.
unsigned default_load_processes() noexcept;

}  // namespace kvtier::bench
