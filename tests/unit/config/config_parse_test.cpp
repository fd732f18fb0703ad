// parse_config: every field read, strictness (unknown table/key, type, range), syntax errors.
#include <gtest/gtest.h>

#include <string>

#include "kvtier/config/config.hpp"

namespace kvtier::config {
namespace {

constexpr const char* kEveryFieldChanged = R"toml(
[daemon]
runtime_dir = "/run/kvtier-test"
socket = "/tmp/kvtier-test.sock"
shm_prefix = "kvt_1"
admin_group = "wheel"
log_level = "debug"
watchdog = false

[limits]
max_clients = 8
max_sequences_per_client = 16
max_pool_bytes_per_client = 2147483648
max_frame_bytes = 65536
max_tokens_per_sequence = 4096
score_ring_records = 256
plan_ring_records = 64
hello_timeout_ms = 250
max_pending_connections = 3
drain_timeout_ms = 500
orphan_grace_ms = 1000
plans_in_flight = 4

[tiering]
sink_tokens = 8
window_tokens = 256
interval = 32
hbm_ratio = 0.25
evict_ratio = 0.1
hysteresis = 0.05
decay = 0.99
eviction_mode = "paper-prototype"

[pools]
ddr_bytes_total = 17179869184
)toml";

DaemonConfig every_field_changed() {
  DaemonConfig c;
  c.daemon = {"/run/kvtier-test", "/tmp/kvtier-test.sock", "kvt_1", "wheel", LogLevel::kDebug,
              false};
  c.limits = {8, 16, std::uint64_t{2} << 30, 65536, 4096, 256, 64, 250, 3, 500, 1000, 4};
  c.tiering = {8, 256, 32, 0.25, 0.1, 0.05, 0.99, EvictionMode::kPaperPrototype};
  c.pools.ddr_bytes_total = std::uint64_t{16} << 30;
  return c;
}

// The message of the error parse_config returns; fails the test when parsing succeeds.
std::string parse_error(const std::string& text) {
  auto result = parse_config(text, "kvtierd.toml");
  EXPECT_FALSE(result.has_value()) << "parsed:\n" << text;
  if (result) return {};
  EXPECT_EQ(result.error().code, Errc::kInvalidArgument);
  return result.error().message;
}

TEST(ConfigParse, EmptyTextGivesTheDefaults) {
  auto result = parse_config("", "empty.toml");
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(*result, DaemonConfig{});
}

TEST(ConfigParse, ReadsEveryField) {
  auto result = parse_config(kEveryFieldChanged, "kvtierd.toml");
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result->daemon, every_field_changed().daemon);
  EXPECT_EQ(result->limits, every_field_changed().limits);
  EXPECT_EQ(result->tiering, every_field_changed().tiering);
  EXPECT_EQ(result->pools, every_field_changed().pools);
}

TEST(ConfigParse, KeysLeftOutKeepTheirDefaults) {
  auto result = parse_config("[limits]\nmax_clients = 3\n", "kvtierd.toml");
  ASSERT_TRUE(result.has_value()) << result.error().message;
  DaemonConfig expected;
  expected.limits.max_clients = 3;
  EXPECT_EQ(*result, expected);
}

TEST(ConfigParse, AcceptsAnIntegerForARealKey) {
  auto result = parse_config("[tiering]\nhbm_ratio = 1\n", "kvtierd.toml");
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result->tiering.hbm_ratio, 1.0);
}

TEST(ConfigParse, AcceptsDottedKeys) {
  auto result = parse_config("limits.max_clients = 5\n", "kvtierd.toml");
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result->limits.max_clients, 5u);
}

TEST(ConfigParse, RefusesAnUnknownKeyNamingItAndItsLine) {
  EXPECT_EQ(parse_error("\n[limits]\nmax_clinets = 8\n"),
            "unknown key 'limits.max_clinets' in kvtierd.toml:3");
}

TEST(ConfigParse, RefusesAnUnknownTableNamingIt) {
  EXPECT_EQ(parse_error("[limit]\nmax_clients = 8\n"), "unknown table 'limit' in kvtierd.toml:1");
}

TEST(ConfigParse, RefusesATopLevelKey) {
  EXPECT_EQ(parse_error("max_clients = 8\n"), "unknown key 'max_clients' in kvtierd.toml:1");
}

TEST(ConfigParse, RefusesASubTable) {
  EXPECT_EQ(parse_error("[limits.extra]\nx = 1\n"), "unknown key 'limits.extra' in kvtierd.toml:1");
}

TEST(ConfigParse, RefusesATableGivenAsAValue) {
  EXPECT_EQ(parse_error("limits = 8\n"), "'limits' must be a table, got an integer in kvtierd.toml:1");
}

TEST(ConfigParse, RefusesAWrongTypeNamingKeyAndValue) {
  EXPECT_EQ(parse_error("[limits]\nmax_clients = \"eight\"\n"),
            "invalid value for limits.max_clients: \"eight\" (expected an integer, got a string) "
            "in kvtierd.toml:2");
  EXPECT_EQ(parse_error("[daemon]\nwatchdog = 1\n"),
            "invalid value for daemon.watchdog: 1 (expected a boolean, got an integer) in "
            "kvtierd.toml:2");
  EXPECT_EQ(parse_error("[tiering]\ndecay = \"1\"\n"),
            "invalid value for tiering.decay: \"1\" (expected a number, got a string) in "
            "kvtierd.toml:2");
  EXPECT_EQ(parse_error("[daemon]\nlog_level = 3\n"),
            "invalid value for daemon.log_level: 3 (expected a string, got an integer) in "
            "kvtierd.toml:2");
}

struct RangeCase {
  const char* name;  // test name suffix
  const char* text;
  const char* message;
};

void PrintTo(const RangeCase& range_case, std::ostream* out) { *out << range_case.name; }

class ConfigRange : public testing::TestWithParam<RangeCase> {};

TEST_P(ConfigRange, RefusesAnOutOfRangeValueNamingKeyAndValue) {
  EXPECT_EQ(parse_error(GetParam().text), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    ConfigParse, ConfigRange,
    testing::Values(
        RangeCase{"MaxClientsZero", "[limits]\nmax_clients = 0",
                  "invalid value for limits.max_clients: 0 (must be between 1 and 65536) in "
                  "kvtierd.toml:2"},
        RangeCase{"MaxClientsNegative", "[limits]\nmax_clients = -1",
                  "invalid value for limits.max_clients: -1 (must be between 1 and 65536) in "
                  "kvtierd.toml:2"},
        RangeCase{"FrameBytesTooLarge", "[limits]\nmax_frame_bytes = 4294967296",
                  "invalid value for limits.max_frame_bytes: 4294967296 (must be between 4096 "
                  "and 67108864) in kvtierd.toml:2"},
        RangeCase{"RingNotPowerOfTwo", "[limits]\nscore_ring_records = 1000",
                  "invalid value for limits.score_ring_records: 1000 (must be a power of two) in "
                  "kvtierd.toml:2"},
        RangeCase{"HbmRatioAboveOne", "[tiering]\nhbm_ratio = 1.5",
                  "invalid value for tiering.hbm_ratio: 1.5 (must be in [0.0, 1.0]) in "
                  "kvtierd.toml:2"},
        RangeCase{"EvictRatioNan", "[tiering]\nevict_ratio = nan",
                  "invalid value for tiering.evict_ratio: nan (must be in [0.0, 1.0]) in "
                  "kvtierd.toml:2"},
        RangeCase{"DecayZero", "[tiering]\ndecay = 0.0",
                  "invalid value for tiering.decay: 0.0 (must be in (0.0, 1.0]) in "
                  "kvtierd.toml:2"},
        RangeCase{"IntervalZero", "[tiering]\ninterval = 0",
                  "invalid value for tiering.interval: 0 (must be between 1 and 1048576) in "
                  "kvtierd.toml:2"},
        RangeCase{"UnknownEvictionMode", "[tiering]\neviction_mode = \"paper\"",
                  "invalid value for tiering.eviction_mode: \"paper\" (must be one of "
                  "cumulative, paper-algorithm, paper-prototype) in kvtierd.toml:2"},
        RangeCase{"UnknownLogLevel", "[daemon]\nlog_level = \"verbose\"",
                  "invalid value for daemon.log_level: \"verbose\" (must be one of trace, debug, "
                  "info, warn, error, critical, off) in kvtierd.toml:2"},
        RangeCase{"ShmPrefixWithSlash", "[daemon]\nshm_prefix = \"a/b\"",
                  "invalid value for daemon.shm_prefix: \"a/b\" (must be 1 to 32 characters "
                  "from [A-Za-z0-9_-]) in kvtierd.toml:2"},
        RangeCase{"RelativeRuntimeDir", "[daemon]\nruntime_dir = \"run/kvtier\"",
                  "invalid value for daemon.runtime_dir: \"run/kvtier\" (must be an absolute "
                  "path) in kvtierd.toml:2"},
        RangeCase{"AdminGroupStartingWithDigit", "[daemon]\nadmin_group = \"1admins\"",
                  "invalid value for daemon.admin_group: \"1admins\" (must be empty or a group "
                  "name: [A-Za-z_][A-Za-z0-9_.-]*, at most 32 characters) in kvtierd.toml:2"}),
    [](const testing::TestParamInfo<RangeCase>& param) { return std::string(param.param.name); });

TEST(ConfigParse, RefusesARuntimeDirWhoseSocketPathIsTooLong) {
  const std::string dir = "/run/" + std::string(100, 'd');
  const std::string message = parse_error("[daemon]\nruntime_dir = \"" + dir + "\"\n");
  EXPECT_NE(message.find("invalid value for daemon.runtime_dir: \"" + dir + "\""),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("in kvtierd.toml"), std::string::npos) << message;
}

TEST(ConfigParse, AcceptsALongRuntimeDirWhenTheSocketIsSetExplicitly) {
  const std::string dir = "/run/" + std::string(100, 'd');
  auto result = parse_config(
      "[daemon]\nruntime_dir = \"" + dir + "\"\nsocket = \"/run/k.sock\"\n", "kvtierd.toml");
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(socket_path(*result), "/run/k.sock");
}

TEST(ConfigParse, SyntaxErrorCarriesLineAndColumn) {
  const std::string message = parse_error("[limits]\nmax_clients = 8\nmax_frame_bytes = = 1\n");
  EXPECT_EQ(message.rfind("TOML syntax error in kvtierd.toml:3:", 0), 0u) << message;
}

TEST(ConfigParse, RefusesADuplicateKeyAsASyntaxError) {
  const std::string message = parse_error("[limits]\nmax_clients = 8\nmax_clients = 9\n");
  EXPECT_EQ(message.rfind("TOML syntax error in kvtierd.toml:3:", 0), 0u) << message;
}

TEST(ConfigLoad, ReadsAFileAndNamesItInErrors) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("kvtier-config-test-" + std::to_string(::getpid()) + ".toml");
  {
    std::FILE* file = std::fopen(path.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs("[limits]\nmax_clients = 9\n[oops]\n", file);
    std::fclose(file);
  }
  auto result = load_config_file(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().message, "unknown table 'oops' in " + path.string() + ":3");
}

TEST(ConfigLoad, MissingFileIsAnOsErrorNamingThePath) {
  auto result = load_config_file("/nonexistent/kvtier/kvtierd.toml");
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, Errc::kOsError);
  EXPECT_NE(result.error().message.find("/nonexistent/kvtier/kvtierd.toml"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::config

namespace kvtier::config {
namespace {

TEST(ConfigParse, MetricsListenTakesANumericAddressAndPort) {
  auto c = parse_config("[metrics]\nlisten = \"[::1]:0\"\n", "kvtierd.toml");
  ASSERT_TRUE(c.has_value()) << c.error().message;
  const auto address = parse_listen_address(c->metrics.listen);
  ASSERT_TRUE(address.has_value());
  EXPECT_EQ(address->host, "::1");
  EXPECT_EQ(address->port, 0);
  EXPECT_EQ(parse_listen_address("127.0.0.1:9464")->port, 9464);
}

TEST(ConfigParse, MetricsListenRefusesNamesAndBadPorts) {
  for (const char* bad : {"localhost:9464", "127.0.0.1", "127.0.0.1:65536", "127.0.0.1:x", "::1:9464", ":9464"}) {
    EXPECT_FALSE(parse_listen_address(bad).has_value()) << bad;
    EXPECT_FALSE(parse_config(std::string("[metrics]\nlisten = \"") + bad + "\"\n", "kvtierd.toml").has_value()) << bad;
  }
}

}  // namespace
}  // namespace kvtier::config
