// kvtier-bench: runs the registered benchmarks and prints one `ratio ...` line per measure.
//
//   kvtier-bench [--quick] [--filter SUBSTR] [--json FILE] [--list] [--help]
//
// Exit status: 0 when every selected benchmark ran (whatever its ratios), 1 when one could not
// run or the JSON file could not be written, 2 for a usage error.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "harness.hpp"

namespace {

constexpr const char* kUsage =
    "usage: kvtier-bench [--quick] [--filter SUBSTR] [--json FILE] [--list] [--help]\n"
    "  --quick         short run (< 20 s): fewer repeats, smaller sizes\n"
    "  --filter SUBSTR run only benchmarks whose name contains SUBSTR\n"
    "  --json FILE     also write the measures as a JSON array to FILE\n"
    "  --list          list the benchmarks and exit\n";

struct Options {
  kvtier::bench::RunConfig config;
  std::string filter;
  std::string json_path;
  bool list = false;
  bool help = false;
};

bool parse_options(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--help" || arg == "-h") {
      options.help = true;
    } else if (arg == "--quick") {
      options.config.quick = true;
    } else if (arg == "--list") {
      options.list = true;
    } else if (arg == "--filter" && has_value) {
      options.filter = argv[++i];
    } else if (arg == "--json" && has_value) {
      options.json_path = argv[++i];
    } else {
      std::fprintf(stderr, "kvtier-bench: unexpected argument '%s'\n%s", argv[i], kUsage);
      return false;
    }
  }
  return true;
}

bool write_file(const std::string& path, const std::string& text) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return false;
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  return std::fclose(file) == 0 && written;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse_options(argc, argv, options)) return 2;
  if (options.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }

  kvtier::bench::Registry registry;
  kvtier::bench::register_shm_pingpong(registry);
  kvtier::bench::register_plan_roundtrip(registry);
  kvtier::bench::register_score_ingest(registry);
  kvtier::bench::register_decision(registry);
  kvtier::bench::register_gather(registry);
  kvtier::bench::register_metadata(registry);
  kvtier::bench::register_quantize(registry);
  kvtier::bench::register_node_scale(registry);
  kvtier::bench::register_plan_window(registry);

  if (options.list) {
    for (const auto& benchmark : registry.all()) {
      std::printf("%-20s %s\n", benchmark.name.c_str(), benchmark.summary.c_str());
    }
    return 0;
  }

  kvtier::bench::Reporter reporter;
  int failures = 0;
  int selected = 0;
  for (const auto& benchmark : registry.all()) {
    if (benchmark.name.find(options.filter) == std::string::npos) continue;
    ++selected;
    const auto start = kvtier::bench::Clock::now();
    reporter.progress(benchmark.name, "running");
    const kvtier::Status status = benchmark.run(options.config, reporter);
    const double seconds = kvtier::bench::seconds_between(start, kvtier::bench::Clock::now());
    if (!status) {
      ++failures;
      reporter.progress(benchmark.name, "FAILED: " + kvtier::to_string(status.error()));
    } else {
      reporter.progress(benchmark.name, "done in " + std::to_string(seconds) + " s");
    }
  }
  if (selected == 0) {
    std::fprintf(stderr, "kvtier-bench: no benchmark matches '%s' (see --list)\n",
                 options.filter.c_str());
    return 2;
  }
  if (!options.json_path.empty() &&
      !write_file(options.json_path, kvtier::bench::to_json(reporter.measures()))) {
    std::fprintf(stderr, "kvtier-bench: cannot write %s: %s\n", options.json_path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
