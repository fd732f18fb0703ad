"""
Low-level binding of libkvtier's C ABI (kvtier.h). Import `kvtier` instead.
"""

from collections.abc import Sequence
import enum
from typing import Annotated

import numpy
from numpy.typing import NDArray


class Status(enum.IntEnum):
    """Status codes of the C ABI (kvtier_status)."""

    OK = 0

    INVALID_ARGUMENT = 1

    VERSION_MISMATCH = 2

    PROTOCOL = 3

    LIMIT_EXCEEDED = 4

    NOT_FOUND = 5

    PERMISSION_DENIED = 6

    UNAVAILABLE = 7

    OS = 8

    BAD_STATE = 9

    INTERNAL = 10

    TIMEOUT = 11

class DType(enum.IntEnum):
    """Element type of the KV cache."""

    F16 = 0

    BF16 = 1

    F32 = 2

class Role(enum.IntEnum):
    ENGINE = 0

    ADMIN = 1

class Tier(enum.IntEnum):
    """
    T0 engine cache, T1 DDR pool, T2 int8 pool, T3 evicted; PEER: the exporter's cache.
    """

    T0 = 0

    T1 = 1

    T2 = 2

    T3 = 3

    PEER = 4
    """
    from_tier of hand-off moves only: the exporter's cache (adopt_sequence)
    """

class EventKind(enum.IntEnum):
    """What kvtierd decided (kvtier_event_kind)."""

    PRESSURE_DEMOTION = 0
    """a relief plan quantized `tokens` T1 rows to T2"""

    PRESSURE_EVICTION = 1
    """a relief plan destroyed `tokens` T1 tokens (T3)"""

    BACKPRESSURE = 2
    """a plan kept `tokens` tokens where they were"""

    PLAN_FAILED = 3
    """the client reported a plan as not applied: rolled back"""

    RECLAIM = 4
    """the client's process exited; what it held was freed"""

    SESSION_ERROR = 5
    """kvtierd ended the client's session"""

class Backpressure(enum.IntEnum):
    """Why the daemon last kept tokens in T0 for lack of a host row."""

    NONE = 0

    POOL_FULL = 1
    """this client's DDR pool is full"""

    NODE_BUDGET = 2
    """the node-wide DDR budget is spent"""

class EvictionMode(enum.IntEnum):
    CUMULATIVE = 0
    """evict_ratio = fraction of the managed chain ever destroyed"""

    PAPER_ALGORITHM = 1
    """evict_ratio re-applied every round (compounds)"""

    PAPER_PROTOTYPE = 2
    """ratios over GPU-resident tokens only"""

class Policy(enum.IntEnum):
    """Which tokens matter (kvtier_policy)."""

    PAPER = 0
    """cumulative attention"""

    H2O = 1
    """accumulated attention: heavy hitters + recent"""

    STREAMING_LLM = 2
    """sinks + window"""

    RANDOM = 3
    """keep the prompt, uniform random over the rest"""

    VASE = 4
    """largest value ranges + sampling by recent attention; needs VALUE_RANGE"""

    R_KV = 5
    """importance minus key redundancy; needs KEY_DIGEST"""

class Feature(enum.IntEnum):
    """Per-token features some policies need."""

    VALUE_RANGE = 2
    """vase: max - min of the token's value vector"""

    KEY_DIGEST = 3
    """r_kv: key_digest_dim floats per position"""

class Handoff(enum.IntEnum):
    """A sequence's hand-off state (kvtier_handoff)."""

    NONE = 0

    EXPORTED = 1
    """frozen in its exporter, waiting for an adopter"""

    ADOPTING = 2
    """the adopter's hand-off plan is in flight"""

    HANDED_OFF = 3
    """adopted: the exporter's copy holds nothing"""

    ADOPTED = 4
    """this copy came from another process"""

class BufferKind(enum.IntEnum):
    """
    The allocation holding an exported sequence's cache (kvtier_buffer_kind).
    """

    HOST_FD = 0
    """shared host memory (memfd, shm) named by fd"""

    CUDA_IPC = 1
    """a cudaMalloc allocation starting at base"""

    CUDA_VMM_FD = 2
    """a cuMem VMM allocation exported as a POSIX fd"""

class Backend(enum.IntEnum):
    CPU = 0

    CUDA = 1

class StagingOrder(enum.IntEnum):
    POSITION_ORDER = 0
    """rows by ascending position: bit-exact merges"""

    COMPACT = 1
    """rows in pool order: exact within fp reordering"""

class Versions:
    """Both sides' protocol and layout versions (kvtier_versions)."""

    @property
    def client_protocol_major(self) -> int: ...

    @property
    def client_protocol_minor(self) -> int: ...

    @property
    def client_layout_version(self) -> int: ...

    @property
    def client_layout_fingerprint(self) -> int: ...

    @property
    def daemon_protocol_major(self) -> int: ...

    @property
    def daemon_protocol_minor(self) -> int: ...

    @property
    def daemon_layout_version(self) -> int: ...

    @property
    def daemon_layout_fingerprint(self) -> int: ...

    @property
    def daemon_epoch(self) -> int: ...

    @property
    def client_id(self) -> int: ...

    @property
    def daemon_version(self) -> str: ...

class Counters:
    """This client's data-plane counters."""

    @property
    def score_records_pushed(self) -> int: ...

    @property
    def score_records_dropped(self) -> int:
        """
        Score records dropped because the ring was full (push_scores never blocks).
        """

    @property
    def plan_records_received(self) -> int: ...

    @property
    def plans_acked(self) -> int: ...

    @property
    def backpressure_tokens(self) -> int:
        """Tokens the daemon kept in T0 for lack of a host row, so far."""

    @property
    def backpressure_reason(self) -> int:
        """
        Backpressure value of the latest such notice (an int: the daemon's word, not checked).
        """

    @property
    def daemon_losses(self) -> int:
        """
        Times the daemon's end of the connection was found gone (it crashed or stopped).
        """

    @property
    def reattachments(self) -> int:
        """
        Successful reattachments of this client's pools and sequences to a restarted daemon.
        """

    @property
    def detached(self) -> int:
        """1 while no daemon is attached (no plans meanwhile)."""

    @property
    def reattach_refused(self) -> int:
        """1 once a restarted daemon refused the reattachment (no more attempts)."""

class Adopted:
    """A sequence adopted from another engine process (kvtier_adopted)."""

    @property
    def sequence(self) -> int:
        """The adopted sequence's id in this client."""

    @property
    def prompt_length(self) -> int: ...

    @property
    def positions(self) -> int:
        """Positions the sequence has seen: the next token's position."""

    @property
    def exporter_pid(self) -> int: ...

    def __repr__(self) -> str: ...

class Move:
    """One token changing tier (kvtier_plan_move)."""

    @property
    def position(self) -> int:
        """Absolute token position; never changes with the tier."""

    @property
    def from_tier(self) -> Tier: ...

    @property
    def to_tier(self) -> Tier: ...

    @property
    def src_slot(self) -> int:
        """
        Pool row read (T1 / T2 source); for a PEER move the exporter's cache slot; else NO_SLOT.
        """

    @property
    def dst_slot(self) -> int:
        """
        Pool row written (T1 / T2 destination; for a PEER move already filled by kvtierd), else NO_SLOT.
        """

    def __repr__(self) -> str: ...

class Plan:
    """
    A differential tier plan for one sequence, copied out of the plan ring. Execute it with Client.execute_plan, then acknowledge it with Client.ack_plan.
    """

    @property
    def epoch(self) -> int: ...

    @property
    def sequence(self) -> int: ...

    @property
    def moves(self) -> list[Move]:
        """The moves, in position order."""

    def __len__(self) -> int: ...

    @property
    def positions(self) -> Annotated[NDArray[numpy.uint32], dict(shape=(None,))]:
        """Positions of the moves (uint32 array)."""

    @property
    def from_tiers(self) -> Annotated[NDArray[numpy.uint8], dict(shape=(None,))]:
        """Source tier of each move (uint8 array of Tier values)."""

    @property
    def to_tiers(self) -> Annotated[NDArray[numpy.uint8], dict(shape=(None,))]:
        """Destination tier of each move (uint8 array of Tier values)."""

    @property
    def src_slots(self) -> Annotated[NDArray[numpy.uint32], dict(shape=(None,))]: ...

    @property
    def dst_slots(self) -> Annotated[NDArray[numpy.uint32], dict(shape=(None,))]: ...

    def __repr__(self) -> str: ...

class StagedLayer:
    """
    One layer's T1 rows staged into the caller's buffer (stage_layer, stage_wait): K at byte k_offset and V at v_offset, each [rows, num_kv_heads, head_dim] in the registered dtype.
    """

    @property
    def layer(self) -> int: ...

    @property
    def rows(self) -> int: ...

    @property
    def positions(self) -> Annotated[NDArray[numpy.uint32], dict(shape=(None,))]:
        """Absolute position of each row (uint32 array)."""

    @property
    def k_offset(self) -> int: ...

    @property
    def v_offset(self) -> int: ...

class SequenceInfo:
    """One sequence as the daemon sees it (admin status)."""

    @property
    def sequence_id(self) -> int: ...

    @property
    def prompt_length(self) -> int: ...

    @property
    def tokens(self) -> int: ...

    @property
    def tokens_t0(self) -> int: ...

    @property
    def tokens_t1(self) -> int: ...

    @property
    def tokens_t2(self) -> int: ...

    @property
    def tokens_t3(self) -> int: ...

    @property
    def destroyed_fraction(self) -> float:
        """T3 / managed tokens: the eviction applied."""

    @property
    def hbm_ratio(self) -> float: ...

    @property
    def evict_ratio(self) -> float: ...

    @property
    def mode(self) -> EvictionMode: ...

    @property
    def int8_ratio(self) -> float: ...

    @property
    def handoff(self) -> Handoff:
        """Hand-off state (sequences moved between engine processes)."""

class ClientInfo:
    """One connected client (admin status)."""

    @property
    def client_id(self) -> int: ...

    @property
    def pid(self) -> int: ...

    @property
    def uid(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def model_name(self) -> str: ...

    @property
    def num_layers(self) -> int: ...

    @property
    def num_kv_heads(self) -> int: ...

    @property
    def head_dim(self) -> int: ...

    @property
    def dtype(self) -> DType: ...

    @property
    def pool_slots(self) -> int: ...

    @property
    def pool_slots_used(self) -> int: ...

    @property
    def score_records(self) -> int: ...

    @property
    def scores_dropped(self) -> int: ...

    @property
    def plans_sent(self) -> int: ...

    @property
    def plans_acked(self) -> int: ...

    @property
    def errors(self) -> int: ...

    @property
    def backpressure_tokens(self) -> int:
        """
        Moves to host memory refused for lack of a row: the tokens stayed in T0.
        """

    @property
    def weight(self) -> int:
        """Share of the node DDR budget under pressure."""

    @property
    def ddr_bytes_used(self) -> int: ...

    @property
    def ddr_share_bytes(self) -> int:
        """Weighted share of the node DDR budget; 0: no budget."""

    @property
    def int8_slots(self) -> int: ...

    @property
    def int8_slots_used(self) -> int: ...

    @property
    def t2_demotions(self) -> int:
        """Tokens quantized T1 -> T2 by policy decisions."""

    @property
    def pressure_demotions(self) -> int:
        """Tokens quantized T1 -> T2 under node pressure."""

    @property
    def pressure_evictions(self) -> int:
        """Tokens evicted (T3) under node pressure."""

    @property
    def int8_trimmed(self) -> int:
        """T1 -> T2 moves dropped because the int8 pool was full."""

    @property
    def last_backpressure(self) -> Backpressure: ...

    @property
    def closing(self) -> bool:
        """
        Disconnected while its process lives: its pools stay its own until it exits.
        """

    @property
    def sequences(self) -> list[SequenceInfo]: ...

class DaemonStatus:
    """The daemon's status report (kvtier_daemon_status_get)."""

    @property
    def daemon_version(self) -> str: ...

    @property
    def daemon_epoch(self) -> int: ...

    @property
    def uptime_seconds(self) -> int: ...

    @property
    def ddr_bytes_total(self) -> int:
        """0: no node-wide cap."""

    @property
    def ddr_bytes_used(self) -> int: ...

    @property
    def int8_bytes_total(self) -> int:
        """0: no node-wide int8 cap."""

    @property
    def int8_bytes_used(self) -> int: ...

    @property
    def metrics_address(self) -> str:
        """
        ADDRESS:PORT where kvtierd serves Prometheus metrics at /metrics; empty: off.
        """

    @property
    def clients(self) -> list[ClientInfo]: ...

class Event:
    """One decision kvtierd recorded about a client (kvtier_event)."""

    @property
    def sequence(self) -> int:
        """1, 2, ...: the order kvtierd recorded events in."""

    @property
    def unix_ms(self) -> int: ...

    @property
    def kind(self) -> EventKind: ...

    @property
    def client_id(self) -> int: ...

    @property
    def client_name(self) -> str: ...

    @property
    def sequence_id(self) -> int:
        """0: not about one sequence."""

    @property
    def tokens(self) -> int:
        """0: not about tokens."""

    @property
    def detail(self) -> str:
        """The daemon's text, untrusted: escape it before printing."""

class DaemonEvents:
    """kvtierd's newest events (kvtier_daemon_events_get)."""

    @property
    def events(self) -> list[Event]:
        """Oldest first."""

    @property
    def capacity(self) -> int:
        """Events kvtierd keeps; older ones are dropped."""

    @property
    def recorded(self) -> int:
        """Events recorded since kvtierd started."""

class Placement:
    """
    A sequence's committed placement, all pages (kvtier_sequence_placement_get).
    """

    @property
    def length(self) -> int:
        """Positions the sequence has, T3 included."""

    @property
    def runs(self) -> list[tuple[Tier, int]]:
        """(Tier, positions) runs in position order."""

class Client:
    """
    A connection to kvtierd (one libkvtier client handle).

    Client(socket_path=None, name=None, role=Role.ENGINE) connects and performs the version
    handshake; socket_path None means $KVTIER_SOCKET or /run/kvtier/kvtierd.sock. An engine then
    calls register_model once, opens sequences, attaches its KV cache to each and runs the step
    loop: poll_plan / execute_plan / ack_plan, stage_layer (or stage_prefetch / stage_wait) before
    each layer's attention, push_scores, step_end. export_sequence / adopt_sequence hand a sequence
    to another engine process. Failures raise kvtier.KvtierError subclasses carrying .status,
    .status_name and .message. Use as a context manager or call close(); one thread at a time
    (calls are serialised).
    """

    def __init__(self, socket_path: str | None = None, name: str | None = None, role: Role = Role.ENGINE) -> None: ...

    def close(self) -> None:
        """Disconnects; the daemon reclaims this client's sequences and pool."""

    @property
    def closed(self) -> bool: ...

    def __enter__(self) -> Client: ...

    def __exit__(self, exc_type: object | None, exc: object | None, tb: object | None) -> None: ...

    def versions(self) -> Versions:
        """Protocol and layout versions of both sides."""

    @property
    def last_error(self) -> str:
        """Detail of the last failed call on this handle."""

    def counters(self) -> Counters: ...

    def status(self) -> DaemonStatus:
        """
        The daemon's status report. Needs a client connected with Role.ADMIN (and the daemon's admin group).
        """

    def events(self, limit: int = 64) -> DaemonEvents:
        """
        kvtierd's newest `limit` events (1..capacity, else InvalidArgumentError): relief plans, backpressure, failed plans, reclaims, ended sessions. Role.ADMIN only.
        """

    def placement(self, client_id: int, sequence_id: int) -> Placement:
        """
        The committed placement of another client's sequence as (Tier, positions) runs, every page fetched. Role.ADMIN only; NotFoundError for an unknown client or sequence.
        """

    def register_model(self, num_layers: int, num_kv_heads: int, head_dim: int, dtype: DType, pool_tokens: int, model_name: str | None = None, *, int8_pool_tokens: int = 0, weight: int = 0) -> None:
        """
        Registers the model's KV geometry; the daemon creates this client's DDR pool of pool_tokens rows and, with int8_pool_tokens > 0, an int8 (T2) pool. weight: this client's share of the node DDR budget under pressure (0 = 1). Engine role only, once per client.
        """

    def open_sequence(self, prompt_length: int, *, sink_tokens: int | None = None, window_tokens: int | None = None, interval: int | None = None, hbm_ratio: float | None = None, evict_ratio: float | None = None, hysteresis: float | None = None, decay: float | None = None, hbm_tokens: int | None = None, evict_tokens: int | None = None, seed: int | None = None, recent_window: int | None = None, value_protect_ratio: float | None = None, value_protect_tokens: int | None = None, rkv_lambda: float | None = None, int8_ratio: float | None = None, int8_tokens: int | None = None, mode: EvictionMode | None = None, policy: Policy | None = None, protect_prompt: bool | None = None, key_digest_dim: int | None = None, tokens_per_position: int | None = None) -> int:
        """
        Opens a sequence whose first prompt_length positions are the (protected) prompt and returns its id. Tier parameters left None keep the paper's defaults (k_s 4, k_w 128, interval 64, beta 0.5, r 0); with none given the daemon's configured defaults apply. int8_ratio / int8_tokens: of the survivors not kept in T0 the lowest-ranked share goes to the int8 tier T2 (lossy; needs register_model(int8_pool_tokens > 0)). policy (Policy.PAPER default) ranks the tokens; seed (random, vase), protect_prompt (None: the policy's default), recent_window (vase, r_kv), value_protect_ratio / value_protect_tokens (vase), rkv_lambda and key_digest_dim (r_kv) tune it; vase needs push_features(Feature.VALUE_RANGE) and r_kv push_features(Feature.KEY_DIGEST) for every position. tokens_per_position: tokens one position stands for (an engine tiering whole blocks passes its block size; None: 1); the *_tokens parameters and the daemon's defaults are in tokens and kvtierd converts them (sink, window, hbm, value_protect rounded up; evict, int8 down), prompt_length is in positions. Out-of-range values raise InvalidArgumentError naming the field.
        """

    def close_sequence(self, sequence: int) -> None:
        """
        Closes a sequence. An exported one: cancels the export while no adopter holds it, raises BadStateError while the hand-off plan is in flight, and closes the emptied sequence once it was adopted.
        """

    def push_scores(self, sequence: int, step: int, scores: Annotated[NDArray[numpy.float32], dict(shape=(None,), order='C', device='cpu', writable=False)], first_position: int = 0) -> None:
        """
        Publishes one step's per-token scores for positions [first_position, first_position + len(scores)): a 1-D float32 array (NumPy or any DLPack tensor on the CPU, read in place). Never blocks: when the score ring is full the records are dropped and counted (counters().score_records_dropped).
        """

    def push_features(self, sequence: int, feature: Feature, values: Annotated[NDArray[numpy.float32], dict(shape=(None,), order='C', device='cpu', writable=False)], first_position: int = 0) -> None:
        """
        Publishes per-token features from first_position on, for the policies that use them: VALUE_RANGE (vase) one float per position (max - min of the token's value vector), KEY_DIGEST (r_kv) key_digest_dim floats per position. A 1-D float32 array; never blocks (full rings drop and count, as scores do).
        """

    def step_end(self, sequence: int, step: int) -> None:
        """
        Marks the end of decode step `step` (increasing) after its scores were pushed; the daemon decides tiers every `interval` ended steps.
        """

    def poll_plan(self, timeout_ms: int = 0) -> Plan | None:
        """
        The next complete plan, waiting up to timeout_ms (0: poll, < 0: forever); None when none arrived.
        """

    def ack_plan(self, epoch: int, applied: bool = True) -> None:
        """
        Acknowledges a polled plan: applied=True after execute_plan succeeded (the daemon frees the source slots), False when it was not applied (the daemon rolls back). Epochs are acknowledged in order.
        """

    def sync(self, timeout_ms: int = 10000) -> bool:
        """
        Waits up to timeout_ms (0: look once, < 0: forever) until kvtierd has consumed every score and step end and resolved every acknowledgement this client published; every plan decided from them is then on the ring, so poll_plan(0) returns it. False on timeout. Syncing after each step end makes the step at which a decision takes effect the same on every run.
        """

    def attach_cache(self, sequence: int, *, k_base: Sequence[int], v_base: Sequence[int], num_kv_heads: int, head_dim: int, dtype: DType, num_slots: int, block_size: int, token_stride: int, head_stride: int, block_stride: int = 0, backend: Backend = Backend.CPU) -> None:
        """
        Binds a sequence to the engine's KV cache (kvtier_kv_layout). k_base/v_base: one address per layer (e.g. tensor.data_ptr()); strides in bytes. Slot s of layer l, head h starts at k_base[l] + (s // block_size) * block_stride + (s % block_size) * token_stride + h * head_stride, so HF [heads, slots, dim] tensors use block_size = num_slots. The memory must outlive the sequence.
        """

    def execute_plan(self, plan: Plan, hbm_slots: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> None:
        """
        Executes a plan's copies. hbm_slots[i] (uint32) is the engine cache slot of move i where it touches T0: the slot the token occupies for moves out of T0, the slot reserved for it for moves into T0; NO_SLOT elsewhere. On success ack_plan(epoch, True); on failure nothing changed: ack_plan(epoch, False).
        """

    def t1_rows(self, sequence: int) -> tuple[int, int]:
        """(rows, bytes) a stage_layer of this sequence needs now."""

    def stage_layer(self, sequence: int, layer: int, buffer: Annotated[NDArray, dict(order='C')], order: StagingOrder = StagingOrder.POSITION_ORDER) -> StagedLayer:
        """
        Copies layer `layer`'s T1 rows of the sequence from the pool into `buffer` (a writable, C-contiguous array of any dtype with at least t1_rows(sequence)[1] bytes: host memory, or CUDA memory for a sequence attached with Backend.CUDA) and says where K and V landed.
        """

    def stage_prefetch(self, sequence: int, layer: int, buffer: Annotated[NDArray, dict(order='C')], order: StagingOrder = StagingOrder.POSITION_ORDER) -> None:
        """
        Issues the staging of layer `layer`'s T1 rows into `buffer` (as stage_layer) and returns; stage_wait completes it. The client holds a reference to `buffer` until then. At most two layers in flight per sequence: prefetch layer l + 1 while layer l computes. A layer already in flight, a third one, or execute_plan while one is in flight raise BadStateError.
        """

    def stage_wait(self, sequence: int, layer: int) -> StagedLayer:
        """
        Completes stage_prefetch(sequence, layer, buffer) and says where K and V landed in that buffer (as stage_layer). BadStateError for a layer not prefetched.
        """

    def stage_at(self, sequence: int, layer: int, *, k: int, v: int, rows: int, token_stride: int, head_stride: int, row_offset: int = 0) -> None:
        """
        Stages layer `layer`'s T1 and T2 rows straight to their positions in the engine's host memory (kvtier_stage_layer_at): KV head h of position p at k + (p + row_offset) * token_stride + h * head_stride (V from v), strides in bytes, every p + row_offset below rows (e.g. an HF [kv_heads, length, head_dim] tensor's data_ptr()). One copy per row, no staging buffer; complete on return. CPU backend only (UnavailableError on CUDA); InvalidArgumentError, nothing written, for a position outside; BadStateError while a layer is prefetched.
        """

    def attend(self, sequence: int, layer: int, *, q: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu', writable=False)], scale: float, out: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu')], lse: Annotated[NDArray[numpy.float32], dict(shape=(None,), order='C', device='cpu')], t0_slots: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order='C', device='cpu', writable=False)] | None = None, t0_tokens: int = 0, keys_dim_major: bool = False, probs: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu')] | None = None, scores: Annotated[NDArray[numpy.float32], dict(shape=(None,), order='C', device='cpu')] | None = None) -> None:
        """
        One decode query's attention over layer `layer`'s rows where they live, on the CPU (kvtier_attend): the attached cache's slots t0_slots (uint32, may be omitted), then the T1 and T2 rows in ascending positions. q: [q_heads, head_dim] float32, head_dim the cache's or a divisor of it: a slot then holds cache head_dim / head_dim tokens per head (vLLM's blocks), each one row, and t0_tokens (0: all) is how many tokens of the T0 slots count (only the last slot may give fewer); keys_dim_major: a slot's keys are stored dim-major per head (element e of token t at e * tokens + t: vLLM's CPU backend), values token-major. Writes out [q_heads, head_dim] and lse [q_heads] (natural log, -inf with no rows: a partial result merges with other keys by log-sum-exp) and, when given, probs [q_heads, >= rows]: row i's weight exp(scale * q.k - lse) per head in column i; scores [rows]: adds every head's weight of row i. Contiguous float32 CPU arrays or tensors. Complete on return. CPU backend only (UnavailableError on CUDA); InvalidArgumentError, nothing written, for bad shapes, slots or layer; BadStateError while a layer is prefetched.
        """

    def set_stream(self, sequence: int, stream: int) -> None:
        """
        The engine's compute stream for this sequence's copies (a cudaStream_t as an int, e.g. torch.cuda.current_stream().cuda_stream; 0 = none). Copies then wait for work already queued on it and stage_wait makes the stream wait instead of blocking. The CPU backend ignores it. Needs an attached cache.
        """

    def export_sequence(self, sequence: int, *, base: int, nbytes: int, t0_positions: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order='C', device='cpu', writable=False)] | Sequence[int], t0_slots: Annotated[NDArray[numpy.uint32], dict(shape=(None,), order='C', device='cpu', writable=False)] | Sequence[int], kind: BufferKind = BufferKind.HOST_FD, fd: int = -1, buffer_id: int = 0) -> int:
        """
        Freezes the sequence for a hand-off to another engine process and returns the token (an int) the adopter passes to adopt_sequence. The one allocation [base, base + nbytes) holds the attached cache: kind HOST_FD names it by fd (memfd, shm; the library sends a copy, the caller keeps fd), CUDA_IPC by base, CUDA_VMM_FD by fd and buffer_id. t0_positions (ascending) are exactly the sequence's T0 positions and t0_slots their cache slots (uint32 arrays, read in place, or sequences of ints). Keep the cache alive and the sequence open until the adopter is done, then close_sequence. BadStateError while a plan for the sequence is in flight (execute and ack it, then export again) or when already exported; InvalidArgumentError naming the field for a buffer that does not hold the cache or a T0 list that differs from the daemon's.
        """

    def adopt_sequence(self, token: int) -> Adopted:
        """
        Adopts an exported sequence; returns Adopted (the new sequence's id here, prompt_length, positions seen, exporter_pid). Then attach_cache for it; the next plan for it is the hand-off: moves from Tier.PEER into T0 (copied from the exporter's slot src_slot into hbm_slots[i]) and into T1 / T2 (already in this client's pool); execute_plan and ack_plan it. NotFoundError for an unknown, used or cancelled token; InvalidArgumentError for a different model geometry; LimitExceededError when the pools lack room; PermissionDeniedError for another user; UnavailableError when the exporter's buffer cannot be opened.
        """

def block_scores(query: Annotated[NDArray[numpy.float32], dict(shape=(None, None, None), order='C', device='cpu', writable=False)], keys: Annotated[NDArray, dict(shape=(None, None, None, None), device='cpu')], block_table: Annotated[NDArray[numpy.int32], dict(shape=(None, None), order='C', device='cpu', writable=False)], seq_lens: Annotated[NDArray[numpy.int32], dict(shape=(None,), order='C', device='cpu', writable=False)], query_start: Annotated[NDArray[numpy.int32], dict(shape=(None,), order='C', device='cpu', writable=False)], scale: float, out: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu')]) -> None:
    """
    Per-block attention scores over a paged KV cache (kvtier_block_scores, kvtier/cache.h): for each row r, softmax(scale * q . k) of each of its queries (query[query_start[r]:query_start[r+1]], [tokens, q_heads, head_dim] float32; query j sees the keys up to position seq_lens[r] - queries + j) over the keys of its blocks block_table[r] (int32) in `keys` [blocks, kv_heads, block_size, head_dim] (float32, bfloat16 or float16, any strides: vLLM's CPU keys are a transposed view), averaged over query heads, summed over the row's queries and over each full block's keys into out[r, block] (float32 [rows, >= table width]; 0 past the full blocks). InvalidArgumentError for shapes, lengths or block ids that disagree.
    """

def status_string(status: Status) -> str:
    """The library's name of a status ("ok", "invalid_argument", ...)."""

def default_socket_path() -> str:
    """
    The socket used when none is given: $KVTIER_SOCKET, else /run/kvtier/kvtierd.sock.
    """

NO_SLOT: int = 4294967295
