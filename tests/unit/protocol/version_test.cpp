#include "kvtier/protocol/version.hpp"

#include <capnp/schema.h>
#include <gtest/gtest.h>

#include "kvtier/protocol/control.capnp.h"

namespace kvtier::protocol {
namespace {

TEST(ProtocolVersion, SameMajorIsCompatibleWhateverTheMinor) {
  EXPECT_TRUE(is_compatible(ProtocolVersion{1, 0}, ProtocolVersion{1, 0}));
  EXPECT_TRUE(is_compatible(ProtocolVersion{1, 0}, ProtocolVersion{1, 7}));
  EXPECT_TRUE(is_compatible(ProtocolVersion{1, 7}, ProtocolVersion{1, 0}));
}

TEST(ProtocolVersion, DifferentMajorIsIncompatible) {
  EXPECT_FALSE(is_compatible(ProtocolVersion{1, 0}, ProtocolVersion{2, 0}));
  EXPECT_FALSE(is_compatible(ProtocolVersion{2, 3}, ProtocolVersion{1, 3}));
  EXPECT_FALSE(is_compatible(ProtocolVersion{0, 0}));
}

TEST(ProtocolVersion, ThisBuildIsCompatibleWithItself) {
  static_assert(is_compatible(kProtocolVersion));
  static_assert(kProtocolVersion.major == kProtocolMajor);
  static_assert(kProtocolVersion.minor == kProtocolMinor);
  const auto next_minor = static_cast<std::uint16_t>(kProtocolMinor + 1);
  EXPECT_TRUE(is_compatible(ProtocolVersion{kProtocolMajor, next_minor}));
}

TEST(ProtocolVersion, PrintsAsMajorDotMinor) {
  EXPECT_EQ(to_string(ProtocolVersion{1, 0}), "1.0");
  EXPECT_EQ(to_string(ProtocolVersion{12, 345}), "12.345");
}

TEST(ProtocolVersion, SchemaFileIdIsPinned) {
  const auto proto = capnp::Schema::from<wire::ClientMessage>().getProto();
  EXPECT_EQ(proto.getScopeId(), kControlSchemaFileId);
  EXPECT_EQ(capnp::Schema::from<wire::DaemonMessage>().getProto().getScopeId(),
            kControlSchemaFileId);
}

}  // namespace
}  // namespace kvtier::protocol
