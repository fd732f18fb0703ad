"""The kvtier binding against a real kvtierd: handshake, errors, and the whole tiering loop driven
from NumPy arrays (a numpy "engine" whose cache is [heads, slots, dim] per layer)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import kvtier
from kvtierd_process import Daemon

LAYERS, HEADS, DIM, SLOTS = 2, 2, 4, 64


def test_connect_reports_matching_versions(daemon):
    with daemon.connect() as client:
        v = client.versions()
        assert (v.client_protocol_major, v.client_layout_version) == (v.daemon_protocol_major, v.daemon_layout_version)
        assert v.client_id > 0
        assert v.daemon_version


def test_unreachable_daemon_raises_unavailable_with_status_and_message(tmp_path):
    with pytest.raises(kvtier.UnavailableError) as info:
        kvtier.Client(str(tmp_path / "none.sock"), "lost")
    assert info.value.status == kvtier.Status.UNAVAILABLE
    assert info.value.status_name == "unavailable"
    assert "none.sock" in info.value.message
    assert str(info.value).startswith("unavailable: ")


def test_invalid_geometry_raises_invalid_argument(daemon):
    with daemon.connect() as client:
        with pytest.raises(kvtier.InvalidArgumentError) as info:
            client.register_model(0, HEADS, DIM, kvtier.DType.F32, 128)
        assert info.value.status == kvtier.Status.INVALID_ARGUMENT
        assert isinstance(info.value, ValueError)


def test_out_of_range_tier_parameter_is_named(daemon):
    with daemon.connect() as client:
        client.register_model(LAYERS, HEADS, DIM, kvtier.DType.F32, 128)
        with pytest.raises(kvtier.InvalidArgumentError, match="hbm_ratio"):
            client.open_sequence(8, hbm_ratio=1.5)


def test_open_sequence_keywords_are_the_tier_parameter_table(daemon):
    # The keywords come from protocol/tier_param_table.hpp: every one is in the signature, an
    # unknown one or a wrong type is a TypeError, and an int passes for a float.
    signature = kvtier.Client.open_sequence.__doc__.splitlines()[0]
    for name in ("sink_tokens", "hbm_ratio", "rkv_lambda", "int8_tokens", "mode", "tokens_per_position"):
        assert f"{name}: " in signature
    with daemon.connect() as client:
        client.register_model(LAYERS, HEADS, DIM, kvtier.DType.F32, 128)
        with pytest.raises(TypeError, match="unexpected keyword argument 'hbm_ration'"):
            client.open_sequence(8, hbm_ration=0.5)
        with pytest.raises(TypeError, match="sink_tokens has the wrong type"):
            client.open_sequence(8, sink_tokens=1.5)
        with pytest.raises(TypeError, match="mode has the wrong type"):
            client.open_sequence(8, mode="cumulative")
        client.close_sequence(client.open_sequence(8, hbm_ratio=1, sink_tokens=None))


def test_policy_parameters_reach_the_daemon_and_are_checked(daemon):
    with daemon.connect() as client:
        client.register_model(LAYERS, HEADS, DIM, kvtier.DType.F32, 128)
        with pytest.raises(kvtier.InvalidArgumentError, match="rkv_lambda"):
            client.open_sequence(8, policy=kvtier.Policy.R_KV, rkv_lambda=1.5)
        seq = client.open_sequence(8, policy=kvtier.Policy.R_KV, key_digest_dim=4, seed=7, protect_prompt=False)
        client.push_features(seq, kvtier.Feature.KEY_DIGEST, np.ones(8 * 4, dtype=np.float32))
        client.push_scores(seq, 0, np.ones(8, dtype=np.float32))
        assert client.sync(60_000)
        client.close_sequence(seq)


def test_closed_client_raises_bad_state(daemon):
    client = daemon.connect()
    client.close()
    assert client.closed
    with pytest.raises(kvtier.BadStateError, match="closed"):
        client.counters()


def test_push_scores_reads_float32_arrays_and_counts_records(daemon):
    with daemon.connect() as client:
        client.register_model(LAYERS, HEADS, DIM, kvtier.DType.F32, 128)
        # interval 1: the step end ships the step's summed scores (libkvtier accumulates pushes and
        # ships sums once per decision interval), then the step-end marker.
        seq = client.open_sequence(8, interval=1)
        client.push_scores(seq, 0, np.ones(8, dtype=np.float32))
        client.push_scores(seq, 0, np.ones(9, dtype=np.float64))  # converted to float32
        client.step_end(seq, 0)
        assert client.counters().score_records_pushed >= 2
        with pytest.raises(TypeError):
            client.push_scores(seq, 1, np.ones((2, 2), dtype=np.float32))  # not 1-D


class NumpyEngine:
    """T0 of one sequence in NumPy arrays, slot == position until tokens move."""

    def __init__(self, client: kvtier.Client, seq: int) -> None:
        self.client, self.seq = client, seq
        self.k = [np.zeros((HEADS, SLOTS, DIM), np.float32) for _ in range(LAYERS)]
        self.v = [np.zeros((HEADS, SLOTS, DIM), np.float32) for _ in range(LAYERS)]
        self.slot_of: dict[int, int] = {}
        client.attach_cache(
            seq, k_base=[a.ctypes.data for a in self.k], v_base=[a.ctypes.data for a in self.v],
            num_kv_heads=HEADS, head_dim=DIM, dtype=kvtier.DType.F32, num_slots=SLOTS, block_size=SLOTS,
            token_stride=DIM * 4, head_stride=SLOTS * DIM * 4)

    @staticmethod
    def row(layer: int, head: int, position: int, kind: float) -> np.ndarray:
        return np.arange(DIM, dtype=np.float32) + 1000 * layer + 100 * head + position + kind

    def write(self, position: int) -> None:
        slot = position
        self.slot_of[position] = slot
        for layer in range(LAYERS):
            for head in range(HEADS):
                self.k[layer][head, slot] = self.row(layer, head, position, 0.25)
                self.v[layer][head, slot] = self.row(layer, head, position, 0.5)

    def apply(self, plan: kvtier.Plan) -> None:
        hbm = np.full(len(plan), kvtier.NO_SLOT, dtype=np.uint32)
        for i, move in enumerate(plan.moves):
            if move.from_tier == kvtier.Tier.T0:
                hbm[i] = self.slot_of[move.position]
            elif move.to_tier == kvtier.Tier.T0:
                hbm[i] = move.position
        self.client.execute_plan(plan, hbm)
        for move in plan.moves:
            if move.from_tier == kvtier.Tier.T0:
                del self.slot_of[move.position]
            if move.to_tier == kvtier.Tier.T0:
                self.slot_of[move.position] = move.position


def run_steps(client: kvtier.Client, engine: NumpyEngine, prompt: int, steps: int) -> kvtier.Plan:
    """Prompt + `steps` decode steps; odd positions get tiny scores, so they are demoted first.
    Returns the first plan the daemon sends."""
    weights = np.where(np.arange(SLOTS) % 2 == 1, 0.001, 1.0).astype(np.float32)
    for position in range(prompt):
        engine.write(position)
    client.push_scores(engine.seq, 0, weights[:prompt])
    for step in range(steps):
        position = prompt + step
        engine.write(position)
        client.push_scores(engine.seq, step, weights[: position + 1])
        client.step_end(engine.seq, step)
    plan = client.poll_plan(timeout_ms=5000)
    assert plan is not None, "the daemon sent no plan"
    return plan


def sequence_info(admin: kvtier.Client, client: kvtier.Client, seq: int) -> kvtier.SequenceInfo:
    info = next(c for c in admin.status().clients if c.client_id == client.versions().client_id)
    return next(s for s in info.sequences if s.sequence_id == seq)


def open_tiered(client: kvtier.Client, prompt: int) -> int:
    client.register_model(LAYERS, HEADS, DIM, kvtier.DType.F32, SLOTS)
    return client.open_sequence(prompt, hbm_ratio=0.0, evict_ratio=0.0, sink_tokens=1, window_tokens=4, interval=8)


def test_plan_moves_rows_to_the_pool_and_stage_layer_returns_them_exactly(daemon):
    with daemon.connect() as client, daemon.connect("admin", kvtier.Role.ADMIN) as admin:
        prompt = 4
        seq = open_tiered(client, prompt)
        engine = NumpyEngine(client, seq)
        plan = run_steps(client, engine, prompt, 8)
        assert plan.sequence == seq and len(plan) > 0
        # β = 0: every managed token (after the protected prompt and 1 sink, before the newest 4)
        # goes to T1.
        assert set(plan.positions.tolist()) == set(range(prompt + 1, prompt + 8 - 4))
        assert (plan.from_tiers == kvtier.Tier.T0).all() and (plan.to_tiers == kvtier.Tier.T1).all()
        engine.apply(plan)
        client.ack_plan(plan.epoch, applied=True)

        rows, nbytes = client.t1_rows(seq)
        assert rows == len(plan) and nbytes == rows * 2 * HEADS * DIM * 4  # one layer's K and V
        buffer = np.zeros(nbytes // 4, dtype=np.float32)
        for layer in range(LAYERS):
            staged = client.stage_layer(seq, layer, buffer)
            assert staged.rows == rows
            assert staged.positions.tolist() == sorted(plan.positions.tolist())
            k = buffer[staged.k_offset // 4: staged.k_offset // 4 + rows * HEADS * DIM].reshape(rows, HEADS, DIM)
            v = buffer[staged.v_offset // 4: staged.v_offset // 4 + rows * HEADS * DIM].reshape(rows, HEADS, DIM)
            for r, position in enumerate(staged.positions.tolist()):
                for head in range(HEADS):
                    np.testing.assert_array_equal(k[r, head], NumpyEngine.row(layer, head, position, 0.25))
                    np.testing.assert_array_equal(v[r, head], NumpyEngine.row(layer, head, position, 0.5))

        # The daemon commits the plan when it reads the acknowledgement; sync waits for that.
        assert client.sync(60_000)
        assert sequence_info(admin, client, seq).tokens_t1 == rows
        assert sequence_info(admin, client, seq).tokens_t3 == 0
        # The admin's placement view: every position of the sequence in one run list, the moved
        # ones in T1.
        placement = admin.placement(client.versions().client_id, seq)
        assert placement.length == sequence_info(admin, client, seq).tokens
        assert sum(count for _, count in placement.runs) == placement.length
        assert sum(count for tier, count in placement.runs if tier == kvtier.Tier.T1) == rows
        with pytest.raises(kvtier.NotFoundError):
            admin.placement(client.versions().client_id, seq + 1000)
        client.close_sequence(seq)


def test_plan_acknowledged_as_not_applied_keeps_the_placement(daemon):
    with daemon.connect() as client, daemon.connect("admin", kvtier.Role.ADMIN) as admin:
        seq = open_tiered(client, 4)
        engine = NumpyEngine(client, seq)
        plan = run_steps(client, engine, 4, 8)
        client.ack_plan(plan.epoch, applied=False)
        assert client.t1_rows(seq) == (0, 0)
        # The rollback leaves the committed placement: the next decision proposes the same moves.
        for step in range(8, 16):
            engine.write(4 + step)
            client.push_scores(seq, step, np.ones(4 + step + 1, dtype=np.float32))
            client.step_end(seq, step)
        again = client.poll_plan(timeout_ms=5000)
        assert again is not None and again.epoch > plan.epoch
        assert (again.from_tiers == kvtier.Tier.T0).all()
        assert set(plan.positions.tolist()) <= set(again.positions.tolist())
        assert sequence_info(admin, client, seq).tokens_t1 == 0
        # The rollback is one of kvtierd's recorded decisions.
        events = admin.events(1024)
        assert events.recorded >= 1 and events.capacity >= len(events.events)
        failed = [e for e in events.events if e.kind == kvtier.EventKind.PLAN_FAILED and e.sequence_id == seq]
        assert failed and failed[0].client_id == client.versions().client_id
        with pytest.raises(kvtier.InvalidArgumentError):
            admin.events(0)
        client.ack_plan(again.epoch, applied=False)


def test_status_names_the_metrics_address():
    daemon = Daemon(["--set", "metrics.listen=127.0.0.1:0"])
    try:
        with daemon.connect("admin", kvtier.Role.ADMIN) as admin:
            address = admin.status().metrics_address
            assert address.startswith("127.0.0.1:") and int(address.rsplit(":", 1)[1]) > 0
    finally:
        daemon.stop()


def test_execute_plan_checks_the_slot_count(daemon):
    with daemon.connect() as client:
        seq = open_tiered(client, 4)
        engine = NumpyEngine(client, seq)
        plan = run_steps(client, engine, 4, 8)
        with pytest.raises(kvtier.InvalidArgumentError, match="hbm_slots"):
            client.execute_plan(plan, np.zeros(len(plan) + 1, dtype=np.uint32))
        client.ack_plan(plan.epoch, applied=False)


def offloaded(client, engine_out: list | None = None):
    """A tiered sequence of 4 prompt tokens after 8 steps, its first plan applied and acknowledged
    (its NumpyEngine appended to engine_out when given)."""
    seq = open_tiered(client, 4)
    engine = NumpyEngine(client, seq)
    plan = run_steps(client, engine, 4, 8)
    engine.apply(plan)
    client.ack_plan(plan.epoch)
    if engine_out is not None:
        engine_out.append(engine)
    return seq, plan


def test_stage_at_writes_each_host_row_at_its_position_and_checks_the_target(daemon):
    with daemon.connect() as client:
        seq, plan = offloaded(client)
        length, offset = 12, 1  # [heads, length + offset, dim] per layer, position p at row p + offset
        for layer in range(LAYERS):
            k = np.zeros((HEADS, length + offset, DIM), dtype=np.float32)
            v = np.zeros_like(k)
            client.stage_at(seq, layer, k=k.ctypes.data, v=v.ctypes.data, rows=length + offset,
                            token_stride=DIM * 4, head_stride=(length + offset) * DIM * 4, row_offset=offset)
            want_k, want_v = np.zeros_like(k), np.zeros_like(v)
            for position in plan.positions.tolist():
                for head in range(HEADS):
                    want_k[head, position + offset] = NumpyEngine.row(layer, head, position, 0.25)
                    want_v[head, position + offset] = NumpyEngine.row(layer, head, position, 0.5)
            np.testing.assert_array_equal(k, want_k)
            np.testing.assert_array_equal(v, want_v)
        short = np.zeros((HEADS, 4, DIM), dtype=np.float32)
        with pytest.raises(kvtier.InvalidArgumentError, match="outside"):
            client.stage_at(seq, 0, k=short.ctypes.data, v=short.ctypes.data, rows=4, token_stride=DIM * 4,
                            head_stride=4 * DIM * 4)
        assert not short.any()
        client.close_sequence(seq)


def offloaded_rows(client):
    """offloaded()'s sequence and its engine (which owns the attached cache: keep it alive), the
    host positions and T0 positions (ascending) and the T0 slots."""
    engines: list = []
    seq, plan = offloaded(client, engines)
    host = sorted(m.position for m in plan.moves if m.to_tier in (kvtier.Tier.T1, kvtier.Tier.T2))
    t0 = sorted(engines[0].slot_of)
    return seq, engines[0], host, t0, np.array([engines[0].slot_of[p] for p in t0], dtype=np.uint32)


def test_attend_reads_the_t0_slots_and_host_rows_where_they_live(daemon):
    """Client.attend: one query over the cache's T0 slots it is given, then the host rows in
    ascending positions, in one softmax, against float64 NumPy; bad input is refused."""
    with daemon.connect() as client:
        seq, engine, host, t0, slots = offloaded_rows(client)
        assert host and t0
        q_heads, rows, scale = 2 * HEADS, len(t0) + len(host), 0.5
        q = np.random.default_rng(3).standard_normal((q_heads, DIM)).astype(np.float32) * 1e-3
        for layer in range(LAYERS):
            out, lse = np.zeros((q_heads, DIM), np.float32), np.zeros(q_heads, np.float32)
            probs, scores = np.zeros((q_heads, rows), np.float32), np.ones(rows, np.float32)
            client.attend(seq, layer, q=q, scale=scale, out=out, lse=lse, t0_slots=slots, probs=probs, scores=scores)
            for h in range(q_heads):
                kv = h // (q_heads // HEADS)
                k = np.array([NumpyEngine.row(layer, kv, p, 0.25) for p in t0 + host], dtype=np.float64)
                v = np.array([NumpyEngine.row(layer, kv, p, 0.5) for p in t0 + host], dtype=np.float64)
                s = scale * k @ q[h].astype(np.float64)
                want_lse = np.log(np.exp(s - s.max()).sum()) + s.max()
                p = np.exp(s - want_lse)
                np.testing.assert_allclose(lse[h], want_lse, rtol=1e-5)
                np.testing.assert_allclose(probs[h], p, rtol=1e-4, atol=1e-6)
                np.testing.assert_allclose(out[h], p @ v, rtol=1e-5)
            want_scores = 1 + sum(probs[h] for h in range(q_heads))
            np.testing.assert_allclose(scores, want_scores, rtol=1e-6)
        out, lse = np.zeros((q_heads, DIM), np.float32), np.zeros(q_heads, np.float32)
        with pytest.raises(kvtier.InvalidArgumentError, match="num_slots"):
            client.attend(seq, 0, q=q, scale=scale, out=out, lse=lse, t0_slots=np.array([SLOTS], dtype=np.uint32))
        with pytest.raises(kvtier.InvalidArgumentError, match="scores"):
            client.attend(seq, 0, q=q, scale=scale, out=out, lse=lse, scores=np.zeros(rows, np.float32))
        with pytest.raises(kvtier.InvalidArgumentError, match="shape"):
            client.attend(seq, 0, q=q, scale=scale, out=np.zeros((q_heads, DIM + 1), np.float32), lse=lse)
        with pytest.raises(kvtier.InvalidArgumentError, match="head_dim"):
            client.attend(seq, 0, q=np.zeros((q_heads, DIM + 4), np.float32), scale=scale,
                          out=np.zeros((q_heads, DIM + 4), np.float32), lse=lse)
        assert not out.any() and not lse.any()
        client.close_sequence(seq)


def test_attend_reads_every_token_of_a_slot_holding_a_block(daemon):
    """A query of half the cache's head_dim reads each cache slot and host row as two tokens (a
    vLLM block of 2): the first t0_tokens of the T0 slots (the last slot's second token left out),
    then both tokens of every host row; t0_tokens past the slots is refused."""
    half = DIM // 2
    with daemon.connect() as client:
        seq, engine, host, t0, slots = offloaded_rows(client)
        assert host and t0
        q_heads, t0_tokens, scale = HEADS, 2 * len(t0) - 1, 0.5
        rows = t0_tokens + 2 * len(host)
        q = np.random.default_rng(4).standard_normal((q_heads, half)).astype(np.float32) * 1e-3
        out, lse, scores = np.zeros((q_heads, half), np.float32), np.zeros(q_heads, np.float32), np.zeros(rows, np.float32)
        client.attend(seq, 1, q=q, scale=scale, out=out, lse=lse, t0_slots=slots, t0_tokens=t0_tokens, scores=scores)
        for h in range(q_heads):
            tokens = [(p, t) for p in t0 for t in range(2)][:t0_tokens] + [(p, t) for p in host for t in range(2)]
            k = np.array([NumpyEngine.row(1, h, p, 0.25)[t * half:(t + 1) * half] for p, t in tokens], np.float64)
            v = np.array([NumpyEngine.row(1, h, p, 0.5)[t * half:(t + 1) * half] for p, t in tokens], np.float64)
            s = scale * k @ q[h].astype(np.float64)
            want_lse = np.log(np.exp(s - s.max()).sum()) + s.max()
            np.testing.assert_allclose(lse[h], want_lse, rtol=1e-5)
            np.testing.assert_allclose(out[h], np.exp(s - want_lse) @ v, rtol=1e-5)
        np.testing.assert_allclose(scores.sum(), q_heads, rtol=1e-5)
        with pytest.raises(kvtier.InvalidArgumentError, match="t0_tokens"):
            client.attend(seq, 1, q=q, scale=scale, out=out, lse=lse, t0_slots=slots, t0_tokens=2 * len(t0) + 1)
        client.close_sequence(seq)


def test_stage_layer_refuses_a_too_small_buffer(daemon):
    with daemon.connect() as client:
        seq, _ = offloaded(client)
        with pytest.raises(kvtier.KvtierError):
            client.stage_layer(seq, 0, np.zeros(1, dtype=np.float32))


def test_prefetch_and_wait_stage_the_same_rows_as_stage_layer(daemon):
    with daemon.connect() as client:
        seq, _ = offloaded(client)
        rows, nbytes = client.t1_rows(seq)
        assert rows > 0
        expected = []
        for layer in range(LAYERS):
            buffer = np.zeros(nbytes // 4, dtype=np.float32)
            expected.append((client.stage_layer(seq, layer, buffer), buffer))

        buffers = [np.zeros(nbytes // 4, dtype=np.float32) for _ in range(LAYERS)]
        client.stage_prefetch(seq, 0, buffers[0])
        client.stage_prefetch(seq, 1, buffers[1])  # two layers in flight
        for layer in range(LAYERS):
            staged = client.stage_wait(seq, layer)
            reference, reference_buffer = expected[layer]
            assert (staged.layer, staged.rows) == (layer, rows)
            np.testing.assert_array_equal(staged.positions, reference.positions)
            assert (staged.k_offset, staged.v_offset) == (reference.k_offset, reference.v_offset)
            np.testing.assert_array_equal(buffers[layer], reference_buffer)
        client.close_sequence(seq)


def attach_three_layers(client: kvtier.Client) -> tuple[int, list[np.ndarray]]:
    """A 3-layer model and a sequence attached to a NumPy cache (no T1 rows: stages are empty)."""
    layers = 3
    client.register_model(layers, HEADS, DIM, kvtier.DType.F32, SLOTS)
    seq = client.open_sequence(4)
    cache = [np.zeros((HEADS, SLOTS, DIM), np.float32) for _ in range(2 * layers)]
    client.attach_cache(seq, k_base=[a.ctypes.data for a in cache[:layers]],
                        v_base=[a.ctypes.data for a in cache[layers:]], num_kv_heads=HEADS, head_dim=DIM,
                        dtype=kvtier.DType.F32, num_slots=SLOTS, block_size=SLOTS, token_stride=DIM * 4,
                        head_stride=SLOTS * DIM * 4)
    return seq, cache


def test_prefetch_refuses_a_layer_in_flight_a_third_layer_and_a_wait_without_prefetch(daemon):
    with daemon.connect() as client:
        seq, _cache = attach_three_layers(client)
        buffers = [np.zeros(64, dtype=np.float32) for _ in range(3)]
        with pytest.raises(kvtier.BadStateError, match="not prefetched"):
            client.stage_wait(seq, 0)
        client.stage_prefetch(seq, 0, buffers[0])
        with pytest.raises(kvtier.BadStateError, match="already"):
            client.stage_prefetch(seq, 0, buffers[2])
        client.stage_prefetch(seq, 1, buffers[1])
        with pytest.raises(kvtier.BadStateError):
            client.stage_prefetch(seq, 2, buffers[2])  # a third layer
        assert client.stage_wait(seq, 0).rows == 0
        with pytest.raises(kvtier.BadStateError, match="not prefetched"):
            client.stage_wait(seq, 0)  # waited already
        client.stage_prefetch(seq, 2, buffers[2])  # a slot is free again
        assert client.stage_wait(seq, 1).layer == 1
        assert client.stage_wait(seq, 2).layer == 2


def test_prefetch_keeps_its_buffer_alive_until_the_wait_or_the_close(daemon):
    with daemon.connect() as client:
        seq, _cache = attach_three_layers(client)

        def prefetch(layer: int) -> weakref.ref:
            buffer = np.zeros(64, dtype=np.float32)
            client.stage_prefetch(seq, layer, buffer)
            return weakref.ref(buffer)

        first, second = prefetch(0), prefetch(1)
        gc.collect()
        assert first() is not None and second() is not None  # only the client holds them
        client.stage_wait(seq, 0)
        gc.collect()
        assert first() is None and second() is not None
        refused = np.zeros(64, dtype=np.float32)
        with pytest.raises(kvtier.BadStateError):
            client.stage_prefetch(seq, 1, refused)
        refused_ref = weakref.ref(refused)
        del refused
        gc.collect()
        assert refused_ref() is None  # a refused prefetch holds nothing
        client.close_sequence(seq)
        gc.collect()
        assert second() is None


def test_set_stream_is_accepted_by_the_cpu_backend_and_needs_a_known_sequence(daemon):
    with daemon.connect() as client:
        seq, _cache = attach_three_layers(client)
        client.set_stream(seq, 0)
        with pytest.raises(kvtier.KvtierError):
            client.set_stream(seq + 100, 0)
