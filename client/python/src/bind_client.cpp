// kvtier.Client: one connection to kvtierd (one kvtier_client handle). Every method that only
// touches the handle runs with the GIL released; array arguments are read in place (NumPy via
// the buffer protocol, torch and others via DLPack) when they already have the required dtype
// and layout, and converted (copied) otherwise.
//
// The bound class is ClientObject: PyClient plus the Python buffers stage_prefetch writes into.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "bindings.hpp"
#include "py_client.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kvtier::python {
namespace {

using Release = nb::call_guard<nb::gil_scoped_release>;
using FloatVector = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using SlotVector = nb::ndarray<const std::uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Buffer = nb::ndarray<nb::c_contig>;  // writable, any dtype, host or CUDA memory
using QueryRows = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using OutRows = nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using OutVector = nb::ndarray<float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
// A uint32 array read in place, or any sequence of ints (converted).
using SlotList = std::variant<SlotVector, std::vector<std::uint32_t>>;

std::span<const std::uint32_t> as_span(const SlotList& list) {
  if (const auto* array = std::get_if<SlotVector>(&list)) return {array->data(), array->shape(0)};
  return std::get<std::vector<std::uint32_t>>(list);
}

// kvtier.Client. The library keeps only the address of a buffer given to stage_prefetch and writes
// into it until stage_wait, so each such buffer (its Python object) is pinned here from the
// prefetch until the wait, the sequence's close or the client's close. Pins are touched with the
// GIL held only; the PyClient calls run without it.
class ClientObject : public PyClient {
 public:
  using StageKey = std::pair<std::uint32_t, std::uint32_t>;  // (sequence, layer)
  using PyClient::PyClient;
  ClientObject(const ClientObject&) = delete;
  ClientObject& operator=(const ClientObject&) = delete;
  // Frees the handle before the pins go, so nothing can still be writing into them.
  ~ClientObject() { PyClient::close(); }

  std::map<StageKey, Buffer> pins;
  std::map<std::uint32_t, kvtier_backend> backends;  // of each attached sequence

  // A staging buffer must be memory the sequence's executor writes: host memory for the CPU
  // backend, device memory for CUDA (the library cannot tell a device address from a host one).
  void check_buffer(std::uint32_t sequence, const Buffer& buffer) const {
    const auto it = backends.find(sequence);
    const bool cuda = it != backends.end() && it->second == KVTIER_BACKEND_CUDA;
    const int want = cuda ? nb::device::cuda::value : nb::device::cpu::value;
    if (buffer.device_type() != want) {
      throw nb::value_error(cuda ? "staging buffer: a CUDA sequence stages into CUDA memory"
                                 : "staging buffer: a CPU sequence stages into host memory");
    }
  }
};

constexpr const char* kClientDoc = R"(A connection to kvtierd (one libkvtier client handle).

Client(socket_path=None, name=None, role=Role.ENGINE) connects and performs the version
handshake; socket_path None means $KVTIER_SOCKET or /run/kvtier/kvtierd.sock. An engine then
calls register_model once, opens sequences, attaches its KV cache to each and runs the step
loop: poll_plan / execute_plan / ack_plan, stage_layer (or stage_prefetch / stage_wait) before
each layer's attention, push_scores, step_end. export_sequence / adopt_sequence hand a sequence
to another engine process. Failures raise kvtier.KvtierError subclasses carrying .status,
.status_name and .message. Use as a context manager or call close(); one thread at a time
(calls are serialised).)";

void bind_lifecycle(nb::class_<ClientObject>& c) {
  const auto close = [](ClientObject& self) {
    {
      nb::gil_scoped_release release;
      self.close();
    }
    self.pins.clear();
  };
  c.def(nb::init<const std::optional<std::string>&, const std::optional<std::string>&, kvtier_role>(),
        "socket_path"_a = nb::none(), "name"_a = nb::none(), "role"_a = KVTIER_ROLE_ENGINE, Release())
      .def("close", close, "Disconnects; the daemon reclaims this client's sequences and pool.")
      .def_prop_ro("closed", &PyClient::closed)
      .def("__enter__", [](ClientObject& self) -> ClientObject& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [close](ClientObject& self, nb::handle, nb::handle, nb::handle) { close(self); },
           "exc_type"_a.none(), "exc"_a.none(), "tb"_a.none())
      .def("versions", &PyClient::versions, Release(), "Protocol and layout versions of both sides.")
      .def_prop_ro("last_error", &PyClient::last_error, "Detail of the last failed call on this handle.")
      .def("counters", &PyClient::counters, Release())
      .def("status", &PyClient::daemon_status, Release(),
           "The daemon's status report. Needs a client connected with Role.ADMIN (and the daemon's admin group).")
      .def("events", &PyClient::daemon_events, "limit"_a = 64, Release(),
           "kvtierd's newest `limit` events (1..capacity, else InvalidArgumentError): relief plans, "
           "backpressure, failed plans, reclaims, ended sessions. Role.ADMIN only.")
      .def("placement", &PyClient::placement, "client_id"_a, "sequence_id"_a, Release(),
           "The committed placement of another client's sequence as (Tier, positions) runs, every page "
           "fetched. Role.ADMIN only; NotFoundError for an unknown client or sequence.");
}

// open_sequence's keywords: the tier parameter table's numbers (Python int or float as their C
// type), its choices, and the two options that are not tier parameters; each None by default.
struct Keyword {
  const char* name;
  const char* type;
};
#define KVTIER_PY_KEYWORD(name, Wire, Type, value, range, help) {#name, std::is_integral_v<Type> ? "int" : "float"},
constexpr Keyword kOpenKeywords[] = {KVTIER_TIER_NUMBERS(KVTIER_PY_KEYWORD){"mode", "EvictionMode"},
                                     {"policy", "Policy"},
                                     {"protect_prompt", "bool"},
                                     {"key_digest_dim", "int"},
                                     {"tokens_per_position", "int"}};
#undef KVTIER_PY_KEYWORD
#define KVTIER_PY_COUNT(name, Wire) +1
static_assert(0 KVTIER_TIER_CHOICES(KVTIER_PY_COUNT) == 3, "a new tier choice needs its keyword above");
#undef KVTIER_PY_COUNT

std::string open_sequence_signature() {
  std::string sig = "def open_sequence(self, prompt_length: int, *";
  for (const Keyword& k : kOpenKeywords) sig += std::string(", ") + k.name + ": " + k.type + " | None = None";
  return sig + ") -> int";
}

// kwargs[name] into `out` when given and not None; TypeError when it has the wrong type.
template <class T>
void take(const nb::kwargs& kwargs, const char* name, std::optional<T>& out) {
  if (!kwargs.contains(name)) return;
  const nb::handle value = kwargs[name];
  if (value.is_none()) return;
  T parsed{};
  if (!nb::try_cast<T>(value, parsed)) {
    throw nb::type_error(("open_sequence(): " + std::string(name) + " has the wrong type (" +
                          nb::type_name(value.type()).c_str() + ")")
                             .c_str());
  }
  out = parsed;
}

std::uint32_t open_sequence(ClientObject& self, std::uint32_t prompt_length, const nb::kwargs& kwargs) {
  for (const auto [key, value] : kwargs) {
    const std::string name = nb::str(key).c_str();
    bool known = false;
    for (const Keyword& k : kOpenKeywords) known = known || name == k.name;
    if (!known) throw nb::type_error(("open_sequence() got an unexpected keyword argument '" + name + "'").c_str());
  }
  SequenceParams p;
#define KVTIER_PY_TAKE(name, Wire, Type, value, range, help) take(kwargs, #name, p.name);
  KVTIER_TIER_NUMBERS(KVTIER_PY_TAKE)
#undef KVTIER_PY_TAKE
  take(kwargs, "mode", p.mode);
  take(kwargs, "policy", p.policy);
  take(kwargs, "protect_prompt", p.protect_prompt);
  take(kwargs, "key_digest_dim", p.key_digest_dim);
  take(kwargs, "tokens_per_position", p.tokens_per_position);
  nb::gil_scoped_release release;
  return self.open_sequence(prompt_length, p);
}

void bind_engine(nb::class_<ClientObject>& c) {
  c.def("register_model", &PyClient::register_model, "num_layers"_a, "num_kv_heads"_a, "head_dim"_a, "dtype"_a,
        "pool_tokens"_a, "model_name"_a = nb::none(), nb::kw_only(), "int8_pool_tokens"_a = 0, "weight"_a = 0, Release(),
        "Registers the model's KV geometry; the daemon creates this client's DDR pool of pool_tokens rows and, with "
        "int8_pool_tokens > 0, an int8 (T2) pool. weight: this client's share of the node DDR budget under pressure "
        "(0 = 1). Engine role only, once per client.");
  c.def("open_sequence", &open_sequence, "prompt_length"_a, "kwargs"_a, nb::sig(open_sequence_signature().c_str()),
        "Opens a sequence whose first prompt_length positions are the (protected) prompt and returns its id. "
        "Tier parameters left None keep the paper's defaults (k_s 4, k_w 128, interval 64, beta 0.5, r 0); with "
        "none given the daemon's configured defaults apply. int8_ratio / int8_tokens: of the survivors not kept in "
        "T0 the lowest-ranked share goes to the int8 tier T2 (lossy; needs register_model(int8_pool_tokens > 0)). "
        "policy (Policy.PAPER default) ranks the tokens; seed (random, vase), protect_prompt (None: the policy's "
        "default), recent_window (vase, r_kv), value_protect_ratio / value_protect_tokens (vase), rkv_lambda and "
        "key_digest_dim (r_kv) tune it; vase needs push_features(Feature.VALUE_RANGE) and r_kv "
        "push_features(Feature.KEY_DIGEST) for every position. "
        "tokens_per_position: tokens one position stands for (an engine tiering whole blocks passes its block "
        "size; None: 1); the *_tokens parameters and the daemon's defaults are in tokens and kvtierd converts them "
        "(sink, window, hbm, value_protect rounded up; evict, int8 down), prompt_length is in positions. "
        "Out-of-range values raise InvalidArgumentError naming the field.");
  c.def(
      "close_sequence",
      [](ClientObject& self, std::uint32_t sequence) {
        {
          nb::gil_scoped_release release;
          self.close_sequence(sequence);
        }
        // The library dropped the sequence's staging, so its prefetched buffers are free again.
        std::erase_if(self.pins, [sequence](const auto& pin) { return pin.first.first == sequence; });
        self.backends.erase(sequence);
      },
      "sequence"_a,
      "Closes a sequence. An exported one: cancels the export while no adopter holds it, raises BadStateError "
      "while the hand-off plan is in flight, and closes the emptied sequence once it was adopted.");
  c.def(
      "push_scores",
      [](ClientObject& self, std::uint32_t sequence, std::uint32_t step, const FloatVector& scores,
         std::uint32_t first_position) {
        const std::span<const float> values(scores.data(), scores.shape(0));
        nb::gil_scoped_release release;
        self.push_scores(sequence, step, first_position, values);
      },
      "sequence"_a, "step"_a, "scores"_a, "first_position"_a = 0,
      "Publishes one step's per-token scores for positions [first_position, first_position + len(scores)): a 1-D "
      "float32 array (NumPy or any DLPack tensor on the CPU, read in place). Never blocks: when the score ring is "
      "full the records are dropped and counted (counters().score_records_dropped).");
  c.def(
      "push_features",
      [](ClientObject& self, std::uint32_t sequence, kvtier_feature feature, const FloatVector& values,
         std::uint32_t first_position) {
        const std::span<const float> span(values.data(), values.shape(0));
        nb::gil_scoped_release release;
        self.push_features(sequence, feature, first_position, span);
      },
      "sequence"_a, "feature"_a, "values"_a, "first_position"_a = 0,
      "Publishes per-token features from first_position on, for the policies that use them: VALUE_RANGE (vase) one "
      "float per position (max - min of the token's value vector), KEY_DIGEST (r_kv) key_digest_dim floats per "
      "position. A 1-D float32 array; never blocks (full rings drop and count, as scores do).");
  c.def("step_end", &PyClient::step_end, "sequence"_a, "step"_a, Release(),
        "Marks the end of decode step `step` (increasing) after its scores were pushed; the daemon decides tiers "
        "every `interval` ended steps.");
  c.def("poll_plan", &PyClient::poll_plan, "timeout_ms"_a = 0, Release(),
        "The next complete plan, waiting up to timeout_ms (0: poll, < 0: forever); None when none arrived.");
  c.def("ack_plan", &PyClient::ack_plan, "epoch"_a, "applied"_a = true, Release(),
        "Acknowledges a polled plan: applied=True after execute_plan succeeded (the daemon frees the source "
        "slots), False when it was not applied (the daemon rolls back). Epochs are acknowledged in order.");
  c.def("sync", &PyClient::sync, "timeout_ms"_a = 10000, Release(),
        "Waits up to timeout_ms (0: look once, < 0: forever) until kvtierd has consumed every score and step "
        "end and resolved every acknowledgement this client published; every plan decided from them is then on "
        "the ring, so poll_plan(0) returns it. False on timeout. Syncing after each step end makes the step at "
        "which a decision takes effect the same on every run.");
}

void bind_cache(nb::class_<ClientObject>& c) {
  c.def(
      "attach_cache",
      [](ClientObject& self, std::uint32_t sequence, std::vector<std::uintptr_t> k_base,
         std::vector<std::uintptr_t> v_base, std::uint32_t num_kv_heads, std::uint32_t head_dim, kvtier_dtype dtype,
         std::uint32_t num_slots, std::uint32_t block_size, std::size_t token_stride, std::size_t head_stride,
         std::size_t block_stride, kvtier_backend backend) {
        KvLayout layout{num_kv_heads, head_dim,    num_slots,    block_size,        dtype,
                        token_stride, head_stride, block_stride, std::move(k_base), std::move(v_base),
                        backend};
        {
          nb::gil_scoped_release release;
          self.attach_cache(sequence, layout);
        }
        self.backends[sequence] = backend;
      },
      "sequence"_a, nb::kw_only(), "k_base"_a, "v_base"_a, "num_kv_heads"_a, "head_dim"_a, "dtype"_a, "num_slots"_a,
      "block_size"_a, "token_stride"_a, "head_stride"_a, "block_stride"_a = 0, "backend"_a = KVTIER_BACKEND_CPU,
      "Binds a sequence to the engine's KV cache (kvtier_kv_layout). k_base/v_base: one address per layer "
      "(e.g. tensor.data_ptr()); strides in bytes. Slot s of layer l, head h starts at k_base[l] + "
      "(s // block_size) * block_stride + (s % block_size) * token_stride + h * head_stride, so HF "
      "[heads, slots, dim] tensors use block_size = num_slots. The memory must outlive the sequence.");
  c.def(
      "execute_plan",
      [](ClientObject& self, const Plan& plan, const SlotVector& hbm_slots) {
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
      [](ClientObject& self, std::uint32_t sequence, std::uint32_t layer, const Buffer& buffer,
         kvtier_staging_order order) {
        self.check_buffer(sequence, buffer);
        void* data = buffer.data();
        const std::size_t capacity = buffer.nbytes();
        nb::gil_scoped_release release;
        return self.stage_layer(sequence, layer, order, data, capacity);
      },
      "sequence"_a, "layer"_a, "buffer"_a, "order"_a = KVTIER_STAGE_POSITION_ORDER,
      "Copies layer `layer`'s T1 rows of the sequence from the pool into `buffer` (a writable, C-contiguous array "
      "of any dtype with at least t1_rows(sequence)[1] bytes: host memory, or CUDA memory for a sequence attached "
      "with Backend.CUDA) and says where K and V landed.");
}

void bind_staging(nb::class_<ClientObject>& c) {
  c.def(
      "stage_prefetch",
      [](ClientObject& self, std::uint32_t sequence, std::uint32_t layer, const Buffer& buffer,
         kvtier_staging_order order) {
        self.check_buffer(sequence, buffer);
        const ClientObject::StageKey key{sequence, layer};
        void* data = buffer.data();
        const std::size_t capacity = buffer.nbytes();
        // Pinned before the call so that no wait can miss it; a layer already in flight keeps its
        // own pin (the library refuses the second prefetch).
        const bool pinned = self.pins.try_emplace(key, buffer).second;
        try {
          nb::gil_scoped_release release;
          self.stage_prefetch(sequence, layer, order, data, capacity);
        } catch (...) {
          if (pinned) self.pins.erase(key);
          throw;
        }
      },
      "sequence"_a, "layer"_a, "buffer"_a, "order"_a = KVTIER_STAGE_POSITION_ORDER,
      "Issues the staging of layer `layer`'s T1 rows into `buffer` (as stage_layer) and returns; stage_wait "
      "completes it. The client holds a reference to `buffer` until then. At most two layers in flight per "
      "sequence: prefetch layer l + 1 while layer l computes. A layer already in flight, a third one, or "
      "execute_plan while one is in flight raise BadStateError.");
  c.def(
      "stage_wait",
      [](ClientObject& self, std::uint32_t sequence, std::uint32_t layer) {
        Buffer pin;  // released after the call, with the GIL held again (declared before `release`)
        if (const auto it = self.pins.find({sequence, layer}); it != self.pins.end()) {
          pin = std::move(it->second);
          self.pins.erase(it);
        }
        const void* base = pin.data();
        nb::gil_scoped_release release;
        return self.stage_wait(sequence, layer, base);
      },
      "sequence"_a, "layer"_a,
      "Completes stage_prefetch(sequence, layer, buffer) and says where K and V landed in that buffer (as "
      "stage_layer). BadStateError for a layer not prefetched.");
  c.def(
      "stage_at",
      [](ClientObject& self, std::uint32_t sequence, std::uint32_t layer, std::uintptr_t k, std::uintptr_t v,
         std::size_t rows, std::size_t token_stride, std::size_t head_stride, std::size_t row_offset) {
        kvtier_stage_target target;
        kvtier_stage_target_init(&target);
        target.k = k;
        target.v = v;
        target.rows = rows;
        target.token_stride = token_stride;
        target.head_stride = head_stride;
        target.row_offset = row_offset;
        nb::gil_scoped_release release;
        self.stage_at(sequence, layer, target);
      },
      "sequence"_a, "layer"_a, nb::kw_only(), "k"_a, "v"_a, "rows"_a, "token_stride"_a, "head_stride"_a,
      "row_offset"_a = 0,
      "Stages layer `layer`'s T1 and T2 rows straight to their positions in the engine's host memory "
      "(kvtier_stage_layer_at): KV head h of position p at k + (p + row_offset) * token_stride + h * "
      "head_stride (V from v), strides in bytes, every p + row_offset below rows (e.g. an HF [kv_heads, length, "
      "head_dim] tensor's data_ptr()). One copy per row, no staging buffer; complete on return. CPU backend "
      "only (UnavailableError on CUDA); InvalidArgumentError, nothing written, for a position outside; "
      "BadStateError while a layer is prefetched.");
  c.def(
      "attend",
      [](ClientObject& self, std::uint32_t sequence, std::uint32_t layer, const QueryRows& q, float scale,
         OutRows out, OutVector lse, std::optional<SlotVector> t0_slots, std::size_t t0_tokens, bool keys_dim_major,
         std::optional<OutRows> probs, std::optional<OutVector> scores) {
        const std::size_t heads = q.shape(0);
        const auto bad = [](const std::string& what) { throw StatusError(KVTIER_E_INVALID_ARGUMENT, "attend: " + what); };
        if (heads > UINT32_MAX || q.shape(1) > UINT32_MAX) bad("q is too large");
        if (out.shape(0) != heads || out.shape(1) != q.shape(1)) bad("out must have q's shape");
        if (lse.shape(0) != heads) bad("lse must have one entry per query head");
        if (probs && probs->shape(0) != heads) bad("probs must have one row per query head");
        kvtier_attention a;
        kvtier_attention_init(&a);
        a.q = q.data();
        a.q_heads = static_cast<std::uint32_t>(heads);
        a.head_dim = static_cast<std::uint32_t>(q.shape(1));
        a.scale = scale;
        a.out = out.data();
        a.lse = lse.data();
        if (t0_slots) {
          a.t0_slots = t0_slots->data();
          a.t0_count = t0_slots->shape(0);
        }
        a.t0_tokens = t0_tokens;
        a.keys_dim_major = keys_dim_major ? 1 : 0;
        if (probs) {
          a.probs = probs->data();
          a.probs_stride = probs->shape(1);
        }
        if (scores) {  // libkvtier checks it has one entry per row
          a.scores = scores->data();
          a.scores_count = scores->shape(0);
        }
        nb::gil_scoped_release release;
        self.attend(sequence, layer, a);
      },
      "sequence"_a, "layer"_a, nb::kw_only(), "q"_a, "scale"_a, "out"_a, "lse"_a, "t0_slots"_a = nb::none(),
      "t0_tokens"_a = 0, "keys_dim_major"_a = false, "probs"_a = nb::none(), "scores"_a = nb::none(),
      "One decode query's attention over layer `layer`'s rows where they live, on the CPU (kvtier_attend): the "
      "attached cache's slots t0_slots (uint32, may be omitted), then the T1 and T2 rows in ascending positions. "
      "q: [q_heads, head_dim] float32, head_dim the cache's or a divisor of it: a slot then holds cache head_dim / "
      "head_dim tokens per head (vLLM's blocks), each one row, and t0_tokens (0: all) is how many tokens of the "
      "T0 slots count (only the last slot may give fewer); keys_dim_major: a slot's keys are stored dim-major per "
      "head (element e of token t at e * tokens + t: vLLM's CPU backend), values token-major. Writes out "
      "[q_heads, head_dim] and lse [q_heads] "
      "(natural log, -inf with no rows: a partial result merges with other keys by log-sum-exp) and, when given, "
      "probs [q_heads, >= rows]: row i's weight exp(scale * q.k - lse) per head in column i; scores [rows]: adds "
      "every head's weight of row i. Contiguous float32 CPU arrays or tensors. Complete on return. CPU backend "
      "only (UnavailableError on CUDA); InvalidArgumentError, nothing written, for bad shapes, slots or layer; "
      "BadStateError while a layer is prefetched.");
  c.def("set_stream", &PyClient::set_stream, "sequence"_a, "stream"_a, Release(),
        "The engine's compute stream for this sequence's copies (a cudaStream_t as an int, e.g. "
        "torch.cuda.current_stream().cuda_stream; 0 = none). Copies then wait for work already queued on it and "
        "stage_wait makes the stream wait instead of blocking. The CPU backend ignores it. Needs an attached "
        "cache.");
}

void bind_handoff(nb::class_<ClientObject>& c) {
  c.def(
      "export_sequence",
      [](ClientObject& self, std::uint32_t sequence, std::uintptr_t base, std::uint64_t nbytes,
         const SlotList& t0_positions, const SlotList& t0_slots, kvtier_buffer_kind kind, int fd,
         std::uint64_t buffer_id) {
        kvtier_export_buffer buffer;
        kvtier_export_buffer_init(&buffer);
        buffer.kind = kind;
        buffer.fd = fd;
        buffer.base = base;
        buffer.bytes = nbytes;
        buffer.buffer_id = buffer_id;
        const auto positions = as_span(t0_positions), slots = as_span(t0_slots);
        nb::gil_scoped_release release;
        return self.export_sequence(sequence, buffer, positions, slots);
      },
      "sequence"_a, nb::kw_only(), "base"_a, "nbytes"_a, "t0_positions"_a, "t0_slots"_a,
      "kind"_a = KVTIER_BUFFER_HOST_FD, "fd"_a = -1, "buffer_id"_a = 0,
      "Freezes the sequence for a hand-off to another engine process and returns the token (an int) the "
      "adopter passes to adopt_sequence. The one allocation [base, base + nbytes) holds the attached cache: "
      "kind HOST_FD names it by fd (memfd, shm; the library sends a copy, the caller keeps fd), CUDA_IPC by "
      "base, CUDA_VMM_FD by fd and buffer_id. t0_positions (ascending) are exactly the sequence's T0 positions "
      "and t0_slots their cache slots (uint32 arrays, read in place, or sequences of ints). Keep the cache "
      "alive and the sequence open until the adopter is done, then close_sequence. BadStateError while a plan "
      "for the sequence is in flight (execute and ack it, then export again) or when already exported; "
      "InvalidArgumentError naming the field for a buffer that does not hold the cache or a T0 list that differs "
      "from the daemon's.");
  c.def("adopt_sequence", &PyClient::adopt_sequence, "token"_a, Release(),
        "Adopts an exported sequence; returns Adopted (the new sequence's id here, prompt_length, positions "
        "seen, exporter_pid). Then attach_cache for it; the next plan for it is the hand-off: moves from "
        "Tier.PEER into T0 (copied from the exporter's slot src_slot into hbm_slots[i]) and into T1 / T2 "
        "(already in this client's pool); execute_plan and ack_plan it. NotFoundError for an unknown, used or "
        "cancelled token; InvalidArgumentError for a different model geometry; LimitExceededError when the "
        "pools lack room; PermissionDeniedError for another user; UnavailableError when the exporter's buffer "
        "cannot be opened.");
}

}  // namespace

void bind_client(nb::module_& m) {
  nb::class_<ClientObject> c(m, "Client", kClientDoc);
  bind_lifecycle(c);
  bind_engine(c);
  bind_cache(c);
  bind_staging(c);
  bind_handoff(c);
}

}  // namespace kvtier::python
