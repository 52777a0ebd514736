"""glmnorm.torch: the torch.ops.glmnorm ops (opcheck, torch.compile, autograd refusals), the
RMSNorm module and patch_glm4_moe on a tiny random Glm4MoeForCausalLM."""

import copy
import os
import sys

import pytest
import torch
from transformers import Glm4MoeConfig, Glm4MoeForCausalLM
from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRMSNorm

import glmnorm
import glmnorm.torch as gt
from conftest import REPO, SEED, assert_conforms, bits, gammas, rows

OPS = torch.ops.glmnorm


def _opcheck(op, args, kwargs=None):
    # test_schema, test_autograd_registration, test_faketensor, test_aot_dispatch_dynamic
    result = torch.library.opcheck(op, args, kwargs or {})
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_opcheck_norms(gen, dtype):
    x = rows(gen, (3, 5, 256), dtype)
    w = gammas(gen, 256, dtype)
    _opcheck(OPS.rms_norm.default, (x, w, 1e-5, "cast-then-scale", 0.0))
    _opcheck(OPS.rms_norm.default, (x, w, 1e-5, "single", 1.0))
    _opcheck(OPS.rms_norm.default, (x, gammas(gen, 256, torch.float32)))
    _opcheck(OPS.add_rms_norm.default, (rows(gen, (4, 256), dtype), rows(gen, (4, 256), dtype),
                                        w, 1e-5, "cast-then-scale", 0.0, True))
    _opcheck(OPS.add_rms_norm.default, (rows(gen, (4, 256), torch.float32),
                                        rows(gen, (4, 256), dtype), w, 1e-5, "single", 0.0,
                                        False))


def test_opcheck_qk_norm(gen):
    nq, nk, nv, hd, t = 4, 2, 2, 32, 5
    qkv = rows(gen, (t, (nq + nk + nv) * hd), torch.bfloat16)
    qw, kw = gammas(gen, hd, torch.bfloat16), gammas(gen, hd, torch.bfloat16)
    ang = torch.rand((9, hd // 4), generator=gen)
    rope = (hd // 2, torch.cos(ang), torch.sin(ang), torch.randint(0, 9, (t,), generator=gen))
    for op in (OPS.qk_norm_.default, OPS.qk_norm.default):
        _opcheck(op, (qkv.clone(), qw, kw, nq, nk, nv, hd))
        _opcheck(op, (qkv.clone(), qw, kw, nq, nk, nv, hd, 1e-5, "cast-then-scale", 0.0) + rope)


@pytest.mark.parametrize("qdtype", [torch.float8_e4m3fn, torch.int8], ids=["e4m3", "i8"])
def test_opcheck_quant(gen, qdtype):
    x = rows(gen, (4, 128), torch.bfloat16)
    w = gammas(gen, 128, torch.bfloat16)
    _opcheck(OPS.rms_norm_quant.default, (x, w, qdtype))
    _opcheck(OPS.rms_norm_quant.default, (x, w, qdtype, 0.02))
    _opcheck(OPS.add_rms_norm_quant.default, (rows(gen, (4, 128), torch.bfloat16),
                                              rows(gen, (4, 128), torch.bfloat16), w, qdtype))
    _opcheck(OPS.add_rms_norm_quant.default, (rows(gen, (4, 128), torch.bfloat16),
                                              rows(gen, (4, 128), torch.bfloat16), w, qdtype,
                                              0.5))


def test_ops_equal_the_package_functions(gen):
    x = rows(gen, (6, 512), torch.bfloat16)
    w = gammas(gen, 512, torch.bfloat16)
    assert torch.equal(bits(OPS.rms_norm(x, w)), bits(glmnorm.rms_norm(x, w)))
    r1, r2 = rows(gen, (6, 512), torch.bfloat16), None
    r2 = r1.clone()
    d = rows(gen, (6, 512), torch.bfloat16)
    y1 = OPS.add_rms_norm(r1, d, w)
    y2 = glmnorm.add_rms_norm(r2, d, w)
    assert torch.equal(bits(y1), bits(y2)) and torch.equal(bits(r1), bits(r2))
    q1, s1 = OPS.rms_norm_quant(x, w, torch.float8_e4m3fn)
    q2, s2 = glmnorm.rms_norm_quant(x, w, dtype="f8e4m3")
    assert torch.equal(bits(q1), bits(q2)) and torch.equal(s1, s2)


def test_op_errors_are_value_and_type_errors(gen):
    x = rows(gen, (2, 64), torch.bfloat16)
    w = gammas(gen, 64, torch.bfloat16)
    with pytest.raises(ValueError, match="weight length must equal the width 64, got 32"):
        OPS.rms_norm(x, w[:32])
    with pytest.raises(ValueError, match="rounding must be"):
        OPS.rms_norm(x, w, 1e-5, "twice")
    with pytest.raises(TypeError, match="unsupported dtype"):
        OPS.rms_norm(x.to(torch.int32), w)
    with pytest.raises(TypeError, match="int8 or torch.float8_e4m3fn"):
        OPS.rms_norm_quant(x, w, torch.float16)


def test_compiled_ops_keep_their_bits_without_graph_breaks(gen):
    """torch.compile(fullgraph=True) (inductor) of a function mixing aten ops and every
    glmnorm op: no graph break, and each glmnorm op gives the same bits as in eager mode
    on the tensor it received (inductor computes the aten ops around it its own way)."""
    nq, nk, nv, hd, t = 4, 2, 2, 32, 6
    width = (nq + nk + nv) * hd

    def block(x, delta, qkv, w, qw, kw):
        h = x * 0.5 + 1.0  # re-rounded by inductor
        y = OPS.rms_norm(h, w)
        r = h.clone()
        y2 = OPS.add_rms_norm(r, delta, w)
        q8, s8 = OPS.rms_norm_quant(h, w, torch.float8_e4m3fn)
        qkv2 = qkv * 1.0
        OPS.qk_norm_(qkv2, qw, kw, nq, nk, nv, hd)
        return h, y, r, y2, q8, s8, qkv2

    x = rows(gen, (t, 512), torch.bfloat16)
    delta = rows(gen, (t, 512), torch.bfloat16)
    qkv = rows(gen, (t, width), torch.bfloat16)
    w = gammas(gen, 512, torch.bfloat16)
    qw, kw = gammas(gen, hd, torch.bfloat16), gammas(gen, hd, torch.bfloat16)
    explained = torch._dynamo.explain(block)(x, delta, qkv, w, qw, kw)
    assert explained.graph_break_count == 0
    code = "\n".join(g.code for g in explained.graphs)
    for op in ("rms_norm", "add_rms_norm", "rms_norm_quant", "qk_norm_"):
        assert f"glmnorm.{op}" in code, f"{op} not in the captured graph"
    compiled = torch.compile(block, fullgraph=True)
    with torch.inference_mode():
        h, y, r, y2, q8, s8, qkv2 = compiled(x, delta, qkv, w, qw, kw)
        assert torch.equal(bits(y), bits(OPS.rms_norm(h, w)))
        r_eager = h.clone()
        assert torch.equal(bits(y2), bits(OPS.add_rms_norm(r_eager, delta, w)))
        assert torch.equal(bits(r), bits(r_eager))
        q_eager, s_eager = OPS.rms_norm_quant(h, w, torch.float8_e4m3fn)
        assert torch.equal(bits(q8), bits(q_eager)) and torch.equal(s8, s_eager)
        assert torch.equal(bits(qkv2), bits(OPS.qk_norm(qkv, qw, kw, nq, nk, nv, hd)))


def test_gradients_are_refused_clearly(gen):
    """The ops without a backward (in-place, quant) refuse inputs that require grad in grad
    mode, at the call (not a warning and a silently missing gradient); rms_norm and the
    RMSNorm module are differentiable (test_autograd.py)."""
    x = rows(gen, (2, 64), torch.float32).requires_grad_()
    w = gammas(gen, 64, torch.float32)
    no_backward = "torch.ops.glmnorm.{} has no backward"
    with pytest.raises(RuntimeError, match=no_backward.format("add_rms_norm")):
        OPS.add_rms_norm(x.detach().clone(), x, w)
    with pytest.raises(RuntimeError, match=no_backward.format("qk_norm_")):
        OPS.qk_norm_(torch.zeros(2, 64), w[:16].clone().requires_grad_(), w[:16], 2, 1, 1, 16)
    with pytest.raises(RuntimeError, match=no_backward.format("rms_norm_quant")):
        OPS.rms_norm_quant(x, w, torch.int8)
    m = gt.RMSNorm(64)  # its weight requires grad, as a Parameter
    assert m(x.detach()).requires_grad
    with pytest.raises(RuntimeError, match="requires grad"):
        glmnorm.rms_norm(x, w)  # the plain function would silently drop the graph
    with torch.no_grad():  # forward-only use works
        assert m(x).shape == x.shape
        assert OPS.add_rms_norm(x.detach().clone(), x, w).shape == x.shape
        assert glmnorm.rms_norm(x, w).shape == x.shape


def test_rms_norm_module_loads_a_glm4moe_state_dict(gen):
    ref = Glm4MoeRMSNorm(512, eps=1e-5)
    with torch.no_grad():
        ref.weight.copy_(gammas(gen, 512, torch.float32))
    ref = ref.to(torch.bfloat16)
    mine = gt.RMSNorm(512, eps=1e-5, dtype=torch.bfloat16)
    assert mine.load_state_dict(ref.state_dict()) is not None
    assert list(mine.state_dict()) == list(ref.state_dict())
    x = rows(gen, (2, 9, 512), torch.bfloat16)
    with torch.no_grad():
        assert_conforms(mine(x), ref(x), x, ref.weight)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_rms_norm_module_equals_the_op_with_every_argument_passed(gen, dtype):
    """RMSNorm.forward leaves the schema's defaults out of its op call (a per-call cost): for
    every option it must give the op's bits with all arguments passed."""
    x = rows(gen, (3, 256), dtype)
    w = gammas(gen, 256, dtype)
    for eps in (1e-5, 1e-6, 0.0):
        for rounding in ("cast-then-scale", "single"):
            for offset in (0.0, -0.0, 1.0):
                m = gt.RMSNorm(256, eps=eps, rounding=rounding, weight_offset=offset,
                               dtype=dtype)
                with torch.no_grad():
                    m.weight.copy_(w)
                    got = m(x)
                want = OPS.rms_norm.default(x, w, eps, rounding, offset)
                assert got.dtype == want.dtype
                assert torch.equal(bits(got), bits(want)), (eps, rounding, offset)
    with pytest.raises(TypeError, match="glmnorm.rms_norm: x must be a torch.Tensor, got list"):
        gt.RMSNorm(256)([1.0] * 256)  # torch's own argument error, explained as the wrapper does
    with pytest.raises(TypeError, match="glmnorm.rms_norm: x must be a torch.Tensor, got None"):
        gt.RMSNorm(256)(None)
    with pytest.raises(TypeError, match="rms_norm: weight must be a torch.Tensor, got None"):
        gt.rms_norm(x, None)


def test_rms_norm_module_weight_outside_parameters(gen):
    """Tools that move the weight out of _parameters (parametrizations, pruning, a buffer):
    forward still finds it, as self.weight does."""
    import torch.nn.utils.parametrize as parametrize
    x = rows(gen, (3, 64), torch.float32)
    w = gammas(gen, 64, torch.float32)
    want = OPS.rms_norm.default(x, 2 * w, 1e-5, "cast-then-scale", 0.0)

    class Double(torch.nn.Module):
        def forward(self, t):
            return 2 * t

    m = gt.RMSNorm(64)
    with torch.no_grad():
        m.weight.copy_(w)
    parametrize.register_parametrization(m, "weight", Double())
    with torch.no_grad():
        assert torch.equal(bits(m(x)), bits(want))
    b = gt.RMSNorm(64)
    del b.weight
    b.register_buffer("weight", 2 * w)
    assert torch.equal(bits(b(x)), bits(want))


# --- the tiny Glm4MoeForCausalLM -------------------------------------------------------

def _tiny_model(dtype):
    """A tiny random Glm4MoeForCausalLM as scripts/make_tiny_checkpoint.py builds it:
    Transformers' own config and class, random gains on every norm."""
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    try:
        from make_tiny_checkpoint import COMMON, MODELS
    finally:
        sys.path.pop(0)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED + 1)
    model = Glm4MoeForCausalLM(Glm4MoeConfig(**COMMON, **MODELS["tiny_glm45"])).eval()
    for mod in model.modules():
        if isinstance(mod, Glm4MoeRMSNorm):
            with torch.no_grad():
                mod.weight.copy_(1.0 + 0.6 * torch.randn(mod.weight.shape, generator=gen))
    return model.to(dtype), torch.randint(0, 128, (2, 11), generator=gen)


def _norm_records(model, ids):
    """Runs the unpatched model and returns (module, input, output) of every norm call."""
    records = []
    hooks = [m.register_forward_hook(lambda m, i, o: records.append((m, i[0], o)))
             for m in model.modules() if isinstance(m, Glm4MoeRMSNorm)]
    try:
        logits = model(ids).logits
    finally:
        for h in hooks:
            h.remove()
    return logits, records


@pytest.fixture(scope="module")
def tiny_bf16():
    model, ids = _tiny_model(torch.bfloat16)
    patched = gt.patch_glm4_moe(copy.deepcopy(model))
    return model, patched, ids


def test_patch_replaces_every_norm_and_keeps_the_state_dict(tiny_bf16):
    model, patched, _ = tiny_bf16
    n_ref = sum(isinstance(m, Glm4MoeRMSNorm) for m in model.modules())
    assert n_ref == 3 * (2 + 2) + 1  # 3 layers: input/post-attention + q/k norms; model.norm
    assert not any(isinstance(m, Glm4MoeRMSNorm) for m in patched.modules())
    assert sum(isinstance(m, gt.RMSNorm) for m in patched.modules()) == n_ref
    a, b = model.state_dict(), patched.state_dict()
    assert list(a) == list(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(TypeError, match="holds no Glm4MoeRMSNorm"):
        gt.patch_glm4_moe(torch.nn.Linear(2, 2))


def test_patched_bf16_logits_are_bit_identical(tiny_bf16):
    """Eager bf16: the patched model's logits have the unpatched model's bits, whenever
    every norm call of the run agrees bit for bit with Transformers (checked on the very
    inputs each norm received; see MIDPOINT_TOLERANCE for the rare midpoint case)."""
    model, patched, ids = tiny_bf16
    with torch.inference_mode():
        ref_logits, records = _norm_records(model, ids)
        mismatches = sum(assert_conforms(OPS.rms_norm(x, m.weight, m.variance_epsilon), y, x,
                                         m.weight, m.variance_epsilon) for m, x, y in records)
        logits = patched(ids).logits
    assert len(records) == 3 * 4 + 1
    if mismatches == 0:
        assert torch.equal(bits(logits), bits(ref_logits))
    else:  # a documented 1-ulp midpoint in some norm: it propagates, so only close.
        print(f"seed {SEED}: {mismatches} norm outputs at a midpoint; logits compared "
              "within tolerance")
        torch.testing.assert_close(logits, ref_logits, rtol=0.05, atol=0.05)


def test_patched_f32_model_within_the_ulp_bound():
    model, ids = _tiny_model(torch.float32)
    patched = gt.patch_glm4_moe(copy.deepcopy(model))
    with torch.inference_mode():
        ref_logits, records = _norm_records(model, ids)
        for m, x, y in records:
            assert_conforms(OPS.rms_norm(x, m.weight, m.variance_epsilon), y, x, m.weight,
                            m.variance_epsilon)
        logits = patched(ids).logits
    # Few-ulp differences in the norms, carried through 3 layers and the head.
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)


def test_patched_model_compiles_fullgraph(tiny_bf16):
    """torch.compile(fullgraph=True) of the patched model: no graph break, the glmnorm ops
    are in the graph, logits close to eager (inductor re-rounds the bf16 ops around the
    norms, so not bitwise; the ops' own bits are checked by
    test_compiled_ops_keep_their_bits_without_graph_breaks)."""
    _, patched, ids = tiny_bf16
    with torch.inference_mode():
        explained = torch._dynamo.explain(patched)(ids)
        assert explained.graph_break_count == 0
        assert "glmnorm.rms_norm" in "\n".join(g.code for g in explained.graphs)
        eager = patched(ids).logits
        compiled = torch.compile(patched, fullgraph=True)(ids).logits
    torch.testing.assert_close(compiled.float(), eager.float(), rtol=0.1, atol=0.1)


def test_torch_ops_from_several_threads(gen):
    """4 Python threads calling the torch op at once give the serial results."""
    import threading
    xs = [rows(gen, (32, 5120), torch.bfloat16) for _ in range(4)]
    w = gammas(gen, 5120, torch.bfloat16)
    serial = [OPS.rms_norm(x, w) for x in xs]
    got = [None] * 4
    barrier = threading.Barrier(4)

    def work(i):
        barrier.wait()
        with torch.inference_mode():
            for _ in range(20):
                got[i] = OPS.rms_norm(xs[i], w)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(bits(a), bits(b)) for a, b in zip(got, serial))


def test_a_tensor_on_another_device_is_refused_not_read():
    # A weight left on meta (a model built on meta, never materialised) with a CPU input
    # used to reach the shape-only Meta kernel and come back as uninitialised memory.
    x = torch.randn(4, 64)
    meta_w = torch.ones(64, device="meta")
    with pytest.raises(ValueError, match=r"glmnorm.rms_norm: weight is on meta but x is on cpu"):
        gt.rms_norm(x, meta_w)
    with pytest.raises(ValueError, match=r"glmnorm.rms_norm: weight is on meta"):
        gt.RMSNorm(64, device="meta")(x)
    residual = x.clone()
    with pytest.raises(ValueError, match=r"glmnorm.add_rms_norm: weight is on meta"):
        gt.add_rms_norm(residual, torch.randn(4, 64), meta_w)
    assert torch.equal(residual, x)  # refused before anything was written
    with pytest.raises(ValueError, match=r"glmnorm.rms_norm_quant: weight is on meta"):
        gt.rms_norm_quant(x, meta_w)
    with pytest.raises(ValueError, match=r"glmnorm.rms_norm: weight is on cpu but x is on meta"):
        gt.rms_norm(torch.empty(4, 64, device="meta"), torch.ones(64))
    # All on meta stays what it was: shape inference.
    y = gt.rms_norm(torch.empty(4, 64, device="meta"), meta_w)
    assert y.device.type == "meta" and y.shape == (4, 64)
