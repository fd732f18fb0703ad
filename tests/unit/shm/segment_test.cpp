#include "kvtier/shm/segment.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "kvtier/base/unique_fd.hpp"
#include "shm_test_support.hpp"

namespace kvtier::shm {
namespace {

using testing::unique_name;

bool name_exists(const std::string& name) {
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

TEST(Segment, CreatesOwnerOnlyObjectOfWholePages) {
  auto segment = Segment::create(unique_name(), SegmentKind::kPool, 5000, 42, 7);
  ASSERT_TRUE(segment) << segment.error().message;
  struct stat info {};
  ASSERT_EQ(::fstat(segment->fd(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(segment->size() % page, 0u);
  EXPECT_GE(segment->size(), sizeof(SegmentHeader) + 5000);
  EXPECT_EQ(static_cast<std::size_t>(info.st_size), segment->size());
  EXPECT_EQ(segment->payload().size(), segment->size() - sizeof(SegmentHeader));
}

TEST(Segment, ItsMemoryIsReservedAtCreationNotAtFirstTouch) {
  constexpr std::size_t kPayload = std::size_t{4} << 20;
  auto segment = Segment::create(unique_name(), SegmentKind::kPool, kPayload, 42, 7);
  ASSERT_TRUE(segment) << segment.error().message;
  struct stat info {};
  ASSERT_EQ(::fstat(segment->fd(), &info), 0);
  // Only the header page was written; every page is allocated all the same.
  EXPECT_GE(static_cast<std::uint64_t>(info.st_blocks) * 512, segment->size());
}

// In a child with a private mount namespace and a 1 MiB tmpfs on /dev/shm (needs
// CAP_SYS_ADMIN): a segment larger than what is free is refused, naming what is free. Exit codes:
// 0 as expected, 77 no namespace here, other values name the failed check.
int refuse_beyond_a_small_shm_filesystem() {
  if (::unshare(CLONE_NEWNS) != 0) return 77;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
  if (::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) return 77;
  auto small = Segment::create("/kvtier-reserve-small", SegmentKind::kPool, 256 * 1024, 1, 1);
  if (!small) {
    std::fprintf(stderr, "small segment: %s\n", small.error().message.c_str());
    return 1;
  }
  auto large = Segment::create("/kvtier-reserve-large", SegmentKind::kPool, 4u << 20, 1, 1);
  if (large) return 2;
  std::fprintf(stderr, "refused: %s\n", large.error().message.c_str());
  if (large.error().code != Errc::kLimitExceeded) return 3;
  if (large.error().message.find("/dev/shm has ") == std::string::npos) return 4;
  if (large.error().message.find(" of 1048576 bytes free") == std::string::npos) return 5;
  if (name_exists("/kvtier-reserve-large")) return 6;  // a refused segment leaves no name
  return 0;
}

TEST(Segment, ASegmentTheShmFilesystemCannotHoldIsRefusedNamingWhatIsFree) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(refuse_beyond_a_small_shm_filesystem());
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "no private mount namespace here (needs CAP_SYS_ADMIN)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed check " << WEXITSTATUS(status) << " (see stderr)";
}

TEST(Segment, WritesACompleteHeaderWithReadyLast) {
  std::uint32_t ready_during_init = 99;
  auto segment = Segment::create(unique_name(), SegmentKind::kControl, 128, 42, 7,
                                 [&](std::span<std::byte> payload) {
                                   const auto* header = reinterpret_cast<const SegmentHeader*>(
                                       payload.data() - sizeof(SegmentHeader));
                                   ready_during_init = header->ready.load();
                                 });
  ASSERT_TRUE(segment) << segment.error().message;
  EXPECT_EQ(ready_during_init, 0u);
  const auto& header = *reinterpret_cast<const SegmentHeader*>(segment->base());
  EXPECT_EQ(header.magic, kSegmentMagic);
  EXPECT_EQ(header.layout_version, kLayoutVersion);
  EXPECT_EQ(header.kind, SegmentKind::kControl);
  EXPECT_EQ(header.header_size, sizeof(SegmentHeader));
  EXPECT_EQ(header.segment_size, segment->size());
  EXPECT_EQ(header.layout_fingerprint, kLayoutFingerprint);
  EXPECT_EQ(header.daemon_epoch, 42u);
  EXPECT_EQ(header.client_id, 7u);
  EXPECT_EQ(header.ready.load(), 1u);
}

TEST(Segment, UnlinksItsNameOnDestruction) {
  const std::string name = unique_name();
  {
    auto segment = Segment::create(name, SegmentKind::kPool, 64, 1, 1);
    ASSERT_TRUE(segment) << segment.error().message;
    EXPECT_TRUE(name_exists(name));
  }
  EXPECT_FALSE(name_exists(name));
}

TEST(Segment, ReleasedNameSurvivesAndCanBeAdopted) {
  const std::string name = unique_name();
  {
    auto segment = Segment::create(name, SegmentKind::kPool, 64, 3, 9);
    ASSERT_TRUE(segment);
    segment->payload()[0] = std::byte{0x5a};
    segment->release_name();
  }
  ASSERT_TRUE(name_exists(name));
  {
    auto adopted = Segment::open_existing(name);
    ASSERT_TRUE(adopted) << adopted.error().message;
    EXPECT_EQ(adopted->kind(), SegmentKind::kPool);
    EXPECT_EQ(adopted->epoch(), 3u);
    EXPECT_EQ(adopted->client_id(), 9u);
    EXPECT_EQ(adopted->payload()[0], std::byte{0x5a});
  }
  EXPECT_FALSE(name_exists(name));  // the adopter owned the name
}

TEST(Segment, RefusesToCreateAnExistingName) {
  const std::string name = unique_name();
  auto first = Segment::create(name, SegmentKind::kPool, 64, 1, 1);
  ASSERT_TRUE(first);
  auto second = Segment::create(name, SegmentKind::kPool, 64, 1, 1);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, Errc::kOsError);
  EXPECT_TRUE(name_exists(name));  // the failed attempt did not unlink the first one's name
}

TEST(Segment, RefusesANameWithASlash) {
  auto segment = Segment::create("/kvtier/bad", SegmentKind::kPool, 64, 1, 1);
  ASSERT_FALSE(segment);
  EXPECT_EQ(segment.error().code, Errc::kInvalidArgument);
}

TEST(Segment, OpenExistingRefusesAMissingName) {
  auto segment = Segment::open_existing(unique_name("missing"));
  ASSERT_FALSE(segment);
  EXPECT_EQ(segment.error().code, Errc::kOsError);
}

TEST(Segment, OpenExistingRefusesAForeignObject) {
  const std::string name = unique_name("foreign");
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ::close(fd);
  auto segment = Segment::open_existing(name);
  ::shm_unlink(name.c_str());
  ASSERT_FALSE(segment);
  EXPECT_EQ(segment.error().code, Errc::kProtocol);
  EXPECT_NE(segment.error().message.find("magic"), std::string::npos) << segment.error().message;
}

TEST(SegmentName, FollowsThePrefixClientKindPattern) {
  EXPECT_EQ(segment_name("prod", 12, SegmentKind::kControl).value(), "/kvtier.prod.12.control");
  EXPECT_EQ(segment_name("prod", 12, SegmentKind::kPool, 1).value(), "/kvtier.prod.12.pool.1");
  auto bad = segment_name("a/b", 1, SegmentKind::kControl);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::kInvalidArgument);
  EXPECT_FALSE(segment_name("", 1, SegmentKind::kControl));
}

TEST(UniqueFd, ClosesOnDestructionAndMovesOwnership) {
  int raw = -1;
  {
    auto fd = UniqueFd::duplicate(STDERR_FILENO);
    ASSERT_TRUE(fd) << fd.error().message;
    raw = fd->get();
    UniqueFd moved = std::move(*fd);
    EXPECT_FALSE(fd->valid());
    EXPECT_EQ(moved.get(), raw);
    EXPECT_GE(::fcntl(raw, F_GETFD), 0);
  }
  errno = 0;
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace kvtier::shm
