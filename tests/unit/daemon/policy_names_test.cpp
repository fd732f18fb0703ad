// The policy names of the configuration (config::policy_names, tiering.policy) and the tier
// engine's policies (tier::kAllPolicies) are two lists that kvtierd maps onto each other in
// daemon/src/tier_params.cpp: every name the config accepts maps to a policy, every policy has a
// name the config accepts, and a name outside them is refused on both sides, naming the value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>

#include <capnp/message.h>

#include "kvtier/config/config.hpp"
#include "kvtier/tier/policy_kind.hpp"
#include "tier_params.hpp"

namespace kvtier::daemon {
namespace {

using ::testing::HasSubstr;

Result<config::DaemonConfig> config_with_policy(std::string_view name) {
  return config::parse_config("[tiering]\npolicy = \"" + std::string(name) + "\"\n", "test.toml");
}

config::TieringSection tiering_with_policy(std::string_view name) {
  config::TieringSection tiering;
  tiering.policy = std::string(name);
  return tiering;
}

TEST(PolicyNames, EveryNameTheConfigAcceptsMapsToThatPolicy) {
  ASSERT_FALSE(config::policy_names().empty());
  for (std::string_view name : config::policy_names()) {
    SCOPED_TRACE(std::string(name));
    ASSERT_TRUE(config_with_policy(name).has_value());
    const Result<tier::TierParams> params = tier_defaults(tiering_with_policy(name), 1);
    ASSERT_TRUE(params.has_value()) << to_string(params.error());
    EXPECT_EQ(tier::policy_name(params->policy), name);
  }
}

TEST(PolicyNames, EveryPolicyHasANameTheConfigAccepts) {
  const auto names = config::policy_names();
  EXPECT_EQ(names.size(), tier::kAllPolicies.size());
  for (tier::PolicyKind kind : tier::kAllPolicies) {
    const std::string_view name = tier::policy_name(kind);
    SCOPED_TRACE(std::string(name));
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end());
    EXPECT_TRUE(config_with_policy(name).has_value());
  }
}

TEST(PolicyNames, TheDefaultPolicyIsPaperOnBothSides) {
  const Result<tier::TierParams> params = tier_defaults(config::TieringSection{}, 1);
  ASSERT_TRUE(params.has_value()) << to_string(params.error());
  EXPECT_EQ(params->policy, tier::PolicyKind::kPaper);
  EXPECT_EQ(params->policy, tier::TierParams{}.policy);
}

TEST(PolicyNames, ConfigRefusesAnUnknownNameNamingIt) {
  const auto config = config_with_policy("h2o_v2");
  ASSERT_FALSE(config.has_value());
  EXPECT_EQ(config.error().code, Errc::kInvalidArgument);
  EXPECT_THAT(config.error().message, HasSubstr("tiering.policy"));
  EXPECT_THAT(config.error().message, HasSubstr("h2o_v2"));
}

TEST(PolicyNames, TierDefaultsRefuseAnUnknownNameInsteadOfFallingBackToPaper) {
  // A TieringSection that skipped validation (or a name the two lists disagree on).
  const Result<tier::TierParams> params = tier_defaults(tiering_with_policy("H2O"), 1);
  ASSERT_FALSE(params.has_value());
  EXPECT_EQ(params.error().code, Errc::kInvalidArgument);
  EXPECT_THAT(params.error().message, HasSubstr("tiering.policy"));
  EXPECT_THAT(params.error().message, HasSubstr("'H2O'"));
}

TEST(PolicyNames, SequenceOnDefaultsIsRefusedWhenTheConfiguredNameIsUnknown) {
  capnp::MallocMessageBuilder message;
  auto wire = message.initRoot<wire::TierParams>();
  wire.setUseDefaults(true);
  const auto params = tier_params_from_wire(wire.asReader(), tiering_with_policy("bogus"), 1);
  ASSERT_FALSE(params.has_value());
  EXPECT_THAT(params.error().message, HasSubstr("'bogus'"));
}

TEST(PolicyNames, SequenceWithAnUnknownWirePolicyIsRefusedNamingTheValue) {
  capnp::MallocMessageBuilder message;
  auto wire = message.initRoot<wire::TierParams>();
  wire.setUseDefaults(false);
  wire.setPolicy(static_cast<wire::Policy>(tier::kAllPolicies.size() + 3));
  const auto params = tier_params_from_wire(wire.asReader(), config::TieringSection{}, 1);
  ASSERT_FALSE(params.has_value());
  EXPECT_EQ(params.error().code, Errc::kInvalidArgument);
  EXPECT_THAT(params.error().message, HasSubstr("unknown policy 9"));
}

}  // namespace
}  // namespace kvtier::daemon
