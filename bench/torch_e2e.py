#!/usr/bin/env python3
"""What glmnorm.torch.patch_glm4_moe gains end to end: forward time of Transformers'
Glm4MoeForCausalLM with and without the patch, eager and torch.compile, on the CPU.

Models (random weights, random norm gains, bf16):
  tiny   the test model of scripts/make_tiny_checkpoint.py (hidden 64, 3 layers)
  slice  GLM-4.5-shaped: hidden 5120, head_dim 128, 96 q / 8 kv heads, QK-norm, 2 layers
         (1 dense, 1 MoE with 4 small experts), vocab 1024

Run in the venv of python/requirements.txt with the package on PYTHONPATH, e.g.
  PYTHONPATH=build/release/python $(bash scripts/python_env.sh python/requirements.txt)/bin/python \\
      bench/torch_e2e.py [--threads 2] [--no-compile] [--tokens 1 128]
Prints one line per (model, tokens, mode): median ms of a forward and the patched/unpatched
ratio.
"""

import argparse
import copy
import warnings
import os
import statistics
import sys
import time

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(name):
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM
    from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRMSNorm
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    from make_tiny_checkpoint import COMMON, MODELS
    if name == "tiny":
        cfg = Glm4MoeConfig(**COMMON, **MODELS["tiny_glm45"])
    else:
        cfg = Glm4MoeConfig(
            vocab_size=1024, hidden_size=5120, num_attention_heads=96, num_key_value_heads=8,
            head_dim=128, num_hidden_layers=2, first_k_dense_replace=1, use_qk_norm=True,
            intermediate_size=1024, moe_intermediate_size=256, n_routed_experts=4,
            num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1,
            max_position_embeddings=4096, rms_norm_eps=1e-5, partial_rotary_factor=0.5,
            tie_word_embeddings=False)
    torch.manual_seed(0)
    model = Glm4MoeForCausalLM(cfg).eval()
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, Glm4MoeRMSNorm):
            with torch.no_grad():
                m.weight.copy_(1.0 + 0.6 * torch.randn(m.weight.shape, generator=gen))
    return model.to(torch.bfloat16), cfg.vocab_size


def time_pair(fa, fb, ids, min_time):
    """Median ms of fa(ids) and fb(ids), timed alternately (so both see the same machine
    load), after warm-up calls that also absorb any recompilation."""
    with torch.inference_mode():
        for _ in range(5):
            fa(ids)
            fb(ids)
        ta, tb = [], []
        start = time.perf_counter()
        while time.perf_counter() - start < min_time or len(ta) < 7:
            t = time.perf_counter()
            fa(ids)
            ta.append(time.perf_counter() - t)
            t = time.perf_counter()
            fb(ids)
            tb.append(time.perf_counter() - t)
    return statistics.median(ta) * 1e3, statistics.median(tb) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 128])
    ap.add_argument("--models", nargs="+", default=["tiny", "slice"])
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()

    import glmnorm
    import glmnorm.torch as gt
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.set_num_threads(args.threads)
    glmnorm.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, glmnorm.torch: C++ kernels")
    print(f"{'model':6s} {'tokens':>6s} {'mode':8s} {'unpatched_ms':>13s} {'patched_ms':>11s} "
          f"{'ratio':>6s}")
    for name in args.models:
        model, vocab = build(name)
        patched = gt.patch_glm4_moe(copy.deepcopy(model))
        for tokens in args.tokens:
            ids = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(2))
            modes = [("eager", model, patched)]
            if not args.no_compile:
                torch._dynamo.reset()
                modes.append(("compiled", torch.compile(model, fullgraph=True, dynamic=False),
                              torch.compile(patched, fullgraph=True, dynamic=False)))
            for mode, a, b in modes:
                ta, tb = time_pair(a, b, ids, args.min_time)
                print(f"{name:6s} {tokens:6d} {mode:8s} {ta:13.3f} {tb:11.3f} {tb / ta:6.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
