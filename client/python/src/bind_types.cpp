// Enums and read-only value types of the binding: versions, counters, plans, staged layers,
// adopted sequences and the daemon's status report. Arrays come back as NumPy arrays that own a
// copy of their data.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "py_client.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kvtier::python {
namespace {

template <class T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> to_numpy(std::vector<T> values) {
  auto* heap = new std::vector<T>(std::move(values));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(heap->data(), {heap->size()}, owner);
}

std::string tier_name(std::uint8_t tier) {
  return tier == KVTIER_TPEER ? std::string("PEER") : "T" + std::to_string(tier);
}

template <class T, class Field>
nb::ndarray<nb::numpy, T, nb::ndim<1>> move_field(const Plan& plan, Field field) {
  std::vector<T> out;
  out.reserve(plan.moves.size());
  for (const auto& m : plan.moves) out.push_back(static_cast<T>(m.*field));
  return to_numpy(std::move(out));
}

void bind_plan(nb::module_& m) {
  nb::class_<kvtier_plan_move>(m, "Move", "One token changing tier (kvtier_plan_move).")
      .def_ro("position", &kvtier_plan_move::position, "Absolute token position; never changes with the tier.")
      .def_prop_ro("from_tier", [](const kvtier_plan_move& mv) { return static_cast<kvtier_tier>(mv.from_tier); })
      .def_prop_ro("to_tier", [](const kvtier_plan_move& mv) { return static_cast<kvtier_tier>(mv.to_tier); })
      .def_ro("src_slot", &kvtier_plan_move::src_slot,
              "Pool row read (T1 / T2 source); for a PEER move the exporter's cache slot; else NO_SLOT.")
      .def_ro("dst_slot", &kvtier_plan_move::dst_slot,
              "Pool row written (T1 / T2 destination; for a PEER move already filled by kvtierd), else NO_SLOT.")
      .def("__repr__", [](const kvtier_plan_move& mv) {
        return "Move(position=" + std::to_string(mv.position) + ", " + tier_name(mv.from_tier) + "->" +
               tier_name(mv.to_tier) + ")";
      });

  nb::class_<Plan>(m, "Plan",
                   "A differential tier plan for one sequence, copied out of the plan ring. Execute it with "
                   "Client.execute_plan, then acknowledge it with Client.ack_plan.")
      .def_ro("epoch", &Plan::epoch)
      .def_ro("sequence", &Plan::sequence)
      .def_ro("moves", &Plan::moves, "The moves, in position order.")
      .def("__len__", [](const Plan& p) { return p.moves.size(); })
      .def_prop_ro("positions", [](const Plan& p) { return move_field<std::uint32_t>(p, &kvtier_plan_move::position); },
                   nb::rv_policy::move, "Positions of the moves (uint32 array).")
      .def_prop_ro("from_tiers", [](const Plan& p) { return move_field<std::uint8_t>(p, &kvtier_plan_move::from_tier); },
                   nb::rv_policy::move, "Source tier of each move (uint8 array of Tier values).")
      .def_prop_ro("to_tiers", [](const Plan& p) { return move_field<std::uint8_t>(p, &kvtier_plan_move::to_tier); },
                   nb::rv_policy::move, "Destination tier of each move (uint8 array of Tier values).")
      .def_prop_ro("src_slots", [](const Plan& p) { return move_field<std::uint32_t>(p, &kvtier_plan_move::src_slot); },
                   nb::rv_policy::move)
      .def_prop_ro("dst_slots", [](const Plan& p) { return move_field<std::uint32_t>(p, &kvtier_plan_move::dst_slot); },
                   nb::rv_policy::move)
      .def("__repr__", [](const Plan& p) {
        return "Plan(epoch=" + std::to_string(p.epoch) + ", sequence=" + std::to_string(p.sequence) +
               ", moves=" + std::to_string(p.moves.size()) + ")";
      });

  nb::class_<StagedLayer>(m, "StagedLayer",
                          "One layer's T1 rows staged into the caller's buffer (stage_layer, stage_wait): K at "
                          "byte k_offset and V at v_offset, each [rows, num_kv_heads, head_dim] in the registered "
                          "dtype.")
      .def_ro("layer", &StagedLayer::layer)
      .def_ro("rows", &StagedLayer::rows)
      .def_prop_ro("positions", [](const StagedLayer& s) { return to_numpy(s.positions); }, nb::rv_policy::move,
                   "Absolute position of each row (uint32 array).")
      .def_ro("k_offset", &StagedLayer::k_offset)
      .def_ro("v_offset", &StagedLayer::v_offset);
}

void bind_status(nb::module_& m) {
  nb::class_<SequenceInfo>(m, "SequenceInfo", "One sequence as the daemon sees it (admin status).")
      .def_ro("sequence_id", &SequenceInfo::sequence_id)
      .def_ro("prompt_length", &SequenceInfo::prompt_length)
      .def_ro("tokens", &SequenceInfo::tokens)
      .def_ro("tokens_t0", &SequenceInfo::tokens_t0)
      .def_ro("tokens_t1", &SequenceInfo::tokens_t1)
      .def_ro("tokens_t2", &SequenceInfo::tokens_t2)
      .def_ro("tokens_t3", &SequenceInfo::tokens_t3)
      .def_ro("destroyed_fraction", &SequenceInfo::destroyed_fraction, "T3 / managed tokens: the eviction applied.")
      .def_ro("hbm_ratio", &SequenceInfo::hbm_ratio)
      .def_ro("evict_ratio", &SequenceInfo::evict_ratio)
      .def_ro("mode", &SequenceInfo::mode)
      .def_ro("int8_ratio", &SequenceInfo::int8_ratio)
      .def_ro("handoff", &SequenceInfo::handoff, "Hand-off state (sequences moved between engine processes).");
  nb::class_<ClientInfo>(m, "ClientInfo", "One connected client (admin status).")
      .def_ro("client_id", &ClientInfo::client_id)
      .def_ro("pid", &ClientInfo::pid)
      .def_ro("uid", &ClientInfo::uid)
      .def_ro("name", &ClientInfo::name)
      .def_ro("model_name", &ClientInfo::model_name)
      .def_ro("num_layers", &ClientInfo::num_layers)
      .def_ro("num_kv_heads", &ClientInfo::num_kv_heads)
      .def_ro("head_dim", &ClientInfo::head_dim)
      .def_ro("dtype", &ClientInfo::dtype)
      .def_ro("pool_slots", &ClientInfo::pool_slots)
      .def_ro("pool_slots_used", &ClientInfo::pool_slots_used)
      .def_ro("score_records", &ClientInfo::score_records)
      .def_ro("scores_dropped", &ClientInfo::scores_dropped)
      .def_ro("plans_sent", &ClientInfo::plans_sent)
      .def_ro("plans_acked", &ClientInfo::plans_acked)
      .def_ro("errors", &ClientInfo::errors)
      .def_ro("backpressure_tokens", &ClientInfo::backpressure_tokens,
              "Moves to host memory refused for lack of a row: the tokens stayed in T0.")
      .def_ro("weight", &ClientInfo::weight, "Share of the node DDR budget under pressure.")
      .def_ro("ddr_bytes_used", &ClientInfo::ddr_bytes_used)
      .def_ro("ddr_share_bytes", &ClientInfo::ddr_share_bytes, "Weighted share of the node DDR budget; 0: no budget.")
      .def_ro("int8_slots", &ClientInfo::int8_slots)
      .def_ro("int8_slots_used", &ClientInfo::int8_slots_used)
      .def_ro("t2_demotions", &ClientInfo::t2_demotions, "Tokens quantized T1 -> T2 by policy decisions.")
      .def_ro("pressure_demotions", &ClientInfo::pressure_demotions, "Tokens quantized T1 -> T2 under node pressure.")
      .def_ro("pressure_evictions", &ClientInfo::pressure_evictions, "Tokens evicted (T3) under node pressure.")
      .def_ro("int8_trimmed", &ClientInfo::int8_trimmed, "T1 -> T2 moves dropped because the int8 pool was full.")
      .def_ro("last_backpressure", &ClientInfo::last_backpressure)
      .def_ro("closing", &ClientInfo::closing,
              "Disconnected while its process lives: its pools stay its own until it exits.")
      .def_ro("sequences", &ClientInfo::sequences);
  nb::class_<DaemonStatus>(m, "DaemonStatus", "The daemon's status report (kvtier_daemon_status_get).")
      .def_ro("daemon_version", &DaemonStatus::daemon_version)
      .def_ro("daemon_epoch", &DaemonStatus::daemon_epoch)
      .def_ro("uptime_seconds", &DaemonStatus::uptime_seconds)
      .def_ro("ddr_bytes_total", &DaemonStatus::ddr_bytes_total, "0: no node-wide cap.")
      .def_ro("ddr_bytes_used", &DaemonStatus::ddr_bytes_used)
      .def_ro("int8_bytes_total", &DaemonStatus::int8_bytes_total, "0: no node-wide int8 cap.")
      .def_ro("int8_bytes_used", &DaemonStatus::int8_bytes_used)
      .def_ro("metrics_address", &DaemonStatus::metrics_address,
              "ADDRESS:PORT where kvtierd serves Prometheus metrics at /metrics; empty: off.")
      .def_ro("clients", &DaemonStatus::clients);
  nb::class_<Event>(m, "Event", "One decision kvtierd recorded about a client (kvtier_event).")
      .def_ro("sequence", &Event::sequence, "1, 2, ...: the order kvtierd recorded events in.")
      .def_ro("unix_ms", &Event::unix_ms)
      .def_ro("kind", &Event::kind)
      .def_ro("client_id", &Event::client_id)
      .def_ro("client_name", &Event::client_name)
      .def_ro("sequence_id", &Event::sequence_id, "0: not about one sequence.")
      .def_ro("tokens", &Event::tokens, "0: not about tokens.")
      .def_ro("detail", &Event::detail, "The daemon's text, untrusted: escape it before printing.");
  nb::class_<DaemonEvents>(m, "DaemonEvents", "kvtierd's newest events (kvtier_daemon_events_get).")
      .def_ro("events", &DaemonEvents::events, "Oldest first.")
      .def_ro("capacity", &DaemonEvents::capacity, "Events kvtierd keeps; older ones are dropped.")
      .def_ro("recorded", &DaemonEvents::recorded, "Events recorded since kvtierd started.");
  nb::class_<Placement>(m, "Placement", "A sequence's committed placement, all pages (kvtier_sequence_placement_get).")
      .def_ro("length", &Placement::length, "Positions the sequence has, T3 included.")
      .def_ro("runs", &Placement::runs, "(Tier, positions) runs in position order.");
}

}  // namespace

void bind_enums(nb::module_& m) {
  nb::enum_<kvtier_status>(m, "Status", nb::is_arithmetic(), "Status codes of the C ABI (kvtier_status).")
      .value("OK", KVTIER_OK)
      .value("INVALID_ARGUMENT", KVTIER_E_INVALID_ARGUMENT)
      .value("VERSION_MISMATCH", KVTIER_E_VERSION_MISMATCH)
      .value("PROTOCOL", KVTIER_E_PROTOCOL)
      .value("LIMIT_EXCEEDED", KVTIER_E_LIMIT_EXCEEDED)
      .value("NOT_FOUND", KVTIER_E_NOT_FOUND)
      .value("PERMISSION_DENIED", KVTIER_E_PERMISSION_DENIED)
      .value("UNAVAILABLE", KVTIER_E_UNAVAILABLE)
      .value("OS", KVTIER_E_OS)
      .value("BAD_STATE", KVTIER_E_BAD_STATE)
      .value("INTERNAL", KVTIER_E_INTERNAL)
      .value("TIMEOUT", KVTIER_E_TIMEOUT);
  nb::enum_<kvtier_dtype>(m, "DType", nb::is_arithmetic(), "Element type of the KV cache.")
      .value("F16", KVTIER_DTYPE_F16)
      .value("BF16", KVTIER_DTYPE_BF16)
      .value("F32", KVTIER_DTYPE_F32);
  nb::enum_<kvtier_role>(m, "Role", nb::is_arithmetic())
      .value("ENGINE", KVTIER_ROLE_ENGINE)
      .value("ADMIN", KVTIER_ROLE_ADMIN);
  nb::enum_<kvtier_tier>(m, "Tier", nb::is_arithmetic(),
                         "T0 engine cache, T1 DDR pool, T2 int8 pool, T3 evicted; PEER: the exporter's cache.")
      .value("T0", KVTIER_T0)
      .value("T1", KVTIER_T1)
      .value("T2", KVTIER_T2)
      .value("T3", KVTIER_T3)
      .value("PEER", KVTIER_TPEER, "from_tier of hand-off moves only: the exporter's cache (adopt_sequence)");
  nb::enum_<kvtier_event_kind>(m, "EventKind", nb::is_arithmetic(), "What kvtierd decided (kvtier_event_kind).")
      .value("PRESSURE_DEMOTION", KVTIER_EVENT_PRESSURE_DEMOTION, "a relief plan quantized `tokens` T1 rows to T2")
      .value("PRESSURE_EVICTION", KVTIER_EVENT_PRESSURE_EVICTION, "a relief plan destroyed `tokens` T1 tokens (T3)")
      .value("BACKPRESSURE", KVTIER_EVENT_BACKPRESSURE, "a plan kept `tokens` tokens where they were")
      .value("PLAN_FAILED", KVTIER_EVENT_PLAN_FAILED, "the client reported a plan as not applied: rolled back")
      .value("RECLAIM", KVTIER_EVENT_RECLAIM, "the client's process exited; what it held was freed")
      .value("SESSION_ERROR", KVTIER_EVENT_SESSION_ERROR, "kvtierd ended the client's session");
  nb::enum_<kvtier_backpressure>(m, "Backpressure", nb::is_arithmetic(),
                                 "Why the daemon last kept tokens in T0 for lack of a host row.")
      .value("NONE", KVTIER_BACKPRESSURE_NONE)
      .value("POOL_FULL", KVTIER_BACKPRESSURE_POOL_FULL, "this client's DDR pool is full")
      .value("NODE_BUDGET", KVTIER_BACKPRESSURE_NODE_BUDGET, "the node-wide DDR budget is spent");
  nb::enum_<kvtier_eviction_mode>(m, "EvictionMode", nb::is_arithmetic())
      .value("CUMULATIVE", KVTIER_EVICT_CUMULATIVE, "evict_ratio = fraction of the managed chain ever destroyed")
      .value("PAPER_ALGORITHM", KVTIER_EVICT_PAPER_ALGORITHM, "evict_ratio re-applied every round (compounds)")
      .value("PAPER_PROTOTYPE", KVTIER_EVICT_PAPER_PROTOTYPE, "ratios over GPU-resident tokens only");
  nb::enum_<kvtier_policy>(m, "Policy", nb::is_arithmetic(), "Which tokens matter (kvtier_policy).")
      .value("PAPER", KVTIER_POLICY_PAPER, "cumulative attention")
      .value("H2O", KVTIER_POLICY_H2O, "accumulated attention: heavy hitters + recent")
      .value("STREAMING_LLM", KVTIER_POLICY_STREAMING_LLM, "sinks + window")
      .value("RANDOM", KVTIER_POLICY_RANDOM, "keep the prompt, uniform random over the rest")
      .value("VASE", KVTIER_POLICY_VASE, "largest value ranges + sampling by recent attention; needs VALUE_RANGE")
      .value("R_KV", KVTIER_POLICY_R_KV, "importance minus key redundancy; needs KEY_DIGEST");
  nb::enum_<kvtier_feature>(m, "Feature", nb::is_arithmetic(), "Per-token features some policies need.")
      .value("VALUE_RANGE", KVTIER_FEATURE_VALUE_RANGE, "vase: max - min of the token's value vector")
      .value("KEY_DIGEST", KVTIER_FEATURE_KEY_DIGEST, "r_kv: key_digest_dim floats per position");
  nb::enum_<kvtier_handoff>(m, "Handoff", nb::is_arithmetic(), "A sequence's hand-off state (kvtier_handoff).")
      .value("NONE", KVTIER_HANDOFF_NONE)
      .value("EXPORTED", KVTIER_HANDOFF_EXPORTED, "frozen in its exporter, waiting for an adopter")
      .value("ADOPTING", KVTIER_HANDOFF_ADOPTING, "the adopter's hand-off plan is in flight")
      .value("HANDED_OFF", KVTIER_HANDOFF_HANDED_OFF, "adopted: the exporter's copy holds nothing")
      .value("ADOPTED", KVTIER_HANDOFF_ADOPTED, "this copy came from another process");
  nb::enum_<kvtier_buffer_kind>(m, "BufferKind", nb::is_arithmetic(),
                                "The allocation holding an exported sequence's cache (kvtier_buffer_kind).")
      .value("HOST_FD", KVTIER_BUFFER_HOST_FD, "shared host memory (memfd, shm) named by fd")
      .value("CUDA_IPC", KVTIER_BUFFER_CUDA_IPC, "a cudaMalloc allocation starting at base")
      .value("CUDA_VMM_FD", KVTIER_BUFFER_CUDA_VMM_FD, "a cuMem VMM allocation exported as a POSIX fd");
  nb::enum_<kvtier_backend>(m, "Backend", nb::is_arithmetic())
      .value("CPU", KVTIER_BACKEND_CPU)
      .value("CUDA", KVTIER_BACKEND_CUDA);
  nb::enum_<kvtier_staging_order>(m, "StagingOrder", nb::is_arithmetic())
      .value("POSITION_ORDER", KVTIER_STAGE_POSITION_ORDER, "rows by ascending position: bit-exact merges")
      .value("COMPACT", KVTIER_STAGE_COMPACT, "rows in pool order: exact within fp reordering");
}

void bind_types(nb::module_& m) {
  nb::class_<kvtier_versions>(m, "Versions", "Both sides' protocol and layout versions (kvtier_versions).")
      .def_ro("client_protocol_major", &kvtier_versions::client_protocol_major)
      .def_ro("client_protocol_minor", &kvtier_versions::client_protocol_minor)
      .def_ro("client_layout_version", &kvtier_versions::client_layout_version)
      .def_ro("client_layout_fingerprint", &kvtier_versions::client_layout_fingerprint)
      .def_ro("daemon_protocol_major", &kvtier_versions::daemon_protocol_major)
      .def_ro("daemon_protocol_minor", &kvtier_versions::daemon_protocol_minor)
      .def_ro("daemon_layout_version", &kvtier_versions::daemon_layout_version)
      .def_ro("daemon_layout_fingerprint", &kvtier_versions::daemon_layout_fingerprint)
      .def_ro("daemon_epoch", &kvtier_versions::daemon_epoch)
      .def_ro("client_id", &kvtier_versions::client_id)
      .def_prop_ro("daemon_version", [](const kvtier_versions& v) { return std::string(v.daemon_version); });
  nb::class_<kvtier_client_counters>(m, "Counters", "This client's data-plane counters.")
      .def_ro("score_records_pushed", &kvtier_client_counters::score_records_pushed)
      .def_ro("score_records_dropped", &kvtier_client_counters::score_records_dropped,
              "Score records dropped because the ring was full (push_scores never blocks).")
      .def_ro("plan_records_received", &kvtier_client_counters::plan_records_received)
      .def_ro("plans_acked", &kvtier_client_counters::plans_acked)
      .def_ro("backpressure_tokens", &kvtier_client_counters::backpressure_tokens,
              "Tokens the daemon kept in T0 for lack of a host row, so far.")
      .def_ro("backpressure_reason", &kvtier_client_counters::backpressure_reason,
              "Backpressure value of the latest such notice (an int: the daemon's word, not checked).")
      .def_ro("daemon_losses", &kvtier_client_counters::daemon_losses,
              "Times the daemon's end of the connection was found gone (it crashed or stopped).")
      .def_ro("reattachments", &kvtier_client_counters::reattachments,
              "Successful reattachments of this client's pools and sequences to a restarted daemon.")
      .def_ro("detached", &kvtier_client_counters::detached, "1 while no daemon is attached (no plans meanwhile).")
      .def_ro("reattach_refused", &kvtier_client_counters::reattach_refused,
              "1 once a restarted daemon refused the reattachment (no more attempts).");
  nb::class_<kvtier_adopted>(m, "Adopted", "A sequence adopted from another engine process (kvtier_adopted).")
      .def_ro("sequence", &kvtier_adopted::sequence, "The adopted sequence's id in this client.")
      .def_ro("prompt_length", &kvtier_adopted::prompt_length)
      .def_ro("positions", &kvtier_adopted::positions, "Positions the sequence has seen: the next token's position.")
      .def_ro("exporter_pid", &kvtier_adopted::exporter_pid)
      .def("__repr__", [](const kvtier_adopted& a) {
        return "Adopted(sequence=" + std::to_string(a.sequence) + ", prompt_length=" + std::to_string(a.prompt_length) +
               ", positions=" + std::to_string(a.positions) + ", exporter_pid=" + std::to_string(a.exporter_pid) + ")";
      });
  bind_plan(m);
  bind_status(m);
}

}  // namespace kvtier::python
