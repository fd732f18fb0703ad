// Daemon-side segments through Boost.Interprocess (create_only + truncate + mapped_region), their
// memory reserved with posix_fallocate.
// Only the object/mapping API is used: no managed segment, allocator or named objects, and no
// lock in shared memory (see research: Interprocess mutexes are not robust in Boost 1.74).
#include "kvtier/shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstring>
#include <new>
#include <optional>
#include <utility>

#include "kvtier/shm/mapping.hpp"

namespace bip = boost::interprocess;

namespace kvtier::shm {

struct Segment::Impl {
  std::string name;
  bip::shared_memory_object object;
  bip::mapped_region region;
  // from_fd: the fd and a plain mapping instead of Boost's objects.
  UniqueFd fd;
  std::byte* fd_base = nullptr;
  std::size_t fd_size = 0;
  bool owns_name = true;
  // Private copies of the header, taken when the header was written or validated.
  SegmentKind kind = SegmentKind::kControl;
  std::uint64_t epoch = 0;
  std::uint32_t client_id = 0;
  SegmentOwner owner;

  ~Impl() {
    // Unmap and close first (members destroyed after this body); unlinking only drops the name.
    if (owns_name) bip::shared_memory_object::remove(name.c_str());
    if (fd_base != nullptr) ::munmap(fd_base, fd_size);
  }
};

namespace {

constexpr std::size_t kMaxPrefixLength = 64;

Status check_name(const std::string& name) {
  // One leading slash, no other: POSIX shm names live flat in /dev/shm.
  if (name.size() < 2 || name.size() > 255 || name[0] != '/' ||
      name.find('/', 1) != std::string::npos) {
    return make_error(Errc::kInvalidArgument,
                      "invalid shared memory name '" + name + "': need '/' then 1..254 "
                      "characters without '/'");
  }
  return {};
}

std::size_t page_size() noexcept { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

tl::unexpected<Error> interprocess_error(const std::string& what, const std::exception& error) {
  std::string message = what + ": " + error.what();
  if (const auto* ipc = dynamic_cast<const bip::interprocess_exception*>(&error)) {
    const int code = ipc->get_native_error();
    if (code != 0) message += std::string(" (errno=") + std::to_string(code) + ")";
  }
  return make_error(Errc::kOsError, std::move(message));
}

constexpr const char* kShmDirectory = "/dev/shm";  // where Linux keeps POSIX shm objects

// Reserves the object's pages now, so that no writer of the mapping can take SIGBUS later when
// the shm filesystem (tmpfs) runs out; a reservation that cannot be had is refused here, naming
// what is free.
Status reserve(const bip::shared_memory_object& object, const std::string& name, std::size_t size) {
  int rc = 0;
  do {
    rc = ::posix_fallocate(object.get_mapping_handle().handle, 0, static_cast<off_t>(size));
  } while (rc == EINTR);
  if (rc == 0) return {};
  std::string message = "cannot reserve " + std::to_string(size) + " bytes for shared memory object " + name +
                        ": " + std::strerror(rc);
  if (struct statvfs fs{}; ::statvfs(kShmDirectory, &fs) == 0) {
    message += std::string(" (") + kShmDirectory + " has " + std::to_string(std::uint64_t{fs.f_bavail} * fs.f_frsize) +
               " of " + std::to_string(std::uint64_t{fs.f_blocks} * fs.f_frsize) + " bytes free)";
  }
  return make_error(rc == ENOSPC || rc == ENOMEM ? Errc::kLimitExceeded : Errc::kOsError, std::move(message));
}

}  // namespace

Result<std::string> segment_name(std::string_view prefix, std::uint32_t client_id,
                                 SegmentKind kind, std::uint32_t index) {
  const bool prefix_ok = !prefix.empty() && prefix.size() <= kMaxPrefixLength &&
                         prefix.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
                             std::string_view::npos;
  if (!prefix_ok) {
    return make_error(Errc::kInvalidArgument, "invalid segment prefix '" + std::string(prefix) +
                                                  "': need 1..64 characters of [A-Za-z0-9_-]");
  }
  std::string name = "/kvtier." + std::string(prefix) + "." + std::to_string(client_id) + ".";
  name += segment_kind_name(kind);
  if (kind != SegmentKind::kControl) {
    name += '.';  // two appends: GCC 12 -O3 reports a false -Wrestrict for "." + to_string()
    name += std::to_string(index);
  }
  return name;
}

Segment::Segment(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Segment::Segment(Segment&& other) noexcept = default;
Segment& Segment::operator=(Segment&& other) noexcept = default;
Segment::~Segment() = default;

Result<Segment> Segment::create(std::string name, SegmentKind kind, std::size_t payload_bytes,
                                std::uint64_t epoch, std::uint32_t client_id,
                                const PayloadInit& init, SegmentOwner owner) {
  if (auto ok = check_name(name); !ok) return tl::unexpected(std::move(ok.error()));
  const std::size_t page = page_size();
  constexpr std::size_t kMaxSegmentBytes = std::size_t{1} << 46;
  if (payload_bytes > kMaxSegmentBytes) {
    return make_error(Errc::kInvalidArgument, "segment payload of " +
                                                  std::to_string(payload_bytes) +
                                                  " bytes is larger than 64 TiB");
  }
  const std::size_t size = (sizeof(SegmentHeader) + payload_bytes + page - 1) / page * page;

  auto impl = std::make_unique<Impl>();
  impl->name = std::move(name);
  impl->owns_name = false;  // until we know we created it
  try {
    bip::permissions owner_only;
    owner_only.set_permissions(0600);  // Boost fchmod()s, so the umask does not widen or narrow it
    impl->object = bip::shared_memory_object(bip::create_only, impl->name.c_str(),
                                             bip::read_write, owner_only);
    impl->owns_name = true;
    impl->object.truncate(static_cast<bip::offset_t>(size));
    if (auto reserved = reserve(impl->object, impl->name, size); !reserved) return tl::unexpected(reserved.error());
    impl->region = bip::mapped_region(impl->object, bip::read_write);
  } catch (const std::exception& error) {
    return interprocess_error("create shared memory object " + impl->name, error);
  }
  impl->kind = kind;
  impl->epoch = epoch;
  impl->client_id = client_id;
  impl->owner = owner;

  auto* header = new (impl->region.get_address()) SegmentHeader{};
  header->magic = kSegmentMagic;
  header->layout_version = kLayoutVersion;
  header->kind = kind;
  header->header_size = sizeof(SegmentHeader);
  header->segment_size = size;
  header->layout_fingerprint = kLayoutFingerprint;
  header->daemon_epoch = epoch;
  header->client_id = client_id;
  header->owner_uid = owner.uid;
  header->owner_pid = owner.pid;
  Segment segment(std::move(impl));
  if (init) init(segment.payload());
  header->ready.store(1, std::memory_order_release);  // last: publishes everything above
  return segment;
}

Result<Segment> Segment::open_existing(std::string name) {
  if (auto ok = check_name(name); !ok) return tl::unexpected(std::move(ok.error()));
  auto impl = std::make_unique<Impl>();
  impl->name = std::move(name);
  impl->owns_name = false;  // not ours until it validates
  try {
    impl->object = bip::shared_memory_object(bip::open_only, impl->name.c_str(), bip::read_write);
    bip::offset_t size = 0;
    if (!impl->object.get_size(size) || size < static_cast<bip::offset_t>(sizeof(SegmentHeader))) {
      return make_error(Errc::kProtocol, "shared memory object " + impl->name + " is " +
                                             std::to_string(size) + " bytes, smaller than a "
                                             "segment header");
    }
    impl->region = bip::mapped_region(impl->object, bip::read_write);
  } catch (const std::exception& error) {
    return interprocess_error("open shared memory object " + impl->name, error);
  }
  const std::span<const std::byte> bytes(static_cast<const std::byte*>(impl->region.get_address()),
                                         impl->region.get_size());
  if (auto valid = validate_segment_header(bytes, std::nullopt, 0); !valid) {
    return tl::unexpected(Error{valid.error().code, impl->name + ": " + valid.error().message});
  }
  const auto& header = *reinterpret_cast<const SegmentHeader*>(bytes.data());
  impl->kind = header.kind;
  impl->epoch = header.daemon_epoch;
  impl->client_id = header.client_id;
  impl->owner = SegmentOwner{header.owner_uid, header.owner_pid};
  impl->owns_name = true;
  return Segment(std::move(impl));
}

Result<Segment> Segment::from_fd(UniqueFd fd, std::string name) {
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) return os_error("fstat of the fd of " + name);
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size < sizeof(SegmentHeader)) {
    return make_error(Errc::kProtocol, name + " (by fd) is " + std::to_string(size) + " bytes, smaller than a segment header");
  }
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return os_error("mmap of " + name);
  auto impl = std::make_unique<Impl>();
  impl->name = std::move(name);
  impl->owns_name = false;
  impl->fd = std::move(fd);
  impl->fd_base = static_cast<std::byte*>(base);
  impl->fd_size = size;
  if (auto valid = validate_segment_header({impl->fd_base, size}, std::nullopt, 0); !valid) {
    return tl::unexpected(Error{valid.error().code, impl->name + ": " + valid.error().message});
  }
  const auto& header = *reinterpret_cast<const SegmentHeader*>(impl->fd_base);
  impl->kind = header.kind;
  impl->epoch = header.daemon_epoch;
  impl->client_id = header.client_id;
  impl->owner = SegmentOwner{header.owner_uid, header.owner_pid};
  return Segment(std::move(impl));
}

int Segment::fd() const noexcept {
  return impl_->fd ? impl_->fd.get() : impl_->object.get_mapping_handle().handle;
}
std::byte* Segment::base() const noexcept {
  return impl_->fd_base != nullptr ? impl_->fd_base : static_cast<std::byte*>(impl_->region.get_address());
}
std::size_t Segment::size() const noexcept { return impl_->fd_base != nullptr ? impl_->fd_size : impl_->region.get_size(); }
const std::string& Segment::name() const noexcept { return impl_->name; }
SegmentKind Segment::kind() const noexcept { return impl_->kind; }
std::uint64_t Segment::epoch() const noexcept { return impl_->epoch; }
std::uint32_t Segment::client_id() const noexcept { return impl_->client_id; }
SegmentOwner Segment::owner() const noexcept { return impl_->owner; }
void Segment::release_name() noexcept { impl_->owns_name = false; }

}  // namespace kvtier::shm
