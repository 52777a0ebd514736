#!/usr/bin/env python3
"""glmnorm against the RMSNorm implementations a GLM-4.5 user could pick, in one run.

Same inputs, same thread count, GLM-4.5 shapes (tokens x 5120 and x 4096 hidden states;
tokens x 104 heads x 128 for the QK-norm), bf16 and float32, 1 thread and all cores:

  glmnorm           glmnorm.rms_norm (the Python binding, zero-copy on torch tensors)
  glmnorm.torch     torch.ops.glmnorm.rms_norm (the torch op that torch.compile keeps)
  hf eager          Transformers' Glm4MoeRMSNorm module, eager PyTorch (the reference)
  F.rms_norm        torch.nn.functional.rms_norm (single rounding: not the reference order)
  torch.compile     torch.compile of the Transformers module (inductor, CPU)
  onnxruntime       RMSNormalization (opset 23) where ONNX Runtime has a CPU kernel for
                    the dtype, else com.microsoft SimplifiedLayerNormalization
The backward (rms_norm_bwd, dx and dweight given dy): glmnorm.rms_norm_backward and the torch
op against torch autograd through the Transformers module, eager and torch.compile'd
(forward + backward there: see backward_case); "same" compares dx. The fused residual add
(add_rms_norm): glmnorm.add_rms_norm, the decoder layer's
"residual + delta, then the module" in eager and compiled PyTorch, and ONNX Runtime's
SkipSimplifiedLayerNormalization. The backward of QK-norm + partial RoPE (qk_rope_bwd,
tokens x (96 + 8 + 8) heads x 128, rotary_dim 64; up to 512 tokens unless
--qk-rope-max-tokens says more): glmnorm.qk_norm_backward, the torch op, and
forward + backward through torch.ops.glmnorm.qk_norm's autograd, against torch autograd
through Glm4MoeRMSNorm and apply_rotary_pos_emb, eager and torch.compile'd (forward +
backward); "same" compares dqkv, err64 its mean error against a float64 autograd (see
qk_rope_backward_case).

For each case it prints the median time, GB/s (bytes read and written), the ratio of each
peer's time to glmnorm's (> 1: glmnorm is faster), and the fraction of the peer's output
elements bit-identical to the Transformers module's. It also measures the machine's copy
speed of the same bytes (torch's copy_, same threads), prints it, and draws it as a line in
a PNG chart (matplotlib): each glmnorm path's speed over the fastest peer's, per shape.

Run (make compare does this):
  PYTHONPATH=build/release/python $(bash scripts/python_env.sh python/requirements.txt)/bin/python \\
      bench/compare_peers.py [--quick] [--threads 1 2] [--png build/compare_peers.png]
      [--ops qk_rope_bwd] [--no-qk-rope-backward] [--qk-rope-max-tokens 4096]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings

import numpy as np
import torch

import glmnorm
import glmnorm.torch  # noqa: F401  (registers torch.ops.glmnorm)

EPS = 1e-5
OPS = ["rms_norm", "add_rms_norm", "rms_norm_bwd", "qk_rope_bwd"]  # the rows, for --ops


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        name = next(l.split(":", 1)[1].strip() for l in info.splitlines()
                    if l.startswith("model name"))
        fam = next(l.split(":", 1)[1].strip() for l in info.splitlines()
                   if l.startswith("cpu family"))
        model = next(l.split(":", 1)[1].strip() for l in info.splitlines()
                     if l.startswith("model\t"))
        flags = next(l for l in info.splitlines() if l.startswith("flags"))
        bf16 = "avx512_bf16" in flags
        return f"{name} (family {fam} model {model}{', AVX512-BF16' if bf16 else ''})"
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def timeit(fn, min_time, min_reps=5):
    """Median seconds of fn() over at least min_reps calls and min_time seconds."""
    fn()  # warm-up (and compilation for torch.compile)
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) * 1e-9)
        if len(times) >= 10000:
            break
    return statistics.median(times)


def identical_fraction(a, ref):
    """Fraction of elements whose bits equal the reference's (NaN == NaN)."""
    if a is None:
        return float("nan")
    a = a.detach().to(ref.dtype).contiguous()
    ref = ref.contiguous()
    bits = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
    same = a.view(bits[ref.dtype]) == ref.view(bits[ref.dtype])
    both_nan = torch.isnan(a) & torch.isnan(ref)
    return float((same | both_nan).double().mean())


# --- ONNX Runtime peers ---------------------------------------------------------------

NP_OF = {torch.float32: np.float32, torch.float16: np.float16}


def onnx_runner(kind, x, weight, delta, threads):
    """(name, run, y) for ONNX Runtime computing the norm of x (kind 'norm') or the fused
    residual add + norm of x + delta (kind 'add'), with weight as an initializer, inputs and
    output bound once (io_binding, no copies per call); or (None, reason, None) when ORT has
    no CPU kernel for the dtype or is not installed."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as e:
        return None, f"not installed ({e.name})", None
    if x.dtype not in NP_OF:
        # numpy has no bfloat16: ORT's CPU provider has no bf16 kernel for these ops either
        # (checked: session creation fails), so there is nothing to time.
        return None, "no CPU kernel for bfloat16 in ONNX Runtime", None
    elem = {torch.float32: TensorProto.FLOAT, torch.float16: TensorProto.FLOAT16}[x.dtype]
    shape = list(x.shape)
    inputs = [helper.make_tensor_value_info("x", elem, shape)]
    outputs = [helper.make_tensor_value_info("y", elem, shape)]
    w_init = numpy_helper.from_array(weight.numpy(), "w")
    attempts = []
    if kind == "norm":
        attempts.append(("RMSNormalization", [helper.make_operatorsetid("", 23)],
                         [helper.make_node("RMSNormalization", ["x", "w"], ["y"], axis=-1,
                                           epsilon=EPS, stash_type=1)]))
        attempts.append(("SimplifiedLayerNormalization", [helper.make_operatorsetid("", 17)],
                         [helper.make_node("SimplifiedLayerNormalization", ["x", "w"], ["y"],
                                           axis=-1, epsilon=EPS, stash_type=1)]))
    else:
        inputs.append(helper.make_tensor_value_info("d", elem, shape))
        outputs.append(helper.make_tensor_value_info("sum", elem, shape))
        attempts.append(("SkipSimplifiedLayerNormalization",
                         [helper.make_operatorsetid("", 17),
                          helper.make_operatorsetid("com.microsoft", 1)],
                         [helper.make_node("SkipSimplifiedLayerNormalization",
                                           ["x", "d", "w"], ["y", "", "", "sum"],
                                           domain="com.microsoft", epsilon=EPS)]))
    reasons = []
    for name, opsets, nodes in attempts:
        graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=[w_init])
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 10
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        try:
            sess = ort.InferenceSession(model.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])
        except Exception as e:  # ORT raises its own exception types
            reasons.append(f"{name}: {str(e).splitlines()[0][:100]}")
            continue
        io = sess.io_binding()
        feeds = {"x": x} if kind == "norm" else {"x": x, "d": delta}
        feeds = {key: t.contiguous().numpy() for key, t in feeds.items()}
        for key, a in feeds.items():
            io.bind_cpu_input(key, a)
        outs = {o.name: torch.empty_like(x) for o in sess.get_outputs()}
        for key, t in outs.items():
            io.bind_output(key, "cpu", 0, NP_OF[x.dtype], shape, t.data_ptr())

        # ORT keeps raw pointers to the bound tensors: the closure keeps them alive.
        def run(sess=sess, io=io, keep=(feeds, outs)):
            sess.run_with_iobinding(io)

        return name, run, outs["y"]
    return None, "; ".join(reasons), None


def onnx_entry(kind, x, weight, delta, threads):
    """The ONNX Runtime entry of a case's results (see norm_case)."""
    name, run, out = onnx_runner(kind, x, weight, delta, threads)
    if name is None:
        return ("onnxruntime", None, run)  # run holds the reason
    return (f"onnxruntime {name}", run, lambda: (run(), out)[1])


# --- the cases -------------------------------------------------------------------------

def make_module(width, weight):
    from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRMSNorm
    m = Glm4MoeRMSNorm(width, eps=EPS)
    with torch.no_grad():
        m.weight = torch.nn.Parameter(weight.clone(), requires_grad=False)
    return m.eval()


def norm_case(tokens, shape_tail, dtype, threads, args, gen):
    """One rms_norm case: every peer on the same x and weight."""
    shape = (tokens, *shape_tail)
    width = shape[-1]
    x = torch.randn(shape, generator=gen).to(dtype)
    weight = (1.0 + 0.5 * torch.randn(width, generator=gen)).to(dtype)
    module = make_module(width, weight)
    ref = module(x)
    nbytes = 2 * x.numel() * x.element_size() + weight.numel() * weight.element_size()
    results = []

    y = torch.empty_like(x)
    results.append(("glmnorm", lambda: glmnorm.rms_norm(x, weight, eps=EPS, out=y), None))
    results.append(("glmnorm.torch", lambda: torch.ops.glmnorm.rms_norm(x, weight, EPS),
                    None))
    results.append(("hf eager", lambda: module(x), None))
    results.append(("F.rms_norm",
                    lambda: torch.nn.functional.rms_norm(x, (width,), weight, EPS), None))
    if not args.no_compile:
        compiled = torch.compile(module, dynamic=False)
        results.append(("torch.compile", lambda: compiled(x), None))
    if not args.no_onnx:
        results.append(onnx_entry("norm", x, weight, None, threads))
    return shape, nbytes, ref, results


def add_case(tokens, width, dtype, threads, args, gen):
    """One fused add + norm case (the decoder layer's residual step)."""
    shape = (tokens, width)
    residual0 = torch.randn(shape, generator=gen).to(dtype)
    delta = torch.randn(shape, generator=gen).to(dtype)
    weight = (1.0 + 0.5 * torch.randn(width, generator=gen)).to(dtype)
    module = make_module(width, weight)
    ref = module(residual0 + delta)
    # Reads residual and delta, writes residual and y.
    nbytes = 4 * residual0.numel() * residual0.element_size()
    results = []
    residual = residual0.clone()
    y = torch.empty_like(residual)

    # In place, called repeatedly, residual drifts (residual += delta each call); restoring it
    # per call would time a copy too. The kernel's speed does not depend on the values; the
    # identity check (the third entry) uses a fresh residual.
    results.append(("glmnorm",
                    lambda: glmnorm.add_rms_norm(residual, delta, weight, eps=EPS, out=y),
                    lambda: glmnorm.add_rms_norm(residual0.clone(), delta, weight, eps=EPS)))
    r_op = residual0.clone()
    results.append(("glmnorm.torch",
                    lambda: torch.ops.glmnorm.add_rms_norm(r_op, delta, weight, EPS),
                    lambda: torch.ops.glmnorm.add_rms_norm(residual0.clone(), delta, weight,
                                                           EPS)))
    results.append(("hf eager", lambda: module(residual0 + delta), None))
    if not args.no_compile:
        def step(r, d):
            h = r + d
            return module(h), h
        compiled = torch.compile(step, dynamic=False)
        results.append(("torch.compile", lambda: compiled(residual0, delta), None))
    if not args.no_onnx:
        results.append(onnx_entry("add", residual0, weight, delta, threads))
    return shape, nbytes, ref, results


def backward_case(tokens, width, dtype, threads, args, gen):
    """The backward of the norm: dx and dweight given dy (training). Peers: torch autograd
    through the Transformers module, eager and torch.compile'd (forward + backward: autograd
    recomputes nothing it saved, so its backward alone cannot be timed without the forward;
    the forward's time is printed in the rms_norm rows above), and glmnorm's backward alone
    (it recomputes 1/rms from x)."""
    from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRMSNorm
    shape = (tokens, width)
    x = torch.randn(shape, generator=gen).to(dtype)
    dy = torch.randn(shape, generator=gen).to(dtype)
    weight = (1.0 + 0.5 * torch.randn(width, generator=gen)).to(dtype)
    m = Glm4MoeRMSNorm(width, eps=EPS)
    m.weight = torch.nn.Parameter(weight.clone())
    xr = x.clone().requires_grad_()

    def hf_step(mod):
        return torch.autograd.grad(mod(xr), (xr, m.weight), dy)

    ref = hf_step(m)[0]
    # Reads x and dy, writes dx; reads gamma, writes dgamma.
    nbytes = 3 * x.numel() * x.element_size() + 2 * weight.numel() * weight.element_size()
    dx = torch.empty_like(x)
    results = [
        ("glmnorm", lambda: glmnorm.rms_norm_backward(x, weight, dy, eps=EPS, out=dx), None),
        ("glmnorm.torch",
         lambda: torch.ops.glmnorm.rms_norm_backward.default(x, weight, dy, EPS), None),
        ("hf eager autograd (fwd+bwd)", lambda: hf_step(m), None),
    ]
    if not args.no_compile:
        compiled = torch.compile(m, dynamic=False)
        results.append(("torch.compile autograd (fwd+bwd)", lambda: hf_step(compiled), None))
    return shape, nbytes, ref, results


QKV_HEADS = (96, 8, 8, 128, 64)  # GLM-4.5: q, k, v heads, head_dim, rotary_dim


def qk_rope(q_in, k_in, q_norm, k_norm, cos, sin, nq, nk, hd):
    """Glm4MoeAttention's q_norm / k_norm per head, then apply_rotary_pos_emb (partial rotary:
    rotate-half over the first cos.shape[-1] dims of each head). q_in, k_in: the projections'
    outputs [tokens, heads * hd]; cos, sin: [1, tokens, rotary_dim]. Returns (q, k) as
    [1, heads, tokens, hd], as the attention gets them."""
    from transformers.models.glm4_moe.modeling_glm4_moe import apply_rotary_pos_emb
    t = q_in.shape[0]
    q = q_norm(q_in.view(1, t, nq, hd)).transpose(1, 2)
    k = k_norm(k_in.view(1, t, nk, hd)).transpose(1, 2)
    return apply_rotary_pos_emb(q, k, cos, sin)


def qk_rope_backward_case(tokens, dtype, threads, args, gen):
    """The backward of QK-norm + GLM's partial RoPE: dqkv and the q / k norm weights' gradients
    given the gradient of the rotated heads (training). Peers: torch autograd through
    Transformers' Glm4MoeRMSNorm and apply_rotary_pos_emb on the q and k projections (separate
    tensors, as in Glm4MoeAttention; v takes no part), eager and torch.compile'd, forward +
    backward (see backward_case); glmnorm: its backward alone (binding with out=, torch op)
    and forward + backward through the autograd of torch.ops.glmnorm.qk_norm (the row to
    compare with the peers'). "same" compares dqkv with the eager peer's (v columns: dout's);
    err64 is dqkv's mean absolute error against a float64 autograd of the same math (float32
    tables; Glm4MoeRMSNorm computes in float32 whatever the input, so that formula written
    out in float64)."""
    from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRMSNorm
    nq, nk, nv, hd, rot = QKV_HEADS
    qcols, kcols = slice(0, nq * hd), slice(nq * hd, (nq + nk) * hd)
    x = torch.randn(tokens, (nq + nk + nv) * hd, generator=gen).to(dtype)
    dout = torch.randn(x.shape, generator=gen).to(dtype)
    qw = (1.0 + 0.3 * torch.randn(hd, generator=gen)).to(dtype)
    kw = (1.0 + 0.3 * torch.randn(hd, generator=gen)).to(dtype)
    inv = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    freqs = torch.outer(torch.arange(tokens, dtype=torch.float64), inv)
    cos, sin = freqs.cos().float(), freqs.sin().float()  # [tokens, rot / 2], glmnorm's tables
    # Transformers' tables: [1, tokens, rot] in the activations' dtype (Glm4MoeRotaryEmbedding).
    c = torch.cat([cos, cos], -1)[None].to(dtype)
    s = torch.cat([sin, sin], -1)[None].to(dtype)
    q_norm, k_norm = Glm4MoeRMSNorm(hd, eps=EPS), Glm4MoeRMSNorm(hd, eps=EPS)
    q_norm.weight = torch.nn.Parameter(qw.clone())
    k_norm.weight = torch.nn.Parameter(kw.clone())
    q_in = x[:, qcols].clone().requires_grad_()
    k_in = x[:, kcols].clone().requires_grad_()
    # The gradient of the rotated heads, in the [1, heads, tokens, hd] layout of the outputs.
    dq_out = dout[:, qcols].view(1, tokens, nq, hd).transpose(1, 2)
    dk_out = dout[:, kcols].view(1, tokens, nk, hd).transpose(1, 2)

    def hf_step(fn):
        return torch.autograd.grad(fn(q_in, k_in, q_norm, k_norm, c, s, nq, nk, hd),
                                   (q_in, k_in, q_norm.weight, k_norm.weight), (dq_out, dk_out))

    def hf_dqkv(grads):
        return torch.cat([grads[0], grads[1], dout[:, (nq + nk) * hd:]], -1)

    ref = hf_dqkv(hf_step(qk_rope))

    # float64 reference (not timed): the same math, no rounding but the tables'.
    q64 = x[:, qcols].double().requires_grad_()
    k64 = x[:, kcols].double().requires_grad_()

    def norm64(w):
        w = w.double()
        return lambda h: w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS))

    c64 = torch.cat([cos, cos], -1)[None].double()
    s64 = torch.cat([sin, sin], -1)[None].double()
    g64 = torch.autograd.grad(qk_rope(q64, k64, norm64(qw), norm64(kw), c64, s64, nq, nk, hd),
                              (q64, k64), (dq_out.double(), dk_out.double()))
    ref64 = torch.cat([g64[0], g64[1], dout[:, (nq + nk) * hd:].double()], -1)
    del q64, k64, g64

    # Reads the q and k columns of qkv and dqkv, writes those of dqkv_in (v's gradient is dout's
    # columns: nothing to move in a fused buffer); reads the tables and both weights, writes
    # both weights' gradients.
    nbytes = (3 * tokens * (nq + nk) * hd * x.element_size() + 2 * cos.numel() * 4
              + 4 * hd * qw.element_size())
    dx = dout.clone()  # out=: the binding writes the q and k columns, v's stay dout's
    xr = x.clone().requires_grad_()
    qwp, kwp = qw.clone().requires_grad_(), kw.clone().requires_grad_()

    def glm_step():
        out = torch.ops.glmnorm.qk_norm(xr, qwp, kwp, nq, nk, nv, hd, EPS, "cast-then-scale",
                                        0.0, rot, cos, sin, None)
        return torch.autograd.grad(out, (xr, qwp, kwp), dout)

    results = [
        ("glmnorm",
         lambda: glmnorm.qk_norm_backward(x, qw, kw, dout, num_q_heads=nq, num_k_heads=nk,
                                          num_v_heads=nv, head_dim=hd, eps=EPS, rotary_dim=rot,
                                          cos=cos, sin=sin, out=dx), None),
        ("glmnorm.torch",
         lambda: torch.ops.glmnorm.qk_norm_backward.default(
             x, qw, kw, dout, nq, nk, nv, hd, EPS, "cast-then-scale", 0.0, rot, cos, sin, None),
         None),
        ("glmnorm.torch autograd (fwd+bwd)", glm_step, None),
        ("hf eager autograd (fwd+bwd)", lambda: hf_step(qk_rope),
         lambda: hf_dqkv(hf_step(qk_rope))),
    ]
    if not args.no_compile:
        compiled = torch.compile(qk_rope, dynamic=False)
        results.append(("torch.compile autograd (fwd+bwd)", lambda: hf_step(compiled),
                        lambda: hf_dqkv(hf_step(compiled))))
    return tuple(x.shape), nbytes, ref, ref64, results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=None,
                    help="thread counts (default: 1 and all cores)")
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 512, 4096])
    ap.add_argument("--dtype", nargs="+", default=["bf16", "f32"], choices=["bf16", "f32"])
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds per measurement")
    ap.add_argument("--quick", action="store_true",
                    help="tokens 1 and 512, bf16, 0.1 s per measurement")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--no-onnx", action="store_true", help="leave ONNX Runtime out")
    ap.add_argument("--no-backward", action="store_true",
                    help="leave the backward rows (rms_norm_bwd, qk_rope_bwd) out")
    ap.add_argument("--no-qk-rope-backward", action="store_true",
                    help="leave the QK-norm + RoPE backward (qk_rope_bwd) rows out")
    ap.add_argument("--qk-rope-max-tokens", type=int, default=512,
                    help="the qk_rope_bwd rows only up to this many tokens (default 512: at "
                         "4096 Transformers' eager autograd takes seconds a call and the row "
                         "1-1.5 min per dtype and thread count)")
    ap.add_argument("--ops", nargs="+", default=None, choices=OPS,
                    help="only these rows (default: all)")
    ap.add_argument("--png", default="build/compare_peers.png", help="chart file ('' = none)")
    ap.add_argument("--json", default="", help="also write the rows as JSON lines here")
    ap.add_argument("--markdown", default="",
                    help="also write the table of README / docs/PERFORMANCE.md here")
    args = ap.parse_args()
    if args.quick:
        args.tokens, args.dtype, args.min_time = [1, 512], ["bf16"], 0.1
    threads_list = args.threads or sorted({1, os.cpu_count() or 1})
    for t in threads_list:
        if t < 1:
            ap.error(f"--threads must be >= 1, got {t}")
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    print(f"# CPU: {cpu_model()}; torch {torch.__version__}; glmnorm {glmnorm.__version__}")
    print("# ratio = peer time / glmnorm time (> 1: glmnorm faster); same = fraction of "
          "outputs bit-identical to Transformers' Glm4MoeRMSNorm (eager)")
    print("# qk_rope_bwd: same compares dqkv with Transformers' eager autograd; err64 = mean "
          "|dqkv - float64 autograd of the same math|")
    rows = []
    header = (f"{'op':<13} {'shape':<14} {'dtype':<5} {'thr':>3} {'impl':<40} {'us':>10} "
              f"{'GB/s':>7} {'ratio':>6} {'same':>7} {'err64':>9}")
    for threads in threads_list:
        torch.set_num_threads(threads)
        glmnorm.set_num_threads(threads)
        for dt in args.dtype:
            dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[dt]
            print(header)
            cases = []
            for tokens in args.tokens:
                for tail in [(5120,), (4096,), (104, 128)]:
                    cases.append(("rms_norm", tokens, tail))
                cases.append(("add_rms_norm", tokens, (5120,)))
                if not args.no_backward:
                    cases.append(("rms_norm_bwd", tokens, (5120,)))
                if not (args.no_backward or args.no_qk_rope_backward
                        or tokens > args.qk_rope_max_tokens):
                    cases.append(("qk_rope_bwd", tokens, (sum(QKV_HEADS[:3]), QKV_HEADS[3])))
            if args.ops:
                cases = [c for c in cases if c[0] in args.ops]
            for op, tokens, tail in cases:
                # Each case compiles anew: without a reset dynamo stops recompiling the
                # module after its recompile limit and silently runs it eagerly.
                torch._dynamo.reset()
                gen = torch.Generator().manual_seed(tokens * 7 + len(tail) + tail[-1])
                ref64 = None  # a float64 reference: its error is printed too (err64)
                if op == "rms_norm":
                    shape, nbytes, ref, impls = norm_case(tokens, tail, dtype, threads, args,
                                                          gen)
                elif op == "rms_norm_bwd":
                    shape, nbytes, ref, impls = backward_case(tokens, tail[-1], dtype,
                                                              threads, args, gen)
                elif op == "qk_rope_bwd":
                    shape, nbytes, ref, ref64, impls = qk_rope_backward_case(
                        tokens, dtype, threads, args, gen)
                else:
                    shape, nbytes, ref, impls = add_case(tokens, tail[-1], dtype, threads,
                                                         args, gen)
                # The machine's copy of the same bytes (read + write), same threads.
                src = torch.empty(nbytes // 2, dtype=torch.uint8)
                dst = torch.empty_like(src)
                src.fill_(1)
                copy_s = timeit(lambda: dst.copy_(src), args.min_time)
                copy_gbs = nbytes / copy_s / 1e9
                glm_s = None
                shape_s = "x".join(map(str, shape))
                # impls: (name, fn timed, fn giving the output to check on fresh inputs, or
                # None: fn's own result); fn None: not available, the third is why.
                for name, fn, extra in impls:
                    if fn is None:
                        print(f"{op:<13} {shape_s:<14} {dt:<5} {threads:>3} {name:<40} "
                              f"{'n/a':>10}   ({extra})")
                        rows.append(dict(op=op, shape=shape_s, dtype=dt, threads=threads,
                                         impl=name, us=None, note=extra))
                        continue
                    s = timeit(fn, args.min_time)
                    out = (extra or fn)()
                    if isinstance(out, tuple):
                        out = out[0]
                    same = identical_fraction(out, ref)
                    if name == "glmnorm":
                        glm_s = s
                    ratio = s / glm_s if glm_s else float("nan")
                    gbs = nbytes / s / 1e9
                    row = dict(op=op, shape=shape_s, dtype=dt, threads=threads, impl=name,
                               us=s * 1e6, gbs=gbs, ratio=ratio, same=same)
                    err_s = ""
                    if ref64 is not None:
                        row["err64"] = float((out.detach().double() - ref64).abs().mean())
                        err_s = f" {row['err64']:>9.3e}"
                    print(f"{op:<13} {shape_s:<14} {dt:<5} {threads:>3} {name:<40} "
                          f"{s * 1e6:>10.1f} {gbs:>7.2f} {ratio:>6.2f} {same:>7.4f}{err_s}")
                    rows.append(row)
                print(f"{op:<13} {shape_s:<14} {dt:<5} {threads:>3} {'(copy of the same bytes)':<40} "
                      f"{copy_s * 1e6:>10.1f} {copy_gbs:>7.2f}")
                rows.append(dict(op=op, shape=shape_s, dtype=dt, threads=threads,
                                 impl="copy", us=copy_s * 1e6, gbs=copy_gbs))
    if args.json:
        with open(args.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_table(rows))
        print(f"# markdown table: {args.markdown}")
    if args.png:
        chart(rows, args.png)
        print(f"# chart: {args.png}")


def is_peer(row):
    """A peer's row: not one of glmnorm's paths, not the copy."""
    return not row["impl"].startswith("glmnorm") and row["impl"] != "copy"


def fastest_peer(case_rows):
    """The fastest peer's row among one case's rows (None when no peer ran)."""
    peers = [r for r in case_rows if is_peer(r) and r.get("us") is not None]
    return min(peers, key=lambda r: r["us"]) if peers else None


def markdown_table(rows):
    """The docs' table: per case, glmnorm with out=, the torch op, the fastest peer, ratios."""
    def us(t):
        return f"{t:.1f} µs" if t < 1000 else f"{t / 1000:.2f} ms"

    cases = {}
    for r in rows:
        if r.get("us") is not None:
            cases.setdefault((r["op"], r["shape"], r["dtype"], r["threads"]), []).append(r)
    lines = ["| op | shape | dtype | threads | glmnorm (out=) | glmnorm.torch | torch op / out= "
             "| fastest peer | peer / torch op | peer bit-identical to HF |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (op, shape, dt, threads), rs in cases.items():
        by = {r["impl"]: r for r in rs}
        best = fastest_peer(rs)
        if "glmnorm" not in by or "glmnorm.torch" not in by or best is None:
            continue
        out, op_t = by["glmnorm"]["us"], by["glmnorm.torch"]["us"]
        lines.append(f"| {op} | {shape} | {dt} | {threads} | {us(out)} | {us(op_t)} | "
                     f"{op_t / out:.2f} | {best['impl']} {us(best['us'])} | "
                     f"{best['us'] / op_t:.2f} | {best['same']:.3f} |")
    return "\n".join(lines) + "\n"


def chart(rows, path):
    """One panel per (dtype, threads), one row per case: each glmnorm path's speed as a
    multiple of the fastest peer's on that case (> 1: glmnorm faster), log scale, and the
    copy of the same bytes as the memory-bound ceiling. Labels on the y axis (no overlap),
    one legend under the panels."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    panels = sorted({(r["dtype"], r["threads"]) for r in rows})
    cases = list(dict.fromkeys((r["op"], r["shape"]) for r in rows))
    styles = {"glmnorm": ("o", "tab:blue"), "glmnorm.torch": ("s", "tab:orange"),
              "copy": ("|", "black")}
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 0.32 * len(cases) + 2),
                             squeeze=False, sharey=True)
    for ax, (dt, thr) in zip(axes[0], panels):
        sel = [r for r in rows if r["dtype"] == dt and r["threads"] == thr and r.get("us")]
        for impl, (marker, color) in styles.items():
            xs, ys = [], []
            for y, (op, shape) in enumerate(cases):
                here = [r for r in sel if (r["op"], r["shape"]) == (op, shape)]
                best = fastest_peer(here)
                mine = [r["us"] for r in here if r["impl"] == impl]
                if best is not None and mine:
                    xs.append(best["us"] / mine[0])
                    ys.append(y)
            label = {"copy": "copy of the same bytes (ceiling)"}.get(impl, impl)
            ax.scatter(xs, ys, marker=marker, color=color, s=60 if impl == "copy" else 28,
                       label=label, zorder=3)
        ax.axvline(1.0, color="gray", lw=1)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=2))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(f"{dt}, {thr} thread(s)", fontsize=10)
        ax.set_xlabel("speed / fastest peer's (> 1: faster)")
        ax.grid(axis="x", which="both", alpha=0.3)
    axes[0][0].set_yticks(range(len(cases)))
    axes[0][0].set_yticklabels([f"{op} {shape}" for op, shape in cases], fontsize=8)
    axes[0][0].invert_yaxis()
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)
    fig.suptitle(f"glmnorm against the fastest of its peers, GLM-4.5 shapes ({cpu_model()})",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    sys.exit(main())
