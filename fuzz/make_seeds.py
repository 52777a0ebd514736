#!/usr/bin/env python3
"""Writes the committed seed corpora under fuzz/corpus/<target>/ (stdlib only).

Seeds are small valid and near-valid inputs, so libFuzzer starts from the
structure the parsers expect instead of random bytes. Rerun after changing
the formats: python3 fuzz/make_seeds.py
"""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


ABSENT = object()  # no __metadata__ key (None writes "__metadata__": null)


def safetensors(tensors, metadata=ABSENT, pad=True):
    header = {}
    if metadata is not ABSENT:
        header["__metadata__"] = metadata
    data = b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def npy(descr, shape, payload, version=1):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    pre = 10 if version == 1 else 12
    header += " " * ((64 - (pre + len(header) + 1) % 64) % 64) + "\n"
    size = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header.encode() + payload


def gguf(kvs=(), tensors=(), version=3, align=32):
    """A GGUF image: kvs [(key, type id, packed value)], tensors [(name, dims,
    ggml type, bytes)], packed at `align` as ggml does."""
    def gstr(b):
        b = b.encode() if isinstance(b, str) else b
        return struct.pack("<Q", len(b)) + b
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, vtype, packed in kvs:
        head += gstr(key) + struct.pack("<I", vtype) + packed
    data = b""
    for name, dims, ttype, payload in tensors:
        head += gstr(name) + struct.pack("<I", len(dims))
        head += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ttype, len(data))
        data += payload + b"\0" * ((-len(payload)) % align)
    return head + b"\0" * ((-len(head)) % align) + data


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    shutil.rmtree(os.path.join(HERE, "corpus"), ignore_errors=True)
    bf16 = struct.pack("<4H", 0x3F80, 0x4000, 0xBF80, 0x3F00)
    write("safetensors", "two_tensors", safetensors(
        [("model.norm.weight", "BF16", [4], bf16), ("a", "F32", [2], struct.pack("<2f", 1, 2))],
        {"format": "pt"}))
    write("safetensors", "empty_header", safetensors([]))
    write("safetensors", "scalar_and_zero", safetensors(
        [("s", "F64", [], struct.pack("<d", 3.0)), ("z", "I64", [0, 3], b"")]))
    write("safetensors", "many_dtypes", safetensors(
        [(d, d, [2], b"\x01" * (2 * n)) for d, n in
         [("U8", 1), ("I8", 1), ("F8_E4M3", 1), ("F8_E5M2", 1), ("BOOL", 1), ("I16", 2),
          ("U16", 2), ("F16", 2), ("I32", 4), ("U32", 4), ("F32", 4), ("I64", 8), ("U64", 8),
          ("F64", 8)]]))
    # "__metadata__": null is valid (the reference reads Option<map>): a
    # GLM-like shard of a norm among FP8 weights.
    write("safetensors", "null_metadata", safetensors(
        [("model.layers.0.input_layernorm.weight", "BF16", [4], bf16),
         ("model.layers.0.mlp.down_proj.weight", "F8_E4M3", [2, 2], b"\x38\x40\xb8\x00"),
         ("model.layers.0.mlp.down_proj.weight_scale_inv", "F32", [], struct.pack("<f", 1))],
        None))
    write("safetensors", "newer_dtypes", safetensors(
        [(d, d, [8], b"\x01" * n) for d, n in
         [("F8_E4M3FNUZ", 8), ("F8_E5M2FNUZ", 8), ("F8_E8M0", 8), ("F4", 4), ("F6_E2M3", 6),
          ("F6_E3M2", 6), ("C64", 64)]], {}))
    write("safetensors", "unaligned", safetensors(
        [("p", "U8", [1], b"\x00"), ("f", "F32", [1], struct.pack("<f", 2.5))]))
    overlap = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
                         separators=(",", ":")).encode()
    write("safetensors", "overlap", struct.pack("<Q", len(overlap)) + overlap + b"\0" * 12)
    # A real shard written by the safetensors library (the smallest one).
    shard_dir = os.path.join(REPO, "tests", "data", "tiny_air")
    shards = sorted((os.path.getsize(os.path.join(shard_dir, f)), f)
                    for f in os.listdir(shard_dir) if f.startswith("model-"))
    if shards:
        with open(os.path.join(shard_dir, shards[0][1]), "rb") as f:
            write("safetensors", "real_shard", f.read())

    write("npy", "f32_2x3", npy("<f4", [2, 3], b"\0" * 24))
    write("npy", "f16_vec", npy("<f2", [4], b"\0" * 8))
    write("npy", "bf16_u2_v2", npy("<u2", [1, 2, 2], b"\0" * 8, version=2))
    write("npy", "scalar", npy("<f4", [], b"\0" * 4))

    cfg = os.path.join(REPO, "tests", "data", "tiny_glm45", "config.json")
    if os.path.exists(cfg):
        with open(cfg) as f:
            write("config", "tiny_glm45", f.read())
    write("config", "glm45", json.dumps({
        "model_type": "glm4_moe", "hidden_size": 5120, "num_hidden_layers": 92,
        "num_attention_heads": 96, "head_dim": 128, "rms_norm_eps": 1e-5, "use_qk_norm": True,
        "num_nextn_predict_layers": 1, "rope_scaling": None}))
    write("config", "air_no_eps", json.dumps({
        "model_type": "glm4_moe", "hidden_size": 4096, "num_hidden_layers": 46,
        "use_qk_norm": False}))

    idx = os.path.join(REPO, "tests", "data", "tiny_air", "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            write("index", "tiny_air", f.read())
    write("index", "small", json.dumps({"metadata": {"total_size": 10}, "weight_map": {
        "model.norm.weight": "model-00001-of-00002.safetensors",
        "model.layers.0.self_attn.q_norm.weight": "sub/model-00002-of-00002.safetensors"}}))


    def gs(text):
        return struct.pack("<Q", len(text)) + text.encode()
    f32 = struct.pack("<4f", 1.0, 0.5, 2.0, 1.25)
    write("gguf", "empty_v3", gguf())
    write("gguf", "norms_v2", gguf(version=2, kvs=[
        ("general.architecture", 8, gs("glm4moe")),
        ("glm4moe.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5)),
        ("glm4moe.block_count", 4, struct.pack("<I", 1))], tensors=[
        ("blk.0.attn_norm.weight", [4], 0, f32),
        ("blk.0.attn_q_norm.weight", [2], 30, struct.pack("<2H", 0x3F80, 0x4000)),
        ("output_norm.weight", [4], 1, struct.pack("<4H", 0x3C00, 0x3800, 0x4000, 0x3D00))]))
    write("gguf", "arrays_align_8", gguf(align=8, kvs=[
        ("general.alignment", 4, struct.pack("<I", 8)),
        ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2) + gs("a") + gs("bc")),
        ("scores", 9, struct.pack("<IQ", 6, 2) + struct.pack("<2f", 0.5, -1.0)),
        ("flag", 7, b"\1"), ("n", 11, struct.pack("<q", -3)), ("d", 12, struct.pack("<d", 2.5))],
        tensors=[("token_embd.weight", [32, 2], 8, b"\1" * 68), ("b", [3], 24, b"\2\3\4")]))
    write("gguf", "quant_types", gguf(tensors=[
        ("q4_k", [256], 12, b"\0" * 144), ("q6_k", [256], 14, b"\0" * 210),
        ("f64", [1, 2, 1], 28, b"\0" * 16)]))
    real = os.path.join(REPO, "tests", "data", "tiny_glm45_gguf", "broken", "norms_only.gguf")
    if os.path.exists(real):
        with open(real, "rb") as f:
            write("gguf", "tiny_glm45_norms", f.read())


if __name__ == "__main__":
    main()
