"""One rank of the distributed tests (test_distributed.py starts two, as torchrun would).

    python distributed_worker.py SCENARIO SEED     (env: RANK, WORLD_SIZE, MASTER_ADDR/PORT)

Scenarios: "ops" (every glmnorm op on DTensors, bits against the same op on the full
tensors), "tp" (a tiny Glm4MoeForCausalLM, TP=2 + sequence parallel), "fsdp" (FSDP2, a
training step), "bench" (one TP=2 sequence-parallel step, patched vs unpatched). Each rank
computes its single-process reference itself (same library, same full inputs). A failed
check raises: the rank exits non-zero and the parent kills the other rank.
"""

import copy
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

torch.set_num_threads(1)  # two ranks on a 2-core machine

import glmnorm.torch as gt  # noqa: E402  (registers the sharding rules)
from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard,  # noqa: E402
                                      distribute_tensor, init_device_mesh)
from torch.distributed.tensor.debug import CommDebugMode  # noqa: E402

OPS = torch.ops.glmnorm
RANK = int(os.environ.get("RANK", "0"))


def log(*args):
    print(f"[rank {RANK}]", *args, flush=True)


def same_bits(a, b, what):
    """Exact equality (dtype, shape, bits) of a DTensor's full value and a plain tensor."""
    if isinstance(a, DTensor) and a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        # gloo has no float8 collectives: gather the bytes.
        u8 = DTensor.from_local(a.to_local().view(torch.uint8), a.device_mesh, a.placements,
                                shape=a.shape, stride=a.stride())
        full = u8.full_tensor().view(a.dtype)
    else:
        full = a.full_tensor() if isinstance(a, DTensor) else a
    assert full.dtype == b.dtype and full.shape == b.shape, \
        f"{what}: {full.dtype} {tuple(full.shape)} vs {b.dtype} {tuple(b.shape)}"
    ok = torch.equal(full.view(torch.uint8) if full.dtype.itemsize == 1 else full,
                     b.view(torch.uint8) if b.dtype.itemsize == 1 else b)
    assert ok, f"{what}: bits differ from the single-process result"


def expect_error(fn, *words):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        msg = str(e)
        assert all(w in msg for w in words), f"error {msg!r} does not name {words}"
        return msg
    raise AssertionError(f"no error; expected one naming {words}")


def near_partial_sum(got, parts, ref, mag, n, what):
    """A reduced Partial weight gradient against the single-process one. Each rank's part is
    a float32 sum over its rows rounded to the dtype, then the parts are summed; the
    single-process sum runs over all rows at once. With cancellation the two differ by more
    than an ulp of the result (as for PyTorch's own layer_norm): the bound is an ulp of each
    part and of the result, plus n float32 ulps of mag, the sum of the terms' magnitudes
    (the same backward op on |x| and |dy|)."""
    eps = torch.finfo(ref.dtype).eps
    bound = ((sum(p.float().abs() for p in parts) + ref.float().abs()) * eps
             + n * torch.finfo(torch.float32).eps * mag.float().abs())
    err = (got.float() - ref.float()).abs()
    i = int((err / bound).argmax())
    assert bool((err <= bound).all()), \
        (f"{what}: {float((err / bound).max()):.2f}x the bound at {i}: got {float(got[i])} ref "
         f"{float(ref[i])} parts {[float(p[i]) for p in parts]}")


def rows(gen, shape, dtype):
    x = torch.randn(shape, generator=gen)
    flat = x.view(-1, shape[-1])
    flat *= torch.tensor([1.0, 1e-3, 37.0, 0.25, 5000.0, 3.0])[
        torch.arange(flat.shape[0]) % 6].unsqueeze(1)
    return x.to(dtype)


def gamma(gen, n, dtype):
    return (1.0 + 0.6 * torch.randn(n, generator=gen)).to(dtype)


# --- scenario "ops" --------------------------------------------------------------------

def scenario_ops(seed):
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    gen = torch.Generator().manual_seed(seed)  # same seed on every rank: same full tensors
    R = [Replicate()]

    def dt(t, placement):
        return distribute_tensor(t, mesh, [placement])

    def partial(t):  # a Partial DTensor whose sum is exactly t: t on rank 0, zeros elsewhere
        local = t.clone() if RANK == 0 else torch.zeros_like(t)
        return DTensor.from_local(local, mesh, [Partial()], run_check=False)

    for dtype in (torch.bfloat16, torch.float32):
        # rms_norm: every row dim kept (uneven 7 -> 4 + 3 too); last dim / partial replicated.
        x = rows(gen, (4, 7, 64), dtype)
        w = gamma(gen, 64, dtype)
        ref = OPS.rms_norm(x, w)
        for pl, out in ((Shard(0), Shard(0)), (Shard(1), Shard(1)), (Replicate(), Replicate()),
                        (Shard(2), Replicate())):
            xd, wd = dt(x, pl), dt(w, Replicate())
            with CommDebugMode() as comm:
                y = OPS.rms_norm(xd, wd)
            # Row shards: no communication; a sharded last dim: one all-gather.
            assert comm.get_total_counts() == (1 if pl == Shard(2) else 0), \
                f"rms_norm {pl}: {comm.get_comm_counts()}"
            assert y.placements == (out,), f"rms_norm {pl} -> {y.placements}"
            same_bits(y, ref, f"rms_norm {dtype} {pl}")
        x1 = rows(gen, (1, 3, 64), dtype)  # one row index for two ranks: an empty shard
        y = OPS.rms_norm(dt(x1, Shard(0)), dt(w, Replicate()))
        assert y.placements == (Shard(0),) and y.to_local().shape[0] == 1 - RANK
        same_bits(y, OPS.rms_norm(x1, w), f"rms_norm {dtype} empty shard")
        y = OPS.rms_norm(partial(x), dt(w, Shard(0)))  # partial x, sharded weight: gathered
        assert y.placements == (Replicate(),)
        same_bits(y, ref, f"rms_norm {dtype} Partial")
        y = OPS.rms_norm(dt(x, Shard(1)), dt(w, Replicate()), 1e-6, "single", 1.0)
        same_bits(y, OPS.rms_norm(x, w, 1e-6, "single", 1.0), "rms_norm single +1")

        # add_rms_norm: residual updated in place, same placement; delta redistributed.
        res, delta = rows(gen, (3, 8, 64), dtype), rows(gen, (3, 8, 64), dtype)
        res_ref = res.clone()
        ref = OPS.add_rms_norm(res_ref, delta, w)
        for dpl in (Shard(1), Replicate(), Shard(0)):
            r = dt(res, Shard(1))
            y = OPS.add_rms_norm(r, dt(delta, dpl), dt(w, Replicate()))
            assert y.placements == (Shard(1),) and r.placements == (Shard(1),)
            same_bits(y, ref, f"add_rms_norm y, delta {dpl}")
            same_bits(r, res_ref, f"add_rms_norm residual, delta {dpl}")
        for bad in (Shard(2), "partial"):
            r = partial(res) if bad == "partial" else dt(res, bad)
            expect_error(lambda: OPS.add_rms_norm(r, dt(delta, Replicate()),
                                                  dt(w, Replicate())),
                         "glmnorm.add_rms_norm", "residual",
                         "Partial" if bad == "partial" else "Shard(dim=2)")

        # backward: dx bits; dweight Partial, each rank's part is the op on its own rows.
        dy = rows(gen, (4, 7, 64), dtype)
        dx_ref, dw_ref = OPS.rms_norm_backward(x, w, dy)
        for pl in (Shard(0), Shard(1)):
            dx, dw = OPS.rms_norm_backward(dt(x, pl), dt(w, Replicate()), dt(dy, pl))
            assert dx.placements == (pl,) and dw.placements == (Partial(),), dw.placements
            same_bits(dx, dx_ref, f"rms_norm_backward dx {pl}")
            parts = [OPS.rms_norm_backward(xc, w, dyc)[1]
                     for xc, dyc in zip(x.chunk(2, pl.dim), dy.chunk(2, pl.dim))]
            same_bits(dw.to_local(), parts[RANK], f"rms_norm_backward dweight part {pl}")
            # DTensor's reduction of the two parts is their sum (2 ranks: order-free).
            same_bits(dw, parts[0] + parts[1], f"rms_norm_backward dweight reduced {pl}")
            mag = OPS.rms_norm_backward(x.abs(), w, dy.abs())[1]
            near_partial_sum(dw.full_tensor(), parts, dw_ref, mag, 28, "rms_norm_backward dw")
        dx, dw = OPS.rms_norm_backward(dt(x, Replicate()), dt(w, Replicate()), dt(dy, Shard(1)))
        assert dw.placements == (Replicate(),)
        same_bits(dx, dx_ref, "rms_norm_backward replicated x")
        same_bits(dw, dw_ref, "rms_norm_backward replicated dweight")

    # autograd through DTensor (C++ Autograd kernel above DTensor's dispatch).
    x = rows(gen, (2, 6, 64), torch.float32)
    w = gamma(gen, 64, torch.float32)
    dy = rows(gen, (2, 6, 64), torch.float32)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    OPS.rms_norm(xr, wr).backward(dy)
    xd = dt(x, Shard(1)).requires_grad_()
    wd = dt(w, Replicate()).requires_grad_()
    y = OPS.rms_norm(xd, wd)
    assert y.requires_grad and y.placements == (Shard(1),)
    y.backward(dt(dy, Shard(1)))
    same_bits(xd.grad, xr.grad, "autograd x.grad")
    assert wd.grad.placements == (Partial(),), wd.grad.placements
    parts = [OPS.rms_norm_backward(xc, w, dyc)[1] for xc, dyc in zip(x.chunk(2, 1),
                                                                    dy.chunk(2, 1))]
    same_bits(wd.grad.to_local(), parts[RANK], "autograd weight.grad part")
    near_partial_sum(wd.grad.full_tensor(), parts, wr.grad,
                     OPS.rms_norm_backward(x.abs(), w, dy.abs())[1], 12, "autograd weight.grad")

    # qk_norm / qk_norm_ (+ RoPE with positions), qk_norm_backward, autograd of qk_norm.
    nq, nk, nv, hd, T = 4, 2, 2, 16, 10
    qkv = rows(gen, (T, (nq + nk + nv) * hd), torch.bfloat16)
    qw, kw = gamma(gen, hd, torch.bfloat16), gamma(gen, hd, torch.bfloat16)
    ang = torch.rand((32, hd // 4), generator=gen)
    cos, sin = torch.cos(ang), torch.sin(ang)
    pos = torch.randint(0, 32, (T,), generator=gen)
    heads = (nq, nk, nv, hd)
    ref = OPS.qk_norm(qkv, qw, kw, *heads, 1e-5, "cast-then-scale", 0.0, hd // 2, cos, sin, pos)
    rep = lambda t: dt(t, Replicate())  # noqa: E731
    y = OPS.qk_norm(dt(qkv, Shard(0)), rep(qw), rep(kw), *heads, 1e-5, "cast-then-scale", 0.0,
                    hd // 2, rep(cos), rep(sin), dt(pos, Shard(0)))
    assert y.placements == (Shard(0),)
    same_bits(y, ref, "qk_norm rope positions Shard(0)")
    y = OPS.qk_norm(dt(qkv, Shard(0)), rep(qw), rep(kw), *heads, 1e-5, "cast-then-scale", 0.0,
                    hd // 2, rep(cos), rep(sin), rep(pos))  # positions redistributed
    same_bits(y, ref, "qk_norm rope positions Replicate")
    q = dt(qkv, Shard(0))
    OPS.qk_norm_(q, rep(qw), rep(kw), *heads, 1e-5, "cast-then-scale", 0.0, hd // 2, rep(cos),
                 rep(sin), dt(pos, Shard(0)))
    assert q.placements == (Shard(0),)
    same_bits(q, ref, "qk_norm_ rope")
    ref0 = OPS.qk_norm(qkv, qw, kw, *heads, 1e-5, "cast-then-scale", 0.0, hd // 2, cos, sin)
    y = OPS.qk_norm(dt(qkv, Shard(0)), rep(qw), rep(kw), *heads, 1e-5, "cast-then-scale", 0.0,
                    hd // 2, rep(cos), rep(sin))  # no positions: rows by global index
    assert y.placements == (Replicate(),)
    same_bits(y, ref0, "qk_norm rope without positions (replicated)")
    expect_error(lambda: OPS.qk_norm_(dt(qkv, Shard(0)), rep(qw), rep(kw), *heads, 1e-5,
                                      "cast-then-scale", 0.0, hd // 2, rep(cos), rep(sin)),
                 "glmnorm.qk_norm_", "qkv", "Shard(dim=0)", "positions")
    expect_error(lambda: OPS.qk_norm_(dt(qkv, Shard(1)), rep(qw), rep(kw), *heads),
                 "glmnorm.qk_norm_", "qkv", "Shard(dim=1)")
    y = OPS.qk_norm(dt(qkv, Shard(1)), rep(qw), rep(kw), *heads)  # last dim: replicated
    same_bits(y, OPS.qk_norm(qkv, qw, kw, *heads), "qk_norm Shard(last)")
    # positions shaped like the leading dims ([B, S]: Transformers' position_ids) shard with
    # qkv, dim for dim (sequence-sharded too); [1, S] is broadcast, its dim 0 replicated.
    rope_args = (1e-5, "cast-then-scale", 0.0, hd // 2)
    qkv_bs = rows(gen, (2, 6, (nq + nk + nv) * hd), torch.bfloat16)
    pos_bs = torch.randint(0, 32, (2, 6), generator=gen)
    ref_bs = OPS.qk_norm(qkv_bs, qw, kw, *heads, *rope_args, cos, sin, pos_bs.reshape(-1))
    for pl in (Shard(0), Shard(1)):
        y = OPS.qk_norm(dt(qkv_bs, pl), rep(qw), rep(kw), *heads, *rope_args, rep(cos), rep(sin),
                        dt(pos_bs, pl))
        assert y.placements == (pl,), y.placements
        same_bits(y, ref_bs, f"qk_norm rope positions [B, S] {pl}")
    pos_1s = pos_bs[:1]
    ref_1s = OPS.qk_norm(qkv_bs, qw, kw, *heads, *rope_args, cos, sin,
                         pos_1s.expand(2, 6).reshape(-1))
    y = OPS.qk_norm(dt(qkv_bs, Shard(0)), rep(qw), rep(kw), *heads, *rope_args, rep(cos),
                    rep(sin), rep(pos_1s))
    assert y.placements == (Shard(0),), y.placements
    same_bits(y, ref_1s, "qk_norm rope positions [1, S] broadcast")
    qkv3 = rows(gen, (2, 5, (nq + nk + nv) * hd), torch.float32)
    qw32, kw32 = qw.float(), kw.float()
    dq = rows(gen, qkv3.shape, torch.float32)
    refs = OPS.qk_norm_backward(qkv3, qw32, kw32, dq, *heads)
    outs = OPS.qk_norm_backward(dt(qkv3, Shard(1)), rep(qw32), rep(kw32), dt(dq, Shard(1)),
                                *heads)
    assert [o.placements for o in outs] == [(Shard(1),), (Partial(),), (Partial(),)]
    same_bits(outs[0], refs[0], "qk_norm_backward dqkv")
    parts = [OPS.qk_norm_backward(a.contiguous(), qw32, kw32, b.contiguous(), *heads) for a, b in
             zip(qkv3.chunk(2, 1), dq.chunk(2, 1))]
    for i in (1, 2):
        same_bits(outs[i].to_local(), parts[RANK][i], f"qk_norm_backward weight grad {i}")
        mag = OPS.qk_norm_backward(qkv3.abs(), qw32, kw32, dq.abs(), *heads)[i]
        near_partial_sum(outs[i].full_tensor(), [p[i] for p in parts], refs[i], mag, 40,
                         f"qk_norm_backward weight grad {i}")
    qd = dt(qkv3, Shard(1)).requires_grad_()
    qwd = rep(qw32).requires_grad_()
    OPS.qk_norm(qd, qwd, rep(kw32), *heads).backward(dt(dq, Shard(1)))
    same_bits(qd.grad, refs[0], "qk_norm autograd dqkv")
    assert qwd.grad.placements == (Partial(),)

    # quant ops: per-row scales follow a [T, H] row shard; [B, S, H] sharded on S is
    # replicated; a static scale gives [1] replicated.
    for qdtype in (torch.float8_e4m3fn, torch.int8):
        x2 = rows(gen, (9, 64), torch.bfloat16)
        w2 = gamma(gen, 64, torch.bfloat16)
        q_ref, s_ref = OPS.rms_norm_quant(x2, w2, qdtype)
        q, s = OPS.rms_norm_quant(dt(x2, Shard(0)), rep(w2), qdtype)
        assert q.placements == (Shard(0),) and s.placements == (Shard(0),)
        same_bits(q, q_ref, "rms_norm_quant q")
        same_bits(s, s_ref, "rms_norm_quant scales")
        x3 = rows(gen, (2, 5, 64), torch.bfloat16)
        q_ref, s_ref = OPS.rms_norm_quant(x3, w2, qdtype)
        q, s = OPS.rms_norm_quant(dt(x3, Shard(1)), rep(w2), qdtype)
        assert q.placements == (Replicate(),), q.placements
        same_bits(q, q_ref, "rms_norm_quant [B,S,H] q")
        same_bits(s, s_ref, "rms_norm_quant [B,S,H] scales")
        q_ref, s_ref = OPS.rms_norm_quant(x3, w2, qdtype, 0.05)
        q, s = OPS.rms_norm_quant(dt(x3, Shard(1)), rep(w2), qdtype, 0.05)
        assert q.placements == (Shard(1),) and s.placements == (Replicate(),)
        same_bits(q, q_ref, "rms_norm_quant static q")
        same_bits(s, s_ref, "rms_norm_quant static scales")
        res, delta = rows(gen, (9, 64), torch.bfloat16), rows(gen, (9, 64), torch.bfloat16)
        res_ref = res.clone()
        q_ref, s_ref = OPS.add_rms_norm_quant(res_ref, delta, w2, qdtype)
        r = dt(res, Shard(0))
        q, s = OPS.add_rms_norm_quant(r, dt(delta, Shard(0)), rep(w2), qdtype)
        same_bits(q, q_ref, "add_rms_norm_quant q")
        same_bits(s, s_ref, "add_rms_norm_quant scales")
        same_bits(r, res_ref, "add_rms_norm_quant residual")
        res3 = rows(gen, (2, 5, 64), torch.bfloat16)
        expect_error(lambda: OPS.add_rms_norm_quant(dt(res3, Shard(1)), dt(res3, Shard(1)),
                                                    rep(w2), qdtype),
                     "glmnorm.add_rms_norm_quant", "residual", "Shard(dim=1)", "scales")

    # Mixed DTensor / plain tensor arguments: refused as PyTorch's own ops refuse them.
    xs = dt(rows(gen, (4, 64), torch.float32), Shard(0))
    plain = torch.ones(64)
    expect_error(lambda: torch.mul(xs, plain), "mixed torch.Tensor and DTensor")
    ours = expect_error(lambda: OPS.rms_norm(xs, plain), "mixed torch.Tensor and DTensor")
    log("mixed-argument error (as aten.mul's):", ours.splitlines()[0][:100])
    log("ops: all bit-identical to the single-process results")


# --- tiny GLM-4.5 -----------------------------------------------------------------------

def tiny_model(seed):
    from transformers import Glm4MoeConfig, Glm4MoeForCausalLM
    cfg = Glm4MoeConfig(vocab_size=128, hidden_size=64, intermediate_size=96,
                        moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=16, partial_rotary_factor=0.5,
                        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                        n_group=1, topk_group=1, first_k_dense_replace=1, use_qk_norm=True,
                        max_position_embeddings=64, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = Glm4MoeForCausalLM(cfg).float()
    with torch.no_grad():  # trained-looking norm gains (init is all ones)
        g = torch.Generator().manual_seed(seed + 1)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            if "gate.weight" in name or "e_score_correction_bias" in name:
                p.normal_(0.0, 0.5, generator=g)  # a router that routes
    return model


def tp_plan(model, mesh):
    """torchtitan's decoder plan on a Transformers Glm4Moe: sequence-parallel norms,
    colwise q/k/v and gate/up, rowwise o/down (reduce-scatter back to sequence shards),
    head-sharded q_norm / k_norm; the routed MoE block runs replicated (no expert
    parallelism here)."""
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   PrepareModuleInputOutput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    parallelize_module(model, mesh, {
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    for i, layer in enumerate(model.model.layers):
        plan = {
            "input_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                            desired_input_kwarg_layouts={
                                                "hidden_states": Replicate()}),
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.q_norm": SequenceParallel(sequence_dim=2, use_local_output=True),
            "self_attn.k_norm": SequenceParallel(sequence_dim=2, use_local_output=True),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
            "post_attention_layernorm": SequenceParallel(),
        }
        if i == 0:  # the first layer takes the replicated embeddings as sequence shards
            plan[""] = PrepareModuleInput(input_layouts=(Replicate(),),
                                          desired_input_layouts=(Shard(1),),
                                          use_local_output=True)
        if hasattr(layer.mlp, "gate_proj"):  # dense MLP
            plan.update({
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                          desired_input_layouts=(Replicate(),)),
                "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1)),
            })
        else:  # MoE block: replicated compute, sequence shards in and out
            plan["mlp"] = PrepareModuleInputOutput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                use_local_input=True, output_layouts=(Replicate(),),
                desired_output_layouts=(Shard(1),))
        if "" in plan:
            parallelize_module(layer, mesh, plan.pop(""))
        parallelize_module(layer, mesh, plan)
    return model


def full(t):
    return t.full_tensor() if isinstance(t, DTensor) else t


def step(model, ids, labels):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=labels)
    out.loss.backward()
    grads = {n: full(p.grad).clone() for n, p in model.named_parameters()
             if p.grad is not None}
    return full(out.logits).detach(), full(out.loss).detach(), grads


def rel_diff(a, b):
    """Largest |a - b| over the largest |b| of a group of tensors."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), set(a) ^ set(b)
        num = max(float((a[k] - b[k]).abs().max()) for k in a)
        den = max(float(b[k].abs().max()) for k in a)
    else:
        num, den = float((a - b).abs().max()), float(b.abs().max())
    return num / max(den, 1e-30)


# Where the unpatched model happens to agree exactly (a loss, FSDP2's row-split logits), the
# patched one may still land an ulp away: allow 2 float32 ulps of the largest value.
FLOOR = 2 * torch.finfo(torch.float32).eps


def compare(name, runs):
    """runs: {"unpatched": (single, parallel), "patched": (single, parallel)}; each result
    is (logits, loss, grads). The patched model may differ from its single-process run by
    at most twice what the unpatched model differs by, plus FLOOR (the same matmul
    reorderings; the norms themselves are row-local and exact)."""
    for i, what in enumerate(("logits", "loss", "grads")):
        du = rel_diff(runs["unpatched"][1][i], runs["unpatched"][0][i])
        dp = rel_diff(runs["patched"][1][i], runs["patched"][0][i])
        tol = 2.0 * du + FLOOR
        log(f"{name} {what}: parallel vs single-process, relative max diff: unpatched "
            f"{du:.3e} (tolerance 2x = {tol:.3e}), patched {dp:.3e}")
        assert dp <= tol, f"{name} {what}: patched {dp:.3e} > tolerance {tol:.3e}"
    # And the patched model is the unpatched one (the same bits in the norms' cases).
    pu = rel_diff(runs["patched"][0][0], runs["unpatched"][0][0])
    log(f"{name}: patched vs unpatched single-process logits, relative max diff {pu:.3e}")


def batch(seed, b, s):
    g = torch.Generator().manual_seed(seed + 2)
    ids = torch.randint(0, 128, (b, s), generator=g)
    return ids, ids.clone()


def scenario_tp(seed):
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    base = tiny_model(seed)
    ids, labels = batch(seed, 2, 12)
    runs = {}
    for kind in ("unpatched", "patched"):
        single = copy.deepcopy(base)
        if kind == "patched":
            gt.patch_glm4_moe(single)
        par = tp_plan(copy.deepcopy(single), mesh)
        if kind == "patched":
            norms = [m for m in par.modules() if isinstance(m, gt.RMSNorm)]
            assert len(norms) == 2 * 4 + 1, len(norms)
            assert isinstance(par.model.layers[0].input_layernorm.weight, DTensor)
        runs[kind] = (step(single, ids, labels), step(par, ids, labels))
    compare("TP=2+SP", runs)


def scenario_fsdp(seed):
    from torch.distributed.fsdp import fully_shard
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    base = tiny_model(seed)
    ids, labels = batch(seed, 2 * world, 12)
    mine = slice(RANK * 2, RANK * 2 + 2)
    runs = {}
    for kind in ("unpatched", "patched"):
        single = copy.deepcopy(base)
        if kind == "patched":
            gt.patch_glm4_moe(single)
        par = copy.deepcopy(single)
        for layer in par.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(par, mesh=mesh)
        ref = step(single, ids, labels)
        logits, loss, grads = step(par, ids[mine], labels[mine])
        # Gather the data-parallel logits; the loss is the mean of the ranks' means.
        gathered = [torch.empty_like(logits) for _ in range(world)]
        dist.all_gather(gathered, logits)
        dist.all_reduce(loss)
        got = (torch.cat(gathered), loss / world, grads)
        # A training step (SGD), then the next forward's loss.
        for m in (single, par):
            torch.optim.SGD(m.parameters(), lr=0.5).step()
        with torch.no_grad():
            l1 = single(input_ids=ids, labels=labels).loss
            l2 = par(input_ids=ids[mine], labels=labels[mine]).loss
            dist.all_reduce(l2)
        runs[kind] = (ref + (l1,), got + (l2 / world,))
        log(f"FSDP2 {kind}: loss {float(ref[1]):.6f} -> after one SGD step {float(l1):.6f}")
        assert float(l1) < float(ref[1]), "the training step did not lower the loss"
    compare("FSDP2", {k: (v[0][:3], v[1][:3]) for k, v in runs.items()})
    du = rel_diff(runs["unpatched"][1][3], runs["unpatched"][0][3])
    dp = rel_diff(runs["patched"][1][3], runs["patched"][0][3])
    log(f"FSDP2 loss after the step: unpatched {du:.3e}, patched {dp:.3e}")
    assert dp <= 2.0 * du + FLOOR


def scenario_bench(seed):
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    base = tiny_model(seed)
    ids, labels = batch(seed, 2, 12)
    models = {"unpatched": tp_plan(copy.deepcopy(base), mesh),
              "patched": tp_plan(gt.patch_glm4_moe(copy.deepcopy(base)), mesh)}
    times = {k: [] for k in models}
    for _ in range(int(os.environ.get("GLMNORM_BENCH_REPS", "30"))):
        for k, m in models.items():  # interleaved: drift hits both alike
            dist.barrier()
            t0 = time.perf_counter()
            step(m, ids, labels)
            times[k].append(time.perf_counter() - t0)
    for k, t in times.items():
        t = sorted(t[3:])
        n = len(t)
        log(f"bench {k}: median {1e3 * t[n // 2]:.1f} ms per TP=2 SP step (fwd+bwd, batch "
            f"2 x 12 tokens), quartiles {1e3 * t[n // 4]:.1f}-{1e3 * t[3 * n // 4]:.1f} ms, "
            f"min {1e3 * t[0]:.1f} ms, {n} steps")


def scenario_fail(seed):
    """For the harness's own test: rank 1 fails while rank 0 waits for it."""
    if RANK == 1:
        raise RuntimeError("rank 1 fails on purpose")
    dist.barrier()


def scenario_hang(seed):
    """For the harness's own test: a rank that never finishes."""
    time.sleep(600)


def main():
    scenario, seed = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    try:
        log(f"scenario {scenario}, seed {seed} (replay: GLMNORM_TEST_SEED={seed})")
        globals()["scenario_" + scenario](seed)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
