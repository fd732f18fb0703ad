// EventLog (daemon/src/event_log.hpp): a bounded ring of the newest events, oldest first.
#include "event_log.hpp"

#include <gtest/gtest.h>

namespace kvtier::daemon {
namespace {

Event event_for(std::uint32_t client_id, std::string detail = {}) {
  Event event;
  event.kind = EventKind::kBackpressure;
  event.client_id = client_id;
  event.detail = std::move(detail);
  return event;
}

std::vector<std::uint32_t> clients_of(const std::vector<const Event*>& events) {
  std::vector<std::uint32_t> out;
  for (const Event* event : events) out.push_back(event->client_id);
  return out;
}

TEST(EventLog, NumbersEventsFromOneInTheOrderTheyAreRecorded) {
  EventLog log(4);
  EXPECT_EQ(log.recorded(), 0u);
  EXPECT_EQ(log.record(event_for(7)), 1u);
  EXPECT_EQ(log.record(event_for(8)), 2u);
  const auto events = log.latest(10);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]->sequence, 1u);
  EXPECT_EQ(events[1]->sequence, 2u);
  EXPECT_EQ(log.recorded(), 2u);
}

TEST(EventLog, ListsTheNewestEventsOldestFirst) {
  EventLog log(8);
  for (std::uint32_t c = 1; c <= 5; ++c) log.record(event_for(c));
  EXPECT_EQ(clients_of(log.latest(3)), (std::vector<std::uint32_t>{3, 4, 5}));
  EXPECT_EQ(clients_of(log.latest(5)), (std::vector<std::uint32_t>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(log.latest(0).empty());
}

TEST(EventLog, KeepsOnlyTheNewestCapacityEventsWhenItWrapsAround) {
  EventLog log(3);
  for (std::uint32_t c = 1; c <= 7; ++c) log.record(event_for(c));
  EXPECT_EQ(log.size(), 3u);
  EXPECT_EQ(log.capacity(), 3u);
  EXPECT_EQ(log.recorded(), 7u);
  const auto events = log.latest(100);
  EXPECT_EQ(clients_of(events), (std::vector<std::uint32_t>{5, 6, 7}));
  EXPECT_EQ(events.front()->sequence, 5u);
  EXPECT_EQ(events.back()->sequence, 7u);
  EXPECT_EQ(clients_of(log.latest(2)), (std::vector<std::uint32_t>{6, 7}));
}

TEST(EventLog, StaysBoundedOverManyWrapArounds) {
  EventLog log(EventLog::kDefaultCapacity);
  for (std::uint32_t c = 1; c <= 10 * EventLog::kDefaultCapacity + 3; ++c) log.record(event_for(c));
  EXPECT_EQ(log.size(), EventLog::kDefaultCapacity);
  const auto events = log.latest(EventLog::kDefaultCapacity);
  ASSERT_EQ(events.size(), EventLog::kDefaultCapacity);
  for (std::size_t i = 1; i < events.size(); ++i) EXPECT_EQ(events[i]->sequence, events[i - 1]->sequence + 1);
  EXPECT_EQ(events.back()->sequence, log.recorded());
}

TEST(EventLog, CutsALongDetailAtACharacterBoundary) {
  EventLog log(2);
  // 'e' then two-byte characters: byte kMaxDetailBytes falls inside one of them.
  std::string detail = "e";
  while (detail.size() < 2 * EventLog::kMaxDetailBytes) detail += "\xc3\xa9";
  log.record(event_for(1, detail));
  const std::string& kept = log.latest(1)[0]->detail;
  EXPECT_LE(kept.size(), EventLog::kMaxDetailBytes);
  EXPECT_GE(kept.size(), EventLog::kMaxDetailBytes - 1);
  EXPECT_EQ((kept.size() - 1) % 2, 0u) << "a character was cut in half";
  EXPECT_EQ(cut_utf8("short", 120), "short");
}

}  // namespace
}  // namespace kvtier::daemon
