// Fuzz target: what kvtierd does with the bytes a client sends on its control socket, short of
// the socket and the Server: FrameDecoder (framing.hpp) splits the stream, read_message parses
// each frame, and the request's checks run as Session::dispatch runs them (request_checks.hpp,
// handoff_checks.hpp, inside capture_protocol_errors), with the session state that decides
// which requests are valid when (PROTOCOL.md §4).
//
// Input: u8 split, then the byte stream. The stream is fed once whole and once in pieces of
// (split % 61 + 1) bytes, to two decoders.
//
// Beyond "no crash, no sanitizer report": both decoders hand out the same frames and end in the
// same state (reassembly does not depend on how the stream was split); a message read_message
// accepts re-encodes (encode_frame) into a frame that decodes again; parameters accepted for an
// OpenSequence make a SequenceTiers (the data plane's next step, which must not fail).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include <capnp/message.h>

#include "event_log.hpp"
#include "handoff_checks.hpp"
#include "kvtier/config/config.hpp"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/protocol/defaults.hpp"
#include "kvtier/protocol/framing.hpp"
#include "kvtier/protocol/version.hpp"
#include "kvtier/shm/layout.hpp"
#include "kvtier/tier/sequence_tiers.hpp"
#include "reattach_checks.hpp"
#include "request_checks.hpp"

namespace {

namespace protocol = kvtier::protocol;
namespace daemon = kvtier::daemon;
namespace wire = kvtier::wire;
using kvtier::Errc;
using kvtier::Status;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "frame_dispatch_fuzz: property violated: %s\n", what);
  std::abort();
}

kvtier::config::DaemonConfig fuzz_config() {
  kvtier::config::DaemonConfig config;
  // Small enough that an accepted prompt length does not make every input allocate megabytes.
  config.limits.max_tokens_per_sequence = 1u << 12;
  config.limits.max_sequences_per_client = 8;
  return config;
}

// The request-validity state Session keeps, and its dispatch, minus the Server and data plane.
class FuzzSession {
 public:
  Status dispatch(wire::ClientMessage::Reader message) {
    const auto which = message.which();
    if (!hello_) {
      if (which != wire::ClientMessage::HELLO) return kvtier::make_error(Errc::kProtocol, "first message must be Hello");
      return on_hello(message.getHello());
    }
    switch (which) {
      case wire::ClientMessage::HELLO: return kvtier::make_error(Errc::kProtocol, "Hello sent twice");
      case wire::ClientMessage::REGISTER_MODEL: return on_register(message.getRegisterModel());
      case wire::ClientMessage::OPEN_SEQUENCE: return on_open(message.getOpenSequence());
      case wire::ClientMessage::CLOSE_SEQUENCE: {
        if (sequences_.erase(message.getCloseSequence().getSequenceId()) == 0) {
          return kvtier::make_error(Errc::kNotFound, "no open sequence");
        }
        return {};
      }
      case wire::ClientMessage::STATUS_REQUEST:
        if (engine_) return kvtier::make_error(Errc::kPermissionDenied, "StatusRequest needs the admin role");
        return {};
      case wire::ClientMessage::EXPORT_SEQUENCE: return on_export(message.getExportSequence());
      case wire::ClientMessage::ADOPT_SEQUENCE: return on_adopt(message.getAdoptSequence());
      case wire::ClientMessage::REATTACH: return on_reattach(message.getReattach());
      case wire::ClientMessage::EVENTS_REQUEST: {
        if (engine_) return kvtier::make_error(Errc::kPermissionDenied, "EventsRequest needs the admin role");
        const std::uint32_t limit = message.getEventsRequest().getLimit();
        if (limit == 0 || limit > kvtier::daemon::EventLog::kDefaultCapacity) {
          return kvtier::make_error(Errc::kInvalidArgument, "limit out of range");
        }
        return {};
      }
      case wire::ClientMessage::PLACEMENT_REQUEST: {
        if (engine_) return kvtier::make_error(Errc::kPermissionDenied, "PlacementRequest needs the admin role");
        const auto request = message.getPlacementRequest();
        if (request.getMaxRuns() == 0 || request.getMaxRuns() > kvtier::protocol::kMaxPlacementRuns) {
          return kvtier::make_error(Errc::kInvalidArgument, "maxRuns out of range");
        }
        return kvtier::make_error(Errc::kNotFound, "no engine client");  // none in the fuzz session
      }
    }
    return kvtier::make_error(Errc::kInvalidArgument, "unknown request");
  }

 private:
  Status on_hello(wire::Hello::Reader hello) {
    const bool protocol_ok =
        protocol::is_compatible(protocol::ProtocolVersion{hello.getProtocolMajor(), hello.getProtocolMinor()});
    const bool layout_ok = hello.getLayoutVersion() == kvtier::shm::kLayoutVersion &&
                           hello.getLayoutFingerprint() == kvtier::shm::kLayoutFingerprint;
    const auto name = hello.getClientName();
    (void)std::string(name.begin(), name.size());
    if (!protocol_ok || !layout_ok) return kvtier::make_error(Errc::kVersionMismatch, "version mismatch");
    engine_ = hello.getRole() == wire::SessionRole::ENGINE;
    hello_ = true;
    return {};
  }

  Status on_register(wire::RegisterModel::Reader request) {
    if (!engine_) return kvtier::make_error(Errc::kPermissionDenied, "RegisterModel needs the engine role");
    if (geometry_) return kvtier::make_error(Errc::kBadState, "model already registered");
    auto pool = daemon::pool_request_from_wire(request, config_.pools);
    if (!pool) return tl::unexpected(pool.error());
    if (pool->weight < 1 || pool->weight > config_.pools.max_client_weight) fail("weight not clamped");
    geometry_ = pool->ddr;
    dtype_ = request.getDtype();
    int8_ = pool->int8.has_value();
    return {};
  }

  // What Session::on_reattach checks before the Server looks at the segments.
  Status on_reattach(wire::Reattach::Reader request) {
    if (!engine_) return kvtier::make_error(Errc::kPermissionDenied, "Reattach needs the engine role");
    if (geometry_) return kvtier::make_error(Errc::kBadState, "Reattach after RegisterModel");
    auto pool = daemon::pool_request_from_wire(request.getModel(), config_.pools);
    if (!pool) return tl::unexpected(pool.error());
    auto restored = daemon::restore_sequences(request, *pool, config_, 1);
    if (!restored) return tl::unexpected(restored.error());
    for (const auto& s : *restored) {
      // Every T1/T2 token has exactly one slot, inside its pool.
      if (s.t1.slotted() != s.tiers.count(kvtier::tier::Tier::kT1)) fail("T1 tokens and slots disagree");
      if (s.t2.slotted() != s.tiers.count(kvtier::tier::Tier::kT2)) fail("T2 tokens and slots disagree");
      if (s.tiers.length() < s.tiers.prompt_length()) fail("restored sequence shorter than its prompt");
    }
    return {};
  }

  Status on_open(wire::OpenSequence::Reader request) {
    if (!geometry_) return kvtier::make_error(Errc::kBadState, "OpenSequence before RegisterModel");
    if (sequences_.size() >= config_.limits.max_sequences_per_client) {
      return kvtier::make_error(Errc::kLimitExceeded, "too many sequences");
    }
    auto open = daemon::open_request_from_wire(request, config_, int8_, next_sequence_);
    if (!open) return tl::unexpected(open.error());
    if (!int8_ && kvtier::tier::int8_enabled(open->params)) fail("int8 budget for a client without an int8 pool");
    if (open->digest_dim == 0) fail("digest dim 0 after open_request_from_wire");
    // What ClientChannel::open_sequence does next; a failure there would end the session.
    auto tiers = kvtier::tier::SequenceTiers::create(open->prompt_length, open->params,
                                                     config_.limits.max_tokens_per_sequence);
    if (!tiers) fail("accepted OpenSequence parameters do not make a SequenceTiers");
    sequences_.insert(next_sequence_++);
    return {};
  }

  Status on_export(wire::ExportSequence::Reader request) {
    if (!geometry_) return kvtier::make_error(Errc::kBadState, "ExportSequence before RegisterModel");
    if (!sequences_.contains(request.getSequenceId())) return kvtier::make_error(Errc::kNotFound, "no open sequence");
    auto cache = request.getCache();
    const auto dtype = daemon::kernel_dtype(dtype_).value_or(kvtier::kernels::KvDtype::kF16);
    if (auto ok = daemon::check_exported_cache(cache, *geometry_, dtype); !ok) return ok;
    auto t0 = daemon::t0_list_from_wire(request.getT0Positions(), request.getT0Slots(), cache.getNumSlots());
    if (!t0) return tl::unexpected(t0.error());
    return {};
  }

  Status on_adopt(wire::AdoptSequence::Reader request) {
    if (!geometry_) return kvtier::make_error(Errc::kBadState, "AdoptSequence before RegisterModel");
    // An exporter whose geometry the token's low bits pick: the same as this client's, or not.
    const std::uint64_t token = request.getHandoffToken();
    daemon::ExportRegistry::Entry entry;
    entry.num_layers = geometry_->num_layers + ((token & 1) != 0 ? 1 : 0);
    entry.num_kv_heads = geometry_->num_kv_heads;
    entry.head_dim = geometry_->head_dim + ((token & 2) != 0 ? 1 : 0);
    entry.dtype = dtype_;
    return daemon::check_adopter_geometry(*geometry_, dtype_, entry);
  }

  const kvtier::config::DaemonConfig config_ = fuzz_config();
  bool hello_ = false;
  bool engine_ = false;
  std::optional<kvtier::shm::PoolGeometry> geometry_;
  wire::KvDtype dtype_ = wire::KvDtype::F16;
  bool int8_ = false;
  std::set<std::uint32_t> sequences_;
  std::uint32_t next_sequence_ = 1;
};

bool is_request_error(Errc code) {
  return code == Errc::kInvalidArgument || code == Errc::kNotFound || code == Errc::kLimitExceeded ||
         code == Errc::kBadState;
}

std::vector<std::vector<std::byte>> take_frames(protocol::FrameDecoder& decoder) {
  std::vector<std::vector<std::byte>> frames;
  while (auto words = decoder.next_frame()) {
    const auto bytes = words->asBytes();
    frames.emplace_back(reinterpret_cast<const std::byte*>(bytes.begin()),
                        reinterpret_cast<const std::byte*>(bytes.end()));
  }
  return frames;
}

protocol::FrameWords to_words(const std::vector<std::byte>& bytes) {
  auto words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), words.size() * sizeof(capnp::word));
  return words;
}

// A message read_message accepted must survive a re-encoding. Parsed again: the copy's reads
// must not spend the traversal budget of the message the session reads.
void check_reencodes(const std::vector<std::byte>& frame) {
  auto message = protocol::read_message(to_words(frame));
  if (!message) fail("read_message refused a frame it accepted before");
  auto copied = protocol::capture_protocol_errors([&]() -> kvtier::Result<std::vector<std::byte>> {
    capnp::MallocMessageBuilder builder;
    builder.setRoot(message->root<wire::ClientMessage>());
    return protocol::encode_frame(builder);
  });
  if (!copied) return;  // the copy read a field the traversal limit or the schema refused
  protocol::FrameDecoder decoder;
  if (!decoder.feed(*copied)) fail("encode_frame produced a frame FrameDecoder refuses");
  auto words = decoder.next_frame();
  if (!words || decoder.buffered_bytes() != 0) fail("encode_frame produced other than one frame");
  if (!protocol::read_message(std::move(*words))) fail("encode_frame produced a frame read_message refuses");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = data[0] % 61 + 1;
  const std::span<const std::byte> stream(reinterpret_cast<const std::byte*>(data + 1), size - 1);

  protocol::FrameDecoder whole;
  const bool whole_fed = whole.feed(stream).has_value();
  const auto frames = take_frames(whole);

  protocol::FrameDecoder split;
  std::vector<std::vector<std::byte>> split_frames;
  bool split_fed = true;
  for (std::size_t at = 0; at < stream.size() && split_fed; at += piece) {
    split_fed = split.feed(stream.subspan(at, std::min(piece, stream.size() - at))).has_value();
    for (auto& f : take_frames(split)) split_frames.push_back(std::move(f));
  }
  for (auto& f : take_frames(split)) split_frames.push_back(std::move(f));
  if (whole_fed != split_fed || whole.failed() != split.failed()) fail("the decoders disagree on the stream's framing");
  if (frames != split_frames) fail("the decoders hand out different frames");
  if (whole_fed && whole.buffered_bytes() != split.buffered_bytes()) fail("the decoders hold different partial frames");

  FuzzSession session;
  for (const auto& frame : frames) {
    if (frame.empty() || frame.size() % sizeof(capnp::word) != 0) fail("a frame that is not whole words");
    auto message = protocol::read_message(to_words(frame));
    if (!message) break;  // kProtocol: the session ends
    auto handled = protocol::capture_protocol_errors(
        [&]() -> Status { return session.dispatch(message->root<wire::ClientMessage>()); });
    check_reencodes(frame);
    if (!handled && !is_request_error(handled.error().code)) break;  // the session ends
  }
  return 0;
}
