"""The C API of an installed libmoe.so through ctypes (tests/install/checks.sh): the layer and inputs of
tests/consumer/consumer.c (x from libm's sinf, as the C program computes it), so it prints the C program's line.
Usage: ctypes_c_api.py path/to/libmoe.so.N.M"""
import ctypes
import sys

import numpy as np

lib, libm = ctypes.CDLL(sys.argv[1]), ctypes.CDLL("libm.so.6")
libm.sinf.restype, libm.sinf.argtypes = ctypes.c_float, [ctypes.c_float]
lib.moe_version.restype = lib.moe_last_error.restype = ctypes.c_char_p


class Shape(ctypes.Structure):
    _fields_ = [("hidden", ctypes.c_int64), ("expert_ff", ctypes.c_int64), ("num_experts", ctypes.c_int32),
                ("num_shared_experts", ctypes.c_int32), ("shared_ff", ctypes.c_int64),
                ("shared_expert_gate", ctypes.c_int32), ("score_bias", ctypes.c_int32)]


class Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64)
                for n in ("num_tokens", "num_kept", "num_rerouted", "num_dropped", "num_fully_dropped")]


def check(status):
    if status != 0:
        raise RuntimeError(lib.moe_last_error().decode())


MOE_DTYPE_BF16 = 1
T, H = 16, 64
weights, layer = ctypes.c_void_p(), ctypes.c_void_p()
check(lib.moe_weights_random(ctypes.byref(Shape(H, 96, 8, 0, 0, 0, 0)), MOE_DTYPE_BF16, ctypes.c_uint64(1),
                             ctypes.byref(weights)))
check(lib.moe_layer_create(weights, None, ctypes.byref(layer)))
lib.moe_weights_destroy(weights)
x = np.array([libm.sinf(np.float32(12.9898) * np.float32(i)) for i in range(T * H)], np.float32)
ids = np.array([i % 2 for i in range(T)], np.uint64)
pos = np.array([i // 2 for i in range(T)], np.uint32)
y = np.zeros(T * H, np.float32)


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


check(lib.moe_layer_forward(layer, ptr(x), ctypes.c_int64(T), ctypes.c_int64(H), ptr(ids), ptr(pos), ptr(y), None))
stats = Stats()
check(lib.moe_layer_stats(layer, ctypes.byref(stats), None, ctypes.c_int64(0)))
lib.moe_layer_destroy(layer)
total = 0.0
for v in y:  # in order, in double, as the C program sums
    total += float(v)
print("consumer_c (moe %s): y checksum %.6f, kept %d, dropped %d"
      % (lib.moe_version().decode(), total, stats.num_kept, stats.num_dropped))
