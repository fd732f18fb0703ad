// Device discovery and the RAII owners of device.hpp.
#include "kvtier/kernels/cuda/device.hpp"

#include <map>
#include <utility>

#include "cuda_check.hpp"
#include "kvtier/kernels/cuda/ipc.hpp"
#include "kvtier/kernels/cuda/vmm.hpp"

namespace kvtier::kernels::cuda {
namespace {

cudaStream_t as_stream(std::uintptr_t handle) { return reinterpret_cast<cudaStream_t>(handle); }
cudaEvent_t as_event(std::uintptr_t handle) { return reinterpret_cast<cudaEvent_t>(handle); }

}  // namespace

Result<int> device_count() {
  int count = 0;
  if (const cudaError_t status = cudaGetDeviceCount(&count); status != cudaSuccess) {
    (void)cudaGetLastError();
    return make_error(Errc::kUnavailable, std::string("no CUDA device: ") +
                                              cudaGetErrorName(status) + ": " +
                                              cudaGetErrorString(status));
  }
  if (count <= 0) {
    return make_error(Errc::kUnavailable, "no CUDA device: cudaGetDeviceCount found none");
  }
  return count;
}

Result<std::string> device_description() {
  int device = 0;
  KVTIER_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  KVTIER_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs)";
}

Status device_synchronize() {
  KVTIER_CUDA_CHECK(cudaDeviceSynchronize());
  return {};
}

Status copy_to_device(std::uintptr_t device_dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return {};
  KVTIER_CUDA_CHECK(cudaMemcpy(reinterpret_cast<void*>(device_dst), src, bytes, cudaMemcpyDefault));
  return {};
}

Status copy_to_host(void* dst, std::uintptr_t device_src, std::size_t bytes) {
  if (bytes == 0) return {};
  KVTIER_CUDA_CHECK(
      cudaMemcpy(dst, reinterpret_cast<const void*>(device_src), bytes, cudaMemcpyDefault));
  return {};
}

Result<bool> host_memory_registered(const void* address) {
  cudaPointerAttributes attributes{};
  KVTIER_CUDA_CHECK(cudaPointerGetAttributes(&attributes, address));
  return attributes.type == cudaMemoryTypeHost;
}

// --- DeviceBuffer ------------------------------------------------------------------------------

Result<DeviceBuffer> DeviceBuffer::allocate(std::size_t bytes) {
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;
  void* pointer = nullptr;
  KVTIER_CUDA_CHECK(cudaMalloc(&pointer, bytes));
  buffer.address_ = reinterpret_cast<std::uintptr_t>(pointer);
  buffer.size_ = bytes;
  return buffer;
}

DeviceBuffer::~DeviceBuffer() {
  if (address_ != 0) (void)cudaFree(reinterpret_cast<void*>(address_));
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : address_(std::exchange(other.address_, 0)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));
    address_ = std::exchange(other.address_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Status DeviceBuffer::upload(const void* src, std::size_t bytes, std::size_t offset) {
  if (offset > size_ || bytes > size_ - offset) {
    return make_error(Errc::kInvalidArgument, "device buffer upload: out of bounds");
  }
  if (bytes == 0) return {};
  KVTIER_CUDA_CHECK(
      cudaMemcpy(reinterpret_cast<void*>(address_ + offset), src, bytes, cudaMemcpyHostToDevice));
  return {};
}

Status DeviceBuffer::download(void* dst, std::size_t bytes, std::size_t offset) const {
  if (offset > size_ || bytes > size_ - offset) {
    return make_error(Errc::kInvalidArgument, "device buffer download: out of bounds");
  }
  if (bytes == 0) return {};
  KVTIER_CUDA_CHECK(cudaMemcpy(dst, reinterpret_cast<const void*>(address_ + offset), bytes,
                               cudaMemcpyDeviceToHost));
  return {};
}

Status DeviceBuffer::fill(std::uint8_t value) {
  if (size_ == 0) return {};
  KVTIER_CUDA_CHECK(cudaMemset(reinterpret_cast<void*>(address_), value, size_));
  return {};
}

// --- PinnedBuffer ------------------------------------------------------------------------------

Result<PinnedBuffer> PinnedBuffer::allocate(std::size_t bytes) {
  PinnedBuffer buffer;
  if (bytes == 0) return buffer;
  void* pointer = nullptr;
  KVTIER_CUDA_CHECK(cudaHostAlloc(&pointer, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  buffer.data_ = static_cast<std::byte*>(pointer);
  buffer.size_ = bytes;
  return buffer;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    PinnedBuffer old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Result<std::uintptr_t> PinnedBuffer::device_address() const {
  if (data_ == nullptr) return std::uintptr_t{0};
  void* device = nullptr;
  KVTIER_CUDA_CHECK(cudaHostGetDevicePointer(&device, data_, 0));
  return reinterpret_cast<std::uintptr_t>(device);
}

// --- Stream ------------------------------------------------------------------------------------

Result<Stream> Stream::create() {
  Stream stream;
  cudaStream_t handle = nullptr;
  KVTIER_CUDA_CHECK(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking));
  stream.handle_ = reinterpret_cast<std::uintptr_t>(handle);
  return stream;
}

Stream::~Stream() {
  if (handle_ != 0) (void)cudaStreamDestroy(as_stream(handle_));
}

Stream::Stream(Stream&& other) noexcept : handle_(std::exchange(other.handle_, 0)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    Stream old(std::move(*this));
    handle_ = std::exchange(other.handle_, 0);
  }
  return *this;
}

Status Stream::synchronize() const {
  KVTIER_CUDA_CHECK(cudaStreamSynchronize(as_stream(handle_)));
  return {};
}

// --- Event -------------------------------------------------------------------------------------

Result<Event> Event::create() {
  Event event;
  cudaEvent_t handle = nullptr;
  KVTIER_CUDA_CHECK(cudaEventCreateWithFlags(&handle, cudaEventDisableTiming));
  event.handle_ = reinterpret_cast<std::uintptr_t>(handle);
  return event;
}

Event::~Event() {
  if (handle_ != 0) (void)cudaEventDestroy(as_event(handle_));
}

Event::Event(Event&& other) noexcept : handle_(std::exchange(other.handle_, 0)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Event old(std::move(*this));
    handle_ = std::exchange(other.handle_, 0);
  }
  return *this;
}

Status Event::record(std::uintptr_t stream) {
  KVTIER_CUDA_CHECK(cudaEventRecord(as_event(handle_), as_stream(stream)));
  return {};
}

Status Event::synchronize() const {
  KVTIER_CUDA_CHECK(cudaEventSynchronize(as_event(handle_)));
  return {};
}

Result<IpcHandle> export_ipc_handle(std::uintptr_t device_address) { return export_device_buffer(device_address); }

struct ExportableVmmBuffer::Impl {
  VmmBuffer buffer;
  VmmExport exported;
};

Result<ExportableVmmBuffer> ExportableVmmBuffer::allocate(std::size_t bytes) {
  auto buffer = VmmBuffer::allocate(bytes);
  if (!buffer) return tl::unexpected(buffer.error());
  auto exported = export_vmm_buffer(buffer->address(), buffer->size());
  if (!exported) return tl::unexpected(exported.error());
  ExportableVmmBuffer out;
  out.impl_ = std::make_unique<Impl>(Impl{std::move(*buffer), std::move(*exported)});
  return out;
}

ExportableVmmBuffer::ExportableVmmBuffer() = default;
ExportableVmmBuffer::~ExportableVmmBuffer() = default;
ExportableVmmBuffer::ExportableVmmBuffer(ExportableVmmBuffer&& other) noexcept = default;
ExportableVmmBuffer& ExportableVmmBuffer::operator=(ExportableVmmBuffer&& other) noexcept = default;
std::uintptr_t ExportableVmmBuffer::address() const noexcept { return impl_ ? impl_->buffer.address() : 0; }
std::size_t ExportableVmmBuffer::size() const noexcept { return impl_ ? impl_->buffer.size() : 0; }
int ExportableVmmBuffer::fd() const noexcept { return impl_ ? impl_->exported.fd.get() : -1; }

// The caches map each buffer once; the counts say how many opens still use it.
struct PeerBuffers::Impl {
  IpcBufferCache ipc{make_cuda_ipc_opener()};
  VmmBufferCache vmm{make_cuda_vmm_opener()};
  std::map<IpcHandle, std::size_t> ipc_refs;
  std::map<VmmBufferKey, std::size_t> vmm_refs;
};

PeerBuffers::PeerBuffers() : impl_(std::make_unique<Impl>()) {}
PeerBuffers::~PeerBuffers() = default;
PeerBuffers::PeerBuffers(PeerBuffers&& other) noexcept = default;
PeerBuffers& PeerBuffers::operator=(PeerBuffers&& other) noexcept = default;

Result<std::uintptr_t> PeerBuffers::open_ipc(const IpcHandle& handle) {
  if (!impl_) impl_ = std::make_unique<Impl>();
  auto address = impl_->ipc.open(handle);
  if (address) ++impl_->ipc_refs[handle];
  return address;
}

Result<std::uintptr_t> PeerBuffers::open_vmm(const VmmBufferKey& key, int fd, std::size_t bytes) {
  if (!impl_) impl_ = std::make_unique<Impl>();
  auto address = impl_->vmm.open(key, fd, bytes);
  if (address) ++impl_->vmm_refs[key];
  return address;
}

void PeerBuffers::release_ipc(const IpcHandle& handle) noexcept {
  if (!impl_) return;
  auto it = impl_->ipc_refs.find(handle);
  if (it == impl_->ipc_refs.end() || --it->second != 0) return;
  impl_->ipc_refs.erase(it);
  (void)impl_->ipc.close(handle);
}

void PeerBuffers::release_vmm(const VmmBufferKey& key) noexcept {
  if (!impl_) return;
  auto it = impl_->vmm_refs.find(key);
  if (it == impl_->vmm_refs.end() || --it->second != 0) return;
  impl_->vmm_refs.erase(it);
  (void)impl_->vmm.close(key);
}

}  // namespace kvtier::kernels::cuda
