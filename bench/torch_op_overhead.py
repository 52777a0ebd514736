#!/usr/bin/env python3
"""Per-call cost of a 1 x 5120 RMSNorm (bf16, or f32 with --dtype f32) through each Python /
PyTorch entry point, against the C++ kernel alone (`glmnorm bench --quick`, bf16 only; same
machine, same moment).

  PYTHONPATH=build/release/python <venv>/bin/python bench/torch_op_overhead.py \\
      [--cli build/release/tools/glmnorm] [--dtype f32]

Best of 7 rounds of 5000 calls, 1 thread, inference_mode (and one no_grad row).
"""

import argparse
import os
import re
import subprocess
import sys
import time


def best_us(fn, rounds=7, calls=5000):
    for _ in range(2000):
        fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    return best


def kernel_us(cli):
    out = subprocess.run([cli, "bench", "--quick", "--threads", "1"], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r"^rms_norm\s+1x5120\s+bf16\s+1\s+([0-9.]+)", out, re.M)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=None, help="the glmnorm tool, for the kernel alone")
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    args = ap.parse_args()
    import torch
    import glmnorm
    import glmnorm.torch as gt
    from glmnorm import _arrays, _glmnorm
    torch.set_num_threads(1)
    glmnorm.set_num_threads(1)
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
    x = torch.randn(1, 5120).to(dtype)
    w = torch.randn(5120).to(dtype)
    module = gt.RMSNorm(5120, dtype=dtype).requires_grad_(False)
    out = torch.empty_like(x)
    fn = "bench"
    descs = (_arrays.desc(x, "x", fn), _arrays.desc(w, "weight", fn),
             _arrays.desc(out, "out", fn, True))
    op = torch.ops.glmnorm.rms_norm.default
    rows = [
        ("nanobind extension, descriptors prebuilt", lambda: _glmnorm.rms_norm(
            *descs, 1e-5, "cast-then-scale", 0.0)),
        ("glmnorm.rms_norm(x, w, out=out)", lambda: glmnorm.rms_norm(x, w, out=out)),
        ("glmnorm.rms_norm(x, w)", lambda: glmnorm.rms_norm(x, w)),
        ("torch.ops.glmnorm.rms_norm (C++ kernel)",
         lambda: torch.ops.glmnorm.rms_norm(x, w, 1e-5, "cast-then-scale", 0.0)),
        ("torch.ops.glmnorm.rms_norm.default (C++ kernel)",
         lambda: op(x, w, 1e-5, "cast-then-scale", 0.0)),
        ("torch.ops.glmnorm.rms_norm.default(x, w): defaults left out", lambda: op(x, w)),
        ("glmnorm.torch.RMSNorm module, m(x)", lambda: module(x)),
        ("torch.ops.aten.empty_like.default (dispatcher floor)",
         lambda: torch.ops.aten.empty_like.default(x)),
        ("torch.nn.functional.rms_norm (peer)",
         lambda: torch.nn.functional.rms_norm(x, [5120], w, 1e-5)),
    ]
    k = kernel_us(args.cli) if args.cli and args.dtype == "bf16" else None
    print(f"torch {torch.__version__}; C++ kernel alone: "
          f"{'%.2f us' % k if k else 'not measured (--cli)'}")
    def show(name, t):
        extra = f"  overhead {t - k:5.2f} us" if k and "glmnorm" in name else ""
        print(f"{name:55s} {t:6.2f} us{extra}")

    with torch.inference_mode():
        for name, fn in rows:
            show(name, best_us(fn))
    with torch.no_grad():  # the Autograd key is not skipped here: its kernel runs too
        show(f"torch.ops.glmnorm.rms_norm.default (C++ kernel), no_grad",
             best_us(lambda: op(x, w, 1e-5, "cast-then-scale", 0.0)))
    # grad mode on, nothing requires grad: the Autograd kernel passes the call down
    show(f"torch.ops.glmnorm.rms_norm.default (C++ kernel), grad mode",
         best_us(lambda: op(x, w, 1e-5, "cast-then-scale", 0.0)))
    if hasattr(torch.ops.glmnorm, "rms_norm_backward"):
        wg = w.clone().requires_grad_()  # records the autograd node (training forward)
        show(f"torch.ops.glmnorm.rms_norm.default (C++ kernel), weight requires grad",
             best_us(lambda: op(x, wg, 1e-5, "cast-then-scale", 0.0), calls=2000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
