"""The binding layer's contract (issue 15, item 3): version counters, int ranges, inference
tensors, error messages and kinds, one native library, the import check of the torch ops."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import glmnorm
import glmnorm.torch as gt

OPS = torch.ops.glmnorm
PKG = os.path.dirname(os.path.abspath(glmnorm.__file__))


# --- version counter -------------------------------------------------------------------

def test_issue_example_backward_through_an_updated_tensor_raises():
    """The issue's example: add_rms_norm updates x after rms_norm saved it for backward."""
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    w = torch.ones(4, requires_grad=True)
    y = OPS.rms_norm(x, w)
    OPS.add_rms_norm(x, torch.tensor([[4.0, 2.0, 0.0, -2.0]]), torch.ones(4))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def _saved(x):
    w = torch.ones(x.shape[-1], requires_grad=True)
    return OPS.rms_norm(x, w)


@pytest.mark.parametrize("writer", ["add_rms_norm", "add_rms_norm_quant", "qk_norm_",
                                    "pkg.add_rms_norm", "pkg.add_rms_norm_quant",
                                    "pkg.rms_norm_out", "pkg.qk_norm_in_place"])
def test_every_writer_bumps_the_version(writer):
    x = torch.randn(2, 64)
    before = x._version
    y = _saved(x)
    one = torch.ones(64)
    if writer == "add_rms_norm":
        OPS.add_rms_norm(x, one.expand(2, 64), one)
    elif writer == "add_rms_norm_quant":
        OPS.add_rms_norm_quant(x, one.expand(2, 64), one, torch.int8)
    elif writer == "qk_norm_":
        OPS.qk_norm_(x, torch.ones(16), torch.ones(16), 2, 1, 1, 16)
    elif writer == "pkg.add_rms_norm":
        glmnorm.add_rms_norm(x, one.expand(2, 64), one)
    elif writer == "pkg.add_rms_norm_quant":
        glmnorm.add_rms_norm_quant(x, one.expand(2, 64), one, dtype="int8")
    elif writer == "pkg.rms_norm_out":
        glmnorm.rms_norm(torch.ones(2, 64), one, out=x)
    else:
        glmnorm.qk_norm(x, torch.ones(16), torch.ones(16), num_q_heads=2, num_k_heads=1,
                        num_v_heads=1, head_dim=16, out=x)
    assert x._version > before
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# --- inference tensors -------------------------------------------------------------------

def test_inference_tensors_are_not_written_outside_inference_mode():
    with torch.inference_mode():
        r = torch.randn(2, 64)
        q = torch.randn(2, 64)
    before = r.clone()
    one = torch.ones(64)
    with pytest.raises(RuntimeError, match="[Ii]nference"):
        OPS.add_rms_norm(r, one.expand(2, 64), one)
    with pytest.raises(RuntimeError, match="[Ii]nference"):
        OPS.qk_norm_(q, torch.ones(16), torch.ones(16), 2, 1, 1, 16)
    with pytest.raises(RuntimeError, match="[Ii]nference"):
        glmnorm.add_rms_norm(r, one.expand(2, 64), one)
    assert torch.equal(r, before)
    with torch.inference_mode():  # inside inference mode they are writable, as in PyTorch
        OPS.add_rms_norm(r, one.expand(2, 64), one)
        glmnorm.add_rms_norm(r, one.expand(2, 64), one)
    assert not torch.equal(r, before)


# --- integer arguments -------------------------------------------------------------------

_QK = dict(num_q_heads=2, num_k_heads=1, num_v_heads=1, head_dim=16)


@pytest.mark.parametrize("arg", ["num_q_heads", "num_k_heads", "num_v_heads", "head_dim",
                                 "rotary_dim"])
def test_ints_out_of_range_are_refused_not_narrowed(arg):
    qkv = torch.randn(2, 64)
    cos = sin = torch.ones(4, 4)
    kw = dict(_QK, rotary_dim=8)
    kw[arg] = 2**32 + kw[arg]  # narrowed to 32 bits it would be the valid value
    args = [kw[k] for k in ("num_q_heads", "num_k_heads", "num_v_heads", "head_dim")]
    with pytest.raises(ValueError, match=f"glmnorm.qk_norm: {arg} must fit in 32 bits"):
        OPS.qk_norm(qkv, torch.ones(16), torch.ones(16), *args, 1e-5, "cast-then-scale", 0.0,
                    kw["rotary_dim"], cos, sin)
    with pytest.raises(ValueError, match=f"glmnorm.qk_norm: {arg} must fit in 32 bits"):
        glmnorm.qk_norm(qkv, torch.ones(16), torch.ones(16), cos=cos, sin=sin, **kw)
    if arg != "rotary_dim":
        with pytest.raises(ValueError, match=f"qk_norm_backward: {arg} must fit in 32 bits"):
            OPS.qk_norm_backward(qkv, torch.ones(16), torch.ones(16), qkv, *args)
    with pytest.raises(ValueError, match="must fit in 32 bits"):
        glmnorm.set_num_threads(2**32 + 2)


# --- messages ----------------------------------------------------------------------------

def test_wrong_python_types_name_the_function_and_argument():
    x, w = torch.randn(2, 64), torch.ones(64)
    with pytest.raises(TypeError, match=r"glmnorm.rms_norm: eps must be a float, got str"):
        glmnorm.rms_norm(x, w, eps="1e-5")
    with pytest.raises(TypeError, match=r"glmnorm.rms_norm: rounding must be a str"):
        glmnorm.rms_norm(x, w, rounding=1)
    with pytest.raises(TypeError, match=r"glmnorm.add_rms_norm: normalize_rounded_sum must be "
                                        r"a bool"):
        glmnorm.add_rms_norm(x.clone(), x, w, normalize_rounded_sum="yes")
    with pytest.raises(TypeError, match=r"glmnorm.qk_norm: num_q_heads must be an int, got "
                                        r"float"):
        glmnorm.qk_norm(x, w[:16], w[:16], **dict(_QK, num_q_heads=2.0))
    with pytest.raises(TypeError, match=r"glmnorm.rms_norm: eps must be a float, got NoneType"):
        glmnorm.rms_norm(x, w, eps=None)  # None reaches the conversion, not nanobind's dispatch
    with pytest.raises(TypeError, match=r"glmnorm.rms_norm: eps must be a float, got bool"):
        glmnorm.rms_norm(x, w, eps=True)
    with pytest.raises(TypeError, match=r"glmnorm.rms_norm: x: expected a numpy array"):
        glmnorm.rms_norm(None, w)
    with pytest.raises(TypeError, match=r"glmnorm.rms_norm_quant: dtype: unknown dtype name"):
        glmnorm.rms_norm_quant(x, w, dtype="fp4")
    # glmnorm.torch's functions and RMSNorm: the same messages as the package
    with pytest.raises(TypeError, match=r"^glmnorm.rms_norm: eps must be a float, got str$"):
        gt.rms_norm(x, w, eps="1e-5")
    with pytest.raises(TypeError, match=r"^glmnorm.rms_norm: x must be a torch.Tensor, got list"):
        gt.rms_norm(x.tolist(), w)
    with pytest.raises(TypeError, match=r"^glmnorm.qk_norm: num_q_heads must be an int, got "
                                        r"float$"):
        gt.qk_norm(x, w[:16], w[:16], 2.0, 1, 1, 16)
    with pytest.raises(TypeError, match=r"^glmnorm.add_rms_norm: normalize_rounded_sum must be "
                                        r"a bool"):
        gt.add_rms_norm(x.clone(), x, w, 1e-5, "cast-then-scale", 0.0, "yes")
    with pytest.raises(TypeError, match=r"^glmnorm.torch.RMSNorm: eps must be a float, got str"):
        gt.RMSNorm(64, eps="1e-5")
    with pytest.raises(TypeError, match=r"^patch_glm4_moe: model must be a torch.nn.Module"):
        gt.patch_glm4_moe(None)
    # numpy scalars are numbers, as for torch's own ops (np.float64 is no int)
    assert torch.equal(glmnorm.rms_norm(x, w, eps=np.float32(1e-5)), glmnorm.rms_norm(x, w))
    assert torch.equal(glmnorm.qk_norm(x, w[:16], w[:16], **dict(_QK, num_q_heads=np.int64(2))),
                       glmnorm.qk_norm(x, w[:16], w[:16], **_QK))
    with pytest.raises(TypeError, match=r"glmnorm.qk_norm: num_q_heads must be an int, got "
                                        r"float64"):
        glmnorm.qk_norm(x, w[:16], w[:16], **dict(_QK, num_q_heads=np.float64(2)))
    # torch.ops.glmnorm.* called directly: the dispatcher's own check (as every torch op)
    with pytest.raises(RuntimeError, match=r"rms_norm.*eps"):
        OPS.rms_norm(x, w, "1e-5")
    for call in (lambda: glmnorm.rms_norm(x, w, eps="1e-5"),
                 lambda: glmnorm.rms_norm(x, w, eps=None), lambda: gt.rms_norm(x, w, eps=None)):
        for msg in _messages(call):
            assert "incompatible function arguments" not in msg  # no nanobind signature dump
            assert "Declaration:" not in msg  # no torch schema dump


@pytest.mark.parametrize("call", ["package", "op", "module"])
def test_values_are_checked_by_the_library_with_python_names(call):
    x, w = torch.randn(2, 64), torch.ones(64)
    f = {"package": lambda **kw: glmnorm.rms_norm(x, w, **kw),
         "op": lambda **kw: gt.rms_norm(x, w, **kw),
         "module": lambda eps: gt.RMSNorm(64, eps=eps)}[call]
    fn = "glmnorm.torch.RMSNorm" if call == "module" else "glmnorm.rms_norm"
    with pytest.raises(ValueError, match=rf"^{fn}: eps must be finite and >= 0 \(GLM-4.5: "
                                         r"1e-5\), got -1$"):
        f(eps=-1.0)
    # a finite double past float32 is named by its own value, not reported as inf
    with pytest.raises(ValueError, match=rf"^{fn}: eps must fit in float32, got 1e\+300$"):
        f(eps=1e300)


def test_cpp_argument_names_are_spelled_as_python_spells_them():
    x, w = torch.randn(2, 8), torch.ones(8)
    for f in (glmnorm.rms_norm, OPS.rms_norm):
        with pytest.raises(ValueError, match=r"^glmnorm.rms_norm: weight length must equal the "
                                             r"width 8, got 7$"):
            f(x, torch.ones(7))
    with pytest.raises(ValueError, match=r"^glmnorm.rms_norm: out shape must equal x shape "
                                         r"\[2, 8\], got \[2, 7\]$"):
        glmnorm.rms_norm(x, w, out=torch.empty(2, 7))
    qkv = torch.randn(3, 32, dtype=torch.bfloat16)
    g16 = torch.ones(8, dtype=torch.float16)
    with pytest.raises(TypeError, match=r"^glmnorm.qk_norm_: q_weight.dtype must be f32 or "
                                        r"qkv's dtype bf16, got f16$"):
        OPS.qk_norm_(qkv, g16, g16, 2, 1, 1, 8)
    with pytest.raises(ValueError, match=r"^glmnorm.qk_norm: cos must be 2-D"):
        glmnorm.qk_norm(qkv, g16.bfloat16(), g16.bfloat16(), num_q_heads=2, num_k_heads=1,
                        num_v_heads=1, head_dim=8, rotary_dim=4, cos=torch.ones(10, 3),
                        sin=torch.ones(10, 2), out=qkv)
    for msg in _messages(lambda: glmnorm.rms_norm(x, torch.ones(7))):
        assert "gamma" not in msg and "RmsNorm" not in msg


def test_checkpoint_path_kinds():
    with pytest.raises(TypeError, match=r"^glmnorm.Checkpoint: path must be a str or "
                                        r"os.PathLike, got NoneType$"):
        glmnorm.Checkpoint(None)
    with pytest.raises(ValueError, match=r"/nonexistent/config.json: cannot open"):
        glmnorm.Checkpoint(b"/nonexistent")  # bytes paths are decoded as os.fsdecode does


def _messages(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - collecting the message
        return [str(e)]
    return []


def test_rank5_input_is_refused_alike_everywhere():
    x5 = torch.randn(1, 1, 1, 2, 64)
    with pytest.raises(ValueError, match=r"^glmnorm.rms_norm: x.rank must be 1..4, got 5"):
        OPS.rms_norm(x5, torch.ones(64))
    with pytest.raises(ValueError, match=r"^glmnorm.rms_norm: x.rank must be 1..4, got 5"):
        glmnorm.rms_norm(x5, torch.ones(64))
    with pytest.raises(ValueError, match=r"^glmnorm.rms_norm: x.rank must be 1..4, got 5"):
        gt.RMSNorm(64)(x5)
    # Rank 0, in the same words.
    x0 = torch.tensor(1.0)
    for call in (OPS.rms_norm, glmnorm.rms_norm):
        with pytest.raises(ValueError, match=r"^glmnorm.rms_norm: x.rank must be 1..4, got 0"):
            call(x0, torch.ones(64))


def test_zero_d_optional_tensors_are_refused_not_read_as_absent():
    """The C++ views use rank 0 for an absent optional tensor; a 0-d array given for one (a
    position, a table, a scale) was silently taken as absent by the package functions."""
    gen = torch.Generator().manual_seed(17)
    qkv = torch.randn(3, 32, generator=gen)
    w = torch.ones(8)
    heads = dict(num_q_heads=2, num_k_heads=1, num_v_heads=1, head_dim=8)
    cos, sin = torch.rand(8, 2, generator=gen), torch.rand(8, 2, generator=gen)
    for zero_d in (torch.tensor(3), np.int64(3), np.array(3)):
        for call in (lambda p: glmnorm.qk_norm(qkv, w, w, **heads, rotary_dim=4, cos=cos,
                                               sin=sin, positions=p),
                     lambda p: glmnorm.qk_norm_backward(qkv, w, w, qkv, **heads, rotary_dim=4,
                                                        cos=cos, sin=sin, positions=p)):
            with pytest.raises(ValueError, match=r"positions.rank must be 1..4, got 0"):
                call(zero_d)
    with pytest.raises(ValueError, match=r"^glmnorm.qk_norm: cos.rank must be 1..4, got 0"):
        glmnorm.qk_norm(qkv, w, w, **heads, rotary_dim=4, cos=torch.tensor(1.0), sin=sin)
    with pytest.raises(ValueError, match=r"^glmnorm.qk_norm: positions.rank must be 1..4"):
        OPS.qk_norm(qkv, w, w, 2, 1, 1, 8, rotary_dim=4, cos=cos, sin=sin,
                    positions=torch.tensor(3))


def test_empty_inputs_with_zero_strides_are_a_no_op_everywhere():
    """NumPy 2 gives zero-size arrays strides of 0: an empty view has no layout to check,
    so every op (the quant ops and empty RoPE tables included) does nothing, as for any
    other empty input."""
    def empty(*shape, dtype=np.float32):
        return np.lib.stride_tricks.as_strided(np.empty(0, dtype), shape, (0,) * len(shape))
    w = np.ones(64, np.float32)
    q, scales = glmnorm.rms_norm_quant(empty(0, 64), w)
    assert q.shape == (0, 64) and scales.shape == (0,)
    q, scales = glmnorm.add_rms_norm_quant(empty(0, 64), empty(0, 64), w)
    assert q.shape == (0, 64) and scales.shape == (0,)
    qkv = np.ones((2, 64), np.float32)
    heads = dict(num_q_heads=2, num_k_heads=1, num_v_heads=1, head_dim=16)
    t = empty(0, 4)  # no positions: only an empty qkv can use it
    out = glmnorm.qk_norm(empty(0, 64), w[:16], w[:16], **heads, rotary_dim=8, cos=t, sin=t)
    assert out.shape == (0, 64)
    with pytest.raises(ValueError, match="cos has 0 positions"):
        glmnorm.qk_norm(qkv, w[:16], w[:16], **heads, rotary_dim=8, cos=t, sin=t)


def test_a_descriptor_the_package_could_not_make_is_an_internal_error():
    """_arrays.desc refuses a rank over 4 by the argument's name (test above); a descriptor
    that still reaches the extension bad is the package's fault: RuntimeError, no read."""
    ok = glmnorm._arrays.desc(np.ones(4, np.float32), "x", "t")
    for bad in [(ok[0], 99, (4,), (1,)), (ok[0], 0, (1, 1, 1, 1, 4), (4, 4, 4, 4, 1)),
                (ok[0], 0, (4,), ())]:
        with pytest.raises(RuntimeError, match="internal error: a bad array descriptor"):
            glmnorm._ext.rms_norm(bad, ok, ok, 1e-5, "single", 0.0)


def test_rope_tables_and_rotary_dim_must_agree_alike_everywhere():
    """rotary_dim > 0 with a table missing, or a table with rotary_dim left at 0 (a
    forgotten rotary_dim would silently skip RoPE): the library's rule and message, through
    the package and the torch ops."""
    qkv = torch.randn(3, 32)
    w = torch.ones(8)
    heads = dict(num_q_heads=2, num_k_heads=1, num_v_heads=1, head_dim=8)
    cos = torch.ones(3, 2)
    calls = [  # (the function named in the message, a call)
        ("glmnorm.qk_norm", lambda **kw: glmnorm.qk_norm(qkv, w, w, **heads, **kw)),
        ("glmnorm.qk_norm_backward",
         lambda **kw: glmnorm.qk_norm_backward(qkv, w, w, qkv, **heads, **kw)),
        ("glmnorm.qk_norm", lambda **kw: OPS.qk_norm(qkv, w, w, *heads.values(), **kw)),
        ("glmnorm.qk_norm_", lambda **kw: OPS.qk_norm_(qkv, w, w, *heads.values(), **kw)),
        ("glmnorm.qk_norm_backward",
         lambda **kw: OPS.qk_norm_backward(qkv, w, w, qkv, *heads.values(), **kw)),
    ]
    missing = r"rotary_dim 4 needs sin, f32 \[positions, rotary_dim / 2 = 2\]; none was given$"
    unused = (r"{} is given but rotary_dim is 0 \(no RoPE\): set rotary_dim \(GLM-4.5: "
              r"head_dim / 2 = 4\) or leave out cos, sin and positions$")
    for fn, call in calls:
        prefix = "^" + fn + ": "
        with pytest.raises(ValueError, match=prefix + missing):
            call(rotary_dim=4, cos=cos)
        with pytest.raises(ValueError, match=prefix + unused.format("cos")):
            call(cos=cos, sin=cos)
        with pytest.raises(ValueError, match=prefix + unused.format("positions")):
            call(positions=torch.arange(3))
        # Even positions out of every table's range: refused for the missing rotary_dim.
        with pytest.raises(ValueError, match=prefix + unused.format("positions")):
            call(positions=torch.tensor([0, 99, 5]))


def test_batched_rope_needs_positions_alike_everywhere():
    """qkv [B, S, W] with B > 1 and no positions would take table rows 0..B*S-1 (not 0..S-1
    per sequence, as Transformers' position_ids): refused by the library; positions of
    every token ([B * S], or [B, S] as position_ids, or [1, S]) give each sequence its own
    rows; [1, S, W] needs none. Positions of a
    float dtype are a dtype error (TypeError), as int32 ones are."""
    gen = torch.Generator().manual_seed(16)
    qkv = torch.randn(2, 3, 32, generator=gen)
    w = torch.ones(8)
    heads = dict(num_q_heads=2, num_k_heads=1, num_v_heads=1, head_dim=8)
    cos, sin = torch.rand(8, 2, generator=gen), torch.rand(8, 2, generator=gen)
    rope = dict(rotary_dim=4, cos=cos, sin=sin)
    want = (r"positions is required when qkv holds several sequences \(leading dims \[2, 3\]\)"
            r": without it token t takes table row t of all 6 tokens")
    for fn, call in [
            ("glmnorm.qk_norm", lambda: glmnorm.qk_norm(qkv, w, w, **heads, **rope)),
            ("glmnorm.qk_norm", lambda: OPS.qk_norm(qkv, w, w, *heads.values(), **rope)),
            ("glmnorm.qk_norm_", lambda: OPS.qk_norm_(qkv.clone(), w, w, *heads.values(), **rope)),
            ("glmnorm.qk_norm_backward",
             lambda: glmnorm.qk_norm_backward(qkv, w, w, qkv, **heads, **rope))]:
        with pytest.raises(ValueError, match="^" + fn + ": " + want):
            call()
    got = glmnorm.qk_norm(qkv, w, w, **heads, **rope, positions=torch.arange(3).repeat(2))
    each = torch.stack([glmnorm.qk_norm(qkv[b], w, w, **heads, **rope) for b in range(2)])
    assert torch.equal(got, each)
    assert torch.equal(glmnorm.qk_norm(qkv[:1], w, w, **heads, **rope), each[:1])
    # Positions shaped like the leading dims (Transformers' position_ids [B, S]), or [1, S]
    # broadcast, in every front end; their gradient too.
    for positions in (torch.arange(3).repeat(2).reshape(2, 3), torch.arange(3)[None],
                      torch.arange(3)[None].expand(2, 3)):
        assert torch.equal(glmnorm.qk_norm(qkv, w, w, **heads, **rope, positions=positions),
                           each)
        assert np.array_equal(glmnorm.qk_norm(qkv.numpy(), w.numpy(), w.numpy(), **heads,
                                              rotary_dim=4, cos=cos.numpy(), sin=sin.numpy(),
                                              positions=positions.numpy()), each.numpy())
        assert torch.equal(OPS.qk_norm(qkv, w, w, *heads.values(), **rope, positions=positions),
                           each)
        x = qkv.clone().requires_grad_()
        OPS.qk_norm(x, w, w, *heads.values(), **rope, positions=positions).sum().backward()
        x_flat = qkv.clone().requires_grad_()
        OPS.qk_norm(x_flat, w, w, *heads.values(), **rope,
                    positions=torch.arange(3).repeat(2)).sum().backward()
        assert torch.equal(x.grad, x_flat.grad)
    with pytest.raises(ValueError, match=r"^glmnorm.qk_norm: positions must be i64 "
                       r"\[tokens = 6\] or shaped like qkv's leading dims \[2, 3\] \(a dim of 1 is "
                       r"broadcast\), got i64 \[3, 2\]"):
        glmnorm.qk_norm(qkv, w, w, **heads, **rope, positions=torch.zeros(3, 2, dtype=torch.long))
    for bad in (torch.arange(6.0), torch.arange(6, dtype=torch.int32)):
        with pytest.raises(TypeError, match="positions"):
            glmnorm.qk_norm(qkv, w, w, **heads, **rope, positions=bad)


@pytest.mark.parametrize("shape", [(32,), (6, 32), (2, 3, 32), (3, 1, 2, 32)])
def test_qk_norm_takes_rank_1_to_4_in_every_front_end(shape):
    """The leading dims are the tokens (the C++ library's rule, QkNorm): every front end
    gives the bits of the 2-D call."""
    gen = torch.Generator().manual_seed(15)
    qkv = torch.randn(shape, generator=gen).bfloat16()
    qw = torch.rand(8, generator=gen).bfloat16() + 0.5
    kw = torch.rand(8, generator=gen).bfloat16() + 0.5
    heads = dict(num_q_heads=2, num_k_heads=1, num_v_heads=1, head_dim=8)
    want = glmnorm.qk_norm(qkv.reshape(-1, 32), qw, kw, **heads).reshape(shape)
    assert torch.equal(glmnorm.qk_norm(qkv, qw, kw, **heads), want)
    assert torch.equal(OPS.qk_norm(qkv, qw, kw, 2, 1, 1, 8), want)
    inplace = qkv.clone()
    OPS.qk_norm_(inplace, qw, kw, 2, 1, 1, 8)
    assert torch.equal(inplace, want)
    dqkv = torch.randn(shape, generator=gen).bfloat16()
    d2 = OPS.qk_norm_backward(qkv.reshape(-1, 32), qw, kw, dqkv.reshape(-1, 32), 2, 1, 1, 8)
    dn = OPS.qk_norm_backward(qkv, qw, kw, dqkv, 2, 1, 1, 8)
    assert torch.equal(dn[0], d2[0].reshape(shape))
    assert torch.equal(dn[1], d2[1]) and torch.equal(dn[2], d2[2])


def test_error_kind_comes_from_the_library_not_the_text():
    x, w = torch.randn(2, 64, dtype=torch.bfloat16), torch.ones(64, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="glmnorm.rms_norm: out.dtype must be bf16"):
        glmnorm.rms_norm(x, w, out=torch.empty(2, 64))
    with pytest.raises(TypeError, match="glmnorm.add_rms_norm: delta.dtype"):
        OPS.add_rms_norm(x.clone(), torch.randn(2, 64, dtype=torch.float16), w)
    with pytest.raises(ValueError, match="glmnorm.rms_norm: weight length"):
        OPS.rms_norm(x, w[:32])
    with pytest.raises(TypeError, match="glmnorm.rms_norm_backward: out.dtype must be"):
        glmnorm.rms_norm_backward(x, w, x, out=torch.empty(2, 64, dtype=torch.float16))
    with pytest.raises(ValueError, match="rounding must be 'cast-then-scale' or 'single'"):
        OPS.rms_norm(x, w, 1e-5, "twice")
    with pytest.raises(ValueError, match="eps must be finite"):
        OPS.rms_norm(x, w, -1.0)


def test_output_dtype_is_the_librarys_rule():
    bf, f32 = torch.bfloat16, torch.float32
    for xd, wd, rounding, want in [(bf, bf, "cast-then-scale", bf),
                                   (bf, f32, "cast-then-scale", f32),
                                   (bf, f32, "single", bf), (f32, f32, "single", f32)]:
        x, w = torch.randn(2, 64, dtype=xd), torch.ones(64, dtype=wd)
        assert OPS.rms_norm(x, w, 1e-5, rounding).dtype == want
        assert glmnorm.rms_norm(x, w, rounding=rounding).dtype == want
        with torch._subclasses.FakeTensorMode():
            fx, fw = torch.empty(2, 64, dtype=xd), torch.empty(64, dtype=wd)
            assert OPS.rms_norm(fx, fw, 1e-5, rounding).dtype == want


# --- one native library ------------------------------------------------------------------

def _needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True)
    return [line.split("[")[1].split("]")[0] for line in out.stdout.splitlines()
            if "(NEEDED)" in line]


def test_one_native_library_holds_the_kernels():
    """The nanobind module and libglmnorm_torch both link libglmnorm.so (found through
    $ORIGIN), neither holds a copy of the kernels: one thread pool per process."""
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) not installed")
    ext = glmnorm._ext.__file__
    torch_lib = os.path.join(PKG, "libglmnorm_torch.so")
    for lib in (ext, torch_lib):
        assert "libglmnorm.so" in _needed(lib), lib
        syms = subprocess.run(["nm", "-D", "--defined-only", "-C", lib], capture_output=True,
                              text=True, check=True).stdout
        assert "glmnorm::SetNumThreads" not in syms, f"{lib} holds its own copy of the pool"
    maps = open("/proc/self/maps").read()
    assert len({line.split()[-1] for line in maps.splitlines()
                if line.endswith("/libglmnorm.so")}) == 1


def test_set_num_threads_is_one_setting():
    old = glmnorm.num_threads()
    try:
        glmnorm.set_num_threads(1)
        assert glmnorm.num_threads() == 1
        x = torch.randn(256, 4096)  # above the 512 KiB threshold of the pool
        assert torch.equal(OPS.rms_norm(x, torch.ones(4096)),
                           glmnorm.rms_norm(x, torch.ones(4096)))
    finally:
        glmnorm.set_num_threads(old)


# --- the import check of the torch ops ---------------------------------------------------

def _import_in_copy(tmp_path, edit):
    pkg = tmp_path / "glmnorm"
    shutil.copytree(PKG, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    edit(pkg)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    return subprocess.run([sys.executable, "-c", "import glmnorm.torch"], capture_output=True,
                          text=True, env=env, cwd=str(tmp_path))


def test_torch_version_mismatch_is_an_import_error(tmp_path):
    r = _import_in_copy(tmp_path, lambda p: (p / "libglmnorm_torch.torch_version").write_text(
        "1.0.0\n"))
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "built for torch 1.0.0" in r.stderr
    assert "pip install --force-reinstall --no-deps ." in r.stderr


def test_missing_torch_ops_are_an_import_error_not_a_fallback(tmp_path):
    r = _import_in_copy(tmp_path, lambda p: (p / "libglmnorm_torch.so").unlink())
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "built without torch" in r.stderr
    assert not hasattr(gt, "BACKEND")


# --- fresh outputs (issue 15, item 2) ------------------------------------------------------

_FAULTS = r"""
import resource, sys, torch, glmnorm.torch
# 40 MiB: over glibc's largest mmap threshold (32 MiB), so without the cache every output
# is a fresh mapping (smaller ones may come back from glibc's heap)
x = torch.randn(4096, 5120).bfloat16()
w = torch.ones(5120, dtype=torch.bfloat16)
want = torch.ops.glmnorm.rms_norm(x, w)
faults = []
for i in range(4):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    y = torch.ops.glmnorm.rms_norm(x, w)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    assert torch.equal(y, want), "a reused output block gave other bits"
    del y
print(min(faults[1:]))
"""


@pytest.mark.parametrize("cache_mb", [None, "0"])
def test_large_outputs_reuse_mapped_memory(cache_mb):
    """A freed large output is reused by the next one of its size class (no page faults in
    steady state); GLMNORM_TORCH_OUTPUT_CACHE_MB=0 turns that off (every output a fresh
    mapping: at least one fault per 2 MiB page)."""
    env = dict(os.environ)
    env.pop("GLMNORM_TORCH_OUTPUT_CACHE_MB", None)
    if cache_mb is not None:
        env["GLMNORM_TORCH_OUTPUT_CACHE_MB"] = cache_mb
    r = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    faults = int(r.stdout.split()[-1])
    if cache_mb is None:
        assert faults < 16, f"{faults} page faults per call with the output cache"
    else:
        assert faults >= 5, f"{faults} page faults per call without the cache: not fresh?"


def test_output_cache_setting_is_checked_and_named():
    """A GLMNORM_TORCH_OUTPUT_CACHE_MB that is not a whole number of MiB fails the first large
    output with a ValueError naming the variable and the value (the library's rule)."""
    env = dict(os.environ, GLMNORM_TORCH_OUTPUT_CACHE_MB="64MB")
    code = ("import torch, glmnorm.torch\n"
            "x = torch.ones(1024, 4096)\n"
            "try:\n"
            "    torch.ops.glmnorm.rms_norm(x, torch.ones(4096))\n"
            "except ValueError as e:\n"
            "    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert ("GLMNORM_TORCH_OUTPUT_CACHE_MB must be a whole number of MiB from 0 to 1048576, "
            "got '64MB'") in r.stdout, r.stdout


def test_dtype_codes_match_the_library():
    """The package's dtype codes (_arrays: F32 = 0 ...) are glmnorm::DType's values."""
    assert glmnorm._ext.dtype_names() == list(glmnorm._arrays.NAMES)


def test_wrappers_keep_their_defaults_and_returns():
    """glmnorm.torch's entry points: the quant ops' dtype default (not in the schema), the
    in-place qk_norm_ returning its qkv, positional and keyword calls alike."""
    x, w = torch.randn(3, 64), torch.ones(64)
    q, scales = gt.rms_norm_quant(x, w)
    assert q.dtype == torch.float8_e4m3fn and scales.shape == (3,)
    q8, _ = gt.rms_norm_quant(x, w, torch.int8, 0.05)
    assert q8.dtype == torch.int8
    assert gt.rms_norm_quant(x, weight=w, dtype=torch.int8)[0].dtype == torch.int8
    qkv = torch.randn(2, 4 * 16)
    kw = dict(num_q_heads=2, num_k_heads=1, num_v_heads=1, head_dim=16)
    want = gt.qk_norm(qkv, torch.ones(16), torch.ones(16), **kw)
    assert gt.qk_norm_(qkv, torch.ones(16), torch.ones(16), *kw.values()) is qkv
    assert torch.equal(qkv, want)
    assert gt.qk_norm_(qkv=qkv, q_weight=torch.ones(16), k_weight=torch.ones(16), **kw) is qkv


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_package_outputs_reuse_mapped_memory(kind):
    """glmnorm.rms_norm(x, w) without out=: a large new output comes from the library's output
    cache, as the torch op's do (was a fresh mapping each call: 10,241 page faults and 6.5x
    the out= call at 4096 x 5120 bf16 through a torch tensor). Same bits as out=."""
    import resource
    import ml_dtypes
    x = torch.randn(4096, 5120).bfloat16()  # 40 MiB: past glibc's largest mmap threshold
    w = torch.randn(5120).bfloat16()
    if kind == "numpy":
        x, w = (t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) for t in (x, w))
    want = glmnorm.rms_norm(x, w, out=x * 0)
    glmnorm.rms_norm(x, w)  # the first call of the size maps its block
    faults = []
    for _ in range(3):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        y = glmnorm.rms_norm(x, w)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        assert type(y) is type(x) and y.shape == x.shape and y.dtype == x.dtype
        assert (y == want).all(), "a reused block gave other bits"
        del y
    assert min(faults) < 16, f"{faults} page faults per call: not reused?"


def test_quant_scale_and_dtype_are_checked_with_python_names():
    """A static scale past float32 is refused by its value before any tensor is made from it
    (the op built its scales tensor first and failed in torch's narrowing: "value cannot be
    converted to type float without overflow"); a dtype that is not a torch.dtype is a
    TypeError naming the wrapper and the argument; a Python int past double's range is a
    ValueError naming the argument, not a bare OverflowError."""
    x, w = torch.randn(2, 64), torch.ones(64)
    for op in (OPS.rms_norm_quant, gt.rms_norm_quant):
        for bad in (1e300, -1e300, 3.5e38):
            with pytest.raises(ValueError, match=r"^glmnorm.rms_norm_quant: scale must fit in "
                                                 r"float32, got "):
                op(x, w, torch.int8, bad)
    r = torch.randn(2, 64)
    with pytest.raises(ValueError, match=r"^glmnorm.add_rms_norm_quant: scale must fit in"):
        OPS.add_rms_norm_quant(r, x, w, torch.int8, 1e300)
    for bad in ("int8", None):
        with pytest.raises(TypeError, match=r"^glmnorm.rms_norm_quant: dtype must be a "
                                            r"torch.dtype"):
            gt.rms_norm_quant(x, w, dtype=bad)
    for f in (glmnorm.rms_norm, gt.rms_norm):
        with pytest.raises(ValueError, match=r"^glmnorm.rms_norm: eps must fit in float32, "
                                             r"got 1000"):
            f(x, w, eps=10**400)


def test_wrapper_defaults_must_match_the_schema():
    """The entry points pass on only the defaults the schema lacks, so a signature whose
    default drifted from the schema's would show one value and use another: refused when
    the module is built."""
    with pytest.raises(AssertionError, match=r"default eps=1e-06, the schema's is 1e-05"):
        @gt._entry("rms_norm")
        def drifted(x, weight, eps=1e-6, rounding="cast-then-scale", weight_offset=0.0):
            """A wrapper whose eps default is not the schema's."""


def test_newcomer_messages_name_python_arguments():
    """Found by a newcomer review: the quant ops' output is `out` (C++ `q`), an option
    struct's field is the argument (no `options.` prefix), rounding=None is named even
    without out=, a value that would round to 0 in float32 is refused, and a backward op
    under create_graph says there is no double backward."""
    x, w = np.ones((4, 64), np.float32), np.ones(64, np.float32)
    with pytest.raises(ValueError, match=r"^glmnorm.rms_norm_quant: out shape must equal"):
        glmnorm.rms_norm_quant(x, w, dtype="int8", out=np.empty((4, 63), np.int8))
    with pytest.raises(ValueError, match=r"^glmnorm.add_rms_norm_quant: out shape must equal"):
        glmnorm.add_rms_norm_quant(x.copy(), x, w, dtype="int8", out=np.empty((4, 63), np.int8))
    bf = glmnorm._arrays._NP_DTYPES[glmnorm._arrays.BF16]
    with pytest.raises(ValueError, match=r"^glmnorm.add_rms_norm_backward: normalize_rounded_sum "
                                         r"must be true"):
        glmnorm.add_rms_norm_backward(np.ones((2, 16), bf), np.ones(16, bf), np.ones((2, 16), bf),
                                      normalize_rounded_sum=False)
    for fn in (glmnorm.rms_norm, lambda x, w, **k: glmnorm.add_rms_norm(x.copy(), x, w, **k)):
        with pytest.raises(TypeError, match=r"rounding must be a str .*got NoneType"):
            fn(x, w, rounding=None)
    with pytest.raises(ValueError, match=r"^glmnorm.rms_norm: eps must fit in float32 \(it would "
                                         r"round to 0\), got 1e-46"):
        glmnorm.rms_norm(x, w, eps=1e-46)
    xt = torch.ones(2, 64, requires_grad=True)
    y = gt.rms_norm(xt, torch.ones(64))
    with pytest.raises(RuntimeError, match="rms_norm_backward has no backward: glmnorm has no "
                                           "double backward"):
        torch.autograd.grad(y.sum(), xt, create_graph=True)


def test_missing_torch_is_an_import_error_with_the_fix():
    """Without torch, `import glmnorm.torch` says what to install (torch hidden by a
    meta-path finder in a fresh interpreter); `import glmnorm` itself still works."""
    code = ("import sys\n"
            "class NoTorch:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ModuleNotFoundError(\"No module named 'torch'\", name=name)\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "import glmnorm, numpy as np\n"
            "assert glmnorm.rms_norm(np.ones((1, 8), np.float32), np.ones(8, np.float32)).shape"
            " == (1, 8)\n"
            "import glmnorm.torch\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: glmnorm.torch needs PyTorch"), r.stderr
    assert "pip install torch" in last and "pip install --force-reinstall --no-deps ." in last


def test_unsupported_dtypes_are_named_alike_everywhere():
    """A dtype glmnorm does not take is named as the user wrote it (torch.float64, float64),
    by the torch ops and the package functions alike, with the dtypes glmnorm takes."""
    x64, w64 = torch.randn(2, 8, dtype=torch.float64), torch.ones(8, dtype=torch.float64)
    for call in (OPS.rms_norm, glmnorm.rms_norm):
        with pytest.raises(TypeError, match=r"^glmnorm.rms_norm: x: unsupported dtype "
                                            r"torch.float64 \(glmnorm takes float32"):
            call(x64, w64)
    x, w, dy = torch.randn(2, 8), torch.ones(8), torch.randn(2, 8)
    for dtype, shown in ((np.float64, "float64"), ("float64", "float64"),
                         (np.dtype("float64"), "float64"), (torch.float64, "torch.float64"),
                         (torch.int32, "torch.int32")):
        with pytest.raises(TypeError, match=r"^glmnorm.rms_norm_backward: dweight_dtype: "
                                            rf"unsupported dtype {shown} \(glmnorm's dtypes: "):
            glmnorm.rms_norm_backward(x, w, dy, dweight_dtype=dtype)
    with pytest.raises(TypeError, match=r"dweight_dtype: unknown dtype name 'bogus'"):
        glmnorm.rms_norm_backward(x, w, dy, dweight_dtype="bogus")
    with pytest.raises(TypeError, match=r"unsupported dtype >f4 \(glmnorm's dtypes"):
        glmnorm.rms_norm_backward(x, w, dy, dweight_dtype=">f4")  # float32, not native order
    with pytest.raises(TypeError, match=r"^glmnorm.rms_norm_quant: dtype: a dtype is required, "
                                        r"got None"):
        glmnorm.rms_norm_quant(x, w, dtype=None)


def test_qk_norm_new_output_alike_in_package_and_op():
    """glmnorm.qk_norm(out=None) normalises q and k into a new array and copies v, as the
    torch op does: the same bits, and a qkv view whose leading dims are not rows of one
    stride is refused by both in the same words (it was copied first by the package)."""
    gen = torch.Generator().manual_seed(18)
    qkv = torch.randn(5, 2, 40, generator=gen).bfloat16()[:, :, :32]
    qw = torch.rand(8, generator=gen).bfloat16() + 0.5
    kw = torch.rand(8, generator=gen).bfloat16() + 0.5
    heads = dict(num_q_heads=2, num_k_heads=1, num_v_heads=1, head_dim=8)
    got = glmnorm.qk_norm(qkv, qw, kw, **heads)
    assert torch.equal(got, OPS.qk_norm(qkv, qw, kw, 2, 1, 1, 8))
    assert torch.equal(got[..., 24:], qkv[..., 24:])  # v carried over
    np_got = glmnorm.qk_norm(qkv.float().numpy(), qw.float().numpy(), kw.float().numpy(), **heads)
    assert np.array_equal(np_got[..., 24:], qkv.float().numpy()[..., 24:])
    transposed = qkv.transpose(0, 1)
    for call in (lambda: glmnorm.qk_norm(transposed, qw, kw, **heads),
                 lambda: OPS.qk_norm(transposed, qw, kw, 2, 1, 1, 8)):
        with pytest.raises(ValueError, match=r"^glmnorm.qk_norm: qkv: the leading dims of shape "
                                             r"\[2, 5, 32\] with strides \[40, 80, 1\] do not "
                                             r"form rows of one stride"):
            call()

