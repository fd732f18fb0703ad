#include <gtest/gtest.h>

#include <cstdint>

#include "kvtier/shm/mapping.hpp"
#include "kvtier/shm/pool_geometry.hpp"
#include "kvtier/shm/pool_segment.hpp"
#include "shm_test_support.hpp"

namespace kvtier::shm {
namespace {

TEST(PoolGeometry, RowHoldsKAndVForAllKvHeadsOfOneLayer) {
  auto g = make_pool_geometry(32, 8, 128, 2, 1000);  // Llama-3-8B-like, bf16
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(g->row_bytes(), 2u * 8 * 128 * 2);
  EXPECT_EQ(g->layer_stride(), 1000u * 4096);
  EXPECT_EQ(g->total_bytes(), 32u * 1000 * 4096);
  EXPECT_EQ(g->row_offset(0, 0), 0u);
  EXPECT_EQ(g->row_offset(0, 1), 4096u);
  EXPECT_EQ(g->row_offset(2, 3), 2u * 1000 * 4096 + 3 * 4096);
}

TEST(PoolGeometry, RefusesZeroFields) {
  auto g = make_pool_geometry(32, 0, 128, 2, 10);
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(g.error().message, "pool geometry num_kv_heads 0 is outside [1, 1024]");
  EXPECT_FALSE(make_pool_geometry(0, 8, 128, 2, 10));
  EXPECT_FALSE(make_pool_geometry(32, 8, 128, 2, 0));
}

TEST(PoolGeometry, RefusesAbsurdFields) {
  EXPECT_FALSE(make_pool_geometry(32, 8, 128, 16, 10));      // 16-byte elements
  EXPECT_FALSE(make_pool_geometry(100000, 8, 128, 2, 10));   // 100k layers
}

TEST(PoolGeometry, RefusesTotalsBeyondTheLimitWithoutOverflowing) {
  auto g = make_pool_geometry(1024, 1024, 16384, 8, kMaxPoolSlots);  // ~2^74 bytes
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("exceeds"), std::string::npos) << g.error().message;
}

struct PoolSegmentTest : ::testing::Test {
  void SetUp() override {
    auto g = make_pool_geometry(3, 2, 16, 2, 5);  // 128-byte rows
    ASSERT_TRUE(g);
    geometry = *g;
    auto created = create_pool_segment(testing::unique_name(), geometry, 9, 4);
    ASSERT_TRUE(created) << created.error().message;
    segment.emplace(std::move(*created));
    auto mapped = Mapping::map_segment(segment->fd(), SegmentKind::kPool, 9);
    ASSERT_TRUE(mapped) << mapped.error().message;
    mapping.emplace(std::move(*mapped));
  }
  PoolBlock& shared_block() {
    return *reinterpret_cast<PoolBlock*>(segment->base() + sizeof(SegmentHeader));
  }
  PoolGeometry geometry{};
  std::optional<Segment> segment;
  std::optional<Mapping> mapping;
};

TEST_F(PoolSegmentTest, ClientAndDaemonSeeTheSameRows) {
  auto client = PoolView::validate(mapping->bytes());
  ASSERT_TRUE(client) << client.error().message;
  EXPECT_EQ(client->geometry(), geometry);
  PoolView daemon = PoolView::trusted(segment->bytes(), geometry);

  auto row = client->row(2, 4);
  EXPECT_EQ(row.size(), geometry.row_bytes());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(row.data()) % 64, 0u);
  EXPECT_EQ(row.data() - mapping->data(),
            static_cast<std::ptrdiff_t>(kPoolRowsOffset + geometry.row_offset(2, 4)));
  row[0] = std::byte{0x11};
  row[row.size() - 1] = std::byte{0x22};
  EXPECT_EQ(daemon.row(2, 4)[0], std::byte{0x11});
  EXPECT_EQ(daemon.row(2, 4)[row.size() - 1], std::byte{0x22});
  EXPECT_EQ(daemon.layer(1).size(), geometry.layer_stride());
}

TEST_F(PoolSegmentTest, RowsStartOnAPageBoundary) {
  auto client = PoolView::validate(mapping->bytes());
  ASSERT_TRUE(client);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(client->rows().data()) % 4096, 0u);
}

TEST_F(PoolSegmentTest, ClientRefusesABlockWhoseRowsDoNotMatchItsGeometry) {
  shared_block().rows_bytes += 128;
  auto client = PoolView::validate(mapping->bytes());
  ASSERT_FALSE(client);
  EXPECT_EQ(client.error().code, Errc::kProtocol);
  EXPECT_NE(client.error().message.find("rows_bytes"), std::string::npos);
}

TEST_F(PoolSegmentTest, ClientRefusesAGeometryLargerThanTheSegment) {
  shared_block().geometry.slots = 1000;
  shared_block().rows_bytes = shared_block().geometry.total_bytes();
  auto client = PoolView::validate(mapping->bytes());
  ASSERT_FALSE(client);
  EXPECT_NE(client.error().message.find("beyond the segment"), std::string::npos);
}

TEST_F(PoolSegmentTest, ClientRefusesAZeroGeometry) {
  shared_block().geometry.head_dim = 0;
  auto client = PoolView::validate(mapping->bytes());
  ASSERT_FALSE(client);
  EXPECT_EQ(client.error().code, Errc::kProtocol);
  EXPECT_NE(client.error().message.find("head_dim 0"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::shm
