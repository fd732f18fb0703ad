// device.hpp in a build without CUDA (KVTIER_CUDA=OFF or no nvcc at configure time): every call
// reports kUnavailable "no CUDA device: ...", as device.cpp does on a machine without a device,
// and no owner ever holds a resource. Built instead of device.cpp (kernels/cuda/CMakeLists.txt,
// target kvtier_kernels_cuda_device) so code outside kernels/ can ask for device memory and read
// why there is none without knowing whether CUDA was built.
#include <utility>

#include "kvtier/kernels/cuda/device.hpp"

namespace kvtier::kernels::cuda {
namespace {

Error unavailable() {
  return Error{Errc::kUnavailable,
               "no CUDA device: this kvtier was built without CUDA (KVTIER_CUDA=OFF or no nvcc at "
               "configure time); rebuild with -DKVTIER_CUDA=ON"};
}

}  // namespace

Result<int> device_count() { return tl::unexpected(unavailable()); }
Result<std::string> device_description() { return tl::unexpected(unavailable()); }
Status device_synchronize() { return tl::unexpected(unavailable()); }
Status copy_to_device(std::uintptr_t, const void*, std::size_t) { return tl::unexpected(unavailable()); }
Status copy_to_host(void*, std::uintptr_t, std::size_t) { return tl::unexpected(unavailable()); }
Result<bool> host_memory_registered(const void*) { return tl::unexpected(unavailable()); }

Result<DeviceBuffer> DeviceBuffer::allocate(std::size_t) { return tl::unexpected(unavailable()); }
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : address_(std::exchange(other.address_, 0)), size_(std::exchange(other.size_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  address_ = std::exchange(other.address_, 0);
  size_ = std::exchange(other.size_, 0);
  return *this;
}
Status DeviceBuffer::upload(const void*, std::size_t, std::size_t) { return tl::unexpected(unavailable()); }
Status DeviceBuffer::download(void*, std::size_t, std::size_t) const { return tl::unexpected(unavailable()); }
Status DeviceBuffer::fill(std::uint8_t) { return tl::unexpected(unavailable()); }

Result<PinnedBuffer> PinnedBuffer::allocate(std::size_t) { return tl::unexpected(unavailable()); }
PinnedBuffer::~PinnedBuffer() = default;
PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  return *this;
}
Result<std::uintptr_t> PinnedBuffer::device_address() const { return tl::unexpected(unavailable()); }

Result<Stream> Stream::create() { return tl::unexpected(unavailable()); }
Stream::~Stream() = default;
Stream::Stream(Stream&& other) noexcept : handle_(std::exchange(other.handle_, 0)) {}
Stream& Stream::operator=(Stream&& other) noexcept {
  handle_ = std::exchange(other.handle_, 0);
  return *this;
}
Status Stream::synchronize() const { return tl::unexpected(unavailable()); }

Result<Event> Event::create() { return tl::unexpected(unavailable()); }
Event::~Event() = default;
Event::Event(Event&& other) noexcept : handle_(std::exchange(other.handle_, 0)) {}
Event& Event::operator=(Event&& other) noexcept {
  handle_ = std::exchange(other.handle_, 0);
  return *this;
}
Status Event::record(std::uintptr_t) { return tl::unexpected(unavailable()); }
Status Event::synchronize() const { return tl::unexpected(unavailable()); }

Result<IpcHandle> export_ipc_handle(std::uintptr_t) { return tl::unexpected(unavailable()); }

struct ExportableVmmBuffer::Impl {};
Result<ExportableVmmBuffer> ExportableVmmBuffer::allocate(std::size_t) { return tl::unexpected(unavailable()); }
ExportableVmmBuffer::ExportableVmmBuffer() = default;
ExportableVmmBuffer::~ExportableVmmBuffer() = default;
ExportableVmmBuffer::ExportableVmmBuffer(ExportableVmmBuffer&& other) noexcept = default;
ExportableVmmBuffer& ExportableVmmBuffer::operator=(ExportableVmmBuffer&& other) noexcept = default;
std::uintptr_t ExportableVmmBuffer::address() const noexcept { return 0; }
std::size_t ExportableVmmBuffer::size() const noexcept { return 0; }
int ExportableVmmBuffer::fd() const noexcept { return -1; }

struct PeerBuffers::Impl {};
PeerBuffers::PeerBuffers() = default;
PeerBuffers::~PeerBuffers() = default;
PeerBuffers::PeerBuffers(PeerBuffers&& other) noexcept = default;
PeerBuffers& PeerBuffers::operator=(PeerBuffers&& other) noexcept = default;
Result<std::uintptr_t> PeerBuffers::open_ipc(const IpcHandle&) { return tl::unexpected(unavailable()); }
Result<std::uintptr_t> PeerBuffers::open_vmm(const VmmBufferKey&, int, std::size_t) {
  return tl::unexpected(unavailable());
}
void PeerBuffers::release_ipc(const IpcHandle&) noexcept {}
void PeerBuffers::release_vmm(const VmmBufferKey&) noexcept {}

}  // namespace kvtier::kernels::cuda
