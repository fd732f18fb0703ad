// Sequence hand-off, the client's side: Client::export_sequence, Client::adopt_sequence,
// Client::execute_plan (which runs the hand-off plan from the exporter's buffer and then lets it
// go) and PeerBuffer (handoff.hpp). The flow is in kvtier.h and protocol/PROTOCOL.md.
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "client.hpp"
#include "handoff.hpp"
#include "kvtier/protocol/defaults.hpp"

namespace kvtier::client {
namespace {

// [base + offset, base + offset + extent) within [base, base + bytes)?
bool within(std::uint64_t offset, std::uint64_t extent, std::uint64_t bytes) {
  return offset <= bytes && extent <= bytes - offset;
}

bool is_fd_kind(std::uint32_t kind) { return kind == KVTIER_BUFFER_HOST_FD || kind == KVTIER_BUFFER_CUDA_VMM_FD; }

// ExportedCache copied out of a SequenceAdopted reply (validated after the reader is gone).
struct AdoptedReply {
  std::uint32_t sequence = 0, prompt_length = 0, positions = 0, exporter_pid = 0;
  std::uint32_t digest_dim = 0, policy = 0;  // 1.3; 0 and paper from a 1.2 daemon
  ShippingParams shipping;                    // 1.6; interval 0 (ship per step) before
  std::uint32_t kind = 0;
  std::uint64_t bytes = 0, buffer_id = 0;
  std::vector<std::byte> ipc_handle;
  std::vector<std::uint64_t> k_offsets, v_offsets;
  std::uint32_t num_slots = 0, block_size = 0;
  std::uint64_t token_stride = 0, head_stride = 0, block_stride = 0;
  UniqueFd fd;
};

Error bad_cache(const std::string& why) { return Error{Errc::kProtocol, "kvtierd sent an unusable exported cache: " + why}; }

}  // namespace

// ---- PeerBuffer ---------------------------------------------------------------------------

Result<PeerBuffer> PeerBuffer::map_host(int fd, std::uint64_t bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return os_error("fstat of the exporter's buffer");
  if (st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) < bytes) {
    return tl::unexpected(bad_cache("the buffer fd holds " + std::to_string(st.st_size) + " bytes, cache.bytes says " +
                                    std::to_string(bytes)));
  }
  void* address = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) return os_error("mmap of the exporter's buffer");
  PeerBuffer out;
  out.kind_ = Kind::kHost;
  out.base_ = reinterpret_cast<std::uintptr_t>(address);
  out.bytes_ = bytes;
  return out;
}

Result<PeerBuffer> PeerBuffer::open_ipc(kernels::cuda::PeerBuffers& buffers, const kernels::cuda::IpcHandle& handle) {
  auto address = buffers.open_ipc(handle);
  if (!address) return tl::unexpected(address.error());
  PeerBuffer out;
  out.kind_ = Kind::kIpc;
  out.base_ = *address;
  out.buffers_ = &buffers;
  out.handle_ = handle;
  return out;
}

Result<PeerBuffer> PeerBuffer::open_vmm(kernels::cuda::PeerBuffers& buffers, const kernels::cuda::VmmBufferKey& key,
                                        int fd, std::uint64_t bytes) {
  auto address = buffers.open_vmm(key, fd, bytes);
  if (!address) return tl::unexpected(address.error());
  PeerBuffer out;
  out.kind_ = Kind::kVmm;
  out.base_ = *address;
  out.bytes_ = bytes;
  out.buffers_ = &buffers;
  out.key_ = key;
  return out;
}

PeerBuffer::PeerBuffer(PeerBuffer&& other) noexcept { *this = std::move(other); }

PeerBuffer& PeerBuffer::operator=(PeerBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    kind_ = std::exchange(other.kind_, Kind::kNone);
    base_ = other.base_;
    bytes_ = other.bytes_;
    buffers_ = other.buffers_;
    handle_ = other.handle_;
    key_ = other.key_;
  }
  return *this;
}

PeerBuffer::~PeerBuffer() { reset(); }

void PeerBuffer::reset() noexcept {
  switch (kind_) {
    case Kind::kHost: ::munmap(reinterpret_cast<void*>(base_), bytes_); break;
    case Kind::kIpc: buffers_->release_ipc(handle_); break;
    case Kind::kVmm: buffers_->release_vmm(key_); break;
    case Kind::kNone: break;
  }
  kind_ = Kind::kNone;
}

// ---- export -------------------------------------------------------------------------------

Result<std::uint64_t> Client::export_sequence(std::uint32_t sequence, const kvtier_export_buffer& buffer,
                                              std::span<const std::uint32_t> t0_positions,
                                              std::span<const std::uint32_t> t0_slots) {
  if (auto ok = require_engine("export_sequence"); !ok) return tl::unexpected(ok.error());
  auto it = caches_.find(sequence);
  if (it == caches_.end()) {
    return make_error(Errc::kBadState, "export_sequence: sequence " + std::to_string(sequence) +
                                           " has no attached cache (kvtier_sequence_attach_cache first)");
  }
  const kernels::KvLayout& layout = it->second->layout();
  const bool device = it->second->backend() == kernels::Backend::kCuda;
  const auto invalid = [](const std::string& why) { return make_error(Errc::kInvalidArgument, why); };
  if (buffer.kind > KVTIER_BUFFER_CUDA_VMM_FD) return invalid("buffer.kind: unknown kind " + std::to_string(buffer.kind));
  if (device == (buffer.kind == KVTIER_BUFFER_HOST_FD)) {
    return invalid(std::string("buffer.kind: a ") + (device ? "host" : "device") + " buffer for a cache attached with the " +
                   (device ? "CUDA" : "CPU") + " backend");
  }
  if (buffer.bytes == 0) return invalid("buffer.bytes is 0");
  if (is_fd_kind(buffer.kind) && buffer.fd < 0) return invalid("buffer.fd: this kind needs the buffer's fd");
  const std::uint64_t extent = kernels::layer_extent_bytes(layout);  // exact: the layout was validated at attach
  std::vector<std::uint64_t> k_offsets, v_offsets;
  for (std::uint32_t l = 0; l < layout.num_layers; ++l) {
    for (const bool is_k : {true, false}) {
      const std::uintptr_t at = is_k ? layout.k_base[l] : layout.v_base[l];
      if (at < buffer.base || !within(at - buffer.base, extent, buffer.bytes)) {
        return invalid("buffer: layer " + std::to_string(l) + (is_k ? " K" : " V") + " of the attached cache (" +
                       std::to_string(extent) + " bytes) lies outside [base, base + bytes)");
      }
      (is_k ? k_offsets : v_offsets).push_back(at - buffer.base);
    }
  }
  if (t0_positions.size() != t0_slots.size()) return invalid("t0_slots: not one slot per position");
  std::vector<bool> used(layout.num_slots, false);
  for (std::size_t i = 0; i < t0_slots.size(); ++i) {
    if (i > 0 && t0_positions[i] <= t0_positions[i - 1]) {
      return invalid("t0_positions: not strictly ascending at index " + std::to_string(i));
    }
    if (t0_slots[i] >= layout.num_slots) {
      return invalid("t0_slots[" + std::to_string(i) + "] = " + std::to_string(t0_slots[i]) + " is beyond num_slots " +
                     std::to_string(layout.num_slots));
    }
    if (used[t0_slots[i]]) return invalid("t0_slots: slot " + std::to_string(t0_slots[i]) + " named twice");
    used[t0_slots[i]] = true;
  }
  kernels::cuda::IpcHandle handle{};
  if (buffer.kind == KVTIER_BUFFER_CUDA_IPC) {
    auto exported = kernels::cuda::export_ipc_handle(buffer.base);
    if (!exported) return tl::unexpected(exported.error());
    handle = *exported;
  }

  capnp::MallocMessageBuilder message;
  auto request_message = message.initRoot<wire::ClientMessage>().initExportSequence();
  request_message.setSequenceId(sequence);
  auto cache = request_message.initCache();
  cache.setKind(static_cast<wire::BufferKind>(buffer.kind));
  cache.setBytes(buffer.bytes);
  cache.setBufferId(buffer.buffer_id);
  if (buffer.kind == KVTIER_BUFFER_CUDA_IPC) {
    cache.setIpcHandle(kj::arrayPtr(reinterpret_cast<const kj::byte*>(handle.data()), handle.size()));
  }
  auto k = cache.initKOffsets(layout.num_layers);
  auto v = cache.initVOffsets(layout.num_layers);
  for (std::uint32_t l = 0; l < layout.num_layers; ++l) {
    k.set(l, k_offsets[l]);
    v.set(l, v_offsets[l]);
  }
  cache.setNumSlots(layout.num_slots);
  cache.setBlockSize(layout.block_size);
  cache.setTokenStride(layout.token_stride);
  cache.setHeadStride(layout.head_stride);
  cache.setBlockStride(layout.block_stride);
  auto positions = request_message.initT0Positions(static_cast<unsigned>(t0_positions.size()));
  auto slots = request_message.initT0Slots(static_cast<unsigned>(t0_slots.size()));
  for (std::size_t i = 0; i < t0_slots.size(); ++i) {
    positions.set(static_cast<unsigned>(i), t0_positions[i]);
    slots.set(static_cast<unsigned>(i), t0_slots[i]);
  }
  const int fd = buffer.fd;
  auto reply = request(message, is_fd_kind(buffer.kind) ? std::span<const int>(&fd, 1) : std::span<const int>());
  if (!reply) return tl::unexpected(reply.error());
  return protocol::capture_protocol_errors([&]() -> Result<std::uint64_t> {
    auto root = reply->root<wire::DaemonMessage>();
    if (root.which() != wire::DaemonMessage::SEQUENCE_EXPORTED) return make_error(Errc::kProtocol, "expected SequenceExported");
    auto exported = root.getSequenceExported();
    if (exported.getSequenceId() != sequence) {
      return make_error(Errc::kProtocol, "SequenceExported names sequence " + std::to_string(exported.getSequenceId()));
    }
    records_.erase(sequence);  // frozen here, adopted elsewhere: not reattached (PROTOCOL.md §4)
    return exported.getHandoffToken();
  });
}

// ---- adopt --------------------------------------------------------------------------------

Result<kvtier_adopted> Client::adopt_sequence(std::uint64_t token) {
  if (auto ok = require_engine("adopt_sequence"); !ok) return tl::unexpected(ok.error());
  if (!geometry_) return make_error(Errc::kBadState, "adopt_sequence before register_model");
  capnp::MallocMessageBuilder message;
  message.initRoot<wire::ClientMessage>().initAdoptSequence().setHandoffToken(token);
  auto reply = request(message);
  if (!reply) return tl::unexpected(reply.error());
  AdoptedReply r;
  auto read = protocol::capture_protocol_errors([&]() -> Status {
    auto root = reply->root<wire::DaemonMessage>();
    if (root.which() != wire::DaemonMessage::SEQUENCE_ADOPTED) return make_error(Errc::kProtocol, "expected SequenceAdopted");
    auto adopted = root.getSequenceAdopted();
    auto cache = adopted.getCache();
    r.sequence = adopted.getSequenceId();
    r.prompt_length = adopted.getPromptLength();
    r.positions = adopted.getPositions();
    r.exporter_pid = adopted.getExporterPid();
    r.digest_dim = adopted.getKeyDigestDim();
    r.policy = static_cast<std::uint32_t>(adopted.getPolicy());
    r.shipping = shipping_from_wire(adopted.getShipping());
    r.kind = static_cast<std::uint32_t>(cache.getKind());
    r.bytes = cache.getBytes();
    r.buffer_id = cache.getBufferId();
    for (auto b : cache.getIpcHandle()) r.ipc_handle.push_back(static_cast<std::byte>(b));
    for (auto o : cache.getKOffsets()) r.k_offsets.push_back(o);
    for (auto o : cache.getVOffsets()) r.v_offsets.push_back(o);
    r.num_slots = cache.getNumSlots();
    r.block_size = cache.getBlockSize();
    r.token_stride = cache.getTokenStride();
    r.head_stride = cache.getHeadStride();
    r.block_stride = cache.getBlockStride();
    if (is_fd_kind(r.kind)) {
      auto fd = connection_.take_fd();
      if (!fd) return tl::unexpected(fd.error());
      r.fd = std::move(*fd);
    }
    return {};
  });
  if (!read) return tl::unexpected(read.error());
  auto peer = open_adopted(r.kind, r.bytes, r.buffer_id, r.exporter_pid, r.ipc_handle, r.fd.get());
  if (!peer) {
    // The daemon holds a copy this client cannot use: give it back (best effort) so the token's
    // sequence is not stranded in this session.
    (void)close_sequence(r.sequence);
    return tl::unexpected(peer.error());
  }
  const kernels::KvDtype dtype = static_cast<kernels::KvDtype>(geometry_->dtype);
  kernels::KvLayout& layout = (*peer)->layout;
  layout.num_layers = geometry_->num_layers;
  layout.num_kv_heads = geometry_->num_kv_heads;
  layout.head_dim = geometry_->head_dim;
  layout.dtype = dtype;
  layout.num_slots = r.num_slots;
  layout.block_size = r.block_size;
  layout.token_stride = r.token_stride;
  layout.head_stride = r.head_stride;
  layout.block_stride = r.block_stride;
  const auto checked = [&]() -> Status {
    if (r.k_offsets.size() != layout.num_layers || r.v_offsets.size() != layout.num_layers) {
      return tl::unexpected(bad_cache("cache.kOffsets/vOffsets have " + std::to_string(r.k_offsets.size()) + "/" +
                                      std::to_string(r.v_offsets.size()) + " entries for " +
                                      std::to_string(layout.num_layers) + " layers"));
    }
    for (std::uint32_t l = 0; l < layout.num_layers; ++l) {
      if (r.k_offsets[l] >= r.bytes || r.v_offsets[l] >= r.bytes) {
        return tl::unexpected(bad_cache("cache.kOffsets/vOffsets[" + std::to_string(l) + "] lie beyond the buffer's " +
                                        std::to_string(r.bytes) + " bytes"));
      }
      layout.k_base.push_back((*peer)->buffer.base() + r.k_offsets[l]);
      layout.v_base.push_back((*peer)->buffer.base() + r.v_offsets[l]);
    }
    if (auto ok = kernels::validate(layout); !ok) return tl::unexpected(bad_cache(ok.error().message));
    const std::uint64_t extent = kernels::layer_extent_bytes(layout);  // exact after validate
    for (std::uint32_t l = 0; l < layout.num_layers; ++l) {
      if (!within(r.k_offsets[l], extent, r.bytes) || !within(r.v_offsets[l], extent, r.bytes)) {
        return tl::unexpected(bad_cache("cache.kOffsets/vOffsets[" + std::to_string(l) + "] place layer " +
                                        std::to_string(l) + " outside the buffer's " + std::to_string(r.bytes) + " bytes"));
      }
    }
    return {};
  }();
  if (!checked) {
    (void)close_sequence(r.sequence);
    return tl::unexpected(checked.error());
  }
  peers_[r.sequence] = std::move(*peer);
  // The daemon parses this sequence's digests at the exporter's width: pushes must use it too.
  digest_dims_[r.sequence] = r.digest_dim != 0 ? r.digest_dim : protocol::kDefaultKeyDigestDim;
  track_scores(r.sequence, r.shipping, false);  // continues the exporter's step count
  kvtier_adopted out{};
  out.struct_size = sizeof(out);
  out.sequence = r.sequence;
  out.prompt_length = r.prompt_length;
  out.positions = r.positions;
  out.exporter_pid = r.exporter_pid;
  out.policy = static_cast<kvtier_policy>(r.policy);  // like the status report: a newer policy passes as its number
  out.key_digest_dim = digest_dims_[r.sequence];
  return out;
}

Result<std::unique_ptr<AdoptedPeer>> Client::open_adopted(std::uint32_t kind, std::uint64_t bytes,
                                                          std::uint64_t buffer_id, std::uint32_t exporter_pid,
                                                          std::span<const std::byte> ipc_handle, int fd) {
  if (kind > KVTIER_BUFFER_CUDA_VMM_FD) return tl::unexpected(bad_cache("cache.kind " + std::to_string(kind) + " unknown"));
  if (bytes == 0) return tl::unexpected(bad_cache("cache.bytes is 0"));
  std::optional<PeerBuffer> buffer;
  if (kind == KVTIER_BUFFER_HOST_FD) {
    auto mapped = PeerBuffer::map_host(fd, bytes);
    if (!mapped) return tl::unexpected(mapped.error());
    buffer.emplace(std::move(*mapped));
  } else if (kind == KVTIER_BUFFER_CUDA_IPC) {
    if (ipc_handle.size() != kernels::cuda::kIpcHandleBytes) {
      return tl::unexpected(bad_cache("cache.ipcHandle has " + std::to_string(ipc_handle.size()) + " bytes, not 64"));
    }
    kernels::cuda::IpcHandle handle{};
    std::copy(ipc_handle.begin(), ipc_handle.end(), handle.begin());
    auto opened = PeerBuffer::open_ipc(peer_buffers_, handle);
    if (!opened) return make_error(Errc::kUnavailable, "adopt: cannot open the exporter's buffer: " + opened.error().message);
    buffer.emplace(std::move(*opened));
  } else {
    auto opened = PeerBuffer::open_vmm(peer_buffers_, {exporter_pid, buffer_id}, fd, bytes);
    if (!opened) return make_error(Errc::kUnavailable, "adopt: cannot open the exporter's buffer: " + opened.error().message);
    buffer.emplace(std::move(*opened));
  }
  return std::make_unique<AdoptedPeer>(AdoptedPeer{std::move(*buffer), {}});
}

// ---- executing plans ----------------------------------------------------------------------

Status Client::execute_plan(const kvtier_plan& plan, std::span<const std::uint32_t> hbm_slots) {
  auto found = cache(plan.sequence);
  if (!found) return tl::unexpected(found.error());
  SequenceCache& cache = **found;
  auto peer = peers_.find(plan.sequence);
  if (peer != peers_.end() && !cache.has_peer()) {
    if (auto ok = cache.set_peer(peer->second->layout, peer->second->buffer.backend()); !ok) return ok;
  }
  if (auto ok = cache.execute(plan, hbm_slots); !ok) return ok;
  if (peer == peers_.end()) return {};  // an ordinary plan: nothing more to do
  const bool handoff = std::any_of(plan.moves, plan.moves + plan.move_count,
                                   [](const kvtier_plan_move& m) { return m.from_tier == KVTIER_TPEER; });
  if (handoff) {
    // The hand-off plan ran (its copies are complete): the exporter's buffer is no longer read.
    cache.clear_peer();
    peers_.erase(peer);
  }
  return {};
}

}  // namespace kvtier::client
