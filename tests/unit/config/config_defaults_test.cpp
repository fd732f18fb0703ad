// The built-in defaults and the shipped systemd/kvtierd.toml, which must say the same thing.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <toml++/toml.h>

#include "kvtier/config/config.hpp"

namespace kvtier::config {
namespace {

// "table.key" for every key in a TOML document.
std::set<std::string> keys_of(const toml::table& root) {
  std::set<std::string> keys;
  for (const auto& [table_name, table] : root) {
    if (const auto* entries = table.as_table()) {
      for (const auto& [key, value] : *entries) {
        keys.insert(std::string(table_name.str()) + "." + std::string(key.str()));
      }
    }
  }
  return keys;
}

TEST(ConfigDefaults, AreValid) { EXPECT_TRUE(validate(DaemonConfig{})); }

TEST(ConfigDefaults, MatchTheDocumentedValues) {
  const DaemonConfig c;
  EXPECT_EQ(c.daemon.runtime_dir, "/run/kvtier");
  EXPECT_EQ(c.daemon.socket, "");
  EXPECT_EQ(c.daemon.shm_prefix, "kvtier");
  EXPECT_EQ(c.daemon.admin_group, "kvtier-admin");
  EXPECT_EQ(c.daemon.log_level, LogLevel::kInfo);
  EXPECT_TRUE(c.daemon.watchdog);
  EXPECT_EQ(c.limits.max_clients, 64u);
  EXPECT_EQ(c.limits.max_sequences_per_client, 256u);
  EXPECT_EQ(c.limits.max_pool_bytes_per_client, std::uint64_t{1} << 30);
  EXPECT_EQ(c.limits.max_frame_bytes, 1u << 20);
  EXPECT_EQ(c.limits.max_tokens_per_sequence, 1u << 20);
  EXPECT_EQ(c.limits.score_ring_records, 4096u);
  EXPECT_EQ(c.limits.plan_ring_records, 1024u);
  EXPECT_EQ(c.limits.plans_in_flight, 16u);
  EXPECT_EQ(c.limits.hello_timeout_ms, 10000u);
  EXPECT_EQ(c.limits.max_pending_connections, 64u);
  EXPECT_EQ(c.limits.drain_timeout_ms, 2000u);
  EXPECT_EQ(c.limits.orphan_grace_ms, 30000u);
  EXPECT_EQ(c.tiering.sink_tokens, 4u);
  EXPECT_EQ(c.tiering.window_tokens, 128u);
  EXPECT_EQ(c.tiering.interval, 64u);
  EXPECT_EQ(c.tiering.hbm_ratio, 0.5);
  EXPECT_EQ(c.tiering.evict_ratio, 0.0);
  EXPECT_EQ(c.tiering.hysteresis, 0.0);
  EXPECT_EQ(c.tiering.decay, 1.0);
  EXPECT_EQ(c.tiering.eviction_mode, EvictionMode::kCumulative);
  EXPECT_EQ(c.pools.ddr_bytes_total, 0u);
}

TEST(ConfigDefaults, SocketIsInTheRuntimeDirectory) {
  EXPECT_EQ(socket_path(DaemonConfig{}), "/run/kvtier/kvtierd.sock");
}

TEST(ConfigDefaults, ShippedFileEqualsTheBuiltInDefaults) {
  auto result = load_config_file(KVTIER_SHIPPED_CONFIG);
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(*result, DaemonConfig{});
}

TEST(ConfigDefaults, ShippedFileSpellsOutEveryKey) {
  // Equality alone would pass with keys missing, since missing keys take their defaults.
  const std::set<std::string> all_keys = keys_of(toml::parse(to_toml(DaemonConfig{})));
  const std::set<std::string> shipped = keys_of(toml::parse_file(KVTIER_SHIPPED_CONFIG));
  EXPECT_EQ(all_keys.size(), 35u);
  EXPECT_EQ(shipped, all_keys);
}

}  // namespace
}  // namespace kvtier::config
