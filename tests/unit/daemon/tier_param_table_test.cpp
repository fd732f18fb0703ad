// The tier parameter table (protocol/tier_param_table.hpp) against the wire schema, and every
// parameter carried from the C struct over the wire into the daemon's TierParams: libkvtier's
// kvtier_sequence_options_init and set_tiering, then kvtierd's tier_params_from_wire.
#include <gtest/gtest.h>

#include <capnp/message.h>
#include <capnp/schema.h>

#include <cctype>
#include <set>
#include <string>
#include <type_traits>

#include "kvtier/config/config.hpp"
#include "kvtier/kvtier.h"
#include "kvtier/protocol/tier_param_table.hpp"
#include "tier_params.hpp"
#include "tier_params_wire.hpp"

namespace kvtier::daemon {
namespace {

// The fields of wire TierParams that are not tier parameters (useDefaults does not keep them).
const std::set<std::string> kNotTierParams = {"useDefaults", "keyDigestDim", "tokensPerPosition"};

std::string field_name(const char* wire_accessor) {
  std::string name = wire_accessor;
  name[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(name[0])));
  return name;
}

std::set<std::string> table_fields() {
  std::set<std::string> names;
#define KVTIER_NAME(name, Wire, ...) names.insert(field_name(#Wire));
  KVTIER_TIER_NUMBERS(KVTIER_NAME)
  KVTIER_TIER_CHOICES(KVTIER_NAME)
#undef KVTIER_NAME
  return names;
}

TEST(TierParamTable, EveryWireFieldIsATableEntryOrNamedAsNoTierParameter) {
  const std::set<std::string> table = table_fields();
  const capnp::StructSchema schema = capnp::Schema::from<wire::TierParams>();
  for (const capnp::StructSchema::Field field : schema.getFields()) {
    const std::string name = field.getProto().getName();
    EXPECT_TRUE(table.count(name) == 1 || kNotTierParams.count(name) == 1)
        << "TierParams." << name << " is in neither list of protocol/tier_param_table.hpp";
  }
  for (const std::string& name : table) {
    EXPECT_TRUE(schema.findFieldByName(name) != nullptr) << name << " is in the table but not in TierParams";
  }
  EXPECT_EQ(schema.getFields().size(), table.size() + kNotTierParams.size());
}

// An in-range value that is not the default.
template <class T>
T probe(const protocol::ParamRange& range, T fallback) {
  if constexpr (std::is_integral_v<T>) {
    const auto value = static_cast<T>(range.min + 7);
    return value == fallback ? static_cast<T>(value + 1) : value;
  } else {
    const double value = range.min + (range.max - range.min) * 0.375;
    return value == fallback ? range.min + (range.max - range.min) * 0.625 : value;
  }
}

TEST(TierParamTable, TheCDefaultsAreTheTablesAndTheDaemons) {
  kvtier_sequence_options o;
  kvtier_sequence_options_init(&o);
  const tier::TierParams daemon;
#define KVTIER_EXPECT_DEFAULT(name, Wire, Type, value, range, help) \
  EXPECT_EQ(o.name, Type{value}) << #name;                         \
  EXPECT_EQ(daemon.name, Type{value}) << #name;
  KVTIER_TIER_NUMBERS(KVTIER_EXPECT_DEFAULT)
#undef KVTIER_EXPECT_DEFAULT
}

TEST(TierParamTable, EveryParameterTravelsFromTheCStructIntoTheDaemon) {
  kvtier_sequence_options o;
  kvtier_sequence_options_init(&o);
  o.use_defaults = 0;
#define KVTIER_SET_PROBE(name, Wire, Type, value, range, help) o.name = probe<Type>(protocol::range, Type{value});
  KVTIER_TIER_NUMBERS(KVTIER_SET_PROBE)
#undef KVTIER_SET_PROBE
  o.mode = KVTIER_EVICT_PAPER_ALGORITHM;
  o.policy = KVTIER_POLICY_H2O;
  o.protect_prompt = 1;

  capnp::MallocMessageBuilder message;
  auto wire = message.initRoot<wire::TierParams>();
  client::set_tiering(wire, o);
  const auto params = tier_params_from_wire(wire.asReader(), config::TieringSection{}, 1);
  ASSERT_TRUE(params.has_value()) << params.error().message;
#define KVTIER_EXPECT_CARRIED(name, Wire, Type, value, range, help) \
  EXPECT_EQ(params->name, o.name) << #name << " was not carried end to end";
  KVTIER_TIER_NUMBERS(KVTIER_EXPECT_CARRIED)
#undef KVTIER_EXPECT_CARRIED
  EXPECT_EQ(params->mode, tier::EvictionMode::kPaperAlgorithm);
  EXPECT_EQ(params->policy, tier::PolicyKind::kH2o);
  EXPECT_EQ(params->protect_prompt, std::optional<bool>(true));
}

TEST(TierParamTable, EveryNumberOutsideItsRangeIsRefusedByName) {
#define KVTIER_EXPECT_REFUSED(name, Wire, Type, value, range, help)                              \
  if constexpr (std::is_floating_point_v<Type>) {                                                \
    tier::TierParams params;                                                                      \
    params.name = protocol::range.max + 1.0;                                                      \
    const Status status = tier::validate(params);                                                 \
    ASSERT_FALSE(status.has_value()) << #name;                                                    \
    EXPECT_EQ(status.error().message.rfind(std::string("tier params: ") + #name + " must be in ", 0), 0u) \
        << status.error().message;                                                                \
  }
  KVTIER_TIER_NUMBERS(KVTIER_EXPECT_REFUSED)
#undef KVTIER_EXPECT_REFUSED
}

}  // namespace
}  // namespace kvtier::daemon
