#!/usr/bin/env python3
"""Generates the golden conformance data of glmnorm from the REAL Transformers classes.

The outputs are computed by `Glm4MoeRMSNorm` (transformers.models.glm4_moe) itself, run by
PyTorch on the CPU, so the C++ tests in tests/golden/ check glmnorm against exactly what the
released GLM-4.5 checkpoints were evaluated with (docs/SPEC.md, section 2).

Output (safetensors, read by the C++ tests with glmnorm's own SafetensorsFile):
  tests/data/golden/<case>.safetensors
      one file per case: its arrays as tensors (bf16 as BF16, f32 as F32, little-endian), and
      in "__metadata__" the case's parameters (name, kind, eps, shapes such as rows/width) and
      the generator's record (format, seed, torch/transformers/numpy/python versions, machine,
      module). Metadata values are strings: strings as they are, anything else JSON-encoded
      (eps "1e-05", rows "128", heads '{"num_q_heads": 96, ...}'); no string value may itself
      read as JSON, so a reader can tell the two apart.

Cases:
  rms_norm      widths 128, 4096, 5120; bf16 x with bf16 gamma, f32 x with f32 gamma, and
                f32 gamma with bf16 x at width 5120 (PyTorch promotes: y is f32).
  add_rms_norm  the decoder step of Glm4MoeDecoderLayer in bf16:
                h = residual + delta (torch bf16 add); y = post_attention_layernorm(h).
  qk_norm       self_attn.q_norm / k_norm on (batch, seq, heads, 128) views of a fused
                bf16 QKV buffer (96 q, 8 k, 8 v heads).
  rms_norm_backward      torch autograd through the module: x, gamma, dy -> dx, dgamma
                (x.grad, weight.grad); bf16 widths 128 and 5120, f32 width 128.
  add_rms_norm_backward  autograd through h = residual + delta, y = norm(h), with incoming
                gradients dy (of y) and d_residual_out (of h, the residual stream): d_h
                (= residual.grad = delta.grad) and dgamma; bf16, width 4096.

Usage:
  scripts/make_golden.py [--seed N] [--out DIR] [--venv DIR] [--no-venv] [--backward-only]

--backward-only rewrites only the *_backward cases (the forward cases' random draws are still
made first, so the backward data is the same as a full run's) and leaves the other files as
they are.

By default the script runs inside the repository's .venv: it creates it when missing,
pip-installs torch, transformers and numpy when they are not importable there, and re-executes
itself with the venv's interpreter.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import venv as venv_module
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "data" / "golden"
DEFAULT_VENV = REPO_ROOT / ".venv"
DEFAULT_SEED = 45_2025  # GLM-4.5, 2025
REQUIRED_MODULES = ("torch", "transformers", "numpy")
REEXEC_MARKER = "GLMNORM_MAKE_GOLDEN_IN_VENV"

EPS = 1e-5  # rms_norm_eps of GLM-4.5 and GLM-4.5-Air (config.json)
# GLM-4.5 attention: 96 query heads, 8 kv heads, head_dim 128.
NUM_Q_HEADS, NUM_K_HEADS, NUM_V_HEADS, HEAD_DIM = 96, 8, 8, 128
MAX_TOTAL_BYTES = 2 * 1024 * 1024
# Format 1 was manifest.json + raw .bin files; 2 is one safetensors file per case.
FORMAT = 2
DESCRIPTION = ("Outputs of transformers' Glm4MoeRMSNorm (PyTorch, CPU, 1 thread). "
               "One safetensors file per case: arrays as tensors (bf16 as BF16, f32 as F32); "
               "case parameters and provenance in __metadata__, non-string values JSON-encoded.")


# ----------------------------------------------------------------------------- venv

def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="RNG seed")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV,
                        help="virtual environment to create or reuse (default: repo .venv)")
    parser.add_argument("--no-venv", action="store_true",
                        help="run with the current interpreter; do not create or install")
    parser.add_argument("--backward-only", action="store_true",
                        help="write only the *_backward cases; keep the other files")
    parser.add_argument("--pip-index-url", default=None,
                        help="index URL for pip (e.g. PyTorch's CPU wheel index)")
    return parser.parse_args(argv)


def venv_python(venv_dir: Path) -> Path:
    return venv_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def missing_modules(python: Path):
    missing = []
    for module in REQUIRED_MODULES:
        probe = subprocess.run([str(python), "-c", f"import {module}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if probe.returncode != 0:
            missing.append(module)
    return missing


def ensure_venv_and_reexec(args, argv):
    """Makes sure the venv has the modules, then re-executes this script inside it."""
    if args.no_venv or os.environ.get(REEXEC_MARKER) == "1":
        return
    venv_dir = args.venv.resolve()
    python = venv_python(venv_dir)
    if not python.exists():
        print(f"make_golden: creating venv {venv_dir}", flush=True)
        venv_module.EnvBuilder(with_pip=True).create(str(venv_dir))
    missing = missing_modules(python)
    if missing:
        print(f"make_golden: installing {' '.join(missing)} into {venv_dir}", flush=True)
        cmd = [str(python), "-m", "pip", "install", *missing]
        if args.pip_index_url:
            cmd += ["--index-url", args.pip_index_url]
        subprocess.run(cmd, check=True)
        still_missing = missing_modules(python)
        if still_missing:
            sys.exit(f"make_golden: still not importable in {venv_dir}: {still_missing}")
    env = dict(os.environ, **{REEXEC_MARKER: "1"})
    os.execve(str(python), [str(python), str(Path(__file__).resolve()), *argv], env)


# ----------------------------------------------------------------------------- writer
# Stdlib only (no torch here), so that the writer can be run and checked on its own.

SAFETENSORS_DTYPES = {"bf16": ("BF16", 2), "f32": ("F32", 4)}


def metadata_strings(fields):
    """safetensors metadata values must be strings: strings stay as they are, other values are
    JSON-encoded. A string that itself reads as JSON could not be told from an encoded value,
    so it is refused."""
    out = {}
    for key, value in fields.items():
        if isinstance(value, str):
            try:
                json.loads(value)
            except ValueError:
                out[key] = value
                continue
            raise ValueError(f"metadata {key}={value!r} would read back as JSON")
        out[key] = json.dumps(value)
    return out


def encode_safetensors(arrays, metadata):
    """The bytes of a safetensors file. arrays: {name: {"dtype": "bf16"|"f32", "shape": [...],
    "data": raw little-endian bytes}}; metadata: {key: str}.

    Layout as the reference writer: 8-byte little-endian header length, the JSON header padded
    with spaces to a multiple of 8 bytes, then the tensors' bytes back to back with no gaps,
    larger elements first, then by name, so every tensor starts aligned to its element size."""
    order = sorted(arrays, key=lambda n: (-SAFETENSORS_DTYPES[arrays[n]["dtype"]][1], n))
    header = {"__metadata__": dict(metadata)}
    offset = 0
    for name in order:
        a = arrays[name]
        st_dtype, itemsize = SAFETENSORS_DTYPES[a["dtype"]]
        count = 1
        for dim in a["shape"]:
            count *= dim
        if len(a["data"]) != count * itemsize:
            raise ValueError(f"{name}: {len(a['data'])} bytes for shape {a['shape']} {st_dtype}")
        header[name] = {"dtype": st_dtype, "shape": list(a["shape"]),
                        "data_offsets": [offset, offset + len(a["data"])]}
        offset += len(a["data"])
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return (len(text).to_bytes(8, "little") + text
            + b"".join(arrays[name]["data"] for name in order))


def write_case(out_dir, case, provenance):
    """Writes <out_dir>/<case name>.safetensors: the case's arrays as tensors, its other fields
    and `provenance` (the generator's record) as metadata. Returns the path."""
    fields = {k: v for k, v in case.items() if k != "arrays"}
    clash = set(fields) & set(provenance)
    if clash:
        raise ValueError(f"case {case['name']}: fields {sorted(clash)} clash with provenance")
    path = Path(out_dir) / f"{case['name']}.safetensors"
    path.write_bytes(encode_safetensors(case["arrays"],
                                        metadata_strings({**fields, **provenance})))
    return path


# ----------------------------------------------------------------------------- data

def main(argv):
    args = parse_args(argv)
    ensure_venv_and_reexec(args, argv)

    import numpy as np
    import torch
    import transformers
    from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRMSNorm

    # A row's reduction order must not depend on the thread count; one thread also makes the
    # run reproducible on any machine with the same PyTorch build.
    torch.set_num_threads(1)
    print(f"make_golden: seed {args.seed}", flush=True)
    print(f"make_golden: torch {torch.__version__}, transformers {transformers.__version__}, "
          f"numpy {np.__version__}", flush=True)
    gen = torch.Generator().manual_seed(args.seed)

    out_dir = args.out.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    # Old outputs, including format 1's manifest.json and .bin files.
    olds = [*out_dir.glob("*.safetensors"), *out_dir.glob("*.bin"), *out_dir.glob("manifest.json")]
    if args.backward_only:
        olds = [p for p in olds if "_backward_" in p.stem]
    for old in olds:
        old.unlink()

    dtype_names = {torch.bfloat16: "bf16", torch.float32: "f32"}

    def save(case_name, array_name, tensor):
        """One tensor's raw little-endian bytes, dtype and shape (written by write_case)."""
        t = tensor.detach().contiguous().cpu()
        if t.dtype == torch.bfloat16:
            raw = t.view(torch.int16).numpy().astype("<i2", copy=False).tobytes()
        elif t.dtype == torch.float32:
            raw = t.numpy().astype("<f4", copy=False).tobytes()
        else:
            raise ValueError(f"unsupported dtype {t.dtype}")
        return {"dtype": dtype_names[t.dtype], "shape": list(t.shape), "data": raw}

    def make_gamma(width):
        """Non-trivial gains: around 1 with spread, some small, some negative (f32)."""
        g = 1.0 + 0.5 * torch.randn(width, generator=gen)
        pick = torch.rand(width, generator=gen)
        small = pick < 0.05
        g[small] = 1e-3 * torch.randn(int(small.sum()), generator=gen)
        negative = (pick >= 0.05) & (pick < 0.15)
        g[negative] = -g[negative].abs()
        return g

    def make_input(rows, width, lo=1e-3, hi=1e2):
        """Normal rows with log-uniform per-row scales in [lo, hi] and a few outlier channels
        (GLM activations have massive per-channel outliers) (f32)."""
        log_scale = torch.empty(rows, 1).uniform_(np.log(lo), np.log(hi), generator=gen)
        x = torch.randn(rows, width, generator=gen) * log_scale.exp()
        outliers = torch.randperm(width, generator=gen)[: max(1, width // 512)]
        x[:, outliers] *= 20.0
        return x

    def make_norm(width, gamma, dtype):
        """The module itself, with eps from the GLM config, its weight cast like a checkpoint
        loaded in `dtype` would be."""
        norm = Glm4MoeRMSNorm(width, eps=EPS)
        with torch.no_grad():
            norm.weight.copy_(gamma)
        return norm.to(dtype).eval()

    cases = []

    # Issue 2: the norm alone.
    rms_cases = [
        # (name, width, rows, x dtype, gamma dtype)
        ("rms_norm_bf16_w128", 128, 128, torch.bfloat16, torch.bfloat16),
        ("rms_norm_bf16_w4096", 4096, 8, torch.bfloat16, torch.bfloat16),
        ("rms_norm_bf16_w5120", 5120, 8, torch.bfloat16, torch.bfloat16),
        ("rms_norm_f32_w128", 128, 64, torch.float32, torch.float32),
        ("rms_norm_f32_w4096", 4096, 4, torch.float32, torch.float32),
        ("rms_norm_f32_w5120", 5120, 4, torch.float32, torch.float32),
        ("rms_norm_f32gamma_bf16x_w5120", 5120, 4, torch.bfloat16, torch.float32),
    ]
    for name, width, rows, x_dtype, w_dtype in rms_cases:
        norm = make_norm(width, make_gamma(width), w_dtype)
        x = make_input(rows, width).to(x_dtype)
        with torch.no_grad():
            y = norm(x)
        expected_dtype = x_dtype if x_dtype == w_dtype else torch.float32
        assert y.dtype == expected_dtype, (name, y.dtype)
        arrays = {"x": save(name, "x", x), "gamma": save(name, "gamma", norm.weight),
                  "y": save(name, "y", y)}
        if x_dtype != w_dtype:
            # The bf16 intermediate T(x * r) that the f32 gain multiplies (step 4 of the
            # reference), recomputed with the module's own ops: lets the test tell a 1-ulp
            # flip of the bf16 rounding from a real error.
            with torch.no_grad():
                xf = x.to(torch.float32)
                h = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x_dtype)
                assert torch.equal(norm.weight * h, y), name
            arrays["h"] = save(name, "h", h)
        cases.append({"name": name, "kind": "rms_norm", "eps": EPS, "rows": rows,
                      "width": width, "arrays": arrays})

    # Issue 3a: the residual add of Glm4MoeDecoderLayer, then post_attention_layernorm, bf16.
    name, width, tokens = "add_rms_norm_bf16_w5120", 5120, 4
    norm = make_norm(width, make_gamma(width), torch.bfloat16)
    residual = make_input(tokens, width, 1e-1, 1e1).to(torch.bfloat16)
    delta = make_input(tokens, width, 1e-3, 1e1).to(torch.bfloat16)
    with torch.no_grad():
        h = residual + delta  # exactly `hidden_states = residual + hidden_states`
        y = norm(h)          # exactly `hidden_states = self.post_attention_layernorm(...)`
    assert h.dtype == torch.bfloat16 and y.dtype == torch.bfloat16
    cases.append({"name": name, "kind": "add_rms_norm", "eps": EPS, "rows": tokens,
                  "width": width,
                  "arrays": {"residual": save(name, "residual", residual),
                             "delta": save(name, "delta", delta),
                             "gamma": save(name, "gamma", norm.weight),
                             "h": save(name, "h", h), "y": save(name, "y", y)}})

    # Issue 3b: q_norm / k_norm on views of a fused QKV buffer, as Glm4MoeAttention applies
    # them: (batch, seq, heads, head_dim), before RoPE; v untouched.
    name, batch, seq = "qk_norm_bf16_h128", 2, 2
    tokens = batch * seq
    q_cols, k_cols = NUM_Q_HEADS * HEAD_DIM, NUM_K_HEADS * HEAD_DIM
    qkv_width = (NUM_Q_HEADS + NUM_K_HEADS + NUM_V_HEADS) * HEAD_DIM
    q_norm = make_norm(HEAD_DIM, make_gamma(HEAD_DIM), torch.bfloat16)
    k_norm = make_norm(HEAD_DIM, make_gamma(HEAD_DIM), torch.bfloat16)
    # Scales differ per head, not only per token: every head is its own norm row.
    qkv = make_input(tokens * (qkv_width // HEAD_DIM), HEAD_DIM)
    qkv = qkv.reshape(tokens, qkv_width).to(torch.bfloat16)
    q = qkv[:, :q_cols].view(batch, seq, NUM_Q_HEADS, HEAD_DIM)
    k = qkv[:, q_cols:q_cols + k_cols].view(batch, seq, NUM_K_HEADS, HEAD_DIM)
    assert q.data_ptr() == qkv.data_ptr()  # views of the fused buffer, not copies
    with torch.no_grad():
        q_out = q_norm(q)
        k_out = k_norm(k)
    assert q_out.dtype == torch.bfloat16 and k_out.dtype == torch.bfloat16
    cases.append({"name": name, "kind": "qk_norm", "eps": EPS, "batch": batch, "seq": seq,
                  "tokens": tokens,
                  "heads": {"num_q_heads": NUM_Q_HEADS, "num_k_heads": NUM_K_HEADS,
                            "num_v_heads": NUM_V_HEADS, "head_dim": HEAD_DIM},
                  "arrays": {"qkv": save(name, "qkv", qkv),
                             "q_gamma": save(name, "q_gamma", q_norm.weight),
                             "k_gamma": save(name, "k_gamma", k_norm.weight),
                             "q_out": save(name, "q_out", q_out),
                             "k_out": save(name, "k_out", k_out)}})

    # Issue 11: gradients from torch autograd through the same module (and the decoder step),
    # generated after the forward cases so that their random draws stay what they were.
    # Incoming gradients: normal rows with per-row scales, in the output's dtype.
    bwd_cases = [
        # (name, width, rows, x dtype, gamma dtype)
        ("rms_norm_backward_bf16_w128", 128, 128, torch.bfloat16, torch.bfloat16),
        ("rms_norm_backward_bf16_w5120", 5120, 4, torch.bfloat16, torch.bfloat16),
        ("rms_norm_backward_f32_w128", 128, 32, torch.float32, torch.float32),
    ]
    for name, width, rows, x_dtype, w_dtype in bwd_cases:
        norm = make_norm(width, make_gamma(width), w_dtype)
        x = make_input(rows, width).to(x_dtype).requires_grad_(True)
        y = norm(x)
        dy = make_input(rows, width, 1e-2, 1e1).to(y.dtype)
        y.backward(dy)
        assert x.grad.dtype == x_dtype and norm.weight.grad.dtype == w_dtype, name
        cases.append({"name": name, "kind": "rms_norm_backward", "eps": EPS, "rows": rows,
                      "width": width,
                      "arrays": {"x": save(name, "x", x), "gamma": save(name, "gamma", norm.weight),
                                 "dy": save(name, "dy", dy), "dx": save(name, "dx", x.grad),
                                 "dgamma": save(name, "dgamma", norm.weight.grad)}})

    # The decoder step's add + norm: h = residual + delta feeds both the norm and the residual
    # stream, so its gradient is the norm's dx plus the stream's incoming gradient; residual
    # and delta both receive it.
    name, width, tokens = "add_rms_norm_backward_bf16_w4096", 4096, 2
    norm = make_norm(width, make_gamma(width), torch.bfloat16)
    residual = make_input(tokens, width, 1e-1, 1e1).to(torch.bfloat16).requires_grad_(True)
    delta = make_input(tokens, width, 1e-3, 1e1).to(torch.bfloat16).requires_grad_(True)
    h = residual + delta
    y = norm(h)
    dy = make_input(tokens, width, 1e-2, 1e1).to(torch.bfloat16)
    d_residual_out = make_input(tokens, width, 1e-3, 1e0).to(torch.bfloat16)
    torch.autograd.backward([y, h], [dy, d_residual_out])
    assert torch.equal(residual.grad, delta.grad), name
    cases.append({"name": name, "kind": "add_rms_norm_backward", "eps": EPS, "rows": tokens,
                  "width": width,
                  "arrays": {"h": save(name, "h", h), "gamma": save(name, "gamma", norm.weight),
                             "dy": save(name, "dy", dy),
                             "d_residual_out": save(name, "d_residual_out", d_residual_out),
                             "d_h": save(name, "d_h", residual.grad),
                             "dgamma": save(name, "dgamma", norm.weight.grad)}})

    provenance = {
        "format": FORMAT,
        "generator": "scripts/make_golden.py",
        "description": DESCRIPTION,
        "seed": args.seed,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "machine": platform.machine(),
        "module": "transformers.models.glm4_moe.modeling_glm4_moe.Glm4MoeRMSNorm",
    }
    if args.backward_only:
        cases = [case for case in cases if case["kind"].endswith("_backward")]
    for case in cases:
        write_case(out_dir, case, provenance)

    total = sum(p.stat().st_size for p in out_dir.iterdir() if p.is_file())
    print(f"make_golden: wrote {len(cases)} cases to {out_dir} ({total} bytes)")
    if total >= MAX_TOTAL_BYTES:
        sys.exit(f"make_golden: golden data is {total} bytes, limit {MAX_TOTAL_BYTES}")


if __name__ == "__main__":
    main(sys.argv[1:])
