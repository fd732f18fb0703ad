"""The worker half: one kvtier client per worker, one kvtier sequence per running request, plans
executed over vLLM's paged KV cache, host rows staged per layer, scores pushed per step.

The unit kvtier tiers is one vLLM KV block: its per-layer row is the block's slice for one KV
head, ``block_size`` tokens of K (and of V) back to back, so the libkvtier layout is vLLM's
LBHNC cache with ``head_dim = block_size * head_size`` and one slot per block. Only full blocks
are tiered; the block being written stays where vLLM put it.

A block whose rows a plan moved to host memory is given back to vLLM (the scheduler half frees it;
never a request's first block, which names the request in the worker's block table: ``_apply``);
before each layer's attention its rows are copied from kvtierd's pool into reserved staging
blocks, and that layer's block table names the staging block instead, so vLLM's own kernel reads
exactly the keys and values it would have read. With host attention nothing is staged: each
decode row of a kvtier request is attended by libkvtier where its keys live (host_attention.py).
Evicted blocks (T3) leave the table: attention runs over the remaining keys (their positions were
encoded into the keys already).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

import kvtier
from kvtier import KvtierError

from .config import KvtierConfig
from .host_attention import AttendRow, attend_layer, plan_row, unit_scores
from .metadata import BlockChange, ScheduledRequest, StepMetadata, WorkerReport

if TYPE_CHECKING:
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadata

log = logging.getLogger("kvtier_vllm")
T0, T1, T2, T3 = (int(t) for t in (kvtier.Tier.T0, kvtier.Tier.T1, kvtier.Tier.T2, kvtier.Tier.T3))
DTYPES = {torch.float32: kvtier.DType.F32, torch.float16: kvtier.DType.F16, torch.bfloat16: kvtier.DType.BF16}


@dataclass
class Request:
    req_id: str
    sequence: int
    blocks: list[int]  # vLLM's block id of each unit as the worker's block table has it
    where: list[int] = field(default_factory=list)  # the block holding each T0 unit now (-1: none)
    tier: list[int] = field(default_factory=list)  # each unit's tier (units kvtierd knows)
    tokens: int = 0  # tokens in the cache after this step
    scheduled: int = 0  # tokens this step computes (1: a decode step)
    step: int = 0

    def units(self) -> int:
        return len(self.tier)

    def host_units(self) -> int:
        return sum(1 for t in self.tier if t in (T1, T2))

    def tiered(self) -> bool:
        return any(t != T0 for t in self.tier)


class WorkerSide:
    def __init__(self, config: KvtierConfig) -> None:
        self.config = config
        self.client: kvtier.Client | None = None
        self.requests: dict[str, Request] = {}
        self.by_first_block: dict[int, Request] = {}
        self.staging: list[int] = []
        self.changes: list[BlockChange] = []
        self.plans_refused = 0
        self.plans_applied = 0
        self.bytes_moved = 0  # copied between vLLM's blocks and kvtierd's pool by plans and staging
        # Set by register(): every layer's blocks, [layers * blocks, heads, 2 * bs, d], and their keys.
        self.cache: torch.Tensor
        self.keys: torch.Tensor
        self.layer_index: dict[str, int] = {}
        self.forward: ForwardState | None = None

    # ---- the KV cache ----------------------------------------------------------------------------

    def register(self, kv_caches: dict[str, torch.Tensor]) -> None:
        names = list(kv_caches)
        first = kv_caches[names[0]]
        blocks, heads, bs, two_d = first.shape
        layer_bytes = first.numel() * first.element_size()
        for i, name in enumerate(names):
            t = kv_caches[name]
            if t.shape != first.shape or not t.is_contiguous() or t.data_ptr() != first.data_ptr() + i * layer_bytes:
                raise RuntimeError("kvtier: vLLM's KV cache layers are not one LBHNC allocation; the CPU backend "
                                   "of the tested vLLM has them so")
        self.layer_index = {name: i for i, name in enumerate(names)}
        self.num_layers, self.num_blocks, self.heads, self.block_size = len(names), blocks, heads, bs
        self.head_size = two_d // 2
        # torch's stub wants a stride too; without one the view is contiguous.
        self.cache = torch.empty(0, dtype=first.dtype).set_(  # type: ignore[call-overload]
            first.untyped_storage(), first.storage_offset(), (len(names) * blocks, heads, 2 * bs, self.head_size))
        # Every layer's keys in place as [layers * blocks, heads, bs, d]: the "vec" ISA of vLLM's CPU
        # attention stores a block's keys dim-major ([d, bs] per head; values stay [bs, d]).
        self.keys = self.cache.view(len(names) * blocks, heads, 2 * bs * self.head_size)[:, :, : bs * self.head_size] \
            .unflatten(-1, (self.head_size, bs)).transpose(-1, -2)
        self.dtype = first.dtype
        isa = _get_attn_isa(first.dtype, bs, self.head_size)
        if isa != "vec":  # kvtier never fails a request: serve untiered
            log.error("kvtier: vLLM's CPU attention uses the %r ISA here, whose KV layout kvtier does not read "
                      "(it reads 'vec': x86 without AMX for bf16, block size a multiple of 32); serving without "
                      "tiering", isa)
            return
        self._connect()

    def _connect(self) -> None:
        try:
            self.client = kvtier.Client(self.config.socket, "vllm")
            self.client.register_model(self.num_layers, self.heads, self.block_size * self.head_size,
                                       DTYPES[self.dtype], self.num_blocks, "vllm")
        except KvtierError as e:  # kvtier never fails a request: serve untiered
            log.warning("kvtier: kvtierd not reachable (%s); serving without tiering", e)
            self.client = None

    def unit_bytes(self) -> int:
        """One unit's K and V rows of every layer and head."""
        return self.num_layers * self.heads * 2 * self.block_size * self.head_size * self.cache.element_size()

    def _layout(self) -> dict[str, Any]:
        es = self.cache.element_size()
        row = self.block_size * self.head_size * es
        base = self.cache.data_ptr()
        layer_bytes = self.num_blocks * self.heads * 2 * row
        return dict(k_base=[base + layer * layer_bytes for layer in range(self.num_layers)],
                    v_base=[base + layer * layer_bytes + row for layer in range(self.num_layers)],
                    num_kv_heads=self.heads, head_dim=self.block_size * self.head_size, dtype=DTYPES[self.dtype],
                    num_slots=self.num_blocks, block_size=self.num_blocks, token_stride=self.heads * 2 * row,
                    head_stride=2 * row)

    # ---- each step, before the forward ------------------------------------------------------------

    def begin_step(self, meta: StepMetadata) -> None:
        self.staging = meta.staging_blocks
        for req_id in meta.closed:
            self._close(req_id)
        for s in meta.scheduled:
            if s.prompt_tokens >= 0:
                self._close(s.req_id)
                self._open(s)
            r = self.requests.get(s.req_id)
            if r is None:
                continue
            r.blocks += s.new_blocks
            r.where += s.new_blocks
            r.tokens = s.num_computed_tokens + s.num_scheduled_tokens
            r.scheduled = s.num_scheduled_tokens
        self._run_plans()
        self.forward = None

    def _open(self, s: ScheduledRequest) -> None:
        if self.client is None or not s.new_blocks:
            return
        try:
            # One position is one block; kvtierd converts the token counts (the request's and its
            # own defaults) to blocks.
            seq = self.client.open_sequence(s.prompt_tokens // self.block_size, tokens_per_position=self.block_size,
                                            **s.tier)
            self.client.attach_cache(seq, **self._layout())
        except KvtierError as e:
            log.warning("kvtier: request %s runs untiered: %s", s.req_id, e)
            return
        r = Request(s.req_id, seq, [])
        self.requests[s.req_id] = r
        self.by_first_block[s.new_blocks[0]] = r

    def _close(self, req_id: str) -> None:
        r = self.requests.pop(req_id, None)
        if r is None:
            return
        self.by_first_block.pop(r.blocks[0], None)
        if self.client is not None and not self.client.closed:
            self.client.close_sequence(r.sequence)

    def _run_plans(self) -> None:
        if self.client is None:
            return
        by_sequence = {r.sequence: r for r in self.requests.values()}
        while (plan := self.client.poll_plan(0)) is not None:
            r = by_sequence.get(plan.sequence)
            if r is None or not self._apply(self.client, r, plan):
                self.client.ack_plan(plan.epoch, applied=False)

    def _apply(self, client: kvtier.Client, r: Request, plan: kvtier.Plan) -> bool:
        """Executes one plan; the blocks its offloads free go to its restores first, the rest back
        to vLLM. False (not applied; kvtierd keeps the placement) when restores lack blocks or the
        staging slots could not hold every open request's host rows after it (with host attention:
        when the request's step is not a decode step, which host attention does not compute).

        Unit 0's block is never given back while the request runs: it names the request in the
        worker's block table (ForwardState matches rows by it), and another request given that block
        as its first would be taken for this one. A restore of unit 0 goes back into it; a plan
        moving unit 0 out has that block less for its restores."""
        units, src, dst = plan.positions, plan.from_tiers, plan.to_tiers
        freed = [r.where[u] for u, f in zip(units, src, strict=True) if f == T0 and u != 0]
        restores = [i for i, (u, f, t) in enumerate(zip(units, src, dst, strict=True))
                    if f != T0 and t == T0 and u != 0]
        if self.config.host_attention:
            fits = r.scheduled == 1
        else:
            host_after = sum(q.host_units() for q in self.requests.values()) \
                + int(np.count_nonzero((dst == T1) | (dst == T2))) - int(np.count_nonzero((src == T1) | (src == T2)))
            fits = host_after <= len(self.staging) * self.num_layers
        if len(restores) > len(freed) or not fits:
            self.plans_refused += 1
            return False
        hbm = np.full(len(plan), kvtier.NO_SLOT, dtype=np.uint32)
        spare = list(freed)
        for i, (u, f, t) in enumerate(zip(units, src, dst, strict=True)):
            if f == T0:
                hbm[i] = r.where[u]
            elif t == T0 and u == 0:
                hbm[i] = r.blocks[0]
        for i in restores:
            hbm[i] = spare.pop()
        try:
            client.execute_plan(plan, hbm)
        except KvtierError as e:
            log.warning("kvtier: plan %d of request %s not applied: %s", plan.epoch, r.req_id, e)
            return False
        client.ack_plan(plan.epoch, applied=True)
        self.plans_applied += 1
        copies = sum(1 for f, t in zip(src, dst, strict=True) if (f == T0) != (t == T0) and T3 not in (f, t))
        self.bytes_moved += copies * self.unit_bytes()
        for i, (u, f, t) in enumerate(zip(units, src, dst, strict=True)):
            r.tier[u] = int(t)
            if f == T0:
                r.where[u] = -1
            if t == T0:
                r.where[u] = int(hbm[i])
            if u != 0 and (f == T0) != (t == T0):
                self.changes.append(BlockChange(r.req_id, int(u), r.where[u]))
        return True

    def report(self) -> WorkerReport | None:
        changes, self.changes = self.changes, []
        return WorkerReport(changes) if changes else None

    # ---- each layer ---------------------------------------------------------------------------------

    def forward_state(self, metadata: CPUAttentionMetadata) -> ForwardState:
        if self.forward is None:
            assert self.client is not None, "without a kvtierd client vLLM's attention runs as it is"
            self.forward = ForwardState(self, self.client, metadata)
        return self.forward

    def shutdown(self) -> None:
        for req_id in list(self.requests):
            self._close(req_id)
        if self.client is not None:
            self.client.close()
            self.client = None


@dataclass
class Staged:
    """A request's host rows of this forward: its staging slots and one buffer every layer reuses."""

    request: Request
    ids: torch.Tensor  # staging slot (flat id) of each host unit, in unit order
    rows: int
    buffer: torch.Tensor


@dataclass
class BlockScores:
    """kvtier.block_scores' buffers of one forward, in table order [rows, table width]: one
    layer's scores and their sums over the layers; the rows' full blocks in the table, key counts
    and query starts (int32), the same in every layer."""

    layer: torch.Tensor
    sums: torch.Tensor
    units: list[int]
    lens: torch.Tensor
    starts: torch.Tensor


class ForwardState:
    """One forward's view of the batch: each row's request, block table and scores."""

    def __init__(self, worker: WorkerSide, client: kvtier.Client, md: CPUAttentionMetadata) -> None:
        self.worker = worker
        self.client = client
        table = md.block_table
        self.rows: list[Request | None] = [worker.by_first_block.get(int(table[i, 0]))
                                           for i in range(md.seq_lens.shape[0])]
        self.scores = [None if r is None else torch.zeros(r.units(), dtype=torch.float32) for r in self.rows]
        self.layers_done = 0
        self.block_scores: BlockScores | None = None  # made by the first layer
        self.scheduler_metadata: torch.Tensor | None = None  # of the compacted rows, made by the first layer
        self.attending: list[AttendRow] = []  # host attention's decode rows
        self.compacted = False
        if worker.config.host_attention:
            self._plan_host_attention(md)
        # kvtier rows left to vLLM's kernel, scored by kvtier.block_scores
        self.block_scored = any(r is not None for r in self.rows)
        if worker.config.host_attention:
            self.tiered = False  # nothing staged: the rows vLLM's kernel computes are untiered
            return
        self.tiered = any(r is not None and r.tiered() for r in self.rows)
        if not self.tiered:
            return
        # Per row: the visible units (T0 and host, in order; evicted ones dropped), each read from
        # its block (+ layer offset) or from a staging slot (the same for every layer).
        nb = worker.num_blocks
        base = table.clone()
        self.layer_mask = torch.ones_like(table)
        self.seq_lens = md.seq_lens.clone()
        self.staged: list[Staged] = []  # per row with host rows
        self.visible: list[np.ndarray | None] = []
        slots = iter(layer * nb + b for b in worker.staging for layer in range(worker.num_layers))
        for i, r in enumerate(self.rows):
            if r is None or not r.tiered():
                self.visible.append(None)
                continue
            tier = np.array(r.tier)
            keep = np.flatnonzero(tier != T3)
            entries, ids = [], []
            for u in keep:
                if tier[u] == T0:
                    entries.append((r.where[u], 1))
                else:
                    ids.append(next(slots))
                    entries.append((ids[-1], 0))
            tail = list(range(r.units(), -(-int(md.seq_lens[i]) // worker.block_size)))
            entries += [(r.blocks[u], 1) for u in tail]
            base[i, :len(entries)] = torch.tensor([e[0] for e in entries], dtype=table.dtype)
            self.layer_mask[i, :len(entries)] = torch.tensor([e[1] for e in entries], dtype=table.dtype)
            self.seq_lens[i] -= (r.units() - len(keep)) * worker.block_size
            self.visible.append(keep)
            if ids:
                rows, nbytes = client.t1_rows(r.sequence)
                self.staged.append(Staged(r, torch.tensor(ids), rows,
                                          torch.empty(nbytes // worker.cache.element_size(), dtype=worker.dtype)))
        self.base = base
        self.compacted = bool((self.seq_lens != md.seq_lens).any())

    def _plan_host_attention(self, md: CPUAttentionMetadata) -> None:
        """Each decode row of a kvtier request is attended by libkvtier; for vLLM's kernel (the
        other rows) and the block scores, such a row keeps one key, its output then overwritten."""
        w = self.worker
        starts = md.query_start_loc.tolist()
        seq_lens = md.seq_lens.tolist()
        for i, r in enumerate(self.rows):
            if r is not None and starts[i + 1] - starts[i] == 1:
                self.attending.append(plan_row(i, starts[i], r, seq_lens[i], w.block_size, T0, {T1, T2}))
                self.rows[i] = None  # scored by its AttendRow
            elif r is not None and r.tiered():  # _apply applies plans in decode steps only
                raise RuntimeError(f"kvtier: request {r.req_id} is tiered in a step of several tokens")
        self.others = len(self.attending) < len(seq_lens)
        self.seq_lens = md.seq_lens.clone()
        for a in self.attending:
            self.seq_lens[a.row] = 1
        self.compacted = bool(self.attending)

    def attend(self, layer: int, query: torch.Tensor, output: torch.Tensor, scale: float) -> None:
        out = output.view(output.shape[0], *query.shape[1:])
        attend_layer(self.client, self.attending, layer, query, out, scale)

    def block_table(self, layer: int) -> torch.Tensor:
        return self.base + self.layer_mask * (layer * self.worker.num_blocks)

    def stage(self, layer: int) -> None:
        """Copies layer `layer`'s host rows of every tiered row into its staging slots."""
        w = self.worker
        d = w.block_size * w.head_size
        es = w.cache.element_size()
        slots = w.cache.view(-1, w.heads, 2, d)
        for st in self.staged:
            # The binding takes any DLPack tensor; its stub (_kvtier.pyi) says NumPy only.
            got = self.client.stage_layer(st.request.sequence, layer, st.buffer)  # type: ignore[arg-type]
            n = st.rows * w.heads * d
            for half, offset in ((0, got.k_offset // es), (1, got.v_offset // es)):
                slots[:, :, half].index_copy_(0, st.ids, st.buffer[offset:offset + n].view(st.rows, w.heads, d))
            w.bytes_moved += 2 * n * es

    # ---- scores ---------------------------------------------------------------------------------------

    def add_scores(self, row: int, per_unit: torch.Tensor, visible: np.ndarray | None) -> None:
        """Adds the forward's scores of a row's visible full blocks, summed over the layers (index i
        of `per_unit` is unit visible[i]; past the known units, the units that follow)."""
        r = self.rows[row]
        assert r is not None, "a row of a kvtier request"
        complete = r.tokens // self.worker.block_size
        scores = self.scores[row]
        if scores is None or scores.numel() != complete:
            scores = self.scores[row] = torch.zeros(complete, dtype=torch.float32)
        if visible is None:
            index = torch.arange(per_unit.numel())
        else:
            extra = per_unit.numel() - len(visible)
            units = np.concatenate([visible, np.arange(r.units(), r.units() + extra)])
            index = torch.from_numpy(units.astype(np.int64))
        scores.index_add_(0, index, per_unit)

    def push(self, q_heads: int) -> None:
        """After the last layer: each request's step scores to kvtierd, then its step end."""
        w = self.worker
        client = self.client
        for a in self.attending:  # back in their rows, scored
            self.rows[a.row] = a.request
            self.scores[a.row] = unit_scores(a, q_heads)
        for row, r in enumerate(self.rows):
            sums = self.scores[row]
            if r is None or sums is None:
                continue
            scores = (sums / w.num_layers).numpy()
            r.tier += [T0] * (len(scores) - r.units())
            if len(scores):
                client.push_scores(r.sequence, r.step, scores)
            client.step_end(r.sequence, r.step)
            r.step += 1
        if w.config.sync_ms:
            client.sync(w.config.sync_ms)
