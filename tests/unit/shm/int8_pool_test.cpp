// The int8 (T2) pool segment: geometry limits, the daemon and a client seeing the same blocks,
// and a client refusing a block header that does not describe its segment.
#include <gtest/gtest.h>

#include <cstdint>

#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/mapping.hpp"
#include "shm_test_support.hpp"

namespace kvtier::shm {
namespace {

TEST(Int8PoolGeometry, SlotsAreWholeBlocksOfGroupTokens) {
  auto g = make_int8_pool_geometry(2, 4, 128, 32, 3);
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(g->slots(), 96u);
  EXPECT_EQ(g->layer_stride(), 3u * g->block_bytes());
  EXPECT_EQ(g->total_bytes(), 2u * g->layer_stride());
}

TEST(Int8PoolGeometry, RefusesZeroAndAbsurdFieldsNamingThem) {
  for (const auto& [g, field] : {std::pair{make_int8_pool_geometry(0, 4, 128, 32, 3), "num_layers 0"},
                                 {make_int8_pool_geometry(2, 4, 128, 0, 3), "group_tokens 0"},
                                 {make_int8_pool_geometry(2, 4, 128, 2048, 3), "group_tokens 2048"},
                                 {make_int8_pool_geometry(2, 4, 128, 32, 0), "blocks 0"}}) {
    ASSERT_FALSE(g) << field;
    EXPECT_EQ(g.error().code, Errc::kInvalidArgument);
    EXPECT_NE(g.error().message.find(field), std::string::npos) << g.error().message;
  }
}

TEST(Int8PoolGeometry, RefusesTotalsBeyondTheLimit) {
  auto g = make_int8_pool_geometry(1024, 1024, 16384, 1024, 1024);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("exceeds"), std::string::npos);
}

struct Int8PoolSegmentTest : ::testing::Test {
  void SetUp() override {
    auto g = make_int8_pool_geometry(3, 2, 16, 4, 5);
    ASSERT_TRUE(g);
    geometry = *g;
    auto created = create_int8_pool_segment(testing::unique_name(), geometry, 9, 4);
    ASSERT_TRUE(created) << created.error().message;
    segment.emplace(std::move(*created));
    auto mapped = Mapping::map_segment(segment->fd(), SegmentKind::kInt8Pool, 9);
    ASSERT_TRUE(mapped) << mapped.error().message;
    mapping.emplace(std::move(*mapped));
  }
  Int8PoolBlock& shared_block() { return *reinterpret_cast<Int8PoolBlock*>(segment->base() + sizeof(SegmentHeader)); }
  Int8PoolGeometry geometry{};
  std::optional<Segment> segment;
  std::optional<Mapping> mapping;
};

TEST_F(Int8PoolSegmentTest, ClientAndDaemonSeeTheSameBlocks) {
  auto client = Int8PoolView::validate(mapping->bytes());
  ASSERT_TRUE(client) << client.error().message;
  EXPECT_EQ(client->geometry(), geometry);
  const Int8PoolView daemon = Int8PoolView::trusted(segment->bytes(), geometry);
  auto block = daemon.block(2, 4);
  EXPECT_EQ(block.size(), geometry.block_bytes());
  EXPECT_EQ(block.data() - segment->base(), static_cast<std::ptrdiff_t>(kPoolRowsOffset + geometry.block_offset(2, 4)));
  block[0] = std::byte{0x5A};
  block[block.size() - 1] = std::byte{0xA5};
  EXPECT_EQ(client->block(2, 4)[0], std::byte{0x5A});
  EXPECT_EQ(client->block(2, 4)[block.size() - 1], std::byte{0xA5});
}

TEST_F(Int8PoolSegmentTest, APoolMappingRefusesAnInt8Segment) {
  auto mapped = Mapping::map_segment(segment->fd(), SegmentKind::kPool, 9);
  ASSERT_FALSE(mapped);
  EXPECT_NE(mapped.error().message.find("expected 2 (pool)"), std::string::npos) << mapped.error().message;
}

TEST_F(Int8PoolSegmentTest, ClientRefusesABlockWhoseBytesDoNotMatchItsGeometry) {
  shared_block().rows_bytes += 64;
  auto client = Int8PoolView::validate(mapping->bytes());
  ASSERT_FALSE(client);
  EXPECT_EQ(client.error().code, Errc::kProtocol);
  EXPECT_NE(client.error().message.find("int8 pool block rows_bytes"), std::string::npos) << client.error().message;
}

TEST_F(Int8PoolSegmentTest, ClientRefusesAGeometryLargerThanTheSegment) {
  shared_block().geometry.blocks = 1000;
  shared_block().rows_bytes = shared_block().geometry.total_bytes();
  auto client = Int8PoolView::validate(mapping->bytes());
  ASSERT_FALSE(client);
  EXPECT_NE(client.error().message.find("beyond the segment"), std::string::npos);
}

TEST_F(Int8PoolSegmentTest, ClientRefusesAnAbsurdGroup) {
  shared_block().geometry.group_tokens = 0;
  auto client = Int8PoolView::validate(mapping->bytes());
  ASSERT_FALSE(client);
  EXPECT_NE(client.error().message.find("group_tokens 0"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::shm
