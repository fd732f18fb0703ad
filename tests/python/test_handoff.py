"""Handing a sequence from one engine process to another (export_sequence / adopt_sequence)
against a real kvtierd. The exporter runs in a child process (multiprocessing, spawn) with its KV
cache in a memfd; the test process adopts the sequence into its own NumPy cache, executes the
hand-off plan and checks every row it received."""

from __future__ import annotations

import mmap
import multiprocessing
import os
import traceback

import numpy as np
import pytest

import kvtier

LAYERS, HEADS, DIM, PROMPT, STEPS = 2, 2, 4, 4, 16
SLOTS = PROMPT + STEPS
T0, T1, PEER = int(kvtier.Tier.T0), int(kvtier.Tier.T1), int(kvtier.Tier.PEER)


def row(layer: int, is_v: int, head: int, position: int) -> np.ndarray:
    """What the exporter writes for (layer, K/V, head, position); the adopter checks against it."""
    return np.arange(DIM, dtype=np.float32) + 1000 * layer + 100 * head + position + (0.5 if is_v else 0.25)


def attach(client: kvtier.Client, seq: int, cache: np.ndarray) -> None:
    """cache: [layers, K/V, heads, slots, dim] float32, one allocation."""
    client.attach_cache(seq, k_base=[cache[layer, 0].ctypes.data for layer in range(LAYERS)],
                        v_base=[cache[layer, 1].ctypes.data for layer in range(LAYERS)], num_kv_heads=HEADS,
                        head_dim=DIM, dtype=kvtier.DType.F32, num_slots=SLOTS, block_size=SLOTS,
                        token_stride=DIM * 4, head_stride=SLOTS * DIM * 4)


class Exporter:
    """The exporting engine: slot == position; tiers[p] is position p's tier as the plans said."""

    def __init__(self, client: kvtier.Client, seq: int, cache: np.ndarray) -> None:
        self.client, self.seq, self.cache = client, seq, cache
        self.tiers = np.full(SLOTS, T0, dtype=np.uint8)

    def write(self, position: int) -> None:
        for layer in range(LAYERS):
            for is_v in (0, 1):
                for head in range(HEADS):
                    self.cache[layer, is_v, head, position] = row(layer, is_v, head, position)

    def drain(self, timeout_ms: int) -> bool:
        """Executes and acknowledges the plans that arrive; True when there was one."""
        any_plan = False
        while (plan := self.client.poll_plan(timeout_ms)) is not None:
            hbm = np.where((plan.from_tiers == T0) | (plan.to_tiers == T0), plan.positions, kvtier.NO_SLOT)
            self.client.execute_plan(plan, hbm.astype(np.uint32))
            self.client.ack_plan(plan.epoch, applied=True)
            self.tiers[plan.positions.astype(np.int64)] = plan.to_tiers
            any_plan = True
        return any_plan


def export_side(socket: str, conn) -> None:
    """The child process: tiers a sequence, exports it, sends (token, T0, T1, T3 positions), waits
    for the adopter's word, closes the sequence. Failures are sent as ("error", traceback)."""
    try:
        nbytes = LAYERS * 2 * HEADS * SLOTS * DIM * 4
        fd = os.memfd_create("kvtier-test-cache")
        os.ftruncate(fd, nbytes)
        mapping = mmap.mmap(fd, nbytes)  # unmapped at exit: the cache must outlive the client
        with kvtier.Client(socket, "exporter") as client:
            cache = np.frombuffer(mapping, dtype=np.float32).reshape(LAYERS, 2, HEADS, SLOTS, DIM)
            client.register_model(LAYERS, HEADS, DIM, kvtier.DType.F32, SLOTS)
            seq = client.open_sequence(PROMPT, hbm_ratio=0.0, evict_ratio=0.3, sink_tokens=1, window_tokens=4,
                                       interval=8)
            attach(client, seq, cache)
            engine = Exporter(client, seq, cache)
            weights = np.where(np.arange(SLOTS) % 2 == 1, 0.001, 1.0).astype(np.float32)  # odd ones go first
            for position in range(PROMPT):
                engine.write(position)
            client.push_scores(seq, 0, weights[:PROMPT])
            for step in range(STEPS):
                engine.drain(0)
                engine.write(PROMPT + step)
                client.push_scores(seq, step, weights[: PROMPT + step + 1])
                client.step_end(seq, step)
            while engine.drain(200):
                pass
            for attempt in range(20):
                t0 = np.flatnonzero(engine.tiers == T0).astype(np.uint32)
                try:
                    token = client.export_sequence(seq, kind=kvtier.BufferKind.HOST_FD, fd=fd,
                                                   base=cache.ctypes.data, nbytes=nbytes, t0_positions=t0,
                                                   t0_slots=t0)
                    break
                except kvtier.BadStateError:  # a plan in flight: apply it, then export again
                    if attempt == 19:
                        raise
                    engine.drain(50)
            conn.send(("token", token, t0.tolist(), np.flatnonzero(engine.tiers == T1).tolist(),
                       np.flatnonzero(engine.tiers == int(kvtier.Tier.T3)).tolist()))
            if conn.poll(30):
                conn.recv()
                client.close_sequence(seq)
                conn.send(("closed", None))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def receive(conn, timeout: float = 30.0):
    assert conn.poll(timeout), "the exporter sent nothing"
    message = conn.recv()
    assert message[0] != "error", message[1]
    return message


def test_sequence_handed_to_another_process_arrives_row_for_row(daemon):
    context = multiprocessing.get_context("spawn")
    conn, child_conn = context.Pipe()
    exporter = context.Process(target=export_side, args=(daemon.socket, child_conn))
    exporter.start()
    try:
        _, token, t0, t1, t3 = receive(conn)
        assert t0 and t1 and t3, "the exporter's plans should have left tokens in T0, T1 and T3"
        assert sorted(t0 + t1 + t3) == list(range(SLOTS))
        with daemon.connect("adopter") as client, daemon.connect("admin", kvtier.Role.ADMIN) as admin:
            client.register_model(LAYERS, HEADS, DIM, kvtier.DType.F32, SLOTS)
            adopted = client.adopt_sequence(token)
            assert (adopted.prompt_length, adopted.positions, adopted.exporter_pid) == (PROMPT, SLOTS, exporter.pid)
            cache = np.zeros((LAYERS, 2, HEADS, SLOTS, DIM), dtype=np.float32)
            attach(client, adopted.sequence, cache)

            plan = client.poll_plan(timeout_ms=5000)
            assert plan is not None and plan.sequence == adopted.sequence
            assert (plan.from_tiers == PEER).all()
            assert all(move.from_tier == kvtier.Tier.PEER for move in plan.moves)
            hbm = np.where(plan.to_tiers == T0, plan.positions, kvtier.NO_SLOT).astype(np.uint32)
            client.execute_plan(plan, hbm)
            client.ack_plan(plan.epoch, applied=True)

            into_t0 = plan.positions[plan.to_tiers == T0]
            assert sorted(into_t0.tolist()) == t0
            assert sorted(plan.positions[plan.to_tiers == T1].tolist()) == t1
            assert len(plan) == len(t0) + len(t1)  # evicted positions are not named
            for position in into_t0.tolist():
                for layer in range(LAYERS):
                    for is_v in (0, 1):
                        for head in range(HEADS):
                            np.testing.assert_array_equal(cache[layer, is_v, head, position],
                                                          row(layer, is_v, head, position))
            rows, nbytes = client.t1_rows(adopted.sequence)
            assert rows == len(t1)
            buffer = np.zeros(nbytes // 4, dtype=np.float32)
            for layer in range(LAYERS):
                staged = client.stage_layer(adopted.sequence, layer, buffer)
                assert staged.positions.tolist() == t1
                k = buffer[staged.k_offset // 4:][: rows * HEADS * DIM].reshape(rows, HEADS, DIM)
                v = buffer[staged.v_offset // 4:][: rows * HEADS * DIM].reshape(rows, HEADS, DIM)
                for r, position in enumerate(t1):
                    for head in range(HEADS):
                        np.testing.assert_array_equal(k[r, head], row(layer, 0, head, position))
                        np.testing.assert_array_equal(v[r, head], row(layer, 1, head, position))

            conn.send("done")
            assert receive(conn)[0] == "closed"
            mine = next(c for c in admin.status().clients if c.client_id == client.versions().client_id)
            assert [s.handoff for s in mine.sequences] == [kvtier.Handoff.ADOPTED]
            client.close_sequence(adopted.sequence)
        exporter.join(timeout=10)
        assert exporter.exitcode == 0
    finally:
        if exporter.is_alive():
            exporter.kill()
            exporter.join()


def test_adopting_an_unknown_token_raises_not_found(daemon):
    with daemon.connect() as client:
        client.register_model(LAYERS, HEADS, DIM, kvtier.DType.F32, SLOTS)
        with pytest.raises(kvtier.NotFoundError):
            client.adopt_sequence(0x1234_5678_9ABC)


def test_export_checks_that_positions_and_slots_pair_up(daemon):
    with daemon.connect() as client:
        client.register_model(LAYERS, HEADS, DIM, kvtier.DType.F32, SLOTS)
        seq = client.open_sequence(PROMPT)
        cache = np.zeros((LAYERS, 2, HEADS, SLOTS, DIM), dtype=np.float32)
        attach(client, seq, cache)
        with pytest.raises(kvtier.InvalidArgumentError, match="t0_slots"):
            client.export_sequence(seq, base=cache.ctypes.data, nbytes=cache.nbytes,
                                   t0_positions=list(range(PROMPT)),  # sequences are accepted too
                                   t0_slots=np.arange(PROMPT - 1, dtype=np.uint32))
