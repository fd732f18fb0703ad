// kvtier_ipc_peer HANDLE_HEX BYTES SEED: the second process of the CUDA IPC test. Opens the
// exported buffer through an IpcBufferCache (twice: the second open must hit the cache), checks
// it holds random_bytes(BYTES, SEED), then overwrites it with random_bytes(BYTES, SEED + 1) for
// the exporter to check. Exit 0 on success, 77 without a device, 1 otherwise (reason on stderr).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ipc_hex.hpp"
#include "kvtier/kernels/cuda/device.hpp"
#include "kvtier/kernels/cuda/ipc.hpp"
#include "random_bytes.hpp"

namespace {

int fail(const std::string& why) {
  std::fprintf(stderr, "kvtier_ipc_peer: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvtier::kernels::cuda;
  namespace support = kvtier::kernels::cuda::testing;
  if (argc != 4) return fail("usage: kvtier_ipc_peer HANDLE_HEX BYTES SEED");
  if (auto n = device_count(); !n) {
    std::fprintf(stderr, "kvtier_ipc_peer: %s\n", n.error().message.c_str());
    return 77;
  }
  const auto handle = support::from_hex(argv[1]);
  if (!handle) return fail("bad handle text");
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 10);
  const std::uint64_t seed = std::strtoull(argv[3], nullptr, 10);

  IpcBufferCache cache(make_cuda_ipc_opener());
  const auto address = cache.open(*handle);
  if (!address) return fail(address.error().message);
  const auto again = cache.open(*handle);
  if (!again || *again != *address || cache.open_calls() != 1) return fail("second open missed");

  std::vector<std::byte> got(bytes);
  if (auto s = copy_to_host(got.data(), *address, bytes); !s) return fail(s.error().message);
  if (got != support::random_bytes(bytes, seed)) return fail("peer buffer content differs");
  const std::vector<std::byte> reply = support::random_bytes(bytes, seed + 1);
  if (auto s = copy_to_device(*address, reply.data(), bytes); !s) return fail(s.error().message);
  if (auto s = device_synchronize(); !s) return fail(s.error().message);
  return 0;  // the cache closes the mapping
}
