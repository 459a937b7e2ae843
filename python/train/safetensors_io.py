"""A pure-Python safetensors writer and reader (the `safetensors` package is not installed here).

Writer: the header is JSON with a fixed key order - "__metadata__" first, then the tensors in the order given -
compact separators, padded with spaces to a multiple of 8 bytes; tensor data follow in the same order,
little-endian, contiguous. The same tensors and metadata therefore always give the same file bytes.
"""
import json
import struct

import numpy as np

_DTYPES = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i4"): "I32", np.dtype("<i8"): "I64"}
_NUMPY = {v: k for k, v in _DTYPES.items()}


def write(path, tensors, metadata=None):
    """tensors: list of (name, numpy array); metadata: dict of str -> str (written in its insertion order)."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    blobs = []
    for name, array in tensors:
        a = np.ascontiguousarray(array)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        if a.dtype not in _DTYPES:
            raise ValueError("safetensors_io: %s has unsupported dtype %s" % (name, a.dtype))
        raw = a.tobytes()
        if name in header:
            raise ValueError("safetensors_io: duplicate tensor " + name)
        header[name] = {"dtype": _DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def read(path):
    """-> (dict name -> numpy array (a copy), metadata dict). Tensors keep the file's order."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = _NUMPY[info["dtype"]]
        a = np.frombuffer(data, dtype=dtype, count=(end - begin) // dtype.itemsize, offset=base + begin)
        out[name] = a.reshape(info["shape"]).copy()
    return out, metadata
