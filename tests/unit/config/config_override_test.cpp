// apply_override (--set table.key=value), validate() and the to_toml() round trip.
#include <gtest/gtest.h>

#include <string>

#include "kvtier/config/config.hpp"

namespace kvtier::config {
namespace {

// The message of the error apply_override returns; checks that `config` did not change.
std::string override_error(std::string_view assignment) {
  DaemonConfig config;
  Status status = apply_override(config, assignment);
  EXPECT_FALSE(status.has_value()) << assignment;
  EXPECT_EQ(config, DaemonConfig{}) << "a refused override changed the config";
  if (status) return {};
  EXPECT_EQ(status.error().code, Errc::kInvalidArgument);
  return status.error().message;
}

TEST(ConfigOverride, SetsAnInteger) {
  DaemonConfig config;
  ASSERT_TRUE(apply_override(config, "limits.max_clients=8"));
  EXPECT_EQ(config.limits.max_clients, 8u);
}

TEST(ConfigOverride, ToleratesSpacesAroundTheParts) {
  DaemonConfig config;
  ASSERT_TRUE(apply_override(config, " limits.max_clients = 8 "));
  EXPECT_EQ(config.limits.max_clients, 8u);
}

TEST(ConfigOverride, TakesAnUnquotedStringLiterally) {
  DaemonConfig config;
  ASSERT_TRUE(apply_override(config, "daemon.log_level=debug"));
  EXPECT_EQ(config.daemon.log_level, LogLevel::kDebug);
  ASSERT_TRUE(apply_override(config, "daemon.socket=/tmp/k.sock"));
  EXPECT_EQ(config.daemon.socket, "/tmp/k.sock");
}

TEST(ConfigOverride, ReadsAQuotedStringAsToml) {
  DaemonConfig config;
  ASSERT_TRUE(apply_override(config, "daemon.admin_group=\"\""));
  EXPECT_EQ(config.daemon.admin_group, "");
  ASSERT_TRUE(apply_override(config, "tiering.eviction_mode='paper-algorithm'"));
  EXPECT_EQ(config.tiering.eviction_mode, EvictionMode::kPaperAlgorithm);
}

TEST(ConfigOverride, SetsABooleanAndAReal) {
  DaemonConfig config;
  ASSERT_TRUE(apply_override(config, "daemon.watchdog=false"));
  ASSERT_TRUE(apply_override(config, "tiering.hbm_ratio=0.3"));
  EXPECT_FALSE(config.daemon.watchdog);
  EXPECT_EQ(config.tiering.hbm_ratio, 0.3);
}

TEST(ConfigOverride, RefusesAnUnknownKeyNamingIt) {
  EXPECT_EQ(override_error("limits.max_clinets=8"),
            "unknown key 'limits.max_clinets' in --set limits.max_clinets=8");
}

TEST(ConfigOverride, RefusesAnAssignmentWithoutTableOrValue) {
  EXPECT_EQ(override_error("max_clients=8"), "expected table.key=value, got 'max_clients=8'");
  EXPECT_EQ(override_error("limits.max_clients"),
            "expected table.key=value, got 'limits.max_clients'");
}

TEST(ConfigOverride, RefusesAWrongTypeNamingKeyAndValue) {
  EXPECT_EQ(override_error("daemon.watchdog=\"yes\""),
            "invalid value for daemon.watchdog: \"yes\" (expected a boolean, got a string) in "
            "--set daemon.watchdog=\"yes\"");
  EXPECT_EQ(override_error("limits.max_clients=2.5"),
            "invalid value for limits.max_clients: 2.5 (expected an integer, got a float) in "
            "--set limits.max_clients=2.5");
}

TEST(ConfigOverride, RefusesAValueThatIsNotToml) {
  const std::string message = override_error("limits.max_clients=eight");
  EXPECT_EQ(message.rfind("invalid value for limits.max_clients: eight (not a TOML value", 0), 0u)
      << message;
}

TEST(ConfigOverride, RefusesAnOutOfRangeValue) {
  EXPECT_EQ(override_error("limits.max_clients=0"),
            "invalid value for limits.max_clients: 0 (must be between 1 and 65536) in --set "
            "limits.max_clients=0");
  EXPECT_EQ(override_error("daemon.log_level=loud"),
            "invalid value for daemon.log_level: \"loud\" (must be one of trace, debug, info, "
            "warn, error, critical, off) in --set daemon.log_level=loud");
}

TEST(ConfigOverride, RefusesASecondAssignmentSmuggledIntoTheValue) {
  const std::string message = override_error("limits.max_clients=8\nmax_frame_bytes=1");
  EXPECT_EQ(message.rfind("invalid value for limits.max_clients", 0), 0u) << message;
}

TEST(ConfigValidate, AcceptsTheDefaults) { EXPECT_TRUE(validate(DaemonConfig{})); }

TEST(ConfigValidate, NamesKeyAndValueOfAnOutOfRangeField) {
  DaemonConfig config;
  config.limits.plan_ring_records = 100;
  Status status = validate(config);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(status.error().message,
            "invalid value for limits.plan_ring_records: 100 (must be a power of two)");
}

TEST(ConfigValidate, RefusesAnOutOfRangeEnumValue) {
  DaemonConfig config;
  config.tiering.eviction_mode = static_cast<EvictionMode>(42);
  EXPECT_FALSE(validate(config));
}

TEST(ConfigToToml, RoundTripsTheDefaults) {
  auto result = parse_config(to_toml(DaemonConfig{}), "dump");
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(*result, DaemonConfig{});
}

TEST(ConfigToToml, RoundTripsEveryChangedValueExactly) {
  DaemonConfig config;
  config.daemon = {"/run/x \"quoted\"", "/tmp/a\\b.sock", "p-1", "", LogLevel::kOff, false};
  config.limits = {1, 2, 4096, 4096, 1, 16, 1u << 20};
  config.tiering = {0, 0, 1, 0.1 + 0.2, 1.0 / 3.0, 1e-9, 0.9999999999, EvictionMode::kPaperAlgorithm};
  config.pools.ddr_bytes_total = std::uint64_t{1} << 50;
  const std::string text = to_toml(config);
  auto result = parse_config(text, "dump");
  ASSERT_TRUE(result.has_value()) << result.error().message << "\n" << text;
  EXPECT_EQ(*result, config) << text;
}

TEST(ConfigNames, EnumNamesRoundTrip) {
  for (auto level : {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn,
                     LogLevel::kError, LogLevel::kCritical, LogLevel::kOff}) {
    EXPECT_EQ(parse_log_level(log_level_name(level)), level);
  }
  for (auto mode : {EvictionMode::kCumulative, EvictionMode::kPaperAlgorithm,
                    EvictionMode::kPaperPrototype}) {
    EXPECT_EQ(parse_eviction_mode(eviction_mode_name(mode)), mode);
  }
  EXPECT_FALSE(parse_log_level("warning"));
  EXPECT_FALSE(parse_eviction_mode("Cumulative"));
}

}  // namespace
}  // namespace kvtier::config
