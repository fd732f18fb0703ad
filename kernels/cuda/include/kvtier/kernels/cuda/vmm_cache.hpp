// VmmBufferCache: peer GPU buffers exported as cuMem POSIX fds (ipc.hpp: export_vmm_buffer) mapped
// once and reused; the sibling of IpcBufferCache (ipc_cache.hpp) with the same contract. Mapping a
// peer allocation (import, reserve, map, set access) is slow and each import pins the exporter's
// memory until it is unmapped, so every caller goes through a cache: the first open() maps, later
// ones return the same address, and the cache unmaps what it mapped when destroyed.
//
// Unlike legacy IPC handles, fds are no identity: each SCM_RIGHTS receive yields a new number, and
// each export a new file. Buffers are therefore keyed by VmmBufferKey, which the exporter names
// (its pid and its own id for the buffer, e.g. a registration id) and sends with the fd.
//
// The cache logic is CUDA-free; the VmmOpener does the CUDA calls (ipc.hpp: make_cuda_vmm_opener)
// and tests substitute a fake. A failed open is returned to the caller and not remembered, so a
// later call retries.
//
// Thread-safety: none; one thread (the client's executor thread) uses a cache.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "kvtier/base/error.hpp"

namespace kvtier::kernels::cuda {

// One exported buffer, as its exporter names it.
struct VmmBufferKey {
  std::uint64_t exporter = 0;  // the exporting process (its pid)
  std::uint64_t buffer = 0;    // the exporter's id for the buffer
  auto operator<=>(const VmmBufferKey&) const = default;
};

// Maps and unmaps peer allocations.
class VmmOpener {
 public:
  virtual ~VmmOpener() = default;
  // Maps the first `bytes` of the allocation behind `fd` and returns the local device address of
  // its start. `fd` is borrowed: the caller still owns (and closes) it; the mapping stays valid
  // after it is closed.
  virtual Result<std::uintptr_t> open(int fd, std::size_t bytes) = 0;
  // Unmaps what open returned. Precondition: no queued work still uses the mapping.
  virtual void close(std::uintptr_t address, std::size_t bytes) noexcept = 0;

 protected:
  VmmOpener() = default;
  VmmOpener(const VmmOpener&) = default;
  VmmOpener& operator=(const VmmOpener&) = default;
};

class VmmBufferCache {
 public:
  // Precondition: opener is not null.
  explicit VmmBufferCache(std::unique_ptr<VmmOpener> opener);
  ~VmmBufferCache();  // unmaps every buffer still open
  VmmBufferCache(const VmmBufferCache&) = delete;
  VmmBufferCache& operator=(const VmmBufferCache&) = delete;

  // The local address of the peer buffer `key`: on first use, the `bytes` behind `fd` (borrowed,
  // see VmmOpener::open) are mapped; afterwards the cached address is returned and `fd` is not
  // touched (it may be -1). Errors: kInvalidArgument when bytes is 0, when the key is open with a
  // different size, or when it is not open and fd < 0 (the opener is not called); otherwise the
  // opener's error (kUnavailable "<driver call>: <CUDA's reason>" from the CUDA opener), with
  // nothing cached.
  Result<std::uintptr_t> open(const VmmBufferKey& key, int fd, std::size_t bytes);

  // Unmaps one buffer (its exporter went away). kNotFound when it is not open.
  Status close(const VmmBufferKey& key);
  // Unmaps every buffer.
  void clear() noexcept;

  std::size_t size() const noexcept { return open_.size(); }
  bool contains(const VmmBufferKey& key) const { return open_.count(key) != 0; }
  // Calls made to the opener so far, successful or not.
  std::uint64_t open_calls() const noexcept { return open_calls_; }

 private:
  struct Mapped {
    std::uintptr_t address = 0;
    std::size_t bytes = 0;
  };

  std::unique_ptr<VmmOpener> opener_;
  std::map<VmmBufferKey, Mapped> open_;
  std::uint64_t open_calls_ = 0;
};

}  // namespace kvtier::kernels::cuda
