#!/usr/bin/env python3
"""Builds the tiny GLM-4.5 test checkpoints under tests/data with the real library.

For each of two tiny models, a GLM-4.5-like one (use_qk_norm true) and an
Air-like one (use_qk_norm false), this script:

  1. builds a random Glm4MoeForCausalLM from Transformers' own Glm4MoeConfig
     (seeded), randomises every RMSNorm gamma and casts the model to bf16;
  2. saves it with save_pretrained in several safetensors shards plus
     model.safetensors.index.json and config.json;
  3. adds the MTP layer (layer N = num_hidden_layers: enorm, hnorm,
     shared_head.norm, its block norms and eh_proj) with the safetensors
     library, because Transformers' class does not create it;
  4. records golden outputs of every norm, run by Transformers'
     Glm4MoeRMSNorm modules on random inputs, and one pre-norm residual stream
     through every decoder layer and model.norm (the real
     Glm4MoeDecoderLayer.forward with its attention and MLP replaced by fixed
     tensors), in goldens.safetensors next to the checkpoint.

The C++ tests read the results with glmnorm's own readers, so they need no
Python. Rerun with:  python3 scripts/make_tiny_checkpoint.py
(it creates or reuses the venv at .venv, or --venv DIR, and installs torch,
transformers, safetensors and numpy there when they are missing).
"""

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIRED = ["torch", "transformers", "safetensors", "numpy"]


def ensure_venv(venv):
    """Re-executes this script inside `venv` with the packages it needs."""
    try:
        import numpy  # noqa: F401
        import safetensors  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
        return
    except ImportError:
        pass
    python = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        # Already inside the venv and something is missing: install it.
        subprocess.check_call([python, "-m", "pip", "install", "--quiet"] + REQUIRED)
    else:
        if not os.path.exists(python):
            subprocess.check_call([sys.executable, "-m", "venv", venv])
        probe = subprocess.run([python, "-c", "import " + ", ".join(REQUIRED)],
                               capture_output=True)
        if probe.returncode != 0:
            subprocess.check_call([python, "-m", "pip", "install", "--quiet"] + REQUIRED)
    os.execv(python, [python] + sys.argv)


# Tiny shapes: head_dim is deliberately NOT hidden / heads (as in the real
# models, 5120 / 96 != 128), so a reader that derives it gets the wrong width.
MODELS = {
    "tiny_glm45": dict(
        hidden_size=64, num_attention_heads=6, num_key_value_heads=2, head_dim=16,
        num_hidden_layers=3, first_k_dense_replace=1, use_qk_norm=True),
    "tiny_air": dict(
        hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_hidden_layers=2, first_k_dense_replace=1, use_qk_norm=False),
}
COMMON = dict(
    vocab_size=128, intermediate_size=96, moe_intermediate_size=16, n_routed_experts=4,
    num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1,
    max_position_embeddings=256, rms_norm_eps=1e-5, num_nextn_predict_layers=1,
    tie_word_embeddings=False, partial_rotary_factor=0.5)


def random_rows(torch, gen, shape, dtype):
    """Activations with GLM-like spread: rows of very different scale, a few
    outlier channels, and one all-zero row (r = 1/sqrt(eps), y = 0)."""
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    rows = x.reshape(-1, shape[-1])
    scales = [1.0, 1e-3, 37.0, 0.25, 5000.0, 1.0]
    for i in range(rows.shape[0]):
        rows[i] *= scales[i % len(scales)]
    if rows.shape[0] > 1:
        rows[1, 3] = 900.0  # an outlier channel in a small row
    if rows.shape[0] > 3:
        rows[3].zero_()
    return x.to(dtype)


def build(name, out_dir, seed):
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM
    from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRMSNorm

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    config = Glm4MoeConfig(**COMMON, **MODELS[name])
    model = Glm4MoeForCausalLM(config).eval()
    hidden = config.hidden_size
    head_dim = config.head_dim
    n_layers = config.num_hidden_layers
    eps = config.rms_norm_eps

    # Gammas around 1 with a wide spread and both signs, as trained ones are.
    for mod_name, mod in model.named_modules():
        if isinstance(mod, Glm4MoeRMSNorm):
            with torch.no_grad():
                w = 1.0 + 0.6 * torch.randn(mod.weight.shape, generator=gen)
                mod.weight.copy_(w)
    model = model.to(torch.bfloat16)

    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        if f.endswith(".safetensors") or f.endswith(".json"):
            os.remove(os.path.join(out_dir, f))
    model.save_pretrained(out_dir, max_shard_size="20KB")
    index_path = os.path.join(out_dir, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 2, f"expected several shards, got {shards}"

    # The MTP layer: Transformers' class has none, so its tensors are added to
    # the last shard as the released checkpoints have them.
    mtp = n_layers
    pre = f"model.layers.{mtp}."
    mtp_norms = {
        pre + "enorm.weight": hidden,
        pre + "hnorm.weight": hidden,
        pre + "shared_head.norm.weight": hidden,
        pre + "input_layernorm.weight": hidden,
        pre + "post_attention_layernorm.weight": hidden,
    }
    if config.use_qk_norm:
        mtp_norms[pre + "self_attn.q_norm.weight"] = head_dim
        mtp_norms[pre + "self_attn.k_norm.weight"] = head_dim
    mtp_tensors = {
        n: (1.0 + 0.6 * torch.randn(w, generator=gen)).to(torch.bfloat16)
        for n, w in mtp_norms.items()
    }
    mtp_tensors[pre + "eh_proj.weight"] = (
        0.02 * torch.randn(hidden, 2 * hidden, generator=gen)).to(torch.bfloat16)
    last = shards[-1]
    last_path = os.path.join(out_dir, last)
    tensors = load_file(last_path)
    tensors.update(mtp_tensors)
    save_file(tensors, last_path, metadata={"format": "pt"})
    for n, t in mtp_tensors.items():
        index["weight_map"][n] = last
        index["metadata"]["total_size"] += t.numel() * t.element_size()
    index["weight_map"] = dict(sorted(index["weight_map"].items()))
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")

    # Every norm as a Transformers Glm4MoeRMSNorm module: the model's own, and
    # for the MTP layer the same class built with the checkpoint's eps (what
    # vLLM and llama.cpp do with those tensors).
    norms = {"model.norm.weight": model.model.norm}
    for i, layer in enumerate(model.model.layers):
        norms[f"model.layers.{i}.input_layernorm.weight"] = layer.input_layernorm
        norms[f"model.layers.{i}.post_attention_layernorm.weight"] = layer.post_attention_layernorm
        if config.use_qk_norm:
            norms[f"model.layers.{i}.self_attn.q_norm.weight"] = layer.self_attn.q_norm
            norms[f"model.layers.{i}.self_attn.k_norm.weight"] = layer.self_attn.k_norm
    for n, t in mtp_tensors.items():
        if n in mtp_norms:
            m = Glm4MoeRMSNorm(t.shape[0], eps=eps).to(torch.bfloat16)
            with torch.no_grad():
                m.weight.copy_(t)
            norms[n] = m

    # The checkpoint on disk must hold exactly the gammas the modules use.
    on_disk = {}
    for shard in shards:
        on_disk.update(load_file(os.path.join(out_dir, shard)))
    for n, m in norms.items():
        assert torch.equal(on_disk[n], m.weight.data), n
        assert m.variance_epsilon == eps, n

    goldens = {}
    with torch.no_grad():
        for n, m in sorted(norms.items()):
            width = m.weight.shape[0]
            if ".q_norm." in n or ".k_norm." in n:
                heads = (config.num_attention_heads if ".q_norm." in n
                         else config.num_key_value_heads)
                shape = (1, 2, heads, width)  # (batch, seq, heads, head_dim)
            else:
                shape = (6, width)
            x = random_rows(torch, gen, shape, torch.bfloat16)
            goldens["x/" + n] = x
            goldens["y/" + n] = m(x)
            # f32 activations with bf16 gammas: PyTorch promotes to f32 and
            # skips the cast back (docs/SPEC.md §2).
            if n == "model.norm.weight" or n.endswith(".0.self_attn.q_norm.weight"):
                xf = random_rows(torch, gen, shape, torch.float32)
                goldens["xf32/" + n] = xf
                goldens["yf32/" + n] = m(xf)

        # One residual stream through every layer, pre-norm, with the real
        # Glm4MoeDecoderLayer.forward; attention and MLP return fixed tensors
        # and record what they were given (the normalised inputs).
        class Fixed(torch.nn.Module):
            def __init__(self, out, pair):
                super().__init__()
                self.out, self.pair, self.seen = out, pair, None

            def forward(self, hidden_states, *args, **kwargs):
                self.seen = hidden_states
                return (self.out, None) if self.pair else self.out

        tokens = 5
        h = random_rows(torch, gen, (1, tokens, hidden), torch.bfloat16)
        goldens["stream/h0"] = h[0]
        for i, layer in enumerate(model.model.layers):
            attn = random_rows(torch, gen, (1, tokens, hidden), torch.bfloat16)
            mlp = random_rows(torch, gen, (1, tokens, hidden), torch.bfloat16)
            saved = layer.self_attn, layer.mlp
            layer.self_attn, layer.mlp = Fixed(attn, True), Fixed(mlp, False)
            h = layer(h, attention_mask=None, position_embeddings=None)
            goldens[f"stream/attn_in.{i}"] = layer.self_attn.seen[0]
            goldens[f"stream/attn_out.{i}"] = attn[0]
            goldens[f"stream/mlp_in.{i}"] = layer.mlp.seen[0]
            goldens[f"stream/mlp_out.{i}"] = mlp[0]
            goldens[f"stream/h.{i + 1}"] = h[0]
            layer.self_attn, layer.mlp = saved
        goldens["stream/final"] = model.model.norm(h)[0]

    import transformers
    # One metadata entry: the safetensors writer orders several in hash order,
    # which would change the file on every run.
    meta = {"provenance": json.dumps({
        "eps": eps,
        "seed": seed,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "about": "x/NAME, y/NAME: Glm4MoeRMSNorm(NAME) on bf16 x; xf32/yf32: f32 x; "
                 "stream/*: Glm4MoeDecoderLayer.forward per layer, then model.norm",
    }, sort_keys=True)}
    save_file({k: v.contiguous() for k, v in goldens.items()},
              os.path.join(out_dir, "goldens.safetensors"), metadata=meta)
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    for f in os.listdir(out_dir):
        os.chmod(os.path.join(out_dir, f), 0o644)
    print(f"{name}: {len(shards)} shards, {len(norms)} norms, {size} bytes in {out_dir}")
    return size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--venv", default=os.path.join(REPO, ".venv"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data"))
    ap.add_argument("--seed", type=int, default=4545)
    args = ap.parse_args()
    ensure_venv(args.venv)
    import torch
    torch.set_num_threads(1)  # deterministic CPU reductions
    total = 0
    for i, name in enumerate(MODELS):
        total += build(name, os.path.join(args.out, name), args.seed + 100 * i)
    print(f"total {total} bytes")
    assert total < 2 * 1024 * 1024, "test data must stay under 2 MB"


if __name__ == "__main__":
    main()
