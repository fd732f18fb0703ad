# kvtier control protocol: the messages exchanged over the daemon's Unix stream socket.
#
# Framing, message flow, fd passing and limits are described in protocol/PROTOCOL.md. Bulk
# per-step data (scores, plans, acks) never travels here: it uses shared-memory rings.
#
# EVOLUTION RULES (Cap'n Proto's; a broken rule silently corrupts old peers):
#   * Never renumber, retype or remove a field, enumerant or union member; never reuse an @N.
#   * New fields, enumerants and union members take the next free number and go at the end.
#   * Renaming is wire-compatible but breaks source; prefer adding and deprecating.
#   * A new field must have a meaning when absent (zero / empty / first enumerant), because an
#     older peer will not send it.
#   * Additive changes bump kProtocolMinor; anything a same-major peer cannot ignore bumps
#     kProtocolMajor (protocol/include/kvtier/protocol/version.hpp).
#   * The file id below is fixed forever.

@0xd427c4b726ccb806;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kvtier::wire");

# ---------------------------------------------------------------------------------------------
# Shared enums

enum SessionRole {
  engine @0;  # an inference process: registers a model, streams scores, executes plans
  admin @1;   # kvtierctl and other observers: status only, needs the admin group
}

enum KvDtype {
  f16 @0;
  bf16 @1;
  f32 @2;
}

# ---------------------------------------------------------------------------------------------
# Top-level unions: exactly one per direction. Every frame carries one of these as its root.

struct ClientMessage {
  union {
    hello @0 :Hello;
    registerModel @1 :RegisterModel;
    openSequence @2 :OpenSequence;
    closeSequence @3 :CloseSequence;
    statusRequest @4 :StatusRequest;
    exportSequence @5 :ExportSequence;  # 1.2
    adoptSequence @6 :AdoptSequence;    # 1.2
    reattach @7 :Reattach;              # 1.4
    eventsRequest @8 :EventsRequest;        # 1.5
    placementRequest @9 :PlacementRequest;  # 1.5
  }
}

struct DaemonMessage {
  union {
    welcome @0 :Welcome;
    versionMismatch @1 :VersionMismatch;
    error @2 :ErrorReply;
    modelRegistered @3 :ModelRegistered;
    sequenceOpened @4 :SequenceOpened;
    sequenceClosed @5 :SequenceClosed;
    statusReply @6 :StatusReply;
    sequenceExported @7 :SequenceExported;  # 1.2
    sequenceAdopted @8 :SequenceAdopted;    # 1.2
    reattached @9 :Reattached;              # 1.4
    eventsReply @10 :EventsReply;           # 1.5
    placementReply @11 :PlacementReply;     # 1.5
  }
}

# ---------------------------------------------------------------------------------------------
# Handshake

struct Hello {
  protocolMajor @0 :UInt16;
  protocolMinor @1 :UInt16;
  layoutVersion @2 :UInt32;      # shm layout version the client was built with
  layoutFingerprint @3 :UInt64;  # shm layout fingerprint the client was built with
  clientName @4 :Text;           # for logs and `kvtierctl status`: printable UTF-8, <= 63 bytes
                                 # (PROTOCOL.md §4 "Names"; refused otherwise)
  role @5 :SessionRole;
}

struct Welcome {
  protocolMajor @0 :UInt16;
  protocolMinor @1 :UInt16;
  layoutVersion @2 :UInt32;
  layoutFingerprint @3 :UInt64;
  daemonEpoch @4 :UInt64;        # changes on every daemon start
  clientId @5 :UInt32;
  daemonVersion @6 :Text;
  controlSegmentBytes @7 :UInt64;
  # 0 for admin sessions. For engine sessions the control segment's fd travels with this frame
  # (SCM_RIGHTS, see PROTOCOL.md) and this is its size in bytes.
}

struct VersionMismatch {
  # Sent instead of Welcome; the daemon closes the connection right after.
  daemonProtocolMajor @0 :UInt16;
  daemonProtocolMinor @1 :UInt16;
  daemonLayoutVersion @2 :UInt32;
  daemonLayoutFingerprint @3 :UInt64;
  clientProtocolMajor @4 :UInt16;  # echoed from the Hello
  clientProtocolMinor @5 :UInt16;
  clientLayoutVersion @6 :UInt32;
  clientLayoutFingerprint @7 :UInt64;
  message @8 :Text;                # human-readable, names both sides' versions
}

struct ErrorReply {
  # Any request may be answered by this instead of its normal reply.
  code @0 :UInt32;   # numeric kvtier::Errc (protocol/include/kvtier/base/error.hpp)
  message @1 :Text;
}

# ---------------------------------------------------------------------------------------------
# Engine session

struct RegisterModel {
  numLayers @0 :UInt32;
  numKvHeads @1 :UInt32;
  headDim @2 :UInt32;
  dtype @3 :KvDtype;
  modelName @4 :Text;     # the clientName rule applies
  poolTokens @5 :UInt32;  # requested DDR (T1) pool capacity in tokens
  int8PoolTokens @6 :UInt32;  # requested int8 (T2) pool capacity in tokens; 0 = no T2 (1.1)
  weight @7 :UInt32;          # share of the node's DDR budget under pressure; 0 = 1 (1.1)
}

struct ModelRegistered {
  # The pool segment's fd travels with this frame (SCM_RIGHTS).
  poolSegmentBytes @0 :UInt64;
  poolSlots @1 :UInt32;   # granted capacity in tokens (may be below poolTokens)
  rowBytes @2 :UInt32;    # one token's K and V for all KV heads of one layer
  # 1.1: when int8Slots > 0 a second fd, the int8 pool segment, follows the pool's.
  int8SegmentBytes @3 :UInt64;
  int8Slots @4 :UInt32;        # granted T2 capacity in tokens (whole blocks)
  int8GroupTokens @5 :UInt32;  # tokens per int8 block
  weight @6 :UInt32;           # granted weight (clamped to [1, pools.max_client_weight])
}

struct OpenSequence {
  promptLength @0 :UInt32;
  tiering @1 :TierParams;  # absent or useDefaults: the daemon's [tiering] configuration
}

enum EvictionMode {
  cumulative @0;      # r = fraction of the managed chain destroyed so far (never exceeded)
  paperAlgorithm @1;  # r re-applied every round to all unprotected tokens (compounds)
  paperPrototype @2;  # r and hbmRatio applied to GPU-resident tokens only (T1 immune)
}

# Per-sequence tier engine parameters (daemon/tier/include/kvtier/tier/tier_params.hpp).
struct TierParams {
  useDefaults @0 :Bool = true;
  sinkTokens @1 :UInt32;
  windowTokens @2 :UInt32;
  interval @3 :UInt32;
  hbmRatio @4 :Float64;
  evictRatio @5 :Float64;
  hysteresis @6 :Float64;
  decay @7 :Float64;
  hbmTokens @8 :UInt32;    # absolute T0 budget; 0 = hbmRatio
  evictTokens @9 :UInt32;  # absolute destroyed budget; 0 = evictRatio
  mode @10 :EvictionMode;

  # Policy (daemon/tier/include/kvtier/tier/policy.hpp documents each).
  policy @11 :Policy;
  seed @12 :UInt64;                 # random, vase; 0 with useDefaults: derived per sequence
  protectPrompt @13 :PromptProtection;
  recentWindow @14 :UInt32;         # vase, r_kv; 0 = the policy's default
  valueProtectRatio @15 :Float64;   # vase: share of the T0 budget reserved by value range
  valueProtectTokens @16 :UInt32;   # vase: absolute count instead; 0 = use the ratio
  rkvLambda @17 :Float64;           # r_kv: importance weight λ
  keyDigestDim @18 :UInt32;         # r_kv: floats per key digest the client sends (1..256)

  # 1.1: the int8 tier. Of the survivors not kept in T0, the lowest-ranked share goes to T2
  # (needs an int8 pool); 0 and 0 = T2 off.
  int8Ratio @19 :Float64;
  int8Tokens @20 :UInt32;           # absolute T2 budget; 0 = int8Ratio

  # 1.7: how many tokens one position of the sequence stands for (an engine that tiers whole
  # blocks, such as vLLM, sends its block size); 0 = 1. Sent also with useDefaults. The token
  # counts above and the daemon's [tiering] defaults are in tokens; kvtierd converts them to
  # positions with it (PROTOCOL.md §3 "Tier parameters"). promptLength is in positions.
  tokensPerPosition @21 :UInt32;
}

enum Policy {
  paper @0;         # cumulative attention (the default)
  h2o @1;           # accumulated attention, heavy hitters + recent
  streamingLlm @2;  # sinks + window
  random @3;        # keep the prompt, uniform random over the rest
  vase @4;          # protect the largest value ranges, sample the rest by recent attention
  rKv @5;           # importance minus key redundancy
}

enum PromptProtection {
  policyDefault @0;
  protect @1;
  unprotected @2;
}

struct SequenceOpened {
  sequenceId @0 :UInt32;
  shipping @1 :ScoreShipping;  # 1.6
}

# 1.6: how the client accumulates the sequence's scores between decisions and when it ships them
# (PROTOCOL.md §4 "Score shipping", shm/LAYOUT.md "Records"): the tier parameters kvtierd resolved
# for the sequence, as the floats both sides compute with. Absent (interval 0): ship per step.
struct ScoreShipping {
  interval @0 :UInt32;        # Δ: sums go out in a step that makes stepsDone + 1 a multiple of it
  stepsDone @1 :UInt64;       # steps kvtierd has counted for the sequence (0 unless adopted)
  scoreFactor @2 :Float32;    # IntervalSum factor of the attention sums (the decay; 1 = none)
  recentSums @3 :Bool;        # the policy keeps recent attention (vase, r_kv): ship those sums too
  recentFactor @4 :Float32;   # IntervalSum factor of the recent-attention sums (ρ = 1 − 1/R)
}

struct CloseSequence {
  sequenceId @0 :UInt32;
}

struct SequenceClosed {
  sequenceId @0 :UInt32;
}

# ---------------------------------------------------------------------------------------------
# Sequence hand-off (1.2): one engine process exports a sequence, another adopts it. PROTOCOL.md
# has the flow; the adopter's first plan for the sequence carries the hand-off moves.

enum BufferKind {
  hostFd @0;     # shared host memory (memfd, shm): the fd travels with the frame (SCM_RIGHTS)
  cudaIpc @1;    # a cudaMalloc allocation: ipcHandle holds its 64 cudaIpcMemHandle bytes
  cudaVmmFd @2;  # a cuMem VMM allocation exported as a POSIX fd: the fd travels with the frame
}

# The exporter's KV cache of the sequence: one allocation (the buffer) and where each layer's K
# and V start in it, otherwise kvtier's KvLayout (kernels/include/kvtier/kernels/kv_layout.hpp).
struct ExportedCache {
  kind @0 :BufferKind;
  bytes @1 :UInt64;          # the allocation's size
  bufferId @2 :UInt64;       # the exporter's name for the allocation (with its pid: a cache key)
  ipcHandle @3 :Data;        # cudaIpc only: 64 bytes
  kOffsets @4 :List(UInt64); # per layer: where K of the layer starts, from the buffer's start
  vOffsets @5 :List(UInt64);
  numSlots @6 :UInt32;
  blockSize @7 :UInt32;
  tokenStride @8 :UInt64;
  headStride @9 :UInt64;
  blockStride @10 :UInt64;
}

struct ExportSequence {
  sequenceId @0 :UInt32;
  cache @1 :ExportedCache;
  t0Positions @2 :List(UInt32);  # ascending: exactly the positions the daemon has in T0
  t0Slots @3 :List(UInt32);      # the cache slot of each
}

struct SequenceExported {
  sequenceId @0 :UInt32;
  handoffToken @1 :UInt64;  # the adopter presents it; unguessable, single use
}

struct AdoptSequence {
  handoffToken @0 :UInt64;
}

struct SequenceAdopted {
  # For fd kinds the exporter's buffer fd travels with this frame.
  sequenceId @0 :UInt32;    # the sequence's id in the adopter's session
  promptLength @1 :UInt32;
  positions @2 :UInt32;     # positions seen so far (the next token's position)
  exporterPid @3 :UInt32;
  cache @4 :ExportedCache;
  # 1.3: what the adopter needs to feed the sequence as the exporter did. Absent (a 1.2 daemon):
  # 0 and paper, and the adopter falls back to kDefaultKeyDigestDim.
  keyDigestDim @5 :UInt32;  # floats per key digest (r_kv), fixed when the exporter opened it
  policy @6 :Policy;        # the sequence's policy (which features it takes)
  shipping @7 :ScoreShipping;  # 1.6: stepsDone = the exporter's steps so far
}

# ---------------------------------------------------------------------------------------------
# Reattachment (1.4): after the daemon that created its pools died or restarted, an engine client
# sends Reattach instead of RegisterModel, with its pool segment fds (the DDR pool's, then the
# int8 pool's when it has one) on the frame. The new daemon checks the claim (PROTOCOL.md §4
# "Reattachment") and rebuilds the client's sequences from the placement the client records.

struct Reattach {
  model @0 :RegisterModel;        # what the client registered with the daemon that is gone
  previousEpoch @1 :UInt64;       # that daemon's epoch (Welcome.daemonEpoch)
  previousClientId @2 :UInt32;    # the client id it was given
  sequences @3 :List(ReattachedSequence);
}

# One open sequence as the client's acknowledged plans left it. Tokens [0, length) not listed
# in t1, t2 or t3 are T0 (the engine's cache).
struct ReattachedSequence {
  sequenceId @0 :UInt32;
  promptLength @1 :UInt32;
  length @2 :UInt32;               # positions the client has published scores or features for
  tiering @3 :TierParams;          # as sent in its OpenSequence
  t1Positions @4 :List(UInt32);    # ascending; t1Slots[i] is the DDR pool slot of t1Positions[i]
  t1Slots @5 :List(UInt32);
  t2Positions @6 :List(UInt32);    # ascending; t2Slots[i] is the int8 pool slot
  t2Slots @7 :List(UInt32);
  t3Positions @8 :List(UInt32);    # ascending: evicted
}

struct Reattached {
  # The client's pools are this daemon's now; sequences keep their ids.
  poolSlots @0 :UInt32;
  int8Slots @1 :UInt32;
  weight @2 :UInt32;
  sequences @3 :UInt32;   # sequences adopted
  rowsAdopted @4 :UInt64; # T1 and T2 rows taken over
  shipping @5 :List(ScoreShipping);  # 1.6: one per Reattach.sequences entry, in that order
}

# ---------------------------------------------------------------------------------------------
# Admin session

struct StatusRequest {
  # Empty in 1.0; filters (one client, one sequence) may be added as new fields.
}

struct StatusReply {
  daemonVersion @0 :Text;
  daemonEpoch @1 :UInt64;
  protocolMajor @2 :UInt16;
  protocolMinor @3 :UInt16;
  layoutVersion @4 :UInt32;
  layoutFingerprint @5 :UInt64;
  uptimeSeconds @6 :UInt64;
  ddrBytesTotal @7 :UInt64;
  ddrBytesUsed @8 :UInt64;
  clients @9 :List(ClientStatus);
  int8BytesTotal @10 :UInt64;  # node-wide int8 pool cap (0 = none) (1.1)
  int8BytesUsed @11 :UInt64;   # bytes of int8 blocks holding live rows
  metricsAddress @12 :Text;    # 1.5: "ADDRESS:PORT" serving Prometheus metrics at /metrics; empty = off
}

# Why tokens were last kept in T0 instead of host memory (shm BackpressureReason).
enum Backpressure {
  none @0;
  poolFull @1;    # the client's own DDR pool segment is full
  nodeBudget @2;  # the node-wide DDR budget is spent
}

struct ClientStatus {
  clientId @0 :UInt32;
  pid @1 :UInt32;
  uid @2 :UInt32;
  name @3 :Text;
  role @4 :SessionRole;

  # Model geometry; all zero / empty before RegisterModel.
  numLayers @5 :UInt32;
  numKvHeads @6 :UInt32;
  headDim @7 :UInt32;
  dtype @8 :KvDtype;
  modelName @9 :Text;

  poolSlots @10 :UInt32;
  poolSlotsUsed @11 :UInt32;

  # Counters since the session began.
  scoreRecords @12 :UInt64;
  scoresDropped @13 :UInt64;
  plansSent @14 :UInt64;
  plansAcked @15 :UInt64;
  errors @16 :UInt64;

  sequences @17 :List(SequenceStatus);

  plansFailed @18 :UInt64;         # plans the client reported as not applied (rolled back)
  movesSent @19 :UInt64;           # token moves in all plans sent
  backpressureTokens @20 :UInt64;  # moves to T1 refused for lack of a host row (kept in T0)

  # 1.1: budgets and the pressure cascade (daemon/src/node_budget.hpp).
  weight @21 :UInt32;
  ddrBytesUsed @22 :UInt64;       # T1 rows held, pending plans' destinations included
  ddrShareBytes @23 :UInt64;      # weighted share of the node DDR budget (0 = no node budget)
  int8Slots @24 :UInt32;
  int8SlotsUsed @25 :UInt32;      # slots of allocated int8 blocks
  t2Demotions @26 :UInt64;        # tokens quantized T1 -> T2 by policy decisions (acknowledged)
  pressureDemotions @27 :UInt64;  # tokens quantized T1 -> T2 to relieve node pressure
  pressureEvictions @28 :UInt64;  # tokens destroyed (T3) to relieve node pressure
  int8Trimmed @29 :UInt64;        # T1 -> T2 moves dropped because the int8 pool was full
  lastBackpressure @30 :Backpressure;
  closing @31 :Bool;  # 1.4: its socket closed while its process lives; its pools stay its own
                      # (and count against limits.max_clients and the node budget) until it exits
}

struct SequenceStatus {
  sequenceId @0 :UInt32;
  promptLength @1 :UInt32;
  tokens @2 :UInt32;    # live tokens (T0 + T1 + T2; T3 tokens are gone)
  tokensT0 @3 :UInt32;
  tokensT1 @4 :UInt32;
  tokensT2 @5 :UInt32;
  tokensT3 @6 :UInt32;  # evicted so far
  destroyedFraction @7 :Float64;  # T3 / managed tokens (the eviction knob actually applied)
  hbmRatio @8 :Float64;
  evictRatio @9 :Float64;
  mode @10 :EvictionMode;
  policy @11 :Policy;
  int8Ratio @12 :Float64;
  handoff @13 :Handoff;  # 1.2
}

enum Handoff {
  none @0;
  exported @1;    # frozen in its exporter, waiting for an adopter
  adopting @2;    # the adopter's hand-off plan is in flight
  handedOff @3;   # adopted: the exporter's copy holds nothing, close it
  adopted @4;     # this client's copy came from another process
}

# ---------------------------------------------------------------------------------------------
# Admin session: what the daemon decided and where a sequence's tokens are (1.5). Both need the
# admin credentials StatusRequest needs (PROTOCOL.md §4 "Events and placement").

struct EventsRequest {
  limit @0 :UInt32;  # the newest `limit` events; 1..EventsReply.capacity (kvtierd keeps 1024)
}

# One decision kvtierd took about a client: one event per plan, relief, refusal, reclaim or
# session error, never one per token (daemon/src/event_log.hpp).
enum EventKind {
  pressureDemotion @0;  # a relief plan quantized `tokens` T1 rows to T2 (acknowledged)
  pressureEviction @1;  # a relief plan destroyed `tokens` T1 tokens (T3) (acknowledged)
  backpressure @2;      # a plan kept `tokens` tokens where they were: detail names the reason
                        # (node_budget, pool_full: kept in T0; int8_pool_full: kept in T1)
  planFailed @3;        # the client reported the plan as not applied: rolled back
  reclaim @4;           # the client's process exited and everything it held was freed
  sessionError @5;      # kvtierd ended the client's session; detail: the error
}

struct Event {
  sequence @0 :UInt64;  # 1, 2, ...: the order kvtierd recorded events in, never reused
  unixMs @1 :UInt64;    # wall-clock time of the decision (ms since 1970)
  kind @2 :EventKind;
  clientId @3 :UInt32;
  clientName @4 :Text;  # as the client named itself (may be empty for a session without Hello)
  sequenceId @5 :UInt32;  # 0: not about one sequence
  tokens @6 :UInt64;      # 0: not about tokens
  detail @7 :Text;        # at most 120 bytes of UTF-8
}

struct EventsReply {
  events @0 :List(Event);  # oldest first; at most the request's limit
  capacity @1 :UInt32;     # events kvtierd keeps (older ones are dropped)
  recorded @2 :UInt64;     # events recorded since kvtierd started (the newest one's sequence)
}

# A page of one sequence's placement as runs of consecutive positions in one tier. kvtierctl
# sends firstPosition = 0, then each reply's nextPosition, until nextPosition == length.
struct PlacementRequest {
  clientId @0 :UInt32;
  sequenceId @1 :UInt32;
  firstPosition @2 :UInt32;  # at most the sequence's length
  maxRuns @3 :UInt32;        # 1..65536 (65536 runs of 8 bytes fit the 1 MiB frame limit)
}

enum Tier {
  t0 @0;
  t1 @1;
  t2 @2;
  t3 @3;  # evicted
}

struct TierRun {
  tier @0 :Tier;
  count @1 :UInt32;  # consecutive positions, >= 1
}

struct PlacementReply {
  length @0 :UInt32;         # positions the sequence has (T3 included)
  firstPosition @1 :UInt32;  # the request's
  runs @2 :List(TierRun);    # from firstPosition on; a run never continues into the next page
  nextPosition @3 :UInt32;   # firstPosition + the runs' counts; == length when done
}
