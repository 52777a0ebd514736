"""The backward of QK-norm with GLM's partial RoPE (issue 17 §2) through torch autograd.

``torch.ops.glmnorm.qk_norm`` with rotary_dim > 0 is differentiable; its gradients are
compared, against a float64 autograd of the same math, with Transformers' own autograd
through ``Glm4MoeRMSNorm`` (q_norm / k_norm) and ``apply_rotary_pos_emb`` (partial rotary,
rotate-half), at GLM-4.5's heads (96 q, 8 k, 8 v of 128, rotary_dim 64) and odd ones.
Fresh inputs each run (seed printed; replay with GLMNORM_TEST_SEED).
"""

import math

import pytest
import torch
from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRMSNorm, apply_rotary_pos_emb

import glmnorm.torch  # noqa: F401 - registers torch.ops.glmnorm
from conftest import SEED

EPS = 1e-5


def _tables(positions, rotary_dim, dtype=torch.float32):
    inv = 1.0 / (10000.0 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    freqs = torch.outer(torch.arange(positions, dtype=torch.float64), inv)
    return freqs.cos().to(dtype), freqs.sin().to(dtype)  # [positions, rotary_dim / 2]


class _Float64RMSNorm(torch.nn.Module):
    """Glm4MoeRMSNorm's formula in float64 throughout (no float32 step, no rounding)."""

    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.to(torch.float64).clone())

    def forward(self, x):
        x = x.to(torch.float64)
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def _reference(qkv, qw, kw, nq, nk, hd, cos, sin, dtype):
    """Transformers' math: q_norm / k_norm per head, then apply_rotary_pos_emb on the first
    rotary_dim dims of each head, in `dtype` (torch.float64: the exact reference)."""
    t = qkv.shape[0]
    x = qkv.to(dtype)
    q = x[:, :nq * hd].reshape(1, t, nq, hd).transpose(1, 2)
    k = x[:, nq * hd:(nq + nk) * hd].reshape(1, t, nk, hd).transpose(1, 2)
    if dtype == torch.float64:
        # Glm4MoeRMSNorm computes in float32 whatever the input: the exact reference is the
        # same formula written out in float64.
        q_norm, k_norm = _Float64RMSNorm(qw), _Float64RMSNorm(kw)
    else:
        q_norm, k_norm = Glm4MoeRMSNorm(hd, eps=EPS), Glm4MoeRMSNorm(hd, eps=EPS)
        q_norm.weight = torch.nn.Parameter(qw.to(dtype).clone())
        k_norm.weight = torch.nn.Parameter(kw.to(dtype).clone())
    q, k = q_norm(q), k_norm(k)
    rot = cos.shape[-1] * 2
    c = torch.cat([cos, cos], -1)[None].to(q.dtype)  # [1, tokens, rotary_dim]
    s = torch.cat([sin, sin], -1)[None].to(q.dtype)
    q_rot, k_rot = apply_rotary_pos_emb(q[..., :rot], k[..., :rot], c, s)
    q = torch.cat([q_rot, q[..., rot:]], -1)
    k = torch.cat([k_rot, k[..., rot:]], -1)
    out = torch.cat([q.transpose(1, 2).reshape(t, nq * hd), k.transpose(1, 2).reshape(t, nk * hd),
                     x[:, (nq + nk) * hd:]], -1)
    return out, q_norm.weight, k_norm.weight


def _grads_reference(qkv, qw, kw, dout, nq, nk, hd, cos, sin, dtype):
    x = qkv.to(dtype).detach().requires_grad_()
    out, qwp, kwp = _reference(x, qw, kw, nq, nk, hd, cos, sin, dtype)
    out.backward(dout.to(out.dtype))
    return x.grad, qwp.grad, kwp.grad


def _grads_glmnorm(qkv, qw, kw, dout, nq, nk, nv, hd, cos, sin, positions=None):
    x = qkv.detach().clone().requires_grad_()
    qwp, kwp = qw.clone().requires_grad_(), kw.clone().requires_grad_()
    out = torch.ops.glmnorm.qk_norm(x, qwp, kwp, nq, nk, nv, hd, EPS, "cast-then-scale", 0.0,
                                    cos.shape[-1] * 2, cos, sin, positions)
    out.backward(dout)
    return x.grad, qwp.grad, kwp.grad


def _err(g, ref):
    e = (g.double() - ref).abs()
    return float(e.mean()), float(e.max())


CASES = [  # (tokens, nq, nk, nv, head_dim, rotary_dim)
    (1, 96, 8, 8, 128, 64),
    (37, 96, 8, 8, 128, 64),
    (256, 96, 8, 8, 128, 64),
    (9, 5, 3, 2, 48, 24),
    (3, 2, 1, 1, 130, 66),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_rope_backward_at_least_as_accurate_as_transformers(gen, dtype):
    """Per gradient (dqkv, dq_weight, dk_weight), over the cases: the geometric mean of
    glmnorm's mean error over Transformers' (measured over 22 seeds: dqkv 0.92-0.99,
    weight gradients 0.81-1.02) is at most 1.05, and no case is more than 1.6x worse on the
    mean or 3x on the max. Both sides are float32 sums in different orders, so one case is
    a draw: with 3 rows of one k head a weight gradient column is a sum of 3 terms and either
    side may be ahead (measured up to 2.2x on the max, 1.9x on the mean): such columns (fewer
    than 8 terms) are checked against float64 alone (2 epsilons of the largest value), not in
    the geometric mean. So: as accurate as Transformers on average, better on dqkv; NOT better
    on every run for the weight gradients."""
    print(f"seed {SEED}")
    log_ratio = {"dqkv": [], "dq_weight": [], "dk_weight": []}
    for case in CASES:
        t, nq, nk, nv, hd, rot = case
        qkv = torch.randn(t, (nq + nk + nv) * hd, generator=gen).to(dtype)
        qw = (1.0 + 0.3 * torch.randn(hd, generator=gen)).to(dtype)
        kw = (1.0 + 0.3 * torch.randn(hd, generator=gen)).to(dtype)
        dout = torch.randn(qkv.shape, generator=gen).to(dtype)
        cos, sin = _tables(t, rot)
        ref = _grads_reference(qkv, qw, kw, dout, nq, nk, hd, cos, sin, torch.float64)
        hf = _grads_reference(qkv, qw, kw, dout, nq, nk, hd, cos, sin, dtype)
        gl = _grads_glmnorm(qkv, qw, kw, dout, nq, nk, nv, hd, cos, sin)
        for name, g, h, r in zip(log_ratio, gl, hf, ref):
            assert g.dtype == h.dtype == dtype, name
            mean_g, max_g = _err(g, r)
            mean_h, max_h = _err(h, r)
            print(f"{dtype} {case} {name}: glmnorm mean {mean_g:.3e} max {max_g:.3e}; "
                  f"transformers mean {mean_h:.3e} max {max_h:.3e}")
            tiny = float(r.abs().max()) * 2.0**-30  # both exact (e.g. a 1-token bf16 case)
            heads = {"dq_weight": nq, "dk_weight": nk}.get(name)
            if heads is not None and t * heads < 8:
                # A column of this weight gradient sums fewer than 8 terms: which float32
                # order lands closer is a draw (seed 1032: glmnorm's mean error 1.9x
                # Transformers' at 3 rows of one k head). Checked against float64 instead:
                # within 2 units of the dtype's epsilon of the largest value.
                bound = 2 * torch.finfo(dtype).eps * float(r.abs().max())
                assert max_g <= bound + tiny, (case, name)
                continue  # and left out of the geometric mean below
            assert mean_g <= 1.6 * mean_h + tiny and max_g <= 3.0 * max_h + tiny, (case, name)
            log_ratio[name].append(math.log((mean_g + tiny) / (mean_h + tiny)))
        # v's gradient passes through untouched.
        v = slice((nq + nk) * hd, None)
        assert torch.equal(gl[0][:, v], dout[:, v]), case
    for name, logs in log_ratio.items():
        geo = math.exp(sum(logs) / len(logs))
        print(f"{dtype} {name}: glmnorm / transformers mean error, geometric mean {geo:.3f}")
        assert geo <= 1.05, name


def test_rope_backward_with_positions_and_compile(gen):
    """Positions pick the table rows (a decode step at position 17 of a 32-row table); the
    compiled graph (fullgraph) gives the eager gradients' bits."""
    t, nq, nk, nv, hd, rot = 4, 4, 2, 2, 128, 64
    qkv = torch.randn(t, (nq + nk + nv) * hd, generator=gen).bfloat16()
    qw = (1.0 + 0.3 * torch.randn(hd, generator=gen)).bfloat16()
    kw = (1.0 + 0.3 * torch.randn(hd, generator=gen)).bfloat16()
    dout = torch.randn(qkv.shape, generator=gen).bfloat16()
    cos, sin = _tables(32, rot)
    positions = torch.tensor([17, 3, 30, 0])
    eager = _grads_glmnorm(qkv, qw, kw, dout, nq, nk, nv, hd, cos, sin, positions)
    want = _grads_glmnorm(qkv, qw, kw, dout, nq, nk, nv, hd, cos[positions], sin[positions])
    for a, b in zip(eager, want):
        assert torch.equal(a, b)

    def step(x, qwp, kwp):
        out = torch.ops.glmnorm.qk_norm(x, qwp, kwp, nq, nk, nv, hd, EPS, "cast-then-scale",
                                        0.0, rot, cos, sin, positions)
        return (out.float() * dout.float()).sum()

    x = qkv.clone().requires_grad_()
    qwp, kwp = qw.clone().requires_grad_(), kw.clone().requires_grad_()
    torch.compile(step, fullgraph=True, backend="aot_eager")(x, qwp, kwp).backward()
    x2 = qkv.clone().requires_grad_()
    qw2, kw2 = qw.clone().requires_grad_(), kw.clone().requires_grad_()
    step(x2, qw2, kw2).backward()
    assert torch.equal(x.grad, x2.grad) and torch.equal(qwp.grad, qw2.grad)
    assert torch.equal(kwp.grad, kw2.grad)


def test_rope_tables_requiring_grad_and_in_place_are_refused():
    qkv = torch.randn(2, 4 * 8, requires_grad=True)
    w = torch.ones(8)
    cos, sin = _tables(2, 4)
    with pytest.raises(RuntimeError, match="cos / sin require grad"):
        torch.ops.glmnorm.qk_norm(qkv, w, w, 2, 1, 1, 8, EPS, "cast-then-scale", 0.0, 4,
                                  cos.requires_grad_(), sin, None)
    with pytest.raises(RuntimeError, match="has no backward"):
        torch.ops.glmnorm.qk_norm_(qkv, w, w, 2, 1, 1, 8, EPS, "cast-then-scale", 0.0, 4,
                                   cos.detach(), sin, None)


def test_gradcheck_float64_reference_agrees_with_glmnorm_f32():
    """gradcheck of the float64 reference (the oracle itself), and glmnorm's f32 gradients
    within float32 rounding of it on a small case."""
    gen = torch.Generator().manual_seed(SEED)
    t, nq, nk, nv, hd, rot = 3, 2, 1, 1, 8, 4
    qkv = torch.randn(t, (nq + nk + nv) * hd, generator=gen, dtype=torch.float64)
    qw = 1.0 + 0.3 * torch.randn(hd, generator=gen, dtype=torch.float64)
    kw = 1.0 + 0.3 * torch.randn(hd, generator=gen, dtype=torch.float64)
    cos, sin = _tables(t, rot, torch.float64)

    def f(x):
        return _reference(x, qw, kw, nq, nk, hd, cos, sin, torch.float64)[0]

    assert torch.autograd.gradcheck(f, (qkv.clone().requires_grad_(),))
    dout = torch.randn(qkv.shape, generator=gen, dtype=torch.float64)
    ref = _grads_reference(qkv, qw, kw, dout, nq, nk, hd, cos, sin, torch.float64)
    gl = _grads_glmnorm(qkv.float(), qw.float(), kw.float(), dout.float(), nq, nk, nv, hd,
                        cos.float(), sin.float())
    for g, r in zip(gl, ref):
        torch.testing.assert_close(g.double(), r, rtol=1e-5, atol=1e-5)


def test_bad_arguments_are_refused_where_they_are_given():
    """Found by a newcomer's check: the backward op converted or broadcast a wrong dqkv
    (silent garbage), the functional op accepted a qkv whose last dim is strided and failed
    only at .backward(), the package's backward blamed `out` for a bad dqkv and allocated
    head_dim floats before checking it, and the torch wrappers let a non-tensor table
    through as torch's schema error. Each is now the library's error, naming the argument
    the user gave, at the call that got it."""
    nq, nk, nv, hd, rot, t = 4, 2, 2, 16, 8, 5
    width = (nq + nk + nv) * hd
    qkv = torch.randn(t, width).bfloat16()
    w = torch.ones(hd, dtype=torch.bfloat16)
    cos, sin = _tables(16, rot)
    pos = torch.arange(t)

    def bw(d):
        return torch.ops.glmnorm.qk_norm_backward(qkv, w, w, d, nq, nk, nv, hd, EPS,
                                                  "cast-then-scale", 0.0, rot, cos, sin, pos)

    good = bw(qkv.clone())
    assert good[0].dtype == torch.bfloat16
    # v's gradient passes through.
    assert torch.equal(good[0][:, (nq + nk) * hd:], qkv[:, (nq + nk) * hd:])
    with pytest.raises(TypeError, match=r"^glmnorm.qk_norm_backward: dqkv"):
        bw(torch.randn(t, width))  # f32, was converted to bf16
    with pytest.raises(TypeError, match=r"^glmnorm.qk_norm_backward: .*dqkv"):
        bw(qkv.int())
    with pytest.raises(ValueError, match=r"^glmnorm.qk_norm_backward: .*dqkv"):
        bw(qkv[:1].clone())  # one row, was broadcast
    with pytest.raises(ValueError, match=r"^glmnorm.qk_norm_backward: .*dqkv"):
        bw(qkv[:, :-hd].contiguous())

    strided = torch.randn(width, t).t().requires_grad_()
    wf = torch.ones(hd)
    with pytest.raises(ValueError, match=r"^glmnorm.qk_norm: qkv.*stride"):
        torch.ops.glmnorm.qk_norm(strided, wf, wf, nq, nk, nv, hd, EPS, "cast-then-scale",
                                  0.0, rot, cos, sin, pos)

    def pkg(d, **kw):
        args = dict(num_q_heads=nq, num_k_heads=nk, num_v_heads=nv, head_dim=hd,
                    rotary_dim=rot, cos=cos, sin=sin, positions=pos)
        args.update(kw)
        return glmnorm.qk_norm_backward(qkv, w, w, d, **args)

    with pytest.raises(TypeError, match=r"^glmnorm.qk_norm_backward: dqkv"):
        pkg(qkv.float())
    with pytest.raises(ValueError, match=r"^glmnorm.qk_norm_backward: .*head_dim must be >= 1"):
        pkg(qkv, head_dim=-1)
    with pytest.raises(ValueError, match=r"^glmnorm.qk_norm_backward: head_dim"):
        pkg(qkv, head_dim=2**40)
    with pytest.raises(TypeError, match=r"^glmnorm.qk_norm_backward: head_dim"):
        pkg(qkv, head_dim=16.0)
    # out=None gives the full gradient, bit for bit the op's.
    full = pkg(qkv.clone())
    for a, b in zip(full, good):
        assert torch.equal(a, b)

    import glmnorm.torch as gt
    with pytest.raises(TypeError, match=r"^glmnorm.qk_norm: positions must be a torch.Tensor "
                                        r"or None, got list"):
        gt.qk_norm(qkv, w, w, nq, nk, nv, hd, rotary_dim=rot, cos=cos, sin=sin,
                   positions=[0, 1, 2, 3, 4])
