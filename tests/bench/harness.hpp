// kvtier-bench harness: a registry of named benchmarks, the measures they report and the two
// output forms (one `ratio ...` line per measure on stdout, optionally a JSON array).
//
// Every measure is a ratio of a subject figure against a baseline measured in the same run,
// right next to it (research/perf-anchors.md §9): the runner's absolute speed cancels out.
// Benchmarks make no assertions; a benchmark returns an error only when it could not run.
//
// Thread-safety: a Reporter and a Registry belong to main()'s thread; benchmarks may use threads
// and child processes internally but report from the calling thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/base/error.hpp"

namespace kvtier::bench {

// One side of a ratio, e.g. {"ring_rtt_p50", 410, "ns"}.
struct Figure {
  std::string label;
  double value = 0.0;
  std::string unit;
};

struct Measure {
  std::string name;   // e.g. "shm_pingpong"
  double ratio = 0.0;
  Figure subject;
  Figure baseline;
  std::string goal;   // e.g. "<=2", ">=0.5"
};

// Collects measures: prints each as it arrives, keeps them for the JSON file.
class Reporter {
 public:
  // `ratio <name> <ratio> <subject>=<value><unit> <baseline>=<value><unit> goal<goal>` on stdout.
  void report(Measure measure);
  // stderr line prefixed with the running benchmark, e.g. "[kvtier-bench] gather_rows: ...".
  void progress(std::string_view benchmark, std::string_view text) const;
  const std::vector<Measure>& measures() const noexcept { return measures_; }

 private:
  std::vector<Measure> measures_;
};

// What a benchmark is asked to do.
struct RunConfig {
  bool quick = false;  // short run: fewer repeats, smaller sizes, optional parts skipped
};

using BenchFn = std::function<Status(const RunConfig&, Reporter&)>;

struct Benchmark {
  std::string name;     // matched by --filter (substring)
  std::string summary;  // one line for --list
  BenchFn run;
};

class Registry {
 public:
  void add(std::string name, std::string summary, BenchFn run);
  std::span<const Benchmark> all() const noexcept { return benchmarks_; }

 private:
  std::vector<Benchmark> benchmarks_;
};

// Each benchmark group adds its benchmarks (one file per group).
void register_shm_pingpong(Registry& registry);
void register_plan_roundtrip(Registry& registry);
void register_score_ingest(Registry& registry);
void register_decision(Registry& registry);
void register_gather(Registry& registry);
void register_metadata(Registry& registry);
void register_quantize(Registry& registry);
void register_node_scale(Registry& registry);
void register_plan_window(Registry& registry);

// The measures as a JSON array of {name, ratio, subject:{label,value,unit}, baseline:{...}, goal}.
std::string to_json(std::span<const Measure> measures);

// --- small helpers shared by the benchmarks ---------------------------------------------------

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

// Median (the lower one for even sizes) and the p-th percentile (nearest rank, p in [0, 100]) of
// a sample; 0 for an empty one. Take the vector by value: they sort a copy.
double median(std::vector<double> samples);
double percentile(std::vector<double> samples, double p);

// Keeps the optimiser from dropping a computation whose result is otherwise unused.
template <class T>
inline void do_not_optimize(const T& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}

}  // namespace kvtier::bench
