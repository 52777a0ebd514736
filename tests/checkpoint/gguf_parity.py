#!/usr/bin/env python3
"""Differential test: glmnorm's GGUF reader against llama.cpp's Python reader.

The reference is gguf.GGUFReader from the PyPI `gguf` package (gguf-py, in
llama.cpp's tree), pinned in tests/requirements-parity.txt. This script
builds a corpus of valid and invalid files (the committed test data under
tests/data/tiny_glm45_gguf, the fuzz seeds, and systematic variations
written byte by byte here), takes the reference's verdict and glmnorm's (the
gguf_verdict program) on each, and fails on any disagreement that is not a
documented stricter check: STRICTER below, each rule also listed in
docs/CHECKPOINTS.md (checked here).

Reference verdict: GGUFReader(path) succeeds (it parses the header, every
key/value and tensor info, and views every tensor's data: a tensor whose
bytes are not all in the file fails its reshape) and every key and tensor
name decodes as UTF-8.

When both accept a file they must read it alike: version, alignment, data
offset, every key with its type and value (strings and arrays by FNV-1a of
their bytes), every tensor's name, type, dims, offset, byte size and the
FNV-1a of its bytes.

It also checks glmnorm's tables against the package: the ggml types (id,
name, block size, bytes per block: GGML_QUANT_SIZES) and the glm4moe norm
names (TensorNameMap(MODEL_ARCH.GLM4_MOE) must map each Transformers norm
name to glmnorm's GGUF name, and the norm tensors of MODEL_TENSORS[GLM4_MOE]
must be exactly glmnorm's).

  gguf_parity.py --checker PATH/gguf_verdict [--keep DIR] [-v]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGUFReader, GGMLQuantizationType as Q, GGUFValueType as V

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DOCS = os.path.join(REPO, "docs", "CHECKPOINTS.md")
DATA = os.path.join(REPO, "tests", "data", "tiny_glm45_gguf")
SEEDS = os.path.join(REPO, "fuzz", "corpus", "gguf")

# --- Documented stricter checks ---------------------------------------------
# Files the reference accepts and glmnorm refuses on purpose. Each rule names
# text glmnorm's error must contain; docs/CHECKPOINTS.md lists each rule name
# ("GGUF: stricter than the reference") with the reason.
RULES = {
    # ggml's loader (gguf.cpp) requires each tensor to start where the
    # previous one's bytes, padded to general.alignment, end. gguf-py reads
    # any offset, even one that wraps around 2^64 back into the file.
    "gguf-packed-offsets": "ggml packs tensors in order",
    # gguf-py reads a string whose length runs past the end of the file as
    # the bytes that are there; glmnorm refuses a length the file cannot hold.
    "gguf-lengths-in-file": "remain in the file",
    # ggml: GGML_MAX_DIMS = 4.
    "gguf-max-dims": "ggml allows at most 4",
    # ggml: GGML_MAX_NAME = 64 bytes with the terminating NUL.
    "gguf-name-length": "ggml allows at most 63",
    # ggml: no arrays of arrays.
    "gguf-nested-arrays": "array of arrays",
    # gguf-py reads byte-swapped (big-endian) files; glmnorm reads the
    # little-endian files llama.cpp writes on every platform it supports.
    "gguf-little-endian": "looks big-endian",
}
# Corpus case -> rule. Every other case must get the reference's verdict.
STRICTER = {
    "offset_gap": "gguf-packed-offsets",
    "offset_misaligned": "gguf-packed-offsets",
    "offsets_out_of_order": "gguf-packed-offsets",
    "offsets_overlap": "gguf-packed-offsets",
    "offset_wraps_2p64": "gguf-packed-offsets",
    "value_string_2p40": "gguf-lengths-in-file",
    "dims_5": "gguf-max-dims",
    "name_64_bytes": "gguf-name-length",
    "array_of_arrays": "gguf-nested-arrays",
    "big_endian_v3": "gguf-little-endian",
}
# Cases the reference cannot judge in bounded time: it loops over an array
# count read from the file without checking it against the file's size.
REFERENCE_HANGS = {"array_count_2p60"}

ALIGN = 32


# --- File images ------------------------------------------------------------

def gstr(s):
    b = s if isinstance(s, bytes) else s.encode()
    return struct.pack("<Q", len(b)) + b


SCALAR_FMT = {V.UINT8: "<B", V.INT8: "<b", V.UINT16: "<H", V.INT16: "<h", V.UINT32: "<I",
              V.INT32: "<i", V.FLOAT32: "<f", V.BOOL: "<B", V.UINT64: "<Q", V.INT64: "<q",
              V.FLOAT64: "<d"}


def value(vtype, v):
    if vtype == V.STRING:
        return gstr(v)
    if vtype == V.ARRAY:
        etype, items = v
        body = b"".join(value(etype, x) for x in items)
        return struct.pack("<IQ", etype, len(items)) + body
    return struct.pack(SCALAR_FMT[vtype], v)


def kv(key, vtype, v):
    return gstr(key) + struct.pack("<I", vtype) + value(vtype, v)


def tensor_info(name, dims, ttype, offset):
    return gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", ttype, offset)


def nbytes(dims, ttype):
    if ttype not in {int(t) for t in Q}:
        return 0
    block, size = gguf.GGML_QUANT_SIZES[Q(ttype)]
    n = 1
    for d in dims:
        n *= d
    return n * size // block


def payload(n, seed=0):
    return bytes((i * 7 + seed * 13 + 3) & 0xFF for i in range(n))


def image(kvs=(), tensors=(), version=3, align=ALIGN, magic=b"GGUF", tensor_count=None,
          kv_count=None, data=None, offsets=None, tail=b""):
    """A GGUF image. tensors: [(name, dims, type)], packed as ggml does unless
    `offsets` overrides them; `data` overrides the data section."""
    head = magic + struct.pack("<I", version)
    head += struct.pack("<QQ", len(tensors) if tensor_count is None else tensor_count,
                        len(kvs) if kv_count is None else kv_count)
    head += b"".join(kvs)
    offs, cur = [], 0
    if offsets is None or data is None:
        for name, dims, ttype in tensors:
            offs.append(cur)
            cur += nbytes(dims, ttype)
            cur += (-cur) % align
    if offsets is not None:
        offs = offsets
    head += b"".join(tensor_info(n, d, t, o) for (n, d, t), o in zip(tensors, offs))
    if data is None:
        data = bytearray(cur)
        for i, ((name, dims, ttype), o) in enumerate(zip(tensors, offs)):
            b = payload(nbytes(dims, ttype), i)
            data[o:o + len(b)] = b
        data = bytes(data)
    pad = (-len(head)) % align
    return head + b"\0" * pad + data + tail


def corpus():
    """{case name: bytes}."""
    c = {}
    f32 = ("a.weight", [8], Q.F32)
    two = [f32, ("b.weight", [64, 2], Q.Q8_0)]
    c["empty_file"] = b""
    c["three_bytes"] = b"GGU"
    c["minimal_v3"] = image()
    c["minimal_v2"] = image(version=2)
    c["version_1"] = image(version=1)
    c["version_4"] = image(version=4)
    c["big_endian_v3"] = b"GGUF" + struct.pack(">IQQ", 3, 0, 0)
    c["bad_magic"] = image(magic=b"GGUX")
    c["one_tensor"] = image(tensors=[f32])
    c["two_tensors"] = image(tensors=two)
    c["two_tensors_v2"] = image(tensors=two, version=2)
    for t in (Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.IQ4_XS, Q.I8, Q.I32, Q.F64,
              Q.MXFP4, Q.TQ2_0):
        block = gguf.GGML_QUANT_SIZES[t][0]
        c[f"type_{t.name}"] = image(tensors=[("t.weight", [max(block, 4), 3], t)])
    c["type_retired_4"] = image(tensors=[("t.weight", [32], 4)], data=b"\0" * 64)
    c["type_unknown_99"] = image(tensors=[("t.weight", [32], 99)], data=b"\0" * 64)
    c["q8_0_row_33"] = image(tensors=[("t.weight", [33], Q.Q8_0)], data=b"\0" * 64)
    c["dims_5"] = image(tensors=[("t.weight", [1, 1, 1, 1, 2], Q.F32)])
    c["dims_0"] = image(tensors=[("scalar", [], Q.F32)])
    c["zero_size"] = image(tensors=[("z", [0, 4], Q.F32), f32])
    c["dim_2p63"] = image(tensors=[("z", [0, 2**63], Q.F32)], data=b"")
    c["dims_product_wraps"] = image(tensors=[("z", [2**32, 2**32], Q.F32)], offsets=[0], data=b"")
    c["name_63_bytes"] = image(tensors=[("n" * 63, [8], Q.F32)])
    c["name_64_bytes"] = image(tensors=[("n" * 64, [8], Q.F32)])
    c["name_bad_utf8"] = image(tensors=[(b"bad\xff", [8], Q.F32)])
    c["dup_tensor"] = image(tensors=[f32, f32])
    # Offsets.
    c["offset_gap"] = image(tensors=two, offsets=[0, 64], tail=b"\0" * 64)
    c["offset_misaligned"] = image(tensors=two, offsets=[0, 36], tail=b"\0" * 64)
    c["offsets_out_of_order"] = image(tensors=[two[1], f32], offsets=[32, 0],
                                      data=payload(192))
    c["offsets_overlap"] = image(tensors=[f32, ("c.weight", [8], Q.F32)], offsets=[0, 0])
    c["offset_past_end"] = image(tensors=two, offsets=[0, 4096])
    hdr = len(image(tensors=[f32], data=b""))
    c["offset_wraps_2p64"] = image(tensors=[f32], offsets=[2**64 - hdr], data=payload(64))
    c["tensor_past_end"] = image(tensors=two)[:-30]  # 24 bytes of b.weight cut
    for cut in (3, 7, 15, 23, 40, 60, 80, 100):
        c[f"prefix_{cut}"] = image(kvs=[kv("general.name", V.STRING, "x")], tensors=two)[:cut]
    # Counts and lengths.
    c["tensor_count_2p62"] = image(tensor_count=2**62)
    c["kv_count_2p62"] = image(kv_count=2**62)
    c["tensor_count_plus_1"] = image(tensors=[f32], tensor_count=2)
    c["kv_count_plus_1"] = image(kvs=[kv("a", V.UINT8, 1)], kv_count=2)
    c["string_2p40"] = image(kvs=[struct.pack("<Q", 2**40) + b"key"])
    c["value_string_2p40"] = image(kvs=[gstr("k") + struct.pack("<IQ", V.STRING, 2**40)])
    c["array_count_2p60"] = image(kvs=[gstr("k") + struct.pack("<IIQ", V.ARRAY, V.UINT8, 2**60)])
    c["array_strings_count_2p40"] = image(kvs=[gstr("k") + struct.pack("<IIQ", V.ARRAY, V.STRING, 2**40)])
    # Metadata values.
    scalars = [(V.UINT8, 200), (V.INT8, -5), (V.UINT16, 60000), (V.INT16, -300),
               (V.UINT32, 4000000000), (V.INT32, -70000), (V.FLOAT32, 1e-5), (V.BOOL, 1),
               (V.UINT64, 2**63 + 5), (V.INT64, -2**40), (V.FLOAT64, 1e-300)]
    c["every_scalar"] = image(kvs=[kv(f"k.{t.name}", t, v) for t, v in scalars])
    c["strings"] = image(kvs=[kv("general.name", V.STRING, "tiny"), kv("empty", V.STRING, ""),
                              kv("bad_utf8_value", V.STRING, b"\xff\xfe")])
    c["arrays"] = image(kvs=[kv("a.u8", V.ARRAY, (V.UINT8, [1, 2, 3])),
                             kv("a.f32", V.ARRAY, (V.FLOAT32, [0.5, 1.5])),
                             kv("a.empty", V.ARRAY, (V.INT32, [])),
                             kv("a.str", V.ARRAY, (V.STRING, ["x", "", "yz"]))])
    c["array_of_arrays"] = image(kvs=[kv("a", V.ARRAY, (V.ARRAY, [(V.UINT8, [1]), (V.UINT8, [2])]))])
    c["value_type_13"] = image(kvs=[gstr("k") + struct.pack("<IB", 13, 0)])
    c["array_type_13"] = image(kvs=[gstr("k") + struct.pack("<IIQ", V.ARRAY, 13, 0)])
    c["dup_key"] = image(kvs=[kv("k", V.UINT8, 1), kv("k", V.UINT8, 2)])
    c["key_bad_utf8"] = image(kvs=[kv(b"k\xc3", V.UINT8, 1)])
    c["key_empty"] = image(kvs=[kv("", V.UINT8, 1)])
    c["bool_2"] = image(kvs=[kv("b", V.BOOL, 2)])
    # Alignment.
    for a in (1, 8, 64, 256):
        c[f"align_{a}"] = image(kvs=[kv("general.alignment", V.UINT32, a)], tensors=two, align=a)
    c["align_0"] = image(kvs=[kv("general.alignment", V.UINT32, 0)])
    c["align_3"] = image(kvs=[kv("general.alignment", V.UINT32, 3)])
    c["align_uint64"] = image(kvs=[kv("general.alignment", V.UINT64, 32)])
    c["align_1_odd_f32"] = image(kvs=[kv("general.alignment", V.UINT32, 1)],
                                 tensors=[("x", [3], Q.I8), f32], align=1)
    c["trailing_bytes"] = image(tensors=two, tail=b"extra")
    return c


# --- Verdicts ----------------------------------------------------------------

def fnv1a(b):
    h = 0xcbf29ce484222325
    for x in bytes(b):
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def reference(path):
    try:
        r = GGUFReader(path)
        meta = []
        for name, f in r.fields.items():
            if name.startswith("GGUF."):
                continue
            t = f.types[0]
            e = {"key": name, "type": t.name}
            if t == V.STRING:
                e["fnv1a"] = fnv1a(f.parts[-1].tobytes())
            elif t == V.ARRAY:
                e["element_type"] = V(int(f.parts[3][0])).name
                e["count"] = int(f.parts[4][0])
                e["fnv1a"] = fnv1a(b"".join(p.tobytes() for p in f.parts[5:]))
            else:
                v = f.parts[-1][0]
                if t in (V.FLOAT32, V.FLOAT64):
                    v = float(v)
                    v = "nan" if v != v else ("inf" if v == float("inf") else
                                              ("-inf" if v == float("-inf") else v))
                elif t == V.BOOL:
                    v = int(f.parts[-1].view(np.uint8)[0])
                else:
                    v = int(v)
                e["value"] = v
            meta.append(e)
        tensors = []
        for t in r.tensors:
            raw = np.ascontiguousarray(t.data).view(np.uint8).tobytes()
            if len(raw) != t.n_bytes:
                raise ValueError(f"tensor {t.name}: {len(raw)} bytes of {t.n_bytes}")
            tensors.append({"name": t.name, "type": int(t.tensor_type),
                            "dims": [int(d) for d in t.shape], "offset": int(t.field.parts[5][0]),
                            "size": int(t.n_bytes), "fnv1a": fnv1a(raw)})
        return {"ok": True, "version": int(r.fields["GGUF.version"].parts[0][0]),
                "alignment": int(r.alignment), "data_offset": int(r.data_offset),
                "metadata": meta, "tensors": tensors}
    except Exception as e:  # noqa: BLE001 - any failure is the reference's refusal
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def check_tables(checker):
    out = json.loads(subprocess.run([checker, "--tables"], check=True, capture_output=True,
                                    text=True).stdout)
    failures = []
    ours = {t["id"]: t for t in out["types"]}
    theirs = {int(t): (t.name, *gguf.GGML_QUANT_SIZES[t]) for t in Q}
    if set(ours) != set(theirs):
        failures.append(f"ggml type ids differ: glmnorm only {sorted(set(ours) - set(theirs))}, "
                        f"gguf only {sorted(set(theirs) - set(ours))}")
    for i in sorted(set(ours) & set(theirs)):
        o = ours[i]
        if (o["name"], o["block_size"], o["type_size"]) != theirs[i]:
            failures.append(f"ggml type {i}: glmnorm {o}, gguf {theirs[i]}")
    arch = gguf.MODEL_ARCH.GLM4_MOE
    name_map = gguf.TensorNameMap(arch, 93)
    for hf, ours_name in out["norm_names"].items():
        got = name_map.get_name(hf, try_suffixes=(".weight",))
        if got != ours_name:
            failures.append(f"norm name {hf}: glmnorm {ours_name}, gguf TensorNameMap {got}")
    # Every norm tensor kind of the architecture is one glmnorm maps.
    norm_kinds = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[arch] if "norm" in gguf.TENSOR_NAMES[t]}
    mapped = {v.replace(".weight", "").replace("blk.0.", "blk.{bid}.").replace("blk.7.", "blk.{bid}.")
              .replace("blk.92.", "blk.{bid}.") for v in out["norm_names"].values()}
    if norm_kinds != mapped:
        failures.append(f"glm4moe norm tensors: gguf {sorted(norm_kinds)}, glmnorm {sorted(mapped)}")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checker", required=True)
    ap.add_argument("--keep")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    failures = check_tables(args.checker)
    with open(DOCS) as f:
        docs = f.read()
    for rule in RULES:
        if f"`{rule}`" not in docs:
            failures.append(f"stricter rule `{rule}` is not documented in docs/CHECKPOINTS.md")

    work = args.keep or tempfile.mkdtemp(prefix="gguf_parity_")
    os.makedirs(work, exist_ok=True)
    cases = {}
    for name, data in corpus().items():
        p = os.path.join(work, name + ".gguf")
        with open(p, "wb") as f:
            f.write(data)
        cases[name] = p
    for root, _, files in os.walk(DATA):
        for fn in sorted(files):
            cases["data/" + os.path.relpath(os.path.join(root, fn), DATA)] = os.path.join(root, fn)
    if os.path.isdir(SEEDS):
        for fn in sorted(os.listdir(SEEDS)):
            cases["seed/" + fn] = os.path.join(SEEDS, fn)

    names = sorted(cases)
    lines = subprocess.run([args.checker] + [cases[n] for n in names], check=True,
                           capture_output=True, text=True).stdout.splitlines()
    assert len(lines) == len(names)
    ours = dict(zip(names, (json.loads(l) for l in lines)))
    used_stricter = set()
    agree = 0
    for name in names:
        o = ours[name]
        if name in REFERENCE_HANGS:
            if o["ok"]:
                failures.append(f"{name}: glmnorm accepts a file whose array count exceeds its size")
            continue
        r = reference(cases[name])
        base = name.rsplit("/", 1)[-1]
        if args.verbose:
            print(f"{name}: ours {'ok' if o['ok'] else o['error']}; ref {'ok' if r['ok'] else r['error']}")
        if name in STRICTER:
            rule = STRICTER[name]
            used_stricter.add(name)
            if not r["ok"]:
                failures.append(f"{name}: listed as stricter ({rule}) but the reference refuses it "
                                f"too ({r['error']}); remove it from STRICTER")
            elif o["ok"] or RULES[rule] not in o["error"]:
                failures.append(f"{name}: expected glmnorm to refuse it by rule {rule} "
                                f"({RULES[rule]!r}); got {o.get('error', 'accepted')}")
            continue
        if o["ok"] != r["ok"]:
            failures.append(f"{name}: glmnorm {'accepts' if o['ok'] else 'refuses (' + o['error'] + ')'}, "
                            f"reference {'accepts' if r['ok'] else 'refuses (' + r['error'] + ')'}")
            continue
        if not o["ok"]:
            agree += 1
            if not o["error"].startswith(cases[name] + ": "):
                failures.append(f"{name}: error does not start with the path: {o['error']}")
            continue
        for key in ("version", "alignment", "data_offset", "metadata", "tensors"):
            if o[key] != r[key]:
                failures.append(f"{name}: {key} differs:\n  glmnorm   {o[key]}\n  reference {r[key]}")
                break
        else:
            agree += 1
        del base
    for name in STRICTER:
        if name not in used_stricter:
            failures.append(f"STRICTER names {name}, which is not in the corpus")
    print(f"gguf_parity: {len(names)} files, {agree} same verdict and reading, "
          f"{len(used_stricter)} refused by documented stricter rules, "
          f"{len(REFERENCE_HANGS)} the reference cannot judge (gguf {gguf.__name__} "
          f"from {os.path.dirname(gguf.__file__)})")
    if failures:
        print(f"{len(failures)} FAILURE(S):")
        for f in failures:
            print("  - " + f)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
