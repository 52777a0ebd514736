#!/usr/bin/env python3
"""Converts the tiny GLM-4.5 test checkpoint to GGUF with llama.cpp's own writer.

Writes, under tests/data/tiny_glm45_gguf/ (committed, like the tiny
checkpoints; rerun to regenerate):

  tiny_glm45.gguf          tests/data/tiny_glm45 converted as llama.cpp's
                           convert_hf_to_gguf.py does for Glm4MoeForCausalLM:
                           architecture glm4moe, the metadata keys it writes,
                           tensor names from gguf-py's TensorNameMap, experts
                           stacked into ffn_*_exps, norms (1-D) as F32, 2-D
                           weights Q8_0 where rows allow it, else BF16.
  split/tiny_glm45-0000K-of-00003.gguf
                           the same tensors as a split set (GGUFWriter's
                           split_max_tensors; metadata in the first file).
  broken/*.gguf            variants with one fault each (see VARIANTS):
                           eps 1e-6, eps missing, a q_norm of hidden width, one
                           element changed by 1 ulp, a missing norm, a NaN
                           gain, and malformed files (truncated, bad magic,
                           offsets and counts past the end, a 2^62 tensor
                           count, a 2^40-byte string).
  air.gguf                 tests/data/tiny_air converted the same way.
  dtypes/{bf16,f16}_norms.gguf  the norms stored as BF16 (exact) and F16 (rounded).

The variants hold the norms and a token embedding only (a few KB each). The C++
tests read these files with glmnorm's reader and need no Python. Run with the
parity venv, which pins the `gguf` package:

  $(bash scripts/python_env.sh tests/requirements-parity.txt)/bin/python scripts/make_tiny_gguf.py
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np
import gguf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "data", "tiny_glm45_gguf")
ARCH = gguf.MODEL_ARCH.GLM4_MOE


def read_safetensors(path):
    """{name: float32 ndarray} of a safetensors file (BF16/F16/F32), exactly."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = data[b:end]
        if e["dtype"] == "BF16":
            bits = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        elif e["dtype"] == "F16":
            arr = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif e["dtype"] == "F32":
            arr = np.frombuffer(buf, dtype="<f4").copy()
        else:
            raise SystemExit(f"{path}: {name}: dtype {e['dtype']} not handled")
        out[name] = arr.reshape(e["shape"])
    return out


def read_checkpoint(ckpt):
    with open(os.path.join(ckpt, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(ckpt, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    tensors = {}
    for s in shards:
        tensors.update(read_safetensors(os.path.join(ckpt, s)))
    return config, tensors


def convert(config, tensors):
    """[(gguf name, float32 array, ggml type)] in convert_hf_to_gguf's spirit."""
    blocks = config["num_hidden_layers"] + config.get("num_nextn_predict_layers", 0)
    name_map = gguf.TensorNameMap(ARCH, blocks)
    out = []
    experts = {}
    for name in sorted(tensors):
        arr = tensors[name]
        parts = name.split(".")
        if ".mlp.experts." in name and parts[5].isdigit():  # model.layers.N.mlp.experts.E.X.weight
            experts.setdefault((int(parts[2]), parts[6]), {})[int(parts[5])] = arr
            continue
        new = name_map.get_name(name, try_suffixes=(".weight", ".bias", ".e_score_correction_bias"))
        if new is None:
            raise SystemExit(f"no GGUF name for {name}")
        out.append((new, arr))
    kind = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}
    for (layer, proj), by_expert in sorted(experts.items()):
        stacked = np.stack([by_expert[e] for e in sorted(by_expert)])
        out.append((f"blk.{layer}.{kind[proj]}.weight", stacked))
    typed = []
    for new, arr in out:
        if arr.ndim == 1:
            typed.append((new, arr.astype(np.float32), gguf.GGMLQuantizationType.F32))
        elif arr.shape[-1] % 32 == 0:
            typed.append((new, arr, gguf.GGMLQuantizationType.Q8_0))
        else:
            typed.append((new, arr, gguf.GGMLQuantizationType.BF16))
    return typed


def add_metadata(w, config, eps=True, eps_value=None):
    """The keys convert_hf_to_gguf.py writes for Glm4MoeForCausalLM that the norms need."""
    w.add_name("tiny GLM-4.5 (glmnorm test data)")
    w.add_block_count(config["num_hidden_layers"] + config.get("num_nextn_predict_layers", 0))
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_head_count_kv(config["num_key_value_heads"])
    w.add_key_length(config["head_dim"])
    w.add_value_length(config["head_dim"])
    if eps:
        w.add_layer_norm_rms_eps(config["rms_norm_eps"] if eps_value is None else eps_value)
    w.add_expert_count(config["n_routed_experts"])
    w.add_expert_used_count(config["num_experts_per_tok"])
    w.add_expert_shared_count(config["n_shared_experts"])
    w.add_leading_dense_block_count(config["first_k_dense_replace"])
    w.add_nextn_predict_layers(config.get("num_nextn_predict_layers", 0))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)


def write(path, config, typed, split_max_tensors=0, **meta):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    w = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[ARCH], split_max_tensors=split_max_tensors)
    add_metadata(w, config, **meta)
    for new, arr, qtype in typed:
        data = gguf.quants.quantize(arr, qtype)
        w.add_tensor(new, data, raw_shape=data.shape if qtype == gguf.GGMLQuantizationType.F32
                     else None, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def norms_only(typed):
    """The norms, then the token embedding (last, so that cutting the file's
    end cuts a tensor that is not a norm): what the broken variants keep."""
    return ([t for t in typed if t[2] == gguf.GGMLQuantizationType.F32] +
            [t for t in typed if t[0].startswith("token_embd")])


def patch(src, dst, edit):
    with open(src, "rb") as f:
        raw = bytearray(f.read())
    raw = edit(raw)
    with open(dst, "wb") as f:
        f.write(raw)


def find_tensor_info(raw, name):
    """Byte position of tensor info `name` (its u64 length field)."""
    key = struct.pack("<Q", len(name)) + name.encode()
    pos = raw.find(key)
    assert pos > 0, name
    return pos


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    out = args.out
    if os.path.isdir(out):
        shutil.rmtree(out)
    config, tensors = read_checkpoint(os.path.join(REPO, "tests", "data", "tiny_glm45"))
    typed = convert(config, tensors)
    write(os.path.join(out, "tiny_glm45.gguf"), config, typed)
    write(os.path.join(out, "split", "tiny_glm45.gguf"), config, typed,
          split_max_tensors=(len(typed) + 2) // 3)
    air_config, air_tensors = read_checkpoint(os.path.join(REPO, "tests", "data", "tiny_air"))
    write(os.path.join(out, "air.gguf"), air_config, convert(air_config, air_tensors))

    b = os.path.join(out, "broken")
    base = norms_only(typed)
    write(os.path.join(b, "norms_only.gguf"), config, base)
    write(os.path.join(b, "eps_1e-6.gguf"), config, base, eps_value=1e-6)
    write(os.path.join(b, "eps_missing.gguf"), config, base, eps=False)
    hidden = config["hidden_size"]
    q_wide = [(n, (np.linspace(0.5, 1.5, hidden, dtype=np.float32) if n == "blk.1.attn_q_norm.weight"
                   else a), q) for n, a, q in base]
    write(os.path.join(b, "q_norm_hidden_width.gguf"), config, q_wide)
    def bump(target, value=None):
        res = []
        for n, a, q in base:
            if n == target:
                a = a.copy()
                if value is None:
                    a[5] = np.nextafter(a[5], np.float32(np.inf))
                else:
                    a[5] = value
            res.append((n, a, q))
        return res
    write(os.path.join(b, "one_ulp.gguf"), config, bump("blk.2.post_attention_norm.weight"))
    write(os.path.join(b, "nan_gain.gguf"), config, bump("output_norm.weight", np.float32("nan")))
    # Norms stored as BF16 (exact: the checkpoint's own values) and F16 (rounded).
    for name, qtype in (("bf16_norms", gguf.GGMLQuantizationType.BF16),
                        ("f16_norms", gguf.GGMLQuantizationType.F16)):
        write(os.path.join(out, "dtypes", name + ".gguf"), config,
              [(n, a, qtype if q == gguf.GGMLQuantizationType.F32 else q) for n, a, q in base])
    write(os.path.join(b, "missing_norm.gguf"), config,
          [t for t in base if t[0] != "blk.0.attn_k_norm.weight"])

    # Malformed files, made from norms_only.gguf's bytes. token_embd is the
    # last tensor.
    good = os.path.join(b, "norms_only.gguf")
    patch(good, os.path.join(b, "truncated.gguf"), lambda r: r[:len(r) - 100])
    patch(good, os.path.join(b, "bad_magic.gguf"), lambda r: b"GGUX" + r[4:])
    patch(good, os.path.join(b, "tensor_count_2p62.gguf"),
          lambda r: r[:8] + struct.pack("<Q", 2**62) + r[16:])
    patch(good, os.path.join(b, "kv_count_huge.gguf"),
          lambda r: r[:16] + struct.pack("<Q", 2**40) + r[24:])
    # The first metadata key's length (at byte 24) claims 2^40 bytes.
    patch(good, os.path.join(b, "string_2p40.gguf"),
          lambda r: r[:24] + struct.pack("<Q", 2**40) + r[32:])

    def offset_edit(name, make):
        def edit(r):
            pos = find_tensor_info(r, name) + 8 + len(name)
            n_dims = struct.unpack_from("<I", r, pos)[0]
            off_pos = pos + 4 + 8 * n_dims + 4
            struct.pack_into("<Q", r, off_pos, make(struct.unpack_from("<Q", r, off_pos)[0], len(r)))
            return r
        return edit
    patch(good, os.path.join(b, "offset_past_end.gguf"),
          offset_edit("token_embd.weight", lambda off, size: off + size))
    def dim_edit(r):
        name = "token_embd.weight"
        pos = find_tensor_info(r, name) + 8 + len(name) + 4 + 8  # dims[1]: the rows
        struct.pack_into("<Q", r, pos, 1 << 20)
        return r
    patch(good, os.path.join(b, "dims_past_end.gguf"), dim_edit)
    for root, _, files in os.walk(out):
        for f in sorted(files):
            p = os.path.join(root, f)
            print(f"{os.path.relpath(p, REPO)}: {os.path.getsize(p)} bytes")


if __name__ == "__main__":
    sys.exit(main())
