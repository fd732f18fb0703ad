// kvtier_vmm_peer SOCKET_FD: the second process of the cuMem POSIX-fd IPC test. Receives one
// VmmOffer and its fd over the inherited Unix socket, maps the buffer through a VmmBufferCache
// (three times: with the fd, with the same fd again and with none; the later two must hit the
// cache), checks it holds random_bytes(bytes, seed), then overwrites it with random_bytes(bytes,
// seed + 1) for the exporter to check. Exit 0 on success, 77 without a device, 1 otherwise (reason
// on stderr).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fd_passing.hpp"
#include "kvtier/kernels/cuda/device.hpp"
#include "kvtier/kernels/cuda/ipc.hpp"
#include "random_bytes.hpp"

namespace {

int fail(const std::string& why) {
  std::fprintf(stderr, "kvtier_vmm_peer: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvtier::kernels::cuda;
  namespace support = kvtier::kernels::cuda::testing;
  if (argc != 2) return fail("usage: kvtier_vmm_peer SOCKET_FD");
  const kvtier::UniqueFd socket(std::atoi(argv[1]));
  if (auto n = device_count(); !n) {
    std::fprintf(stderr, "kvtier_vmm_peer: %s\n", n.error().message.c_str());
    return 77;
  }
  support::VmmOffer offer;
  const auto fd = support::receive_offer(socket.get(), offer);
  if (!fd) return fail(fd.error().message);
  const VmmBufferKey key{offer.exporter, offer.buffer};
  const std::size_t bytes = offer.bytes;

  VmmBufferCache cache(make_cuda_vmm_opener());
  const auto address = cache.open(key, fd->get(), bytes);
  if (!address) return fail(address.error().message);
  const auto again = cache.open(key, fd->get(), bytes);
  const auto without_fd = cache.open(key, -1, bytes);
  if (!again || *again != *address || !without_fd || *without_fd != *address ||
      cache.open_calls() != 1) {
    return fail("later opens missed the cache");
  }

  std::vector<std::byte> got(bytes);
  if (auto s = copy_to_host(got.data(), *address, bytes); !s) return fail(s.error().message);
  if (got != support::random_bytes(bytes, offer.seed)) return fail("peer buffer content differs");
  const std::vector<std::byte> reply = support::random_bytes(bytes, offer.seed + 1);
  if (auto s = copy_to_device(*address, reply.data(), bytes); !s) return fail(s.error().message);
  if (auto s = device_synchronize(); !s) return fail(s.error().message);
  return 0;  // the cache unmaps the buffer; the exporter's memory lives on
}
