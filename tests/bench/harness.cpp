// Reporter, Registry, JSON and statistics helpers (see harness.hpp).
#include "harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace kvtier::bench {
namespace {

// Three significant figures in fixed notation ("410", "3.21", "0.0123"); never an exponent, so
// a line stays easy to read and to grep.
std::string format_figure(double value) {
  char buffer[64];
  const double magnitude = std::fabs(value);
  int decimals = 2;
  if (magnitude >= 100.0) {
    decimals = 0;
  } else if (magnitude >= 10.0) {
    decimals = 1;
  } else if (magnitude > 0.0 && magnitude < 1.0) {
    decimals = std::min(6, 2 - static_cast<int>(std::floor(std::log10(magnitude))));
  }
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.6g", value);
  return buffer;
}

std::string json_figure(const Figure& figure) {
  return "{\"label\": " + json_string(figure.label) + ", \"value\": " + json_number(figure.value) +
         ", \"unit\": " + json_string(figure.unit) + "}";
}

}  // namespace

void Reporter::report(Measure measure) {
  std::printf("ratio %s %s %s=%s%s %s=%s%s goal%s\n", measure.name.c_str(),
              format_figure(measure.ratio).c_str(), measure.subject.label.c_str(),
              format_figure(measure.subject.value).c_str(), measure.subject.unit.c_str(),
              measure.baseline.label.c_str(), format_figure(measure.baseline.value).c_str(),
              measure.baseline.unit.c_str(), measure.goal.c_str());
  std::fflush(stdout);
  measures_.push_back(std::move(measure));
}

void Reporter::progress(std::string_view benchmark, std::string_view text) const {
  std::fprintf(stderr, "[kvtier-bench] %.*s: %.*s\n", static_cast<int>(benchmark.size()),
               benchmark.data(), static_cast<int>(text.size()), text.data());
}

void Registry::add(std::string name, std::string summary, BenchFn run) {
  benchmarks_.push_back(Benchmark{std::move(name), std::move(summary), std::move(run)});
}

std::string to_json(std::span<const Measure> measures) {
  std::string out = "[\n";
  for (std::size_t i = 0; i < measures.size(); ++i) {
    const Measure& m = measures[i];
    out += "  {\"name\": " + json_string(m.name) + ", \"ratio\": " + json_number(m.ratio) +
           ", \"subject\": " + json_figure(m.subject) + ", \"baseline\": " +
           json_figure(m.baseline) + ", \"goal\": " + json_string(m.goal) + "}";
    out += i + 1 < measures.size() ? ",\n" : "\n";
  }
  return out + "]\n";
}

double median(std::vector<double> samples) { return percentile(std::move(samples), 50.0); }

double percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0.0;
  const double clamped = std::clamp(p, 0.0, 100.0);
  // Nearest rank: the smallest value with at least p% of the sample at or below it.
  auto rank = static_cast<std::size_t>(std::ceil(clamped / 100.0 * static_cast<double>(samples.size())));
  rank = std::clamp<std::size_t>(rank, 1, samples.size());
  const auto nth = samples.begin() + static_cast<std::ptrdiff_t>(rank - 1);
  std::nth_element(samples.begin(), nth, samples.end());
  return *nth;
}

}  // namespace kvtier::bench
