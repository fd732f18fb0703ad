// CUDA IPC: a device buffer exported here is opened, read and written by a second process
// (kvtier_ipc_peer; CUDA forbids opening one's own handles), and a bad handle fails cleanly.
#include "kvtier/kernels/cuda/ipc.hpp"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "ipc_hex.hpp"

extern char** environ;

namespace kvtier::kernels::cuda::testing {
namespace {

class IpcTest : public ::testing::Test {
 protected:
  void SetUp() override { KVTIER_SKIP_WITHOUT_CUDA_DEVICE(); }
};

// The peer executable: $KVTIER_IPC_PEER when set (binaries moved to another machine), else the
// build tree's.
std::string peer_path() {
  const char* from_env = std::getenv("KVTIER_IPC_PEER");
  return from_env != nullptr && *from_env != '\0' ? from_env : KVTIER_IPC_PEER_PATH;
}

// Runs the peer and returns its exit status (-1 if it did not exit normally).
int run_peer(const IpcHandle& handle, std::size_t bytes, std::uint64_t seed) {
  std::string path = peer_path(), hex = to_hex(handle), size = std::to_string(bytes),
              seed_text = std::to_string(seed);
  char* argv[] = {path.data(), hex.data(), size.data(), seed_text.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, path.c_str(), nullptr, nullptr, argv, environ) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST_F(IpcTest, APeerProcessReadsAndWritesAnExportedBuffer) {
  constexpr std::size_t kBytes = 3 << 20;
  auto buffer = DeviceBuffer::allocate(kBytes);
  ASSERT_TRUE(buffer);
  const std::vector<std::byte> mine = random_bytes(kBytes, 77);
  ASSERT_TRUE(buffer->upload(mine.data(), kBytes));
  const auto handle = export_device_buffer(buffer->address());
  ASSERT_TRUE(handle) << handle.error().message;
  ASSERT_EQ(run_peer(*handle, kBytes, 77), 0);
  std::vector<std::byte> got(kBytes);
  ASSERT_TRUE(buffer->download(got.data(), kBytes));
  EXPECT_TRUE(got == random_bytes(kBytes, 78));
}

TEST_F(IpcTest, OpeningABadHandleFailsWithAReasonAndLeavesCudaUsable) {
  IpcBufferCache cache(make_cuda_ipc_opener());
  IpcHandle garbage{};
  garbage.fill(std::byte{0x42});
  const auto opened = cache.open(garbage);
  ASSERT_FALSE(opened);
  EXPECT_EQ(
      opened.error().code == Errc::kUnavailable || opened.error().code == Errc::kInvalidArgument,
      true);
  EXPECT_NE(opened.error().message.find("cudaIpcOpenMemHandle"), std::string::npos);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(device_synchronize());
  EXPECT_TRUE(DeviceBuffer::allocate(4096));
}

TEST_F(IpcTest, ExportingANullAddressIsRejected) {
  EXPECT_EQ(export_device_buffer(0).error().code, Errc::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::kernels::cuda::testing
