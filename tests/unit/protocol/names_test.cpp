#include "kvtier/protocol/names.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvtier::protocol {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string refusal(std::string_view name) {
  auto checked = check_name("Hello.clientName", name);
  EXPECT_FALSE(checked) << "accepted: " << name.size() << " bytes";
  if (checked) return {};
  EXPECT_EQ(checked.error().code, Errc::kInvalidArgument);
  return checked.error().message;
}

TEST(Names, PrintableUtf8UpToTheLimitIsAccepted) {
  EXPECT_TRUE(check_name("f", ""));
  EXPECT_TRUE(check_name("f", "engine-0 \"quoted\" back\\slash {}"));
  EXPECT_TRUE(check_name("f", "\xc2\xa0\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf"));  // NBSP é 日 😀 U+10FFFF
  EXPECT_TRUE(check_name("f", std::string(kMaxNameBytes, 'a')));
}

TEST(Names, ControlCharactersAreRefusedNamingTheirOffsetAndCodePoint) {
  EXPECT_THAT(refusal("ab\x1b[2J"), HasSubstr("Hello.clientName: byte 2 starts control character U+001B"));
  EXPECT_THAT(refusal("a\nb"), HasSubstr("byte 1 starts control character U+000A"));
  EXPECT_THAT(refusal(std::string_view("a\0b", 3)), HasSubstr("byte 1 starts control character U+0000"));
  EXPECT_THAT(refusal("a\x7f"), HasSubstr("U+007F"));
  EXPECT_THAT(refusal("a\xc2\x80"), HasSubstr("byte 1 starts control character U+0080"));
  EXPECT_THAT(refusal("a\xc2\x9f"), HasSubstr("U+009F"));
}

TEST(Names, IllFormedUtf8IsRefused) {
  for (const std::string_view bad : {"\x80", "\xbf", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xf0\x80\x80\xaf",
                                     "\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff",
                                     "\xe6\x97", "\xc3", "\xc3(", "\xe6(\xa5"}) {
    EXPECT_THAT(refusal(bad), HasSubstr("byte 0 (0x")) << static_cast<int>(static_cast<unsigned char>(bad[0]));
    EXPECT_THAT(refusal(bad), HasSubstr("is not well-formed UTF-8"));
  }
  EXPECT_THAT(refusal("ok\xff"), HasSubstr("byte 2 (0xff) is not well-formed UTF-8"));
}

TEST(Names, TooLongIsRefusedBeforeAnythingElse) {
  EXPECT_THAT(refusal(std::string(kMaxNameBytes + 1, 'a')), HasSubstr("64 bytes is too long"));
  EXPECT_THAT(refusal(std::string(100, '\x1b')), HasSubstr("100 bytes is too long"));
}

TEST(Names, TheMessageStatesTheRuleAndNeverRepeatsTheName) {
  const std::string message = refusal("visible\x1b[31mred");
  EXPECT_THAT(message, HasSubstr("names must be well-formed UTF-8 of at most 63 bytes without control characters"));
  EXPECT_THAT(message, Not(HasSubstr("visible")));
  EXPECT_THAT(message, Not(HasSubstr("red")));
}

}  // namespace
}  // namespace kvtier::protocol
