#include "metrics.hpp"

#include <gtest/gtest.h>

namespace kvtier::daemon {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

NodeMetrics one_client() {
  NodeMetrics m;
  m.version = "1.2.3";
  ClientMetrics& c = m.clients.emplace_back();
  c.client_id = 7;
  c.name = R"(a"b\c)";
  c.model = "toy";
  SequenceSnapshot s;
  s.tokens_t0 = 3;
  s.tokens_t1 = 5;
  s.tokens_t3 = 2;
  c.dynamic.sequences = {s, s};
  c.dynamic.plans_acked = 4;
  c.dynamic.traffic.moves[0 * 4 + 1] = 9;  // T0 -> T1
  c.dynamic.traffic.plan_roundtrip.observe(microseconds(30));   // in (25 µs, 50 µs]
  c.dynamic.traffic.plan_roundtrip.observe(milliseconds(20));   // in (10 ms, 25 ms]
  c.dynamic.traffic.plan_roundtrip.observe(std::chrono::seconds(30));  // above every bound
  return m;
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

constexpr const char* kLabels = R"(client="a\"b\\c",client_id="7",model="toy")";

TEST(Metrics, LabelValuesAreEscaped) {
  const std::string text = render_metrics(one_client());
  EXPECT_TRUE(has_line(text, std::string("kvtier_plans_acked_total{") + kLabels + "} 4")) << text;
}

TEST(Metrics, TokensAndBytesAddUpOverSequences) {
  const std::string text = render_metrics(one_client());
  EXPECT_TRUE(has_line(text, std::string("kvtier_tokens{") + kLabels + ",tier=\"t0\"} 6")) << text;
  EXPECT_TRUE(has_line(text, std::string("kvtier_tokens{") + kLabels + ",tier=\"t3\"} 4")) << text;
  // T0 bytes are the engine's allocation: kvtierd does not claim a figure for them.
  EXPECT_EQ(text.find(std::string("kvtier_tier_bytes{") + kLabels + ",tier=\"t0\"}"), std::string::npos) << text;
  EXPECT_TRUE(has_line(text, std::string("kvtier_moves_total{") + kLabels + ",from=\"t0\",to=\"t1\"} 9")) << text;
}

TEST(Metrics, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  const std::string text = render_metrics(one_client());
  const std::string b = std::string("kvtier_plan_roundtrip_seconds_bucket{") + kLabels;
  EXPECT_TRUE(has_line(text, b + ",le=\"2.5e-05\"} 0")) << text;
  EXPECT_TRUE(has_line(text, b + ",le=\"5e-05\"} 1")) << text;
  EXPECT_TRUE(has_line(text, b + ",le=\"0.01\"} 1")) << text;
  EXPECT_TRUE(has_line(text, b + ",le=\"0.025\"} 2")) << text;
  EXPECT_TRUE(has_line(text, b + ",le=\"10\"} 2")) << text;
  EXPECT_TRUE(has_line(text, b + ",le=\"+Inf\"} 3")) << text;
  EXPECT_TRUE(has_line(text, std::string("kvtier_plan_roundtrip_seconds_count{") + kLabels + "} 3")) << text;
}

TEST(Metrics, EveryFamilyHasHelpAndTypeBeforeItsSamples) {
  const std::string text = render_metrics(one_client());
  std::istringstream lines(text);
  std::string family;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0) continue;
    ASSERT_FALSE(family.empty()) << line;
    EXPECT_EQ(line.rfind(family, 0), 0u) << "sample outside its family " << family << ": " << line;
  }
}

TEST(Metrics, AnUnlimitedInt8PoolHasNoCapacitySample) {
  NodeMetrics m = one_client();
  m.ddr_bytes_total = 1000;
  const std::string text = render_metrics(m);
  EXPECT_TRUE(has_line(text, R"(kvtier_pool_capacity_bytes{pool="ddr"} 1000)")) << text;
  EXPECT_EQ(text.find(R"(kvtier_pool_capacity_bytes{pool="int8"})"), std::string::npos);
}

// The durations are given, no clock is read: these pin the bucketing, not a speed.
TEST(LatencyHistogram, AValueOnABoundCountsInThatBucket) {
  LatencyHistogram h;
  h.observe(milliseconds(1));
  EXPECT_EQ(h.buckets()[6], 1u);  // kBounds[6] == 1e-3: the bucket is (5e-4, 1e-3]
  EXPECT_EQ(h.count(), 1u);
  EXPECT_DOUBLE_EQ(h.sum_seconds(), 1e-3);
}

}  // namespace
}  // namespace kvtier::daemon
