// kvtier-gpu-bench: GPU benchmarks of the CUDA backend (gpu_bench.hpp).
//
//   kvtier-gpu-bench [--quick] [--filter SUBSTR] [--json FILE]
//
// Exit status: 0 when every selected benchmark ran (whatever its ratios); 77 when no CUDA device
// is usable (the message says why; 77 is the "skipped" status of automake and ctest's
// SKIP_RETURN_CODE convention, so scripts can tell a skip from a pass); 1 when a benchmark could
// not run or the JSON file could not be written; 2 for a usage error.
#include <cstdio>
#include <string>
#include <string_view>

#include "gpu_bench.hpp"
#include "kvtier/kernels/cuda/device.hpp"

namespace {

constexpr int kSkipped = 77;

constexpr const char* kUsage =
    "usage: kvtier-gpu-bench [--quick] [--filter SUBSTR] [--json FILE]\n"
    "  --quick         short run: fewer repeats, smaller sizes\n"
    "  --filter SUBSTR run only benchmarks whose name contains SUBSTR\n"
    "  --json FILE     also write the measures as a JSON array to FILE\n";

struct Benchmark {
  const char* name;
  kvtier::Status (*run)(const kvtier::bench::RunConfig&, kvtier::bench::Reporter&);
};

constexpr Benchmark kBenchmarks[] = {
    {"links", kvtier::gpu_bench::run_links},
    {"rows", kvtier::gpu_bench::run_rows},
    {"decode", kvtier::gpu_bench::run_decode},
};

}  // namespace

int main(int argc, char** argv) {
  kvtier::bench::RunConfig config;
  std::string filter, json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      config.quick = true;
    } else if (arg == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else if (arg == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "kvtier-gpu-bench: unexpected argument '%s'\n%s", argv[i], kUsage);
      return 2;
    }
  }
  if (auto devices = kvtier::kernels::cuda::device_count(); !devices) {
    std::printf("kvtier-gpu-bench: %s (nothing measured)\n", devices.error().message.c_str());
    return kSkipped;
  }
  if (auto name = kvtier::kernels::cuda::device_description(); name) {
    std::fprintf(stderr, "[kvtier-gpu-bench] device: %s\n", name->c_str());
  }
  kvtier::bench::Reporter reporter;
  int status = 0;
  for (const Benchmark& benchmark : kBenchmarks) {
    if (!filter.empty() &&
        std::string_view(benchmark.name).find(filter) == std::string_view::npos) {
      continue;
    }
    if (auto s = benchmark.run(config, reporter); !s) {
      std::fprintf(stderr, "kvtier-gpu-bench: %s failed: %s\n", benchmark.name,
                   kvtier::to_string(s.error()).c_str());
      status = 1;
    }
  }
  if (!json_path.empty()) {
    const std::string json = kvtier::bench::to_json(reporter.measures());
    std::FILE* file = std::fopen(json_path.c_str(), "w");
    const bool ok =
        file != nullptr && std::fwrite(json.data(), 1, json.size(), file) == json.size();
    if (file == nullptr || std::fclose(file) != 0 || !ok) {
      std::fprintf(stderr, "kvtier-gpu-bench: cannot write %s\n", json_path.c_str());
      status = 1;
    }
  }
  return status;
}
