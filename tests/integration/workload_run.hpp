// Test support: run kvtier-workload against a daemon and read its `summary key=value` line; run a
// test once per backend, skipping (with the reason) where a backend cannot run.
#pragma once

#include <cctype>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "process.hpp"

namespace kvtier::testing {

struct WorkloadRun {
  int exit_code = -1;
  std::string out;
  std::map<std::string, std::string> summary;

  double number(const std::string& key) const {
    auto it = summary.find(key);
    return it == summary.end() ? -1.0 : std::stod(it->second);
  }
  // A non-numeric value (e.g. backpressure_reason); empty when absent.
  std::string text(const std::string& key) const {
    auto it = summary.find(key);
    return it == summary.end() ? std::string() : it->second;
  }
};

// Sum of `"key":N` over the whole JSON text (e.g. t2 over every sequence of every client).
inline long sum_of(const std::string& json, const std::string& key) {
  long sum = 0;
  const std::string needle = "\"" + key + "\":";
  for (auto at = json.find(needle); at != std::string::npos; at = json.find(needle, at + 1)) {
    sum += std::stol(json.substr(at + needle.size()));
  }
  return sum;
}

// A workload's exit code and output, with its summary line parsed.
inline WorkloadRun workload_result(int exit_code, std::string out) {
  WorkloadRun run{exit_code, std::move(out), {}};
  const auto at = run.out.find("summary ");
  if (at == std::string::npos) return run;
  std::string line = run.out.substr(at + 8, run.out.find('\n', at) - at - 8);
  std::size_t pos = 0;
  while (pos < line.size()) {
    const std::size_t end = std::min(line.find(' ', pos), line.size());
    const std::string item = line.substr(pos, end - pos);
    const std::size_t eq = item.find('=');
    if (eq != std::string::npos) run.summary[item.substr(0, eq)] = item.substr(eq + 1);
    pos = end + 1;
  }
  return run;
}

inline WorkloadRun run_workload(const DaemonUnderTest& daemon, std::vector<std::string> args) {
  std::vector<std::string> argv = {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult result = run_command(argv, std::chrono::seconds(120));
  return workload_result(result.exit_code, result.out);
}

// Why `binary` (kvtier-workload, or another test engine with the same --backend/--probe
// contract) cannot run with `--backend backend` here (its "no CUDA device: ..." line, exit 4), or
// empty when it can. Asks the binary itself (--probe, no daemon) once per binary, backend and
// process. Any other probe failure also returns empty, so the test runs and shows it.
inline std::string backend_unavailable(const std::string& backend, const std::string& binary = KVTIER_TEST_WORKLOAD) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::string>, std::string> known;
  const std::lock_guard lock(mutex);
  if (auto it = known.find({binary, backend}); it != known.end()) return it->second;
  const CommandResult probe = run_command({binary, "--backend", backend, "--probe"});
  std::string why;
  if (probe.exit_code == 4) {
    const auto at = probe.out.find("no CUDA device");
    why = probe.out.substr(at == std::string::npos ? 0 : at);
    while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
    if (why.empty()) why = binary + " --probe: backend " + backend + " unavailable (exit 4)";
  }
  return known.emplace(std::make_pair(binary, backend), why).first->second;
}

// Parameters of a test run once per backend: the backend and a test's own parameter.
using BackendAnd = std::tuple<std::string, std::string>;

// "<backend>_<value>" with every character a test name cannot hold made '_'.
inline std::string backend_and_value(const ::testing::TestParamInfo<BackendAnd>& info) {
  std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param);
  for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

// Skips the test (from the calling test body) when kvtier-workload cannot run on the backend.
#define KVTIER_SKIP_WITHOUT_BACKEND(backend)                                  \
  do {                                                                        \
    if (const std::string why = backend_unavailable(backend); !why.empty()) { \
      GTEST_SKIP() << why;                                                    \
    }                                                                         \
  } while (0)

}  // namespace kvtier::testing
