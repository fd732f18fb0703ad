// kvtier.Client: one connection to kvtierd (one kvtier_client handle). Every method that only
// touches the handle runs with the GIL released; array arguments are read in place (NumPy via
// the buffer protocol, torch and others via DLPack) when they already have the required dtype
// and layout, and converted (copied) otherwise.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "bindings.hpp"
#include "py_client.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kvtier::python {
namespace {

using Release = nb::call_guard<nb::gil_scoped_release>;
using FloatVector = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using SlotVector = nb::ndarray<const std::uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Buffer = nb::ndarray<nb::c_contig, nb::device::cpu>;  // writable, any dtype

constexpr const char* kClientDoc = R"(A connection to kvtierd (one libkvtier client handle).

Client(socket_path=None, name=None, role=Role.ENGINE) connects and performs the version
handshake; socket_path None means $KVTIER_SOCKET or /run/kvtier/kvtierd.sock. An engine then
calls register_model once, opens sequences, attaches its KV cache to each and runs the step
loop: poll_plan / execute_plan / ack_plan, stage_layer before each layer's attention,
push_scores, step_end. Failures raise kvtier.KvtierError subclasses carrying .status,
.status_name and .message. Use as a context manager or call close(); one thread at a time
(calls are serialised).)";

void bind_lifecycle(nb::class_<PyClient>& c) {
  c.def(nb::init<const std::optional<std::string>&, const std::optional<std::string>&, kvtier_role>(),
        "socket_path"_a = nb::none(), "name"_a = nb::none(), "role"_a = KVTIER_ROLE_ENGINE, Release())
      .def("close", &PyClient::close, Release(), "Disconnects; the daemon reclaims this client's sequences and pool.")
      .def_prop_ro("closed", &PyClient::closed)
      .def("__enter__", [](PyClient& self) -> PyClient& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [](PyClient& self, nb::handle, nb::handle, nb::handle) { self.close(); }, "exc_type"_a.none(),
           "exc"_a.none(), "tb"_a.none())
      .def("versions", &PyClient::versions, Release(), "Protocol and layout versions of both sides.")
      .def_prop_ro("last_error", &PyClient::last_error, "Detail of the last failed call on this handle.")
      .def("counters", &PyClient::counters, Release())
      .def("status", &PyClient::daemon_status, Release(),
           "The daemon's status report. Needs a client connected with Role.ADMIN (and the daemon's admin group).");
}

void bind_engine(nb::class_<PyClient>& c) {
  c.def("register_model", &PyClient::register_model, "num_layers"_a, "num_kv_heads"_a, "head_dim"_a, "dtype"_a,
        "pool_tokens"_a, "model_name"_a = nb::none(), nb::kw_only(), "int8_pool_tokens"_a = 0, "weight"_a = 0, Release(),
        "Registers the model's KV geometry; the daemon creates this client's DDR pool of pool_tokens rows and, with "
        "int8_pool_tokens > 0, an int8 (T2) pool. weight: this client's share of the node DDR budget under pressure "
        "(0 = 1). Engine role only, once per client.");
  c.def(
      "open_sequence",
      [](PyClient& self, std::uint32_t prompt_length, std::optional<double> hbm_ratio, std::optional<double> evict_ratio,
         std::optional<std::uint32_t> sink_tokens, std::optional<std::uint32_t> window_tokens,
         std::optional<std::uint32_t> interval, std::optional<double> hysteresis, std::optional<double> decay,
         std::optional<std::uint32_t> hbm_tokens, std::optional<std::uint32_t> evict_tokens,
         std::optional<kvtier_eviction_mode> mode, std::optional<double> int8_ratio,
         std::optional<std::uint32_t> int8_tokens) {
        const SequenceParams p{sink_tokens, window_tokens, interval, hbm_tokens, evict_tokens, hbm_ratio,
                               evict_ratio, hysteresis,    decay,    mode,       int8_ratio,   int8_tokens};
        nb::gil_scoped_release release;
        return self.open_sequence(prompt_length, p);
      },
      "prompt_length"_a, nb::kw_only(), "hbm_ratio"_a = nb::none(), "evict_ratio"_a = nb::none(),
      "sink_tokens"_a = nb::none(), "window_tokens"_a = nb::none(), "interval"_a = nb::none(),
      "hysteresis"_a = nb::none(), "decay"_a = nb::none(), "hbm_tokens"_a = nb::none(), "evict_tokens"_a = nb::none(),
      "mode"_a = nb::none(), "int8_ratio"_a = nb::none(), "int8_tokens"_a = nb::none(),
      "Opens a sequence whose first prompt_length positions are the (protected) prompt and returns its id. "
      "Tier parameters left None keep the paper's defaults (k_s 4, k_w 128, interval 64, beta 0.5, r 0); with "
      "none given the daemon's configured defaults apply. int8_ratio / int8_tokens: of the survivors not kept in "
      "T0 the lowest-ranked share goes to the int8 tier T2 (lossy; needs register_model(int8_pool_tokens > 0)). "
      "Out-of-range values raise InvalidArgumentError naming the field.");
  c.def("close_sequence", &PyClient::close_sequence, "sequence"_a, Release());
  c.def(
      "push_scores",
      [](PyClient& self, std::uint32_t sequence, std::uint32_t step, const FloatVector& scores,
         std::uint32_t first_position) {
        const std::span<const float> values(scores.data(), scores.shape(0));
        nb::gil_scoped_release release;
        self.push_scores(sequence, step, first_position, values);
      },
      "sequence"_a, "step"_a, "scores"_a, "first_position"_a = 0,
      "Publishes one step's per-token scores for positions [first_position, first_position + len(scores)): a 1-D "
      "float32 array (NumPy or any DLPack tensor on the CPU, read in place). Never blocks: when the score ring is "
      "full the records are dropped and counted (counters().score_records_dropped).");
  c.def("step_end", &PyClient::step_end, "sequence"_a, "step"_a, Release(),
        "Marks the end of decode step `step` (increasing) after its scores were pushed; the daemon decides tiers "
        "every `interval` ended steps.");
  c.def("poll_plan", &PyClient::poll_plan, "timeout_ms"_a = 0, Release(),
        "The next complete plan, waiting up to timeout_ms (0: poll, < 0: forever); None when none arrived.");
  c.def("ack_plan", &PyClient::ack_plan, "epoch"_a, "applied"_a = true, Release(),
        "Acknowledges a polled plan: applied=True after execute_plan succeeded (the daemon frees the source "
        "slots), False when it was not applied (the daemon rolls back). Epochs are acknowledged in order.");
}

void bind_cache(nb::class_<PyClient>& c) {
  c.def(
      "attach_cache",
      [](PyClient& self, std::uint32_t sequence, std::vector<std::uintptr_t> k_base, std::vector<std::uintptr_t> v_base,
         std::uint32_t num_kv_heads, std::uint32_t head_dim, kvtier_dtype dtype, std::uint32_t num_slots,
         std::uint32_t block_size, std::size_t token_stride, std::size_t head_stride, std::size_t block_stride,
         kvtier_backend backend) {
        KvLayout layout{num_kv_heads, head_dim,    num_slots,    block_size,        dtype,
                        token_stride, head_stride, block_stride, std::move(k_base), std::move(v_base),
                        backend};
        nb::gil_scoped_release release;
        self.attach_cache(sequence, layout);
      },
      "sequence"_a, nb::kw_only(), "k_base"_a, "v_base"_a, "num_kv_heads"_a, "head_dim"_a, "dtype"_a, "num_slots"_a,
      "block_size"_a, "token_stride"_a, "head_stride"_a, "block_stride"_a = 0, "backend"_a = KVTIER_BACKEND_CPU,
      "Binds a sequence to the engine's KV cache (kvtier_kv_layout). k_base/v_base: one address per layer "
      "(e.g. tensor.data_ptr()); strides in bytes. Slot s of layer l, head h starts at k_base[l] + "
      "(s // block_size) * block_stride + (s % block_size) * token_stride + h * head_stride, so HF "
      "[heads, slots, dim] tensors use block_size = num_slots. The memory must outlive the sequence.");
  c.def(
      "execute_plan",
      [](PyClient& self, const Plan& plan, const SlotVector& hbm_slots) {
        const std::span<const std::uint32_t> slots(hbm_slots.data(), hbm_slots.shape(0));
        nb::gil_scoped_release release;
        self.execute_plan(plan, slots);
      },
      "plan"_a, "hbm_slots"_a,
      "Executes a plan's copies. hbm_slots[i] (uint32) is the engine cache slot of move i where it touches T0: "
      "the slot the token occupies for moves out of T0, the slot reserved for it for moves into T0; NO_SLOT "
      "elsewhere. On success ack_plan(epoch, True); on failure nothing changed: ack_plan(epoch, False).");
  c.def("t1_rows", &PyClient::t1_rows, "sequence"_a, Release(),
        "(rows, bytes) a stage_layer of this sequence needs now.");
  c.def(
      "stage_layer",
      [](PyClient& self, std::uint32_t sequence, std::uint32_t layer, const Buffer& buffer, kvtier_staging_order order) {
        void* data = buffer.data();
        const std::size_t capacity = buffer.nbytes();
        nb::gil_scoped_release release;
        return self.stage_layer(sequence, layer, order, data, capacity);
      },
      "sequence"_a, "layer"_a, "buffer"_a, "order"_a = KVTIER_STAGE_POSITION_ORDER,
      "Copies layer `layer`'s T1 rows of the sequence from the pool into `buffer` (a writable, C-contiguous CPU "
      "array of any dtype with at least t1_rows(sequence)[1] bytes) and says where K and V landed.");
}

}  // namespace

void bind_client(nb::module_& m) {
  nb::class_<PyClient> c(m, "Client", kClientDoc);
  bind_lifecycle(c);
  bind_engine(c);
  bind_cache(c);
}

}  // namespace kvtier::python
