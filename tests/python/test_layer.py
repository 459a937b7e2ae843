"""moe.Layer and moe.plan on numpy arrays: accuracy against a float64 reference, bitwise batch invariance, causal
chunking, safetensors loading, and clear errors on bad input."""
import json
import os
import struct
import tempfile
import unittest

import numpy as np

import moe
from reference import moe_reference, rel_error

D, FF, E = 64, 96, 8


def random_arrays(seed, d=D, ff=FF, e=E, shared_ff=0):
    rng = np.random.default_rng(seed)
    a = dict(router_gate=rng.uniform(-0.3, 0.3, (e, d)).astype(np.float32),
             gate_proj=[rng.uniform(-0.15, 0.15, (ff, d)).astype(np.float32) for _ in range(e)],
             up_proj=[rng.uniform(-0.15, 0.15, (ff, d)).astype(np.float32) for _ in range(e)],
             down_proj=[rng.uniform(-0.1, 0.1, (d, ff)).astype(np.float32) for _ in range(e)])
    if shared_ff:
        a.update(shared_gate_proj=rng.uniform(-0.15, 0.15, (shared_ff, d)).astype(np.float32),
                 shared_up_proj=rng.uniform(-0.15, 0.15, (shared_ff, d)).astype(np.float32),
                 shared_down_proj=rng.uniform(-0.1, 0.1, (d, shared_ff)).astype(np.float32),
                 shared_expert_gate=rng.uniform(-0.2, 0.2, (1, d)).astype(np.float32))
    return a


def tokens(seed, n, d=D):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


class AccuracyTest(unittest.TestCase):
    def test_dropless_matches_float64_reference(self):
        a = random_arrays(1)
        layer = moe.Layer.from_arrays(**a, scope="none")
        x = tokens(2, 96)
        ids = np.repeat(np.arange(4), 24).astype(np.uint64)
        pos = np.tile(np.arange(24), 4).astype(np.uint32)
        y = layer.forward(x, ids, pos)
        ref, order = moe_reference(x, a["router_gate"], a["gate_proj"], a["up_proj"], a["down_proj"], 2, True)
        err = rel_error(y, ref)
        print("\n  dropless mixtral layer vs float64 reference: rel error %.3g" % err)
        self.assertLessEqual(err, 1e-5)
        plan = layer.last_plan()
        np.testing.assert_array_equal(plan["expert"], order)
        self.assertEqual(layer.last_stats()["num_dropped"], 0)

    def test_with_drops_matches_reference_restricted_to_the_plan(self):
        a = random_arrays(3)
        layer = moe.Layer.from_arrays(**a, capacity_factor=0.5)  # deterministic preset, sequence scope: drops
        x = tokens(4, 64)
        ids = np.repeat(np.arange(2), 32).astype(np.uint64)
        pos = np.tile(np.arange(32), 2).astype(np.uint32)
        y = layer.forward(x, ids, pos)
        plan = layer.last_plan()
        self.assertGreater(plan["num_dropped"], 0)
        keep = plan["status"] == 0
        ref, order = moe_reference(x, a["router_gate"], a["gate_proj"], a["up_proj"], a["down_proj"], 2, True,
                                   keep=keep)
        np.testing.assert_array_equal(plan["expert"][keep], order[keep])
        err = rel_error(y, ref)
        print("\n  capacity 0.5 (%d pairs dropped) vs reference with the plan's drops: rel error %.3g"
              % (plan["num_dropped"], err))
        self.assertLessEqual(err, 1e-5)

    def test_qwen2_moe_shared_expert(self):
        a = random_arrays(5, shared_ff=80)
        layer = moe.Layer.from_arrays(**a, router="qwen2-moe", top_k=4, scope="none")
        x = tokens(6, 40)
        y = layer.forward(x, np.zeros(40, np.uint64), np.arange(40, dtype=np.uint32))
        ref, _ = moe_reference(x, a["router_gate"], a["gate_proj"], a["up_proj"], a["down_proj"], 4, False,
                               shared=(a["shared_gate_proj"], a["shared_up_proj"], a["shared_down_proj"]),
                               shared_gate=a["shared_expert_gate"])
        err = rel_error(y, ref)
        print("\n  qwen2-moe (top-4, shared expert + gate) vs float64 reference: rel error %.3g" % err)
        self.assertLessEqual(err, 1e-5)

    def test_bf16_bits_are_widened_exactly(self):
        a = random_arrays(7)
        # bf16 bit patterns (truncate the float32 values' low half), and the same values as float32.
        bits = {k: [(m.view(np.uint32) >> 16).astype(np.uint16) for m in a[k]]
                for k in ("gate_proj", "up_proj", "down_proj")}
        widened = {k: [(b.astype(np.uint32) << 16).view(np.float32) for b in bits[k]] for k in bits}
        l16 = moe.Layer.from_arrays(a["router_gate"], **bits, scope="none")
        l32 = moe.Layer.from_arrays(a["router_gate"], **widened, scope="none")
        self.assertEqual(l16.weights.storage, "bf16")
        x = tokens(8, 20)
        ids, pos = np.zeros(20, np.uint64), np.arange(20, dtype=np.uint32)
        y16, y32 = l16.forward(x, ids, pos), l32.forward(x, ids, pos)
        ref, _ = moe_reference(x, a["router_gate"], widened["gate_proj"], widened["up_proj"],
                               widened["down_proj"], 2, True)
        self.assertLessEqual(rel_error(y16, ref), 1e-5)
        self.assertLessEqual(rel_error(y32, ref), 1e-5)


class InvarianceTest(unittest.TestCase):
    """Bits, not tolerances: the deterministic preset makes a request's output independent of its co-batch."""

    def check_alone_vs_cobatched(self, layer, seed, n_mine, n_strangers):
        rng = np.random.default_rng(seed)
        mine = tokens(seed, n_mine)
        alone = layer.forward(mine, np.full(n_mine, 1000, np.uint64), np.arange(n_mine, dtype=np.uint32))
        strangers = tokens(seed + 1, n_strangers)
        x = np.concatenate([mine, strangers])
        ids = np.concatenate([np.full(n_mine, 1000), rng.integers(0, 5, n_strangers)]).astype(np.uint64)
        pos = np.concatenate([np.arange(n_mine), np.arange(n_strangers)]).astype(np.uint32)
        perm = rng.permutation(len(x))
        y = layer.forward(np.ascontiguousarray(x[perm]), ids[perm], pos[perm])
        back = np.empty_like(y)
        back[perm] = y
        self.assertEqual(alone.tobytes(), back[:n_mine].tobytes())
        return layer.last_stats()

    def test_request_alone_equals_cobatched_shuffled(self):
        layer = moe.Layer.random(D, FF, E, seed=11)  # deterministic preset: sequence scope, capacity 1.25
        dropped = 0
        for seed, (n_mine, n_strangers) in enumerate([(1, 7), (5, 40), (17, 100), (33, 200)]):
            dropped += self.check_alone_vs_cobatched(layer, 100 + seed, n_mine, n_strangers)["num_dropped"]
        self.assertGreater(dropped, 0, "capacity should bind somewhere, or the test proves little")

    def test_thread_count_does_not_change_bits(self):
        x = tokens(21, 50)
        ids = np.arange(50, dtype=np.uint64) % 3
        pos = (np.arange(50) // 3).astype(np.uint32)
        outs = [moe.Layer.random(D, FF, E, seed=12, storage="bf16", num_threads=n).forward(x, ids, pos)
                for n in (1, 2, 3)]
        self.assertEqual(outs[0].tobytes(), outs[1].tobytes())
        self.assertEqual(outs[0].tobytes(), outs[2].tobytes())

    def test_prefix_cache_lifecycle(self):
        """The deterministic preset (prefix scope) with a prefix cache and speculation, 40 draws: a writer
        shares the probe's first P tokens (its prompt length another one of the same prefix_cache_salt); the
        probe restored from the writer's segments, prefilled in chunks among strangers, decoding with draft
        rows partly rejected (rolled back), gives with the writer's rows of the prefix the probe alone's bits.
        Capacity binds: the probe alone drops pairs. Then restoring a prefix of another salt raises ValueError
        and changes nothing."""
        layer = moe.Layer.random(D, FF, E, seed=15, capacity_factor=1.0, lookahead=8)

        def rows(meta):  # meta: (request, content, position)
            x = np.stack([np.random.default_rng(1000003 * (c + 1) + p).standard_normal(D) for _, c, p in meta])
            return (np.ascontiguousarray(x, dtype=np.float32), np.array([i for i, _, _ in meta], np.uint64),
                    np.array([p for _, _, p in meta], np.uint32))

        rng = np.random.default_rng(8)
        probe, writer = 42, 50
        probe_drops = 0
        for trial in range(40):
            prompt = int(rng.integers(12, 40))
            total = prompt + int(rng.integers(1, 6))
            P = int(rng.integers(1, prompt - 8 + 1)) if prompt > 9 else 1
            alone_state = layer.routing_state()
            alone_state.admit(probe, prompt)
            alone = layer.forward(*rows([(probe, probe, p) for p in range(total)]), state=alone_state)
            probe_drops += layer.last_stats()["num_dropped"]
            state = layer.routing_state(record=True)
            writer_prompt = max(P + 8, int(rng.integers(P + 8, P + 30)))
            self.assertEqual(layer.prefix_cache_salt(P, writer_prompt), 0)
            self.assertEqual(layer.prefix_cache_salt(P, prompt), 0)
            state.admit(writer, writer_prompt)
            got = {}
            at = 0
            while at < writer_prompt:
                n = min(writer_prompt - at, int(rng.integers(1, 14)))
                meta = [(writer, probe if p < P else writer, p) for p in range(at, at + n)]
                y = layer.forward(*rows(meta), state=state)
                for r, (_, _, p) in enumerate(meta):
                    if p < P:
                        got[p] = y[r]
                at += n
            bounds = sorted(set(int(b) for b in rng.integers(1, P + 1, size=3)) | {P})
            segments = [state.segment(writer, b0, b1) for b0, b1 in zip([0] + bounds[:-1], bounds)]
            state.release(writer)
            state.restore(probe, prompt, segments)
            self.assertEqual(state.next_position(probe), P)
            at = P
            while at < total:
                if at < prompt:
                    n = min(prompt - at, int(rng.integers(1, 10)))
                    meta = [(probe, probe, p) for p in range(at, at + n)]
                    accepted = n
                else:  # one true row and up to 3 drafts, some rejected
                    drafts = min(int(rng.integers(0, 4)), total - at - 1)
                    accepted = 1 + int(rng.integers(0, drafts + 1))
                    meta = [(probe, probe if i < accepted else 999, at + i) for i in range(drafts + 1)]
                sid = 300 + at
                state.admit(sid, 5)
                meta += [(sid, sid, p) for p in range(5)]
                order = rng.permutation(len(meta))
                meta = [meta[i] for i in order]
                y = layer.forward(*rows(meta), state=state)
                for r, (i, c, p) in enumerate(meta):
                    if i == probe and p < at + accepted:
                        got[p] = y[r]
                state.release(sid)
                if max(p for i, _, p in meta if i == probe) >= at + accepted:
                    state.rollback(probe, at + accepted)
                at += accepted
            served = np.stack([got[p] for p in range(total)])
            self.assertEqual(alone.tobytes(), served.tobytes(), "trial %d (prompt %d, P %d)" % (trial, prompt, P))
        self.assertGreater(probe_drops, 0, "capacity must bind for the property to mean anything")

        # A prefix written under another salt: refused, nothing changes.
        state = layer.routing_state(record=True)
        state.admit(writer, 10)  # 10 < 6 + 8: its first 6 positions saw the prompt length
        layer.forward(*rows([(writer, probe, p) for p in range(10)]), state=state)
        seg = state.segment(writer, 0, 6)
        with self.assertRaisesRegex(ValueError, "planned for a prompt of 10 tokens"):
            state.restore(probe, 30, [seg])
        with self.assertRaisesRegex(ValueError, "too short"):
            state.restore(probe, 30, [b"MOERSEG1"])
        self.assertNotIn(probe, state)
        with self.assertRaisesRegex(ValueError, "does not record"):
            layer.routing_state().segment(1, 0, 1)
        with self.assertRaisesRegex(ValueError, "rolled forward"):
            state.rollback(writer, 11)

    def test_multi_turn_conversation(self):
        """A chat's second turn (the deterministic preset, 8 experts): turn 1 is a 48-row prompt and 24 decode
        rows; turn 2 sends them again with a 16-row message, admitted with its turn ends [48, 72, 88]. At cf
        0.75, 1 and 1.25: every block key of turn 1 equals turn 2's at the same end, so a prefix cache may
        serve all 72 positions; turn 2 recomputed routes them bitwise as turn 1 did, and turn 2 restored from
        turn 1's segments gives the recomputed turn's bits. Capacity binds (turn 1 drops pairs). Admitted as a
        plain 88-row prompt instead, turn 2 routes some of turn 1's positions otherwise at cf 0.75, and the
        salt refuses turn 1's last blocks."""
        def rows(conv, positions):
            x = np.stack([np.random.default_rng(7919 * conv + p).standard_normal(D) for p in positions])
            return (np.ascontiguousarray(x, dtype=np.float32), np.full(len(positions), conv, np.uint64),
                    np.array(positions, np.uint32))

        ends = [48, 72, 88]
        for cf in (0.75, 1.0, 1.25):
            layer = moe.Layer.random(D, FF, E, seed=21, capacity_factor=cf)
            conv = 3
            state = layer.routing_state(record=True)
            state.admit(conv, 48)
            turn1, dropped = [], 0
            for chunk in ([range(0, 20), range(20, 48)] + [range(p, p + 1) for p in range(48, 72)]):
                turn1.append(layer.forward(*rows(conv, list(chunk)), state=state))
                dropped += layer.last_stats()["num_dropped"]
            turn1 = np.concatenate(turn1)
            blocks = [state.segment(conv, b, b + 8) for b in range(0, 72, 8)]
            state.release(conv)
            if cf < 1.25:
                self.assertGreater(dropped, 0, "capacity must bind (cf %g)" % cf)
            for end in range(1, 73):
                self.assertEqual(layer.prefix_cache_salt(end, 48), layer.prefix_cache_salt(end, ends),
                                 "block end %d (cf %g)" % (end, cf))

            state.admit(conv, ends)  # turn 2, recomputed in chunks
            turn2 = np.concatenate([layer.forward(*rows(conv, list(chunk)), state=state)
                                    for chunk in (range(0, 30), range(30, 77), range(77, 88), range(88, 89))])
            state.release(conv)
            self.assertEqual(turn1.tobytes(), turn2[:72].tobytes(), "cf %g" % cf)

            state.restore(conv, ends, blocks)  # turn 2 from the cache: all 72 positions
            self.assertEqual(state.next_position(conv), 72)
            rest = np.concatenate([layer.forward(*rows(conv, list(chunk)), state=state)
                                   for chunk in (range(72, 80), range(80, 88), range(88, 89))])
            state.release(conv)
            self.assertEqual(rest.tobytes(), turn2[72:].tobytes(), "cf %g" % cf)

            if cf == 0.75:  # the counter-check: a plain 88-row prompt
                state.admit(conv, 88)
                plain = layer.forward(*rows(conv, list(range(88))), state=state)
                state.release(conv)
                same = sum(plain[p].tobytes() == turn1[p].tobytes() for p in range(72))
                self.assertLess(same, 72)
                with self.assertRaisesRegex(ValueError, "planned for a prompt of 48 tokens"):
                    state.restore(conv, 88, blocks)

    def test_sequence_scope_serving_lifecycle(self):
        """The deterministic preset under a serving engine: a probe admitted with its prompt length, alone and
        unchunked (prompt and decode rows in one call) vs prefilled in chunks among admitted strangers, rows
        shuffled, then decoded next to theirs: the same bits. Then the lifecycle's errors."""
        layer = moe.Layer.random(D, FF, E, seed=14, capacity_factor=1.0)

        def rows(meta):
            x = np.stack([np.random.default_rng(1000003 * (i + 1) + p).standard_normal(D) for i, p in meta])
            return (np.ascontiguousarray(x, dtype=np.float32), np.array([i for i, _ in meta], np.uint64),
                    np.array([p for _, p in meta], np.uint32))

        prompt, decode, probe = 27, 5, 42
        alone_state = layer.routing_state()
        alone_state.admit(probe, prompt)
        x, ids, pos = rows([(probe, p) for p in range(prompt + decode)])
        alone = layer.forward(x, ids, pos, state=alone_state)
        dropped = layer.last_stats()["num_dropped"]
        self.assertGreater(dropped, 0, "capacity should bind, or the test proves little")

        rng = np.random.default_rng(5)
        for trial in range(5):
            state = layer.routing_state()
            state.admit(probe, prompt)
            strangers = {}
            served = {}
            at = 0
            while at < prompt + decode:
                n = min(prompt - at, int(rng.integers(1, 12))) if at < prompt else 1
                meta = [(probe, p) for p in range(at, at + n)]
                if rng.random() < 0.6:  # a stranger arrives
                    sid = 100 * (trial + 1) + len(strangers)
                    strangers[sid] = [int(rng.integers(1, 30)), 0]
                    state.admit(sid, strangers[sid][0])
                for sid, s in strangers.items():
                    m = min(s[0] - s[1], 6) if s[1] < s[0] else 1
                    meta += [(sid, p) for p in range(s[1], s[1] + m)]
                    s[1] += m
                order = rng.permutation(len(meta))
                x, ids, pos = rows([meta[i] for i in order])
                y = layer.forward(x, ids, pos, state=state)
                for r in range(len(order)):
                    if ids[r] == probe:
                        served[int(pos[r])] = y[r]
                at += n
            got = np.stack([served[p] for p in range(prompt + decode)])
            self.assertEqual(alone.tobytes(), got.tobytes(), "trial %d" % trial)
            self.assertEqual(state.num_requests, 1 + len(strangers))
            self.assertIn(probe, state)

        # The lifecycle's errors: each raises ValueError naming the problem and changes nothing.
        state = layer.routing_state()
        x, ids, pos = rows([(7, 0)])
        with self.assertRaisesRegex(ValueError, "admitted"):
            layer.forward(x, ids, pos, state=state)  # never admitted
        state.admit(7, 4)
        with self.assertRaisesRegex(ValueError, "already admitted"):
            state.admit(7, 4)
        with self.assertRaisesRegex(ValueError, "prompt_length must be >= 1"):
            state.admit(8, 0)
        with self.assertRaisesRegex(ValueError, "does not hold"):
            state.release(9)
        layer.forward(x, ids, pos, state=state)
        x2, ids2, pos2 = rows([(7, 2)])
        with self.assertRaisesRegex(ValueError, "contiguous"):
            layer.forward(x2, ids2, pos2, state=state)  # skips position 1
        with self.assertRaisesRegex(ValueError, "contiguous"):
            layer.forward(x, ids, pos, state=state)  # goes back to 0
        other = moe.Layer.random(D, FF, E + 2, seed=15).routing_state()
        other.admit(7, 4)
        with self.assertRaisesRegex(ValueError, "routing state is for %d experts" % (E + 2)):
            layer.forward(x, ids, pos, state=other)
        self.assertEqual(state.num_requests, 1)
        state.release(7)
        self.assertNotIn(7, state)

    def test_causal_chunking(self):
        layer = moe.Layer.random(D, FF, E, seed=13, scope="causal")
        x = tokens(22, 30)
        ids = np.zeros(30, np.uint64)
        full = layer.forward(x, ids, np.arange(30, dtype=np.uint32), state=layer.routing_state())
        state = layer.routing_state()
        parts = [layer.forward(np.ascontiguousarray(x[a:b]), ids[a:b], np.arange(a, b, dtype=np.uint32),
                               state=state) for a, b in ((0, 7), (7, 8), (8, 30))]
        self.assertEqual(full.tobytes(), np.concatenate(parts).tobytes())
        self.assertEqual(state.num_requests, 1)


class PlanTest(unittest.TestCase):
    def test_plan_arrays(self):
        rng = np.random.default_rng(31)
        logits = rng.standard_normal((40, 8)).astype(np.float32)
        ids = np.repeat(np.arange(4), 10)
        pos = np.tile(np.arange(10), 4)
        p = moe.plan(logits, ids, pos, top_k=2, mode="greedy", capacity_factor=1.0)
        self.assertEqual(p["expert"].shape, (40, 2))
        self.assertEqual(p["expert"].dtype, np.int32)
        self.assertEqual(p["weight"].dtype, np.float32)
        self.assertEqual(p["status"].dtype, np.uint8)
        self.assertEqual(p["batch_capacity"], 10)
        self.assertEqual(p["num_kept"] + p["num_rerouted"] + p["num_dropped"], 80)
        self.assertEqual(int(p["expert_load"].sum()), p["num_kept"] + p["num_rerouted"])
        self.assertTrue(np.all(p["expert"][p["status"] == 2] == -1))
        order = np.argsort(-logits, axis=1, kind="stable")[:, :2]
        kept = p["status"] == 0
        np.testing.assert_array_equal(p["expert"][kept], order[kept])

    def test_stable_plan_is_invariant(self):
        rng = np.random.default_rng(32)
        mine = rng.standard_normal((6, 8)).astype(np.float32)
        alone = moe.plan(mine, np.full(6, 9), np.arange(6), mode="stable")
        others = rng.standard_normal((30, 8)).astype(np.float32)
        logits = np.concatenate([others, mine])
        ids = np.concatenate([np.zeros(30, int), np.full(6, 9)])
        pos = np.concatenate([np.arange(30), np.arange(6)])
        both = moe.plan(logits, ids, pos, mode="stable")
        for key in ("expert", "weight", "status"):
            self.assertEqual(alone[key].tobytes(), both[key][30:].tobytes(), key)

    def test_plan_errors(self):
        logits = np.zeros((4, 8), np.float32)
        with self.assertRaisesRegex(ValueError, "top_k"):
            moe.plan(logits, np.zeros(4, int), np.arange(4), top_k=9)
        with self.assertRaisesRegex(ValueError, "unknown"):
            moe.plan(logits, np.zeros(4, int), np.arange(4), mode="fastest")
        with self.assertRaisesRegex(TypeError, "float32"):
            moe.plan(logits.astype(np.float64), np.zeros(4, int), np.arange(4))
        bad = logits.copy()
        bad[2] = np.nan
        with self.assertRaisesRegex(ValueError, "row 2"):
            moe.plan(bad, np.zeros(4, int), np.arange(4))


class DeviceTest(unittest.TestCase):
    def test_unknown_device_is_a_value_error(self):
        with self.assertRaisesRegex(ValueError, '"tpu"'):
            moe.Layer.from_arrays(**random_arrays(9), device="tpu")

    def test_cuda_matches_cpu_or_says_why_not(self):
        a = random_arrays(10)
        x = tokens(11, 30)
        ids, pos = np.arange(30) % 3, np.arange(30) // 3
        y_cpu = moe.Layer.from_arrays(**a).forward(x, ids, pos)
        try:
            gpu = moe.Layer.from_arrays(**a, device="cuda")
        except (RuntimeError, ValueError) as e:
            self.assertRegex(str(e), "no usable CUDA device|no CUDA backend")
            return
        y_gpu = gpu.forward(x, ids, pos)
        self.assertLess(rel_error(y_gpu, y_cpu), 1e-5)


class BadInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.layer = moe.Layer.random(D, FF, E, seed=41)
        cls.x = tokens(42, 6)
        cls.ids = np.zeros(6, np.uint64)
        cls.pos = np.arange(6, dtype=np.uint32)

    def test_dtype(self):
        with self.assertRaisesRegex(TypeError, r"float32 \(got float64\)"):
            self.layer.forward(self.x.astype(np.float64), self.ids, self.pos)
        with self.assertRaisesRegex(TypeError, "numpy.ndarray"):
            self.layer.forward(self.x.tolist(), self.ids, self.pos)
        with self.assertRaisesRegex(TypeError, "integer dtype"):
            self.layer.forward(self.x, self.ids.astype(np.float32), self.pos)

    def test_shape(self):
        with self.assertRaisesRegex(ValueError, "2-D"):
            self.layer.forward(self.x.reshape(-1), self.ids, self.pos)
        with self.assertRaisesRegex(ValueError, "hidden size is 64"):
            self.layer.forward(np.zeros((6, 63), np.float32), self.ids, self.pos)
        with self.assertRaisesRegex(ValueError, "request_ids has 5 entries but x has 6 rows"):
            self.layer.forward(self.x, self.ids[:5], self.pos)
        with self.assertRaisesRegex(ValueError, "positions has 7 entries"):
            self.layer.forward(self.x, self.ids, np.arange(7))
        with self.assertRaisesRegex(ValueError, "out has 5 rows"):
            self.layer.forward(self.x, self.ids, self.pos, out=np.zeros((5, D), np.float32))

    def test_layout(self):
        wide = np.zeros((6, 2 * D), np.float32)
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            self.layer.forward(wide[:, ::2], self.ids, self.pos)
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            self.layer.forward(np.asfortranarray(np.zeros((6, D), np.float32)), self.ids, self.pos)

    def test_values(self):
        x = self.x.copy()
        x[4, 10] = np.nan
        out = np.full((6, D), 7.0, np.float32)
        with self.assertRaisesRegex(ValueError, "row 4"):
            self.layer.forward(x, self.ids, self.pos, out=out)
        self.assertTrue(np.all(out == 7.0), "y must be unchanged on an error")
        with self.assertRaisesRegex(ValueError, "out of range"):
            self.layer.forward(self.x, -np.ones(6, np.int64), self.pos)
        with self.assertRaisesRegex(ValueError, "both claim request 0 position 0"):
            self.layer.forward(self.x, self.ids, np.zeros(6, np.uint32))

    def test_config_errors(self):
        w = moe.Weights.random(D, FF, E, seed=1)
        with self.assertRaisesRegex(ValueError, "top_k"):
            moe.Layer(w, top_k=9)
        with self.assertRaisesRegex(ValueError, "fastest"):
            moe.Layer(w, preset="fastest")
        with self.assertRaisesRegex(ValueError, "scope"):
            moe.Layer(w, scope="galaxy")
        with self.assertRaises(TypeError):
            moe.Layer("not weights")
        with self.assertRaisesRegex(ValueError, "expected \\[96, 64\\]"):
            a = random_arrays(1)
            a["up_proj"][3] = a["up_proj"][3][:, :10]
            moe.Layer.from_arrays(**a)

    def test_out_and_zero_copy(self):
        out = np.empty((6, D), np.float32)
        y = self.layer.forward(self.x, self.ids, self.pos, out=out)
        self.assertTrue(np.shares_memory(y, out))
        np.testing.assert_array_equal(out, self.layer.forward(self.x, self.ids, self.pos))

    def test_stats_and_fingerprint(self):
        self.layer.forward(self.x, self.ids, self.pos)
        s = self.layer.last_stats()
        self.assertEqual(s["num_tokens"], 6)
        self.assertEqual(s["num_kept"] + s["num_rerouted"] + s["num_dropped"], 12)
        self.assertEqual(int(s["expert_load"].sum()), s["num_kept"] + s["num_rerouted"])
        fp = json.loads(self.layer.fingerprint())
        self.assertEqual(fp["dispatch"], "prefix/request/drop")
        self.assertEqual(fp["weights_hash"], "%016x" % self.layer.weights.content_hash)
        self.assertEqual(fp["version"], moe.__version__)


class EdgeCaseTest(unittest.TestCase):
    def test_empty_batch(self):
        layer = moe.Layer.random(D, FF, E, seed=61)
        y = layer.forward(np.zeros((0, D), np.float32), [], [])
        self.assertEqual(y.shape, (0, D))
        self.assertEqual(layer.last_stats()["num_tokens"], 0)
        self.assertEqual(moe.plan(np.zeros((0, E), np.float32), [], [])["expert"].shape, (0, 2))

    def test_batch_larger_than_max_tokens_grows_the_workspace(self):
        small = moe.Layer.random(D, FF, E, seed=62, max_tokens=4)
        large = moe.Layer.random(D, FF, E, seed=62, max_tokens=64)
        x = tokens(63, 40)
        ids, pos = np.arange(40) % 2, np.arange(40) // 2
        self.assertEqual(small.forward(x, ids, pos).tobytes(), large.forward(x, ids, pos).tobytes())

    def test_concurrent_python_threads_share_a_layer(self):
        import threading
        layer = moe.Layer.random(D, FF, E, seed=64, num_threads=2)
        inputs = [tokens(70 + i, 16 + i) for i in range(4)]
        expected = [layer.forward(x, np.zeros(len(x), int), np.arange(len(x))) for x in inputs]
        results, errors = {}, []

        def work(i):
            try:
                for _ in range(10):
                    x = inputs[i]
                    results[i] = layer.forward(x, np.zeros(len(x), int), np.arange(len(x)))
            except Exception as e:  # pragma: no cover
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        for i in range(4):
            self.assertEqual(results[i].tobytes(), expected[i].tobytes())


def write_safetensors(path, tensors):
    """A minimal safetensors writer (F32 / BF16-as-uint16), enough for the loader test."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dtype = {np.dtype(np.float32): "F32", np.dtype(np.uint16): "BF16"}[arr.dtype]
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        blobs.append(arr.tobytes())
        offset += arr.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class SafetensorsTest(unittest.TestCase):
    def test_load_equals_from_arrays(self):
        a = random_arrays(51)
        t = {"model.layers.2.block_sparse_moe.gate.weight": a["router_gate"]}
        for e in range(E):
            for name, key in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
                t["model.layers.2.block_sparse_moe.experts.%d.%s.weight" % (e, name)] = a[key][e]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "model.safetensors")
            write_safetensors(path, t)
            loaded = moe.Layer.from_safetensors(path, "mixtral", 2, D, FF, E)
            self.assertTrue(loaded.weights.zero_copy)
            with self.assertRaisesRegex(ValueError, "layers.3"):
                moe.Layer.from_safetensors(path, "mixtral", 3, D, FF, E)
        with self.assertRaisesRegex(RuntimeError, "nonexistent"):  # the OS failed: std::runtime_error
            moe.Layer.from_safetensors("/nonexistent/model.safetensors", "mixtral", 0, D, FF, E)
        copied = moe.Layer.from_arrays(**a)
        self.assertEqual(loaded.weights.content_hash, copied.weights.content_hash)
        x = tokens(52, 12)
        ids, pos = np.zeros(12, np.uint64), np.arange(12, dtype=np.uint32)
        self.assertEqual(loaded.forward(x, ids, pos).tobytes(), copied.forward(x, ids, pos).tobytes())


class PresetDocsTest(unittest.TestCase):
    """The presets' descriptions have one source (MoELayerConfig::preset_description, read from the presets):
    Layer's docstring shows them, and a Layer built with each preset has the rules its description names."""

    def test_docstring_shows_every_preset_description(self):
        doc = " ".join(moe.Layer.__doc__.split())
        self.assertNotIn("{presets}", doc)
        self.assertEqual(moe.preset_names(), ["deterministic", "greedy"])
        for name in moe.preset_names():
            self.assertIn('"%s": %s.' % (name, moe.preset_description(name)), doc)

    def test_a_layer_of_each_preset_has_the_described_rules(self):
        a = random_arrays(3)
        for name in moe.preset_names():
            rules = moe.preset_description(name).split(":")[0]  # "prefix scope (lookahead 16), request priority, ..."
            config = moe.Layer.from_arrays(**a, preset=name).config
            scope, priority, overflow, cf, kernels = [part.strip() for part in rules.split(", ")]
            self.assertIn(" scope=%s " % scope.split()[0], config, name)
            if "lookahead" in scope:
                self.assertIn(" lookahead=%s}" % scope.split()[-1].rstrip(")"), config, name)
            self.assertIn(" priority=%s " % priority.split()[0], config, name)
            self.assertIn(" overflow=%s " % overflow, config, name)
            self.assertIn("policy{cf=%s " % cf.split()[-1], config, name)
            self.assertIn(" expert_kernel=%s gate_kernel=%s " % ((kernels.split()[0],) * 2), config, name)

    def test_unknown_preset_is_named(self):
        with self.assertRaisesRegex(ValueError, "unknown layer preset 'bogus'"):
            moe.preset_description("bogus")


if __name__ == "__main__":
    unittest.main()
