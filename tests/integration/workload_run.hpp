// Test support: run kvtier-workload against a daemon and read its `summary key=value` line.
#pragma once

#include <map>
#include <string>
#include <vector>

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

inline WorkloadRun run_workload(const DaemonUnderTest& daemon, std::vector<std::string> args) {
  std::vector<std::string> argv = {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult result = run_command(argv, std::chrono::seconds(120));
  WorkloadRun run{result.exit_code, result.out, {}};
  const auto at = result.out.find("summary ");
  if (at == std::string::npos) return run;
  std::string line = result.out.substr(at + 8, result.out.find('\n', at) - at - 8);
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

}  // namespace kvtier::testing
