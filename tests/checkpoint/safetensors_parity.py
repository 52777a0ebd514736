#!/usr/bin/env python3
"""Differential test: glmnorm's safetensors reader against the reference.

The reference is the PyPI `safetensors` package, pinned in
tests/requirements-parity.txt. This script writes a corpus of valid and
invalid files (the fuzz seeds, the test checkpoints, and systematic
variations of the header), takes the reference's verdict and glmnorm's (the
safetensors_verdict program) on each, and fails on any disagreement that is
not a documented stricter check of glmnorm: STRICTER below, each rule also
listed in docs/CHECKPOINTS.md (checked here).

Reference verdict: safe_open(path, framework="numpy") succeeds (it parses and
validates the whole header: safetensors' read_metadata) and every tensor then
loads with get_tensor. Where get_tensor fails only because NumPy cannot hold
the tensor (NUMPY_LIMITS: no bfloat16 / float8 / float6 / float4 dtype, more
than 64 dimensions, a zero-size array whose other dimensions exceed NumPy's
index range), the header's account of the tensor stands in for it:
get_slice(name).get_shape() and get_dtype() must succeed. Those are limits of
NumPy, not rules of the format: the same files load in PyTorch.

When both readers accept a file they must also read it alike: tensor names,
dtypes, shapes, metadata, and the bytes (FNV-1a) of every tensor NumPy could
load.

  safetensors_parity.py --checker PATH/safetensors_verdict [--keep DIR] [-v]
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy  # noqa: F401  (safe_open(framework="numpy") imports it; fail early if missing)
import safetensors
from safetensors import safe_open

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DOCS = os.path.join(REPO, "docs", "CHECKPOINTS.md")

# --- Documented stricter checks ---------------------------------------------
# Files the reference accepts and glmnorm refuses on purpose. Each rule names
# the text glmnorm's error must contain, and appears in docs/CHECKPOINTS.md
# ("Stricter than the reference") as `rule-name` with the reason.
RULES = {
    # The format's specification says the header MUST begin with '{'; the
    # reference implementation (serde_json) also skips leading whitespace.
    "header-starts-with-brace": "must start with '{'",
    # serde keeps the last of two equal tensor names, metadata keys or
    # unknown fields without a word; glmnorm refuses the ambiguity (another
    # reader may take the first).
    "no-duplicate-keys": "duplicate key",
    # serde also reads a tensor entry from a JSON array ["F32", [1], [0, 4]];
    # that is not the format and no writer produces it.
    "tensor-entry-is-object": "is not a JSON object with dtype",
    # Unknown fields of a tensor entry are ignored by both readers; glmnorm
    # bounds their nesting (4 levels in all, the reference 128).
    "nesting-depth": "nested deeper than",
    # More than 64 dimensions: NumPy's limit; the format has none.
    "rank-limit": "dimensions; at most 64",
    # A dimension above 2^63-1 (only possible in a zero-size tensor): shapes
    # are int64 in glmnorm, as in PyTorch and NumPy.
    "dimension-above-int64": "has a dimension above 2^63-1",
}
# Corpus case -> rule. Every other case must get the reference's verdict.
STRICTER = {
    "header_leading_space": "header-starts-with-brace",
    "header_leading_newline": "header-starts-with-brace",
    "header_leading_tab_with_tensor": "header-starts-with-brace",
    "dup_tensor_identical": "no-duplicate-keys",
    "dup_metadata_key": "no-duplicate-keys",
    "dup_unknown_field": "no-duplicate-keys",
    "tensor_entry_array": "tensor-entry-is-object",
    "unknown_field_nested_5": "nesting-depth",
    "unknown_field_nested_100": "nesting-depth",
    "rank_65": "rank-limit",
    "rank_65_bf16": "rank-limit",
    "rank_65_zero_size": "rank-limit",
    "zero_size_dim_2p63": "dimension-above-int64",
    "zero_size_dim_u64max": "dimension-above-int64",
    "zero_size_dim_2p63_bf16": "dimension-above-int64",
}

# get_tensor failures that are NumPy's limits, not the format's (see above).
NUMPY_DTYPES = {"BOOL", "U8", "I8", "I16", "U16", "F16", "I32", "U32", "F32", "F64", "I64",
                "U64", "C64"}
NUMPY_LIMITS = [
    ("no NumPy dtype", re.compile(
        r"module 'numpy' has no attribute 'float[468]|data type 'bfloat16' not understood|"
        r"Dtype not understood: F6_")),
    ("NumPy rank limit", re.compile(r"maximum supported dimension for an ndarray")),
    ("NumPy size limit", re.compile(r"Maximum allowed dimension exceeded|array is too big")),
]

# Bits per element of the dtypes glmnorm's tests know; a name the installed
# reference adds later is measured (BitsOf).
KNOWN_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16,
    "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64,
}

U64_MAX = 2**64 - 1
MAX_HEADER = 100_000_000  # the reference's MAX_HEADER_SIZE


# --- File images ------------------------------------------------------------

def payload(n, seed=0):
    """n bytes of a non-constant pattern, so hashes tell ranges apart."""
    return bytes((i * 7 + seed * 13 + 3) & 0xFF for i in range(n))


def image(header, data=b"", length=None):
    """8-byte length, header (dict -> compact JSON, str, or bytes), data."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode()
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def packed(tensors, metadata="absent", pad=True):
    """A valid file: tensors = [(name, dtype, shape, nbytes)], laid out in order."""
    header, offset = {}, 0
    if metadata != "absent":
        header["__metadata__"] = metadata
    for name, dtype, shape, nbytes in tensors:
        header[name] = entry(dtype, shape, offset, offset + nbytes)
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return image(text, payload(offset))


def f32(name="t", n=2):
    return (name, "F32", [n], 4 * n)


# --- The reference ----------------------------------------------------------

def numpy_limit(error, dtype):
    for label, pattern in NUMPY_LIMITS:
        if pattern.search(str(error)):
            if label == "no NumPy dtype" and dtype in NUMPY_DTYPES:
                return None  # NumPy has this dtype: a real failure
            return label
    return None


def fnv1a(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & U64_MAX
    return h


def reference_verdict(path):
    try:
        with safe_open(path, framework="numpy") as f:
            metadata = f.metadata()
            tensors = {}
            for name in f.keys():
                view = f.get_slice(name)
                t = {"dtype": view.get_dtype(), "shape": list(view.get_shape())}
                try:
                    t["fnv1a"] = fnv1a(f.get_tensor(name).tobytes())
                except Exception as e:  # noqa: BLE001 (any failure is a verdict)
                    limit = numpy_limit(e, t["dtype"])
                    if limit is None:
                        return {"ok": False, "error": f"get_tensor({name!r}): {e}"}
                    t["numpy_limit"] = limit
                tensors[name] = t
            return {"ok": True, "metadata": metadata, "tensors": tensors}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def reference_dtypes(tmp):
    """The dtype names the installed reference knows, from its own error message."""
    path = os.path.join(tmp, "probe.safetensors")
    with open(path, "wb") as f:
        f.write(image('{"t":{"dtype":"?","shape":[],"data_offsets":[0,0]}}'))
    verdict = reference_verdict(path)
    m = re.search(r"expected one of (.*?) at line", verdict.get("error", ""))
    if not m:
        sys.exit(f"cannot read the dtype list from the reference's error: {verdict}")
    return re.findall(r"`([^`]+)`", m.group(1))


def bits_of(dtype, tmp):
    if dtype in KNOWN_BITS:
        return KNOWN_BITS[dtype]
    # 8 elements take exactly `bits` bytes: find the size the reference accepts.
    path = os.path.join(tmp, "probe.safetensors")
    for nbytes in range(1, 129):
        with open(path, "wb") as f:
            f.write(image({"t": entry(dtype, [8], 0, nbytes)}, payload(nbytes)))
        if reference_verdict(path)["ok"]:
            return nbytes
    sys.exit(f"cannot measure the element size of the reference's dtype {dtype}")


# --- The corpus ---------------------------------------------------------------

def corpus(dtypes, tmp):
    """[(name, bytes or a callable writing the file)]."""
    cases = []

    def add(name, data):
        assert re.fullmatch(r"[a-z0-9_]+", name) and name not in dict(cases), name
        cases.append((name, data))

    # Committed fuzz seeds and every file of the test checkpoints.
    seeds = os.path.join(REPO, "fuzz", "corpus", "safetensors")
    for name in sorted(os.listdir(seeds)):
        with open(os.path.join(seeds, name), "rb") as f:
            add("seed_" + name.lower(), f.read())
    data_dir = os.path.join(REPO, "tests", "data")
    for sub in sorted(os.listdir(data_dir)):
        d = os.path.join(data_dir, sub)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith(".safetensors"):
                with open(os.path.join(d, name), "rb") as f:
                    add(re.sub(r"[^a-z0-9]+", "_", f"data_{sub}_{name[:-12]}".lower()), f.read())

    # __metadata__: the reference reads Option<HashMap<String, String>>.
    norm = ("model.norm.weight", "BF16", [8], 16)
    for label, meta in [("absent", "absent"), ("null", None), ("empty", {}),
                        ("strings", {"format": "pt", "": "", "k": "caf\u00e9 \U0001F600"})]:
        add(f"metadata_{label}_with_norm", packed([norm], meta))
        add(f"metadata_{label}_no_tensors", packed([], meta))
    for label, value in [("int", 1), ("float", 1.5), ("null", None), ("bool", True),
                         ("object", {}), ("array", ["a"])]:
        add(f"metadata_value_{label}", packed([f32()], {"k": value}))
    for label, meta in [("string", "pt"), ("number", 0), ("array", []), ("pairs", [["a", "b"]]),
                        ("true", True)]:
        add(f"metadata_is_{label}", packed([f32()], meta))
    add("metadata_after_tensors", image(
        '{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":null}',
        payload(4)))
    add("metadata_between_tensors", image(
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"__metadata__":{"x":"y"},'
        '"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', payload(2)))
    add("metadata_key_escaped", image('{"\\u005f_metadata__":{"a":"b"}}'))
    add("metadata_key_escaped_null", image('{"\\u005f_metadata__":null}'))
    add("metadata_twice", image('{"__metadata__":{"a":"1"},"__metadata__":{"a":"2"}}'))
    add("metadata_twice_null", image('{"__metadata__":null,"__metadata__":null}'))
    add("dup_metadata_key", image('{"__metadata__":{"a":"1","a":"2"}}'))
    add("metadata_name_with_space", image(
        '{"__metadata__ ":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', payload(1)))

    # Key order: entries in any order, fields in any order.
    add("order_reversed", image(
        '{"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},'
        '"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', payload(8)))
    add("order_fields_reversed", image(
        '{"t":{"data_offsets":[0,8],"shape":[2],"dtype":"F32"}}', payload(8)))
    add("order_names_not_by_offset", packed([("z", "F32", [1], 4), ("a", "I64", [1], 8),
                                             ("m", "U8", [3], 3)]))
    add("many_tensors", packed([(f"t{i}", "U8", [i % 3], i % 3) for i in range(1000)]))

    # Every dtype the reference knows, and names it does not.
    for dtype in dtypes:
        bits = bits_of(dtype, tmp)
        low = dtype.lower()
        add(f"dtype_{low}_vec8", packed([("t", dtype, [8], bits)]))
        add(f"dtype_{low}_2x4", packed([("t", dtype, [2, 4], bits)]))
        add(f"dtype_{low}_zero_size", packed([("t", dtype, [0, 3], 0)]))
        add(f"dtype_{low}_scalar",
            image({"t": entry(dtype, [], 0, (bits + 7) // 8)}, payload((bits + 7) // 8)))
        add(f"dtype_{low}_odd_count",
            image({"t": entry(dtype, [3], 0, (3 * bits + 7) // 8)}, payload((3 * bits + 7) // 8)))
        add(f"dtype_{low}_one_byte_short",
            image({"t": entry(dtype, [8], 0, bits - 1)}, payload(bits - 1)))
        add(f"dtype_{low}_lowercase", packed([("t", low, [8], bits)]))
        add(f"dtype_{low}_with_f32", packed([("a", dtype, [8], bits), f32("b")], None))
    for label, name in [("empty", ""), ("unknown", "Q4_K"), ("f8_e4m3fn", "F8_E4M3FN"),
                        ("c128", "C128"), ("space", " BF16"), ("float", "FLOAT")]:
        add(f"dtype_bad_{label}", packed([("t", name, [1], 1)]))
    add("dtype_number", image('{"t":{"dtype":16,"shape":[1],"data_offsets":[0,2]}}', payload(2)))
    add("dtype_null", image('{"t":{"dtype":null,"shape":[1],"data_offsets":[0,2]}}', payload(2)))

    # A GLM-4.5-like shard: norms among FP8 weights with their scales.
    add("glm_like_shard", packed([
        ("model.layers.0.input_layernorm.weight", "BF16", [16], 32),
        ("model.layers.0.mlp.experts.0.down_proj.weight", "F8_E4M3", [16, 16], 256),
        ("model.layers.0.mlp.experts.0.down_proj.weight_scale_inv", "F32", [1, 1], 4),
        ("model.layers.0.mlp.gate.e_score_correction_bias", "F32", [4], 16),
        ("model.layers.0.self_attn.q_norm.weight", "BF16", [8], 16),
        ("model.layers.0.empty", "BF16", [0], 0),
        ("model.layers.0.step", "I64", [], 8),
    ], None))

    # data_offsets: contiguous from 0, covering the data exactly.
    def two(a, b, data):
        return image({"a": entry("F32", [1], *a), "b": entry("F32", [1], *b)}, payload(data))
    add("offsets_contiguous", two((0, 4), (4, 8), 8))
    add("offsets_gap_between", two((0, 4), (8, 12), 12))
    add("offsets_gap_at_start", two((4, 8), (8, 12), 12))
    add("offsets_overlap", two((0, 4), (2, 6), 6))
    add("offsets_same_range", two((0, 4), (0, 4), 4))
    add("offsets_past_end", two((0, 4), (4, 8), 6))
    add("offsets_short_of_end", two((0, 4), (4, 8), 10))
    add("offsets_begin_after_end", image({"t": entry("F32", [0], 4, 0)}, payload(4)))
    add("offsets_begin_after_end_sized", image({"t": entry("F32", [1], 8, 4)}, payload(8)))
    add("offsets_u64_max", image({"t": entry("U8", [0], U64_MAX, U64_MAX)}))
    add("offsets_u64_max_end", image({"t": entry("U8", [1], 0, U64_MAX)}, payload(1)))
    add("offsets_end_wraps", image({"t": entry("U8", [5], U64_MAX - 1, 3)}, payload(3)))
    for label, text in [("negative", "[-4,0]"), ("float", "[0.0,4]"), ("exponent", "[0,4e0]"),
                        ("minus_zero", "[-0,4]"), ("minus_zero_end", "[0,-0]"),
                        ("over_u64", "[0,18446744073709551616]"), ("string", '["0","4"]'),
                        ("null", "null"), ("one", "[0]"), ("three", "[0,4,4]"),
                        ("object", '{"0":0,"1":4}'), ("bool", "[false,4]"),
                        ("nested", "[[0],[4]]")]:
        size = 0 if label == "minus_zero_end" else 4
        add(f"offsets_{label}", image(
            '{"t":{"dtype":"U8","shape":[%d],"data_offsets":%s}}' % (size, text), payload(4)))
    add("zero_size_first", image({"z": entry("F32", [0], 0, 0), "t": entry("F32", [1], 0, 4)},
                                 payload(4)))
    add("zero_size_middle", image({"a": entry("U8", [1], 0, 1), "z": entry("F32", [0, 9], 1, 1),
                                   "b": entry("U8", [1], 1, 2)}, payload(2)))
    add("zero_size_last", image({"t": entry("F32", [1], 0, 4), "z": entry("F32", [0], 4, 4)},
                                payload(4)))
    add("zero_size_three_same_offset", image({n: entry("I64", [0, 2], 0, 0) for n in "abc"}))
    add("zero_size_past_end", image({"t": entry("F32", [1], 0, 4), "z": entry("F32", [0], 8, 8)},
                                    payload(4)))
    add("zero_size_only_with_data", image({"z": entry("F32", [0], 0, 0)}, payload(4)))

    # Shapes: scalars, zero dims, overflow (also with a 0), bad values.
    add("shape_scalar", image({"t": entry("F64", [], 0, 8)}, payload(8)))
    add("shape_scalar_wrong_size", image({"t": entry("F64", [], 0, 4)}, payload(4)))
    add("shape_ones_rank_8", image({"t": entry("U8", [1] * 8, 0, 1)}, payload(1)))
    add("rank_64", image({"t": entry("F32", [1] * 64, 0, 4)}, payload(4)))
    add("rank_65", image({"t": entry("F32", [1] * 65, 0, 4)}, payload(4)))
    add("rank_65_bf16", image({"t": entry("BF16", [1] * 65, 0, 2)}, payload(2)))
    add("rank_65_zero_size", image({"t": entry("U8", [0] * 65, 0, 0)}))
    add("zero_size_huge_dims", image({"t": entry("F32", [0, 2**32, 2**32], 0, 0)}))
    add("zero_size_dim_2p63_minus_1", image({"t": entry("F32", [0, 2**63 - 1], 0, 0)}))
    add("zero_size_dim_2p63", image({"t": entry("F32", [0, 2**63], 0, 0)}))
    add("zero_size_dim_2p63_bf16", image({"t": entry("BF16", [2**63, 0], 0, 0)}))
    add("zero_size_dim_u64max", image({"t": entry("U8", [0, U64_MAX], 0, 0)}))
    add("overflow_then_zero", image({"t": entry("F32", [2**32, 2**32, 0], 0, 0)}))
    add("overflow_elements", image({"t": entry("F32", [2**32, 2**32], 0, 0)}))
    add("overflow_bits_f64", image({"t": entry("F64", [2**58], 0, 0)}))
    add("overflow_bits_f4", image({"t": entry("F4", [2**62], 0, 0)}))
    add("no_overflow_bits_wrong_size", image({"t": entry("F64", [2**57], 0, 8)}, payload(8)))
    add("overflow_u64max_times_2", image({"t": entry("U8", [U64_MAX, 2], 0, 0)}))
    add("overflow_u64max_times_1", image({"t": entry("U8", [U64_MAX, 1], 0, 0)}))
    add("shape_mismatch_bytes", image({"t": entry("BF16", [2, 3], 0, 10)}, payload(10)))
    for label, text in [("negative", "[-1]"), ("float", "[1.0]"), ("exponent", "[1e0]"),
                        ("minus_zero", "[-0]"), ("minus_zero_second", "[1,-0]"),
                        ("bool", "[true]"), ("null", "null"), ("string", '"1"'),
                        ("dim_string", '["1"]'), ("nested", "[[1]]"), ("object", "{}"),
                        ("over_u64", "[18446744073709551616]"), ("dim_null", "[null]")]:
        add(f"shape_{label}", image(
            '{"t":{"dtype":"U8","shape":%s,"data_offsets":[0,1]}}' % text, payload(1)))

    # Tensor entries: missing fields, unknown fields, other JSON types.
    add("entry_missing_dtype", image('{"t":{"shape":[1],"data_offsets":[0,1]}}', payload(1)))
    add("entry_missing_shape", image('{"t":{"dtype":"U8","data_offsets":[0,1]}}', payload(1)))
    add("entry_missing_offsets", image('{"t":{"dtype":"U8","shape":[1]}}', payload(1)))
    unknown = '{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],%s}}'
    for label, text in [("null", '"x":null'), ("object", '"x":{"a":[1,2]}'),
                        ("string", '"x":"y"'), ("big_negative", '"x":-99999999999999999999'),
                        ("minus_zero", '"x":-0'), ("tiny_float", '"x":1e-400'),
                        ("huge_float", '"x":1e400'), ("nan", '"x":NaN'),
                        ("case", '"DTYPE":"F32"')]:
        add(f"unknown_field_{label}", image(unknown % text, payload(1)))
    # Containers nested: header, tensor entry, then the field's own levels.
    add("unknown_field_nested_4", image(unknown % '"x":{"a":[1]}', payload(1)))
    add("unknown_field_nested_5", image(unknown % '"x":{"a":[[1]]}', payload(1)))
    add("unknown_field_nested_100", image(unknown % ('"x":' + "[" * 98 + "]" * 98), payload(1)))
    add("unknown_field_nested_200", image(unknown % ('"x":' + "[" * 198 + "]" * 198), payload(1)))
    add("dup_unknown_field", image(unknown % '"x":1,"x":2', payload(1)))
    add("dup_field_dtype", image(
        '{"t":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}', payload(1)))
    add("dup_tensor_identical", image(
        '{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', payload(1)))
    add("dup_tensor_different", image(
        '{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', payload(2)))
    add("tensor_entry_array", image('{"t":["U8",[1],[0,1]]}', payload(1)))
    add("tensor_entry_array_short", image('{"t":["U8",[1]]}', payload(1)))
    for label, text in [("number", "5"), ("null", "null"), ("string", '"U8"'), ("true", "true")]:
        add(f"tensor_entry_{label}", image('{"t":%s}' % text))
    add("tensor_name_empty", image('{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
                                   payload(1)))
    add("tensor_name_escaped_nul", image(
        '{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', payload(1)))
    add("tensor_name_unicode", image(
        '{"\u00e9\U0001F600":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', payload(1)))
    add("tensor_name_newline", image(
        '{"a\\nb":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', payload(1)))

    # Header length.
    valid = '{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    add("file_empty", b"")
    add("file_7_bytes", b"\x02\0\0\0\0\0\0")
    add("file_8_bytes_length_0", struct.pack("<Q", 0))
    add("header_length_0_with_data", image("", b"{}"))
    add("header_length_short", image(valid, payload(4), length=len(valid) - 1))
    add("header_length_long", image(valid, payload(4), length=len(valid) + 1))
    add("header_length_past_file", image("{}", length=1000))
    add("header_length_u64_max", image("{}", length=U64_MAX))
    add("header_length_2p63", image("{}", length=2**63))
    add("header_not_8_aligned", image(valid, payload(4)))
    add("header_8_aligned", image(valid + " " * (-len(valid) % 8), payload(4)))
    add("header_limit_exact", lambda path: write_big(path, MAX_HEADER))
    add("header_limit_plus_1", lambda path: write_big(path, MAX_HEADER + 1))

    # Bytes around the JSON: padding, leading and trailing bytes.
    for label, pad in [("spaces", b"   "), ("tab_newline_cr", b"\t\n\r "), ("nul", b"\0\0\0"),
                       ("nul_then_garbage", b"\0garbage"), ("form_feed", b"\x0c"),
                       ("nbsp", b"\xc2\xa0"), ("garbage", b"x"), ("second_object", b"{}"),
                       ("invalid_utf8", b"  \xff")]:
        add(f"padding_{label}", image(valid.encode() + pad, payload(4)))
    add("header_leading_space", image(" {}"))
    add("header_leading_newline", image("\n{}"))
    add("header_leading_tab_with_tensor", image("\t" + valid, payload(4)))
    add("header_bom", image(b"\xef\xbb\xbf{}"))
    add("header_bom_with_tensor", image(b"\xef\xbb\xbf" + valid.encode(), payload(4)))
    add("header_nul_inside", image(b'{"__metadata__":{"a":"b\0c"}}'))
    add("trailing_bytes_after_data", image(valid, payload(5)))
    add("empty_header_with_data", image("{}", payload(8)))
    add("empty_header", image("{}"))
    add("empty_header_padded", image("{}      "))

    # Top-level JSON that is not an object, or not JSON.
    for label, text in [("array", "[]"), ("array_of_object", "[{}]"), ("null", "null"),
                        ("string", '"{}"'), ("number", "0"), ("truncated", '{"t":'),
                        ("comment", "{/* c */}"), ("line_comment", "{}// c"),
                        ("trailing_comma", '{"__metadata__":{"a":"b",}}'),
                        ("single_quotes", "{'__metadata__':null}"), ("unquoted_key", "{a:1}"),
                        ("nan", '{"__metadata__":NaN}'), ("infinity", '{"__metadata__":Infinity}'),
                        ("text", "hello world")]:
        add(f"json_{label}", image(text))

    # UTF-8 and escapes inside strings.
    for label, raw in [("overlong", b"\xc0\x80"), ("surrogate", b"\xed\xa0\x80"),
                       ("above_max", b"\xf4\x90\x80\x80"), ("truncated", b"\xe2\x82"),
                       ("lone_continuation", b"\x80"), ("latin1", b"\xe9"),
                       ("valid_4_byte", "\U0001F600".encode()), ("valid_2_byte", b"\xc3\xa9"),
                       ("control", b"\x01"), ("del", b"\x7f"),
                       ("escaped_pair", b"\\ud83d\\ude00"), ("lone_high", b"\\ud800"),
                       ("lone_low", b"\\udc00"), ("high_then_letter", b"\\ud800\\u0041"),
                       ("bad_escape", b"\\x41"), ("escaped_slash", b"\\/"),
                       ("short_hex", b"\\u12")]:
        add(f"utf8_{label}", image(b'{"__metadata__":{"a":"' + raw + b'"}}'))
        add(f"utf8_{label}_in_name", image(
            b'{"' + raw + b'":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', payload(1)))
    return cases


def write_big(path, header_len):
    """A file whose header is exactly header_len bytes: {} and spaces."""
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", header_len) + b"{}")
        remaining = header_len - 2
        chunk = b" " * (1 << 20)
        while remaining > 0:
            f.write(chunk[:min(remaining, len(chunk))])
            remaining -= min(remaining, len(chunk))


# --- Comparison -------------------------------------------------------------

def glmnorm_verdicts(checker, paths):
    out = subprocess.run([checker] + paths, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"{checker} failed (exit {out.returncode}):\n{out.stderr}")
    verdicts = [json.loads(line) for line in out.stdout.splitlines()]
    if [v["path"] for v in verdicts] != paths:
        sys.exit(f"{checker} printed {len(verdicts)} verdicts for {len(paths)} files")
    return verdicts


def reading_differences(ref, ours):
    """How two accepting readers' readings of one file differ ([] if alike)."""
    diffs = []
    if (ref["metadata"] or {}) != ours["metadata"]:
        diffs.append(f"metadata: reference {ref['metadata']!r}, glmnorm {ours['metadata']!r}")
    mine = {t["name"]: t for t in ours["tensors"]}
    if set(mine) != set(ref["tensors"]):
        diffs.append(f"tensor names: reference {sorted(ref['tensors'])}, glmnorm {sorted(mine)}")
        return diffs
    for name, t in ref["tensors"].items():
        m = mine[name]
        if (t["dtype"], t["shape"]) != (m["dtype"], m["shape"]):
            diffs.append(f"{name!r}: reference {t['dtype']} {t['shape']}, "
                         f"glmnorm {m['dtype']} {m['shape']}")
        if "fnv1a" in t and t["fnv1a"] != m["fnv1a"]:
            diffs.append(f"{name!r}: the bytes differ (FNV-1a {t['fnv1a']:x} vs {m['fnv1a']:x})")
    return diffs


def check_docs(problems):
    with open(DOCS, encoding="utf-8") as f:
        docs = f.read()
    for rule in RULES:
        if f"`{rule}`" not in docs:
            problems.append(f"stricter rule `{rule}` is not documented in {DOCS}")
    for rule in set(RULES) - set(STRICTER.values()):
        problems.append(f"stricter rule `{rule}` has no corpus case in STRICTER")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checker", required=True, help="the safetensors_verdict program")
    parser.add_argument("--keep", metavar="DIR", help="write the corpus here and keep it")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every verdict")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="glmnorm-parity-") as tmp:
        out_dir = args.keep or tmp
        os.makedirs(out_dir, exist_ok=True)
        dtypes = reference_dtypes(tmp)
        cases = corpus(dtypes, tmp)
        paths = []
        for name, data in cases:
            path = os.path.join(out_dir, name + ".safetensors")
            if callable(data):
                data(path)
            else:
                with open(path, "wb") as f:
                    f.write(data)
            paths.append(path)
        reference = [reference_verdict(p) for p in paths]
        ours = glmnorm_verdicts(args.checker, paths)
        for name, data in cases:  # the 100 MB ones
            if callable(data) and not args.keep:
                os.remove(os.path.join(out_dir, name + ".safetensors"))

    problems, counts, stricter_seen, numpy_limited = [], {}, set(), {}
    for (name, _), ref, mine in zip(cases, reference, ours):
        rule = STRICTER.get(name)
        if args.verbose:
            print(f"{name}: reference {'ok' if ref['ok'] else ref['error']} | "
                  f"glmnorm {'ok' if mine['ok'] else mine['error']}")
        if ref["ok"]:
            for t in ref["tensors"].values():
                if "numpy_limit" in t:
                    numpy_limited[t["numpy_limit"]] = numpy_limited.get(t["numpy_limit"], 0) + 1
        if ref["ok"] == mine["ok"]:
            if rule:
                problems.append(f"{name}: listed as stricter ({rule}) but both readers "
                                f"{'accept' if ref['ok'] else 'refuse'} it; update STRICTER")
                continue
            key = "both accept" if ref["ok"] else "both refuse"
            counts[key] = counts.get(key, 0) + 1
            if ref["ok"]:
                problems += [f"{name}: {d}" for d in reading_differences(ref, mine)]
        elif rule and ref["ok"] and RULES[rule] in mine["error"]:
            counts["documented stricter"] = counts.get("documented stricter", 0) + 1
            stricter_seen.add(name)
        elif ref["ok"]:
            problems.append(f"{name}: the reference accepts it, glmnorm refuses: {mine['error']}"
                            + (f" (STRICTER says {rule}: expected \"{RULES[rule]}\")" if rule else ""))
        else:
            problems.append(f"{name}: glmnorm accepts it, the reference refuses: {ref['error']}")
    for name in STRICTER:
        if name not in dict(cases):
            problems.append(f"STRICTER names {name}, which is not in the corpus")
    check_docs(problems)

    print(f"safetensors {safetensors.__version__}, {len(dtypes)} dtypes "
          f"({' '.join(dtypes)}); {len(cases)} files: " +
          ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    print("tensors checked through the header only (NumPy cannot hold them): " +
          (", ".join(f"{v} {k}" for k, v in sorted(numpy_limited.items())) or "none"))
    if problems:
        print(f"FAILED: {len(problems)} disagreement(s) with the reference:")
        for p in problems:
            print("  " + p)
        return 1
    print("PASSED: glmnorm accepts exactly the files the reference accepts, "
          f"apart from {len(stricter_seen)} documented stricter cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
