// VmmBufferCache: map once, reuse, unmap what was mapped.
#include "kvtier/kernels/cuda/vmm_cache.hpp"

#include <string>
#include <utility>

#include "kvtier/base/check.hpp"

namespace kvtier::kernels::cuda {

VmmBufferCache::VmmBufferCache(std::unique_ptr<VmmOpener> opener) : opener_(std::move(opener)) {
  KVTIER_CHECK(opener_ != nullptr, "VmmBufferCache needs an opener");
}

VmmBufferCache::~VmmBufferCache() { clear(); }

Result<std::uintptr_t> VmmBufferCache::open(const VmmBufferKey& key, int fd, std::size_t bytes) {
  if (bytes == 0) return make_error(Errc::kInvalidArgument, "vmm buffer cache: zero-byte buffer");
  if (auto found = open_.find(key); found != open_.end()) {
    // A different size under the same key is a confused or lying peer: mapping again would leave
    // two mappings for one key, and serving the old one would hand out too few bytes.
    if (found->second.bytes != bytes) {
      return make_error(Errc::kInvalidArgument,
                        "vmm buffer cache: buffer " + std::to_string(key.buffer) + " of process " +
                            std::to_string(key.exporter) + " is open with " +
                            std::to_string(found->second.bytes) + " bytes, not " +
                            std::to_string(bytes));
    }
    return found->second.address;
  }
  if (fd < 0) {
    return make_error(Errc::kInvalidArgument,
                      "vmm buffer cache: buffer " + std::to_string(key.buffer) + " of process " +
                          std::to_string(key.exporter) + " is not open and no fd was given");
  }
  ++open_calls_;
  auto opened = opener_->open(fd, bytes);
  if (!opened) return tl::unexpected(std::move(opened.error()));
  open_.emplace(key, Mapped{*opened, bytes});
  return *opened;
}

Status VmmBufferCache::close(const VmmBufferKey& key) {
  const auto found = open_.find(key);
  if (found == open_.end()) {
    return make_error(Errc::kNotFound, "vmm buffer cache: buffer is not open");
  }
  opener_->close(found->second.address, found->second.bytes);
  open_.erase(found);
  return {};
}

void VmmBufferCache::clear() noexcept {
  for (const auto& [key, mapped] : open_) opener_->close(mapped.address, mapped.bytes);
  open_.clear();
}

}  // namespace kvtier::kernels::cuda
