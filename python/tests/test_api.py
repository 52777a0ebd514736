"""The glmnorm package (numpy and torch inputs): conformance with Transformers'
Glm4MoeRMSNorm on fresh random inputs, aliasing, strided q/k views, errors, threads."""

import threading

import ml_dtypes
import numpy as np
import pytest
import torch

import glmnorm
from conftest import (TINY_GLM45, assert_conforms, bits, from_numpy, gammas, reference, rows,
                      to_numpy, ulp_bf16, ulp_f32)

EPS = 1e-5


@pytest.mark.parametrize("width", [128, 4096, 5120])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_matches_transformers_torch(gen, width, dtype):
    x = rows(gen, (3, 7, width), dtype)
    w = gammas(gen, width, dtype)
    y = glmnorm.rms_norm(x, w)
    ref = reference(x, w)
    assert isinstance(y, torch.Tensor)
    assert_conforms(y, ref, x, w)


def test_mixed_dtypes_follow_pytorch_promotion(gen):
    x = rows(gen, (5, 512), torch.bfloat16)
    w = gammas(gen, 512, torch.float32)
    y = glmnorm.rms_norm(x, w)
    assert y.dtype == torch.float32
    assert_conforms(y, reference(x, w), x, w)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_numpy_inputs_give_numpy_outputs_with_the_same_bits(gen, dtype):
    x = rows(gen, (6, 4096), dtype)
    w = gammas(gen, 4096, dtype)
    y = glmnorm.rms_norm(to_numpy(x), to_numpy(w))
    assert isinstance(y, np.ndarray)
    assert y.dtype == (ml_dtypes.bfloat16 if dtype == torch.bfloat16 else np.float32)
    assert torch.equal(bits(from_numpy(y)), bits(glmnorm.rms_norm(x, w)))


def test_single_rounding_matches_f_rms_norm_order(gen):
    x = rows(gen, (4, 5120), torch.bfloat16)
    w = gammas(gen, 5120, torch.bfloat16)
    y = glmnorm.rms_norm(x, w, rounding="single")
    # One rounding of x * r * w computed in float32.
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
    expect = (xf * r * w.float()).to(torch.bfloat16)
    assert y.dtype == torch.bfloat16
    # 1 ulp: PyTorch's float32 r may differ in its last bits (summation order).
    assert int(ulp_bf16(y, expect).max()) <= 1, "single rounding: within 1 bf16 ulp"
    # and it is not the two-rounding order (they differ in about a quarter of outputs).
    assert not torch.equal(bits(y), bits(glmnorm.rms_norm(x, w)))


def test_weight_offset_is_gemma_style(gen):
    x = rows(gen, (3, 256), torch.float32)
    w = gammas(gen, 256, torch.float32)
    y1 = glmnorm.rms_norm(x, w, weight_offset=1.0)
    y2 = glmnorm.rms_norm(x, w + 1.0)
    assert ulp_f32(y1, y2) == 0


def test_out_aliases_and_in_place(gen):
    x = rows(gen, (4, 5120), torch.bfloat16)
    w = gammas(gen, 5120, torch.bfloat16)
    assert_conforms(glmnorm.rms_norm(x, w), reference(x, w), x, w)
    expect = glmnorm.rms_norm(x, w)
    out = torch.empty_like(x)
    assert glmnorm.rms_norm(x, w, out=out) is out
    assert torch.equal(bits(out), bits(expect))
    y = glmnorm.rms_norm(x, w, out=x)
    assert y is x and torch.equal(bits(x), bits(expect))

    xn = to_numpy(rows(gen, (4, 5120), torch.bfloat16))
    wn = to_numpy(w)
    expect_n = glmnorm.rms_norm(xn, wn)
    yn = glmnorm.rms_norm(xn, wn, out=xn)
    assert yn is xn and np.array_equal(xn.view(np.int16), expect_n.view(np.int16))


def test_strided_rows_are_not_copied(gen):
    # Every other row of a bigger buffer, and a column slice: views, written in place.
    buf = rows(gen, (8, 6000), torch.float32)
    before = buf.clone()
    x = buf[::2, 100:100 + 4096]
    w = gammas(gen, 4096, torch.float32)
    x_in = x.clone()
    expect = reference(x_in, w)
    glmnorm.rms_norm(x, w, out=x)
    assert_conforms(x, expect, x_in, w)
    untouched = torch.ones_like(buf, dtype=torch.bool)
    untouched[::2, 100:100 + 4096] = False
    assert torch.equal(bits(buf[untouched]), bits(before[untouched]))


def test_add_rms_norm_is_the_decoder_step(gen):
    residual = rows(gen, (5, 5120), torch.bfloat16)
    delta = rows(gen, (5, 5120), torch.bfloat16)
    w = gammas(gen, 5120, torch.bfloat16)
    expect_residual = residual + delta  # Glm4MoeDecoderLayer: residual + hidden_states
    expect = reference(expect_residual, w)
    y = glmnorm.add_rms_norm(residual, delta, w)
    assert torch.equal(bits(residual), bits(expect_residual)), "residual updated in place"
    assert_conforms(y, expect, expect_residual, w)
    # y into delta (in place), numpy.
    r2 = to_numpy(rows(gen, (5, 5120), torch.bfloat16))
    d2 = to_numpy(rows(gen, (5, 5120), torch.bfloat16))
    sum_expect = from_numpy(r2) + from_numpy(d2)
    out = glmnorm.add_rms_norm(r2, d2, to_numpy(w), out=d2)
    assert out is d2
    assert torch.equal(bits(from_numpy(r2)), bits(sum_expect))
    assert_conforms(from_numpy(d2), reference(sum_expect, w), sum_expect, w)


def _qk_reference(qkv, nq, nk, hd, qw, kw):
    t = qkv.shape[0]
    q = reference(qkv[:, :nq * hd].reshape(t, nq, hd), qw)
    k = reference(qkv[:, nq * hd:(nq + nk) * hd].reshape(t, nk, hd), kw)
    return q.reshape(t, -1), k.reshape(t, -1)


@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_qk_norm_in_place_on_a_fused_qkv_view(gen, kind):
    nq, nk, nv, hd, t = 12, 2, 2, 128, 9
    width = (nq + nk + nv) * hd
    # The fused QKV slice of a wider buffer (extra columns around it): strided rows.
    buf = rows(gen, (t, width + 64), torch.bfloat16)
    before = buf.clone()
    qkv = buf[:, 32:32 + width]
    qw, kw = gammas(gen, hd, torch.bfloat16), gammas(gen, hd, torch.bfloat16)
    qkv_in = qkv.clone()
    q_ref, k_ref = _qk_reference(qkv_in, nq, nk, hd, qw, kw)
    if kind == "torch":
        out = glmnorm.qk_norm(qkv, qw, kw, num_q_heads=nq, num_k_heads=nk, num_v_heads=nv,
                              head_dim=hd, out=qkv)
        assert out is qkv
    else:
        view = to_numpy(buf)[:, 32:32 + width]
        out = glmnorm.qk_norm(view, to_numpy(qw), to_numpy(kw), num_q_heads=nq,
                              num_k_heads=nk, num_v_heads=nv, head_dim=hd, out=view)
        assert out is view and np.shares_memory(view, to_numpy(buf))
    assert_conforms(qkv[:, :nq * hd].reshape(t, nq, hd), q_ref.reshape(t, nq, hd),
                    qkv_in[:, :nq * hd].reshape(t, nq, hd), qw, what="q")
    assert_conforms(qkv[:, nq * hd:(nq + nk) * hd].reshape(t, nk, hd), k_ref.reshape(t, nk, hd),
                    qkv_in[:, nq * hd:(nq + nk) * hd].reshape(t, nk, hd), kw, what="k")
    assert torch.equal(bits(qkv[:, (nq + nk) * hd:]), bits(before[:, 32 + (nq + nk) * hd:
                                                                   32 + width])), "v untouched"
    assert torch.equal(bits(buf[:, :32]), bits(before[:, :32]))
    assert torch.equal(bits(buf[:, 32 + width:]), bits(before[:, 32 + width:]))


def test_qk_norm_with_partial_rope(gen):
    nq, nk, nv, hd, t = 4, 2, 2, 64, 6
    rot = hd // 2
    qkv = rows(gen, (t, (nq + nk + nv) * hd), torch.bfloat16)
    qw, kw = gammas(gen, hd, torch.bfloat16), gammas(gen, hd, torch.bfloat16)
    n_pos = 16
    ang = torch.rand((n_pos, rot // 2), generator=gen) * 6.0
    cos, sin = torch.cos(ang), torch.sin(ang)
    positions = torch.randint(0, n_pos, (t,), generator=gen)
    out = glmnorm.qk_norm(qkv, qw, kw, num_q_heads=nq, num_k_heads=nk, num_v_heads=nv,
                          head_dim=hd, rotary_dim=rot, cos=cos, sin=sin, positions=positions)
    assert out is not qkv
    q_ref, k_ref = _qk_reference(qkv, nq, nk, hd, qw, kw)
    plain = glmnorm.qk_norm(qkv, qw, kw, num_q_heads=nq, num_k_heads=nk, num_v_heads=nv,
                            head_dim=hd)
    assert_conforms(plain[:, :nq * hd].reshape(t, nq, hd), q_ref.reshape(t, nq, hd),
                    qkv[:, :nq * hd].reshape(t, nq, hd), qw, what="q")
    assert_conforms(plain[:, nq * hd:(nq + nk) * hd].reshape(t, nk, hd),
                    k_ref.reshape(t, nk, hd), qkv[:, nq * hd:(nq + nk) * hd].reshape(t, nk, hd),
                    kw, what="k")
    q_ref, k_ref = plain[:, :nq * hd], plain[:, nq * hd:(nq + nk) * hd]
    c, s = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)

    def rope(h, nh):  # the formula of qk_norm.h: float32 rotation of the rounded head
        h = h.reshape(t, nh, hd).float()
        a, b = h[..., :rot // 2], h[..., rot // 2:rot]
        r = torch.cat([a * c - b * s, b * c + a * s, h[..., rot:]], dim=-1)
        return r.to(torch.bfloat16).reshape(t, -1)
    assert torch.equal(bits(out[:, :nq * hd]), bits(rope(q_ref, nq)))
    assert torch.equal(bits(out[:, nq * hd:(nq + nk) * hd]), bits(rope(k_ref, nk)))
    assert torch.equal(bits(out[:, (nq + nk) * hd:]), bits(qkv[:, (nq + nk) * hd:]))


@pytest.mark.parametrize("qdtype", ["f8e4m3", "int8"])
def test_rms_norm_quant_dynamic(gen, qdtype):
    x = rows(gen, (6, 1024), torch.bfloat16)
    w = gammas(gen, 1024, torch.bfloat16)
    q, scales = glmnorm.rms_norm_quant(x, w, dtype=qdtype)
    y = glmnorm.rms_norm(x, w).float()
    qmax = 448.0 if qdtype == "f8e4m3" else 127.0
    expect_scales = (y.abs().amax(-1) / qmax).clamp_min(2.0**-126)
    assert scales.dtype == torch.float32 and torch.equal(scales, expect_scales)
    v = y / scales.unsqueeze(1)
    expect = v.to(torch.float8_e4m3fn) if qdtype == "f8e4m3" else torch.round(v).to(torch.int8)
    assert q.dtype == expect.dtype and torch.equal(bits(q), bits(expect))


def test_add_rms_norm_quant_static(gen):
    residual = rows(gen, (3, 512), torch.bfloat16)
    delta = rows(gen, (3, 512), torch.bfloat16)
    w = gammas(gen, 512, torch.bfloat16)
    r_copy = residual.clone()
    y = glmnorm.add_rms_norm(r_copy, delta, w).float()
    q, scales = glmnorm.add_rms_norm_quant(residual, delta, w, dtype="int8", scale=0.05)
    assert scales is None
    assert torch.equal(bits(residual), bits(r_copy))
    expect = torch.round(y / 0.05).clamp(-128, 127).to(torch.int8)
    assert torch.equal(q, expect)


# --- errors ---------------------------------------------------------------------------

def test_value_errors_carry_the_cpp_message(gen):
    x = rows(gen, (2, 5120), torch.bfloat16)
    w = gammas(gen, 5120, torch.bfloat16)
    with pytest.raises(ValueError, match="glmnorm.rms_norm: weight length must equal the width 5120, got 4096"):
        glmnorm.rms_norm(x, w[:4096])
    with pytest.raises(ValueError, match="eps"):
        glmnorm.rms_norm(x, w, eps=-1.0)
    with pytest.raises(ValueError, match="rounding must be"):
        glmnorm.rms_norm(x, w, rounding="twice")
    with pytest.raises(ValueError, match="shape"):
        glmnorm.rms_norm(x, w, out=torch.empty(3, 5120, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="overlap"):
        buf = torch.empty(2, 5121, dtype=torch.bfloat16)
        glmnorm.rms_norm(x, w, out=buf[:, :5120].as_strided((2, 5120), (1, 1)))
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros((2, 5120), np.float32)
        ro.flags.writeable = False
        glmnorm.rms_norm(np.ones((2, 5120), np.float32), np.ones(5120, np.float32), out=ro)
    with pytest.raises(ValueError, match="positions|position"):
        glmnorm.qk_norm(torch.zeros(2, 4 * 16, dtype=torch.float32), torch.ones(16),
                        torch.ones(16), num_q_heads=2, num_k_heads=1, num_v_heads=1,
                        head_dim=16, rotary_dim=8, cos=torch.ones(1, 4), sin=torch.ones(1, 4),
                        positions=torch.tensor([0, 5]))
    # A lazily negated view holds -value in memory: refused, never read as garbage
    # (as input) or written un-negated (as out=).
    with pytest.raises(ValueError, match=r"glmnorm.rms_norm: x: is a lazily negated view"):
        glmnorm.rms_norm(torch._neg_view(x), w)
    with pytest.raises(ValueError, match=r"glmnorm.rms_norm: out: is a lazily negated view"):
        glmnorm.rms_norm(x, w, out=torch._neg_view(torch.empty_like(x)))
    with pytest.raises(ValueError, match="n must be >= 1"):
        glmnorm.set_num_threads(0)
    with pytest.raises(ValueError, match="config.json"):
        glmnorm.Checkpoint("/nonexistent-glmnorm-dir")


def test_type_errors_name_the_dtype(gen):
    x = rows(gen, (2, 64), torch.bfloat16)
    w = gammas(gen, 64, torch.bfloat16)
    with pytest.raises(TypeError, match=r"^glmnorm.rms_norm: out.dtype must be bf16 in cast-then-scale mode"):
        glmnorm.rms_norm(x, w, out=torch.empty(2, 64))
    with pytest.raises(TypeError, match="unsupported dtype"):
        glmnorm.rms_norm(x.to(torch.int32), w)
    with pytest.raises(TypeError, match="unsupported dtype"):
        glmnorm.rms_norm(np.ones((2, 64), np.float64), np.ones(64, np.float64))
    with pytest.raises(TypeError, match="expected a numpy array"):
        glmnorm.rms_norm("not an array", w)
    with pytest.raises(TypeError, match=r"glmnorm.rms_norm: x: glmnorm takes dense \(strided\) "
                                        r"tensors, got layout torch.sparse_coo"):
        glmnorm.rms_norm(x.float().to_sparse(), w.float())
    with pytest.raises(TypeError, match="int8 or float8"):
        glmnorm.rms_norm_quant(x, w, dtype="bf16")


def test_nothing_is_written_on_error(gen):
    residual = rows(gen, (2, 256), torch.bfloat16)
    before = residual.clone()
    with pytest.raises(ValueError):
        glmnorm.add_rms_norm(residual, rows(gen, (2, 256), torch.bfloat16),
                             gammas(gen, 128, torch.bfloat16))
    assert torch.equal(bits(residual), bits(before))


def test_buffer_protocol_and_dlpack_inputs(gen):
    x = rows(gen, (3, 256), torch.float32)
    w = gammas(gen, 256, torch.float32)
    expect = glmnorm.rms_norm(x, w)
    # memoryview (buffer protocol) and an object that only speaks DLPack.
    y1 = glmnorm.rms_norm(memoryview(x.numpy()), memoryview(w.numpy()))

    class OnlyDlpack:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kwargs):
            return self.t.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    y2 = glmnorm.rms_norm(OnlyDlpack(x), OnlyDlpack(w))
    assert isinstance(y1, np.ndarray) and isinstance(y2, np.ndarray)
    assert torch.equal(bits(torch.from_numpy(y1)), bits(expect))
    assert torch.equal(bits(torch.from_numpy(y2)), bits(expect))


# --- threads --------------------------------------------------------------------------

def test_python_threads_call_at_once(gen):
    """8 Python threads, each on its own data (large enough for the pool), at once; the
    GIL is released in the kernels, so they overlap; results equal the serial ones."""
    n = 8
    xs = [rows(gen, (64, 5120), torch.bfloat16) for _ in range(n)]
    ws = [gammas(gen, 5120, torch.bfloat16) for _ in range(n)]
    serial = [glmnorm.rms_norm(x, w) for x, w in zip(xs, ws)]
    results = [None] * n
    errors = []
    barrier = threading.Barrier(n)

    def work(i):
        try:
            barrier.wait()
            for _ in range(20):
                results[i] = glmnorm.rms_norm(xs[i], ws[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for got, want in zip(results, serial):
        assert torch.equal(bits(got), bits(want))


def test_num_threads_round_trip():
    old = glmnorm.num_threads()
    try:
        glmnorm.set_num_threads(1)
        assert glmnorm.num_threads() == 1
    finally:
        glmnorm.set_num_threads(old)
    assert glmnorm.num_threads() == old


# --- checkpoint reader ----------------------------------------------------------------

def test_checkpoint_reader_zero_copy_gammas():
    from safetensors.torch import load_file
    import json
    import os
    ck = glmnorm.Checkpoint(TINY_GLM45)
    assert ck.sound, ck.problems
    config = json.load(open(os.path.join(TINY_GLM45, "config.json")))
    assert ck.eps == pytest.approx(config["rms_norm_eps"], rel=1e-7)
    roles = {n.role for n in ck.norms}
    assert {"input_layernorm", "post_attention_layernorm", "q_norm", "k_norm",
            "final_norm"} <= roles
    index = json.load(open(os.path.join(TINY_GLM45, "model.safetensors.index.json")))
    for n in ck.norms:
        g = ck.gamma(n.name)
        assert not g.flags.writeable and not g.flags.owndata
        assert g.shape == (n.expected_width,)
        stored = load_file(os.path.join(TINY_GLM45, index["weight_map"][n.name]))[n.name]
        assert torch.equal(bits(from_numpy(np.array(g))), bits(stored))
    with pytest.raises(ValueError, match="not a norm"):
        ck.gamma("model.embed_tokens.weight")
    # The array keeps the mapping alive after the reader is gone.
    g = ck.gamma("model.norm.weight")
    del ck
    assert np.isfinite(g.astype(np.float32)).all()
