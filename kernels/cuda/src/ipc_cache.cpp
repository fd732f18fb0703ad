// IpcBufferCache: open once, reuse, close what was opened.
#include "kvtier/kernels/cuda/ipc_cache.hpp"

#include <utility>

#include "kvtier/base/check.hpp"

namespace kvtier::kernels::cuda {

IpcBufferCache::IpcBufferCache(std::unique_ptr<IpcOpener> opener) : opener_(std::move(opener)) {
  KVTIER_CHECK(opener_ != nullptr, "IpcBufferCache needs an opener");
}

IpcBufferCache::~IpcBufferCache() { clear(); }

Result<std::uintptr_t> IpcBufferCache::open(const IpcHandle& handle) {
  if (auto found = open_.find(handle); found != open_.end()) return found->second;
  ++open_calls_;
  auto opened = opener_->open(handle);
  if (!opened) return tl::unexpected(std::move(opened.error()));
  open_.emplace(handle, *opened);
  return *opened;
}

Status IpcBufferCache::close(const IpcHandle& handle) {
  const auto found = open_.find(handle);
  if (found == open_.end()) {
    return make_error(Errc::kNotFound, "ipc buffer cache: handle is not open");
  }
  opener_->close(found->second);
  open_.erase(found);
  return {};
}

void IpcBufferCache::clear() noexcept {
  for (const auto& [handle, address] : open_) opener_->close(address);
  open_.clear();
}

}  // namespace kvtier::kernels::cuda
