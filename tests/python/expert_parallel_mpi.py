"""moe.Layer as one rank of an expert-parallel layer, run under mpirun (tests/cmake/api.cmake: 1, 2 and 4 ranks):
from the trained checkpoint each rank reads only its experts (Layer.from_pretrained(..., expert_parallel="mpi")),
under both planning modes and an EPLB placement with redundant experts, and from memory; every rank's output
rows must be bitwise those of a single-process layer on the ranks' rows concatenated in rank order. Not a
unittest module (run_tests.py skips it): every rank runs the same script; the exit status says."""
import os
import sys

import numpy as np

import moe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KJV = os.path.join(ROOT, "models", "kjv-moe")
REQUESTS, LEN = 8, 6


def batch(world, hidden):
    """Request r on rank r % world; the ranks' rows in rank order; first[rank] .. first[rank + 1] its rows."""
    rng = np.random.default_rng(5)
    xs = {r: rng.standard_normal((LEN, hidden)).astype(np.float32) for r in range(REQUESTS)}
    x, ids, pos, first = [], [], [], [0]
    for rank in range(world):
        for r in range(REQUESTS):
            if r % world == rank:
                x.append(xs[r])
                ids += [100 + r] * LEN
                pos += list(range(LEN))
        first.append(len(ids))
    return np.ascontiguousarray(np.concatenate(x)), np.array(ids, np.uint64), np.array(pos, np.uint32), first


def check(layer, ref, planning, failures):
    info = layer.expert_parallel
    rank, world = info["rank"], info["world_size"]
    x, ids, pos, first = batch(world, ref.hidden)
    ref_state, state = ref.routing_state(), layer.routing_state()
    for r in range(REQUESTS):
        ref_state.admit(100 + r, LEN)
        if planning == "global" or r % world == rank:
            state.admit(100 + r, LEN)
    y_ref = ref.forward(x, ids, pos, state=ref_state)
    a, b = first[rank], first[rank + 1]
    y = layer.forward(np.ascontiguousarray(x[a:b]), ids[a:b], pos[a:b], state=state)
    if not np.array_equal(y.view(np.uint32), y_ref[a:b].view(np.uint32)):
        failures.append("rank %d: %s planning, experts %s: rows differ" % (rank, planning, info["experts"]))
    if info["plans_locally"] != (planning == "home"):
        failures.append("rank %d: plans_locally %s under %s" % (rank, info["plans_locally"], planning))
    return world


def main():
    failures = []
    ref = moe.Layer.from_pretrained(KJV, layer=1)
    world = 1
    for planning in ("global", "home"):
        layer = moe.Layer.from_pretrained(KJV, layer=1, expert_parallel="mpi", planning=planning)
        world = check(layer, ref, planning, failures)
        held = layer.expert_parallel["experts"]
        if world > 1 and len(held) == ref.num_experts:
            failures.append("a rank of %d holds every expert" % world)
    # Redundant experts: EPLB's slots, 2 extra per rank.
    slots = moe.eplb_rebalance([500, 40, 300, 20, 80, 900, 60, 100], 8 + 2 * world, 1, 1, world)
    layer = moe.Layer.from_pretrained(KJV, layer=1, expert_parallel="mpi", planning="home", placement=slots)
    check(layer, ref, "home", failures)
    # From memory: the whole layer's weights on every rank.
    layer = moe.Layer(ref.weights, pretrained=KJV, expert_parallel="mpi", planning="global")
    check(layer, ref, "global", failures)
    try:
        moe.Layer(ref.weights, expert_parallel="tcp")
        failures.append("an unknown backend was accepted")
    except ValueError as e:
        if "'tcp' is not one of" not in str(e):
            failures.append("unexpected message: %s" % e)
    for f in failures:
        print(f, file=sys.stderr)
    print("expert_parallel_mpi.py: %s (%d ranks)" % ("FAILED" if failures else "all checks passed", world))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
