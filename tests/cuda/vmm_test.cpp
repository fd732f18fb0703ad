// cuMem POSIX-fd IPC: a VmmBuffer exported here as an fd travels over a socketpair (SCM_RIGHTS) to
// a second process (kvtier_vmm_peer), which maps it once through a VmmBufferCache, reads what this
// process wrote and writes a reply; bad fds fail with a reason and leave CUDA usable. Tests that
// need a device skip with CUDA's reason; the argument checks and the no-device answers run
// everywhere.
#include "kvtier/kernels/cuda/vmm.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "fd_passing.hpp"
#include "kvtier/kernels/cuda/ipc.hpp"

extern char** environ;

namespace kvtier::kernels::cuda::testing {
namespace {

class VmmIpcTest : public ::testing::Test {
 protected:
  void SetUp() override { KVTIER_SKIP_WITHOUT_CUDA_DEVICE(); }
};

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

// The peer executable: $KVTIER_VMM_PEER when set (binaries moved to another machine), else the
// build tree's.
std::string peer_path() {
  const char* from_env = std::getenv("KVTIER_VMM_PEER");
  return from_env != nullptr && *from_env != '\0' ? from_env : KVTIER_VMM_PEER_PATH;
}

// The peer, running with the other end of a socketpair; `socket` is this process's end.
struct Peer {
  pid_t pid = -1;
  UniqueFd socket;
};

Result<Peer> spawn_peer() {
  int ends[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    return os_error("socketpair");
  }
  Peer peer{-1, UniqueFd(ends[0])};
  const UniqueFd child_end(ends[1]);  // closed here once the peer has inherited it
  if (::fcntl(child_end.get(), F_SETFD, 0) != 0) return os_error("fcntl(child end)");
  std::string path = peer_path(), fd_text = std::to_string(child_end.get());
  char* argv[] = {path.data(), fd_text.data(), nullptr};
  if (const int rc = posix_spawn(&peer.pid, path.c_str(), nullptr, nullptr, argv, environ);
      rc != 0) {
    return make_error(Errc::kOsError, "posix_spawn " + path + ": " + std::to_string(rc));
  }
  return peer;
}

// The peer's exit status, or -1 if it did not exit normally.
int wait_for(const Peer& peer) {
  int status = 0;
  if (::waitpid(peer.pid, &status, 0) != peer.pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST_F(VmmIpcTest, AVmmBufferIsAGranularityMultipleThatHoldsWhatIsCopiedIn) {
  const auto granularity = vmm_granularity();
  ASSERT_TRUE(granularity) << granularity.error().message;
  auto buffer = VmmBuffer::allocate(*granularity + 1);
  ASSERT_TRUE(buffer) << buffer.error().message;
  EXPECT_EQ(buffer->size(), 2 * *granularity);
  const std::vector<std::byte> mine = random_bytes(buffer->size(), 5);
  ASSERT_TRUE(copy_to_device(buffer->address(), mine.data(), mine.size()));
  std::vector<std::byte> got(mine.size());
  ASSERT_TRUE(copy_to_host(got.data(), buffer->address(), got.size()));
  EXPECT_TRUE(got == mine);
}

TEST_F(VmmIpcTest, ExportingGivesACloseOnExecFdAndTheAllocationSize) {
  auto buffer = VmmBuffer::allocate(1);
  ASSERT_TRUE(buffer) << buffer.error().message;
  const auto exported = export_vmm_buffer(buffer->address(), buffer->size());
  ASSERT_TRUE(exported) << exported.error().message;
  ASSERT_TRUE(exported->fd.valid());
  EXPECT_NE(::fcntl(exported->fd.get(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_EQ(exported->bytes, buffer->size());
}

TEST_F(VmmIpcTest, APeerProcessReadsAndWritesABufferExportedAsAnFd) {
  auto buffer = VmmBuffer::allocate(3 << 20);
  ASSERT_TRUE(buffer) << buffer.error().message;
  const std::size_t bytes = buffer->size();
  const std::vector<std::byte> mine = random_bytes(bytes, 91);
  ASSERT_TRUE(copy_to_device(buffer->address(), mine.data(), bytes));
  const auto exported = export_vmm_buffer(buffer->address(), bytes);
  ASSERT_TRUE(exported) << exported.error().message;

  const auto peer = spawn_peer();
  ASSERT_TRUE(peer) << peer.error().message;
  const VmmOffer offer{static_cast<std::uint64_t>(::getpid()), 1, bytes, 91};
  const auto sent = send_offer(peer->socket.get(), offer, exported->fd.get());
  const int peer_status = wait_for(*peer);  // reap it even if sending failed
  ASSERT_TRUE(sent) << sent.error().message;
  ASSERT_EQ(peer_status, 0);
  std::vector<std::byte> got(bytes);
  ASSERT_TRUE(copy_to_host(got.data(), buffer->address(), bytes));
  EXPECT_TRUE(got == random_bytes(bytes, 92));
}

TEST_F(VmmIpcTest, OpeningAClosedFdFailsWithAReasonAndLeavesCudaUsable) {
  int ends[2] = {-1, -1};
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  ::close(ends[0]);
  ::close(ends[1]);
  VmmBufferCache cache(make_cuda_vmm_opener());
  const auto opened = cache.open(VmmBufferKey{1, 1}, ends[0], 2 << 20);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().code, Errc::kUnavailable);
  EXPECT_NE(opened.error().message.find("is not open"), std::string::npos);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(device_synchronize());
  EXPECT_TRUE(VmmBuffer::allocate(1));
}

TEST_F(VmmIpcTest, OpeningAnFdThatIsNoCudaExportFailsNamingTheDriverCall) {
  const UniqueFd not_cuda(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(not_cuda.valid());
  VmmBufferCache cache(make_cuda_vmm_opener());
  const auto opened = cache.open(VmmBufferKey{1, 1}, not_cuda.get(), 2 << 20);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().code, Errc::kUnavailable);
  EXPECT_NE(opened.error().message.find("cuMemImportFromShareableHandle"), std::string::npos)
      << opened.error().message;
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(device_synchronize());
  EXPECT_TRUE(VmmBuffer::allocate(1));
}

// --- Everywhere: argument checks and the answer without a device
// --------------------------------

TEST(VmmIpc, ExportingANullAddressOrZeroBytesIsRejected) {
  EXPECT_EQ(export_vmm_buffer(0, 2 << 20).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(export_vmm_buffer(0x1000, 0).error().code, Errc::kInvalidArgument);
}

TEST(VmmIpc, AllocatingZeroBytesGivesAnEmptyBuffer) {
  const auto buffer = VmmBuffer::allocate(0);
  ASSERT_TRUE(buffer);
  EXPECT_EQ(buffer->address(), 0u);
  EXPECT_EQ(buffer->size(), 0u);
}

TEST(VmmIpc, WithoutADeviceEveryCallSaysNoCudaDevice) {
  if (device_count()) GTEST_SKIP() << "a CUDA device is present";
  const auto buffer = VmmBuffer::allocate(1);
  ASSERT_FALSE(buffer);
  EXPECT_EQ(buffer.error().code, Errc::kUnavailable);
  EXPECT_TRUE(starts_with(buffer.error().message, "no CUDA device: ")) << buffer.error().message;
  const auto exported = export_vmm_buffer(0x1000, 2 << 20);
  ASSERT_FALSE(exported);
  EXPECT_TRUE(starts_with(exported.error().message, "no CUDA device: "));
  const UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  const auto opened = make_cuda_vmm_opener()->open(fd.get(), 2 << 20);
  ASSERT_FALSE(opened);
  EXPECT_TRUE(starts_with(opened.error().message, "no CUDA device: "));
}

}  // namespace
}  // namespace kvtier::kernels::cuda::testing
