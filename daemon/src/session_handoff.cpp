// Session's hand-off requests (handoff.hpp, PROTOCOL.md "Sequence hand-off"): ExportSequence and
// AdoptSequence, and the close rule for exported sequences.
#include <fcntl.h>

#include <string>

#include "kvtier/kernels/kv_layout.hpp"
#include "server.hpp"
#include "session.hpp"

namespace kvtier::daemon {
namespace {

constexpr std::size_t kIpcHandleBytes = 64;

bool carries_fd(wire::BufferKind kind) {
  return kind == wire::BufferKind::HOST_FD || kind == wire::BufferKind::CUDA_VMM_FD;
}

// The exported cache must describe the registered geometry and lie inside its buffer: checked
// as a KvLayout over a synthetic base (the daemon never maps the buffer).
Status check_cache(wire::ExportedCache::Reader cache, const shm::PoolGeometry& geometry, wire::KvDtype dtype) {
  if (static_cast<std::uint16_t>(cache.getKind()) > static_cast<std::uint16_t>(wire::BufferKind::CUDA_VMM_FD)) {
    return make_error(Errc::kInvalidArgument, "cache.kind " + std::to_string(static_cast<int>(cache.getKind())) +
                                                  " is not a buffer kind");
  }
  const bool ipc = cache.getKind() == wire::BufferKind::CUDA_IPC;
  if (cache.getIpcHandle().size() != (ipc ? kIpcHandleBytes : 0)) {
    return make_error(Errc::kInvalidArgument, "cache.ipcHandle has " + std::to_string(cache.getIpcHandle().size()) +
                                                  " bytes; a " + (ipc ? "cudaIpc buffer needs 64" : "buffer of this kind none"));
  }
  if (cache.getKOffsets().size() != geometry.num_layers || cache.getVOffsets().size() != geometry.num_layers) {
    return make_error(Errc::kInvalidArgument, "cache.kOffsets/vOffsets list " + std::to_string(cache.getKOffsets().size()) +
                                                  "/" + std::to_string(cache.getVOffsets().size()) +
                                                  " layers; the model has " + std::to_string(geometry.num_layers));
  }
  constexpr std::uint64_t kBase = std::uint64_t{1} << 12, kMaxBytes = std::uint64_t{1} << 48;
  const std::uint64_t bytes = cache.getBytes();
  if (bytes == 0 || bytes > kMaxBytes) {
    return make_error(Errc::kInvalidArgument, "cache.bytes " + std::to_string(bytes) + " is not in [1, 2^48]");
  }
  kernels::KvLayout layout;
  layout.num_layers = geometry.num_layers;
  layout.num_kv_heads = geometry.num_kv_heads;
  layout.head_dim = geometry.head_dim;
  layout.dtype = kernel_dtype(dtype).value_or(kernels::KvDtype::kF16);  // registered: known
  layout.num_slots = cache.getNumSlots();
  layout.block_size = cache.getBlockSize();
  layout.token_stride = cache.getTokenStride();
  layout.head_stride = cache.getHeadStride();
  layout.block_stride = cache.getBlockStride();
  for (std::uint32_t l = 0; l < geometry.num_layers; ++l) {
    if (cache.getKOffsets()[l] >= bytes || cache.getVOffsets()[l] >= bytes) {
      return make_error(Errc::kInvalidArgument, "cache.kOffsets/vOffsets[" + std::to_string(l) + "] lies beyond the " +
                                                    std::to_string(bytes) + "-byte buffer");
    }
    layout.k_base.push_back(kBase + cache.getKOffsets()[l]);
    layout.v_base.push_back(kBase + cache.getVOffsets()[l]);
  }
  if (auto ok = kernels::validate(layout); !ok) {
    return make_error(Errc::kInvalidArgument, "cache: " + ok.error().message);
  }
  const std::uint64_t extent = kernels::layer_extent_bytes(layout);  // exact after validate
  for (std::uint32_t l = 0; l < geometry.num_layers; ++l) {
    const std::uint64_t start = std::max(cache.getKOffsets()[l], cache.getVOffsets()[l]);  // < bytes
    if (extent > bytes - start) {
      return make_error(Errc::kInvalidArgument, "cache: layer " + std::to_string(l) + " spans " +
                                                    std::to_string(extent) + " bytes from offset " +
                                                    std::to_string(start) + ", beyond the " + std::to_string(bytes) +
                                                    "-byte buffer");
    }
  }
  return {};
}

}  // namespace

Status Session::on_export(wire::ExportSequence::Reader request) {
  if (!geometry_) return make_error(Errc::kBadState, "ExportSequence before RegisterModel");
  auto cache = request.getCache();
  // The fd came with this frame: take it before any check, so a refused export does not leave
  // it behind for the next one.
  shm::UniqueFd fd;
  if (carries_fd(cache.getKind())) {
    if (received_fds_.empty()) {
      return make_error(Errc::kProtocol, "ExportSequence of a hostFd or cudaVmmFd buffer must carry its fd (SCM_RIGHTS)");
    }
    fd = std::move(received_fds_.front());
    received_fds_.pop_front();
  }
  const std::uint32_t id = request.getSequenceId();
  if (!sequences_.contains(id)) return make_error(Errc::kNotFound, "no open sequence " + std::to_string(id));
  if (server_.exports().token_of(client_id_, id)) {
    return make_error(Errc::kBadState, "sequence " + std::to_string(id) + " is already exported");
  }
  if (auto ok = check_cache(cache, *geometry_, dtype_); !ok) return ok;
  const auto positions = request.getT0Positions();
  const auto slots = request.getT0Slots();
  if (positions.size() != slots.size()) {
    return make_error(Errc::kInvalidArgument, "t0Positions lists " + std::to_string(positions.size()) +
                                                  " tokens, t0Slots " + std::to_string(slots.size()));
  }
  std::vector<std::pair<std::uint32_t, std::uint32_t>> t0;
  t0.reserve(positions.size());
  for (unsigned i = 0; i < positions.size(); ++i) {
    if (i > 0 && positions[i] <= positions[i - 1]) {
      return make_error(Errc::kInvalidArgument, "t0Positions must ascend: " + std::to_string(positions[i]) +
                                                    " follows " + std::to_string(positions[i - 1]));
    }
    if (slots[i] >= cache.getNumSlots()) {
      return make_error(Errc::kInvalidArgument, "t0Slots[" + std::to_string(i) + "] = " + std::to_string(slots[i]) +
                                                    " is beyond the cache's " + std::to_string(cache.getNumSlots()) +
                                                    " slots");
    }
    t0.emplace_back(positions[i], slots[i]);
  }
  ExportRegistry::Entry entry;
  entry.exporter = client_id_;
  entry.exporter_pid = static_cast<std::uint32_t>(peer_.pid);
  entry.exporter_uid = static_cast<std::uint32_t>(peer_.uid);
  entry.sequence = id;
  entry.num_layers = geometry_->num_layers;
  entry.num_kv_heads = geometry_->num_kv_heads;
  entry.head_dim = geometry_->head_dim;
  entry.dtype = dtype_;
  entry.cache = std::make_shared<capnp::MallocMessageBuilder>();
  entry.cache->setRoot(cache);
  entry.fd = std::make_shared<shm::UniqueFd>(std::move(fd));
  server_.data_plane().export_sequence(
      client_id_, id, std::move(t0), [self = shared_from_this(), id, entry = std::move(entry)](Status frozen) {
        if (self->state_ == State::kClosed) return;
        if (!frozen) return self->send_error(frozen.error());
        const std::uint64_t token = self->server_.exports().add(entry);
        capnp::MallocMessageBuilder reply;
        auto exported = reply.initRoot<wire::DaemonMessage>().initSequenceExported();
        exported.setSequenceId(id);
        exported.setHandoffToken(token);
        self->send(reply);
      });
  return {};
}

Status Session::on_adopt(wire::AdoptSequence::Reader request) {
  if (!geometry_) return make_error(Errc::kBadState, "AdoptSequence before RegisterModel");
  const std::uint64_t token = request.getHandoffToken();
  ExportRegistry::Entry* entry = server_.exports().find(token);
  if (entry == nullptr || entry->state != ExportRegistry::State::kWaiting) {
    return make_error(Errc::kNotFound, "no sequence is waiting for an adopter under this hand-off token (unknown, "
                                       "being adopted, or closed by its exporter)");
  }
  if (entry->exporter == client_id_) return make_error(Errc::kInvalidArgument, "a client cannot adopt its own sequence");
  if (peer_.uid != entry->exporter_uid && peer_.uid != 0) {
    // The adopter maps the exporter's KV: the same user only (or root), whoever holds the token.
    return make_error(Errc::kPermissionDenied, "uid " + std::to_string(peer_.uid) +
                                                   " may not adopt a sequence exported by uid " +
                                                   std::to_string(entry->exporter_uid));
  }
  const auto differs = [](const char* field, std::uint64_t mine, std::uint64_t theirs) {
    return make_error(Errc::kInvalidArgument, std::string("model geometry differs from the exporter's: ") + field + " " +
                                                  std::to_string(mine) + " here, " + std::to_string(theirs) + " there");
  };
  if (geometry_->num_layers != entry->num_layers) return differs("numLayers", geometry_->num_layers, entry->num_layers);
  if (geometry_->num_kv_heads != entry->num_kv_heads) {
    return differs("numKvHeads", geometry_->num_kv_heads, entry->num_kv_heads);
  }
  if (geometry_->head_dim != entry->head_dim) return differs("headDim", geometry_->head_dim, entry->head_dim);
  if (dtype_ != entry->dtype) {
    return differs("dtype", static_cast<std::uint64_t>(dtype_), static_cast<std::uint64_t>(entry->dtype));
  }
  const auto& limits = server_.config().limits;
  if (sequences_.size() >= limits.max_sequences_per_client) {
    return make_error(Errc::kLimitExceeded, "client has " + std::to_string(sequences_.size()) +
                                                " sequences open, limit limits.max_sequences_per_client=" +
                                                std::to_string(limits.max_sequences_per_client));
  }
  const std::uint32_t id = next_sequence_++;
  sequences_.insert(id);
  entry->state = ExportRegistry::State::kAdopting;
  entry->adopter = client_id_;
  const HandoffOrigin origin{token, entry->exporter, entry->sequence};
  server_.data_plane().adopt(
      origin, client_id_, id,
      [self = shared_from_this(), id, token, pid = entry->exporter_pid, cache = entry->cache,
       fd = entry->fd](Result<AdoptedSequence> adopted) {
        if (!adopted) {
          if (ExportRegistry::Entry* e = self->server_.exports().find(token)) e->state = ExportRegistry::State::kWaiting;
          self->sequences_.erase(id);
          if (self->state_ != State::kClosed) self->send_error(adopted.error());
          return;
        }
        if (self->state_ == State::kClosed) return;  // the data plane fails the hand-off on detach
        std::vector<shm::UniqueFd> fds;
        if (*fd) {
          shm::UniqueFd copy(::fcntl(fd->get(), F_DUPFD_CLOEXEC, 0));
          if (!copy) {
            self->server_.log().error("event=handoff_fd_dup_failed client_id={} errno={}", self->client_id_, errno);
            return self->close();  // the hand-off fails when the data plane sees the client gone
          }
          fds.push_back(std::move(copy));
        }
        capnp::MallocMessageBuilder reply;
        auto out = reply.initRoot<wire::DaemonMessage>().initSequenceAdopted();
        out.setSequenceId(id);
        out.setPromptLength(adopted->prompt_length);
        out.setPositions(adopted->positions);
        out.setExporterPid(pid);
        out.setCache(cache->getRoot<wire::ExportedCache>().asReader());
        self->send(reply, std::move(fds));
      });
  return {};
}

bool Session::close_after_handoff_settles(std::uint32_t id) {
  const auto adopter = server_.exports().adopter_of(client_id_, id);
  if (!adopter) return false;
  server_.data_plane().service_client(*adopter, [self = shared_from_this(), id] {
    if (self->state_ == State::kClosed) return;
    if (auto ok = self->close_sequence(id); !ok) self->send_error(ok.error());
  });
  return true;
}

Status Session::cancel_export(std::uint32_t id) {
  const auto token = server_.exports().token_of(client_id_, id);
  if (!token) return {};
  if (server_.exports().find(*token)->state == ExportRegistry::State::kAdopting) {
    return make_error(Errc::kBadState, "sequence " + std::to_string(id) +
                                           " is being adopted; close it once the adopter acknowledged the hand-off");
  }
  server_.exports().erase(*token);
  return {};
}

}  // namespace kvtier::daemon
