"""glmnorm: GLM-4.5's RMSNorm on the CPU, bit-exact with Transformers' Glm4MoeRMSNorm.

    y = weight * x / sqrt(mean(x^2) + eps)     over the last axis, float32 accumulation

Every function takes numpy arrays (bf16 and fp8-e4m3 through ``ml_dtypes``), torch CPU
tensors, or any object speaking DLPack or the buffer protocol (read as numpy), and returns
outputs of the kind of its main input. Inputs are never copied: the kernels read and write
the caller's memory through its strides (the last axis must be contiguous, strides >= 0).
The GIL is released while a kernel runs, so Python threads can call at once.

Semantics: docs/SPEC.md. The default op order (``rounding="cast-then-scale"``) is
Transformers' ``Glm4MoeRMSNorm.forward``: ``weight * (x * rsqrt(mean(x^2) + eps)).to(x.dtype)``
(two roundings in bf16); ``rounding="single"`` rounds once (FlashInfer, ``F.rms_norm``).

Errors: ``ValueError`` for bad shapes, strides, values (eps < 0, overlapping outputs...),
``TypeError`` for unsupported dtypes and kinds of object; the message is the C++ library's
(it names the function and the argument). Nothing is written when an error is raised.

PyTorch users: ``glmnorm.torch`` registers the same functions as ``torch.ops.glmnorm.*``
(torch.compile keeps them) and patches Transformers' GLM-4.5 models.
"""

import math as _math
import os as _os
from collections import namedtuple as _namedtuple

from . import _arrays
from ._arrays import BF16, F8E4M3, F16, F32, I8
from ._glmnorm import Checkpoint as _Checkpoint
from . import _glmnorm as _ext

__all__ = ["rms_norm", "add_rms_norm", "qk_norm", "rms_norm_quant", "add_rms_norm_quant",
           "rms_norm_backward", "add_rms_norm_backward", "qk_norm_backward",
           "set_num_threads", "num_threads", "Checkpoint", "NormInfo", "GLM_RMS_NORM_EPS"]
__version__ = "0.1.0"

#: rms_norm_eps of GLM-4.5 and GLM-4.5-Air (config.json).
GLM_RMS_NORM_EPS = 1e-5

_desc = _arrays.desc
_as_array = _arrays.as_array


# (op, rounding, dtype codes) -> output dtype code: the library's answers, remembered (the
# extension call and its argument list cost ~2 us of a decode call). Only valid roundings
# get here: output_dtype raises for any other, and a raise stores nothing.
_OUT_CODES = {}


def _new_out(op, like, rounding, *args):
    """A new output of `op` for arrays `args`: of like's kind and shape, the dtype the C++
    library's rule gives (glmnorm::RmsNormOutputDType / AddRmsNormOutputDType)."""
    key = (op, rounding, *map(_arrays.dtype_code, args))
    code = _OUT_CODES.get(key) if type(rounding) is str else None
    if code is None:
        code = _ext.output_dtype(op, list(key[2:]), rounding)
        if type(rounding) is str:
            _OUT_CODES[key] = code
    return _arrays.empty_like(like, like.shape, code)


def rms_norm(x, weight, *, eps=GLM_RMS_NORM_EPS, rounding="cast-then-scale",
             weight_offset=0.0, out=None):
    """RMSNorm over the last axis of ``x``; returns ``out`` (a new array when None).

    Args:
      x: [..., D] (rank 1 to 4), float32 / bfloat16 / float16.
      weight: [D] gamma, float32 / bfloat16 / float16.
      eps: added inside the square root; finite and >= 0 (GLM-4.5: 1e-5).
      rounding: "cast-then-scale" (Transformers' order: y = W * T(x*r)) or "single" (one
        rounding: y = Out(x*r*W)).
      weight_offset: added to the weight in float32 (1.0 for Gemma-style 1 + gamma).
      out: [..., D] output; may be ``x`` itself (in place). When None a new array of x's kind
        is returned with dtype promote(weight, x) ("cast-then-scale": equal dtypes stay, a mix
        gives float32, as in PyTorch) or x's dtype ("single").

    Raises:
      ValueError: shapes / strides / eps / weight_offset / overlapping out (message from C++).
      TypeError: unsupported dtypes or objects.
    """
    fn = "glmnorm.rms_norm"  # named in error messages
    x = _as_array(x, "x", fn)
    weight = _as_array(weight, "weight", fn)
    out = _new_out("rms_norm", x, rounding, x, weight) if out is None else _as_array(out, "out", fn)
    _ext.rms_norm(_desc(x, "x", fn), _desc(weight, "weight", fn), _desc(out, "out", fn, True),
                  eps, rounding, weight_offset)
    return out


def add_rms_norm(residual, delta, weight, *, eps=GLM_RMS_NORM_EPS, rounding="cast-then-scale",
                 weight_offset=0.0, normalize_rounded_sum=True, out=None):
    """Fused residual add and RMSNorm: ``residual += delta`` IN PLACE, then returns the norm.

        residual <- R(residual + delta)   (float32 add, one rounding to residual's dtype R)
        y        <- rms_norm(residual)    (same options as rms_norm)

    This is the pre-norm decoder step ``hidden = residual + attn_out; residual = hidden;
    hidden = post_attention_layernorm(hidden)`` of Transformers' Glm4MoeDecoderLayer in one
    pass over memory, with identical bits.

    Args:
      residual: [..., D] float32 / bfloat16 / float16, updated in place (must be writable).
      delta: same shape; residual's dtype, or bf16 / f16 with a float32 residual.
      weight: [D] float32 or delta's dtype.
      normalize_rounded_sum: True (Transformers) normalises the rounded sum; False the float32
        sum before rounding (FlashInfer, vLLM CPU).
      out: [..., D]; may be ``delta`` (in place), never ``residual``. None: a new array,
        dtype promote(weight, residual) ("cast-then-scale") or delta's dtype ("single").

    Raises:
      ValueError, TypeError: as rms_norm; nothing is written (residual unchanged) on error.
    """
    fn = "glmnorm.add_rms_norm"  # named in error messages
    residual = _as_array(residual, "residual", fn)
    delta = _as_array(delta, "delta", fn)
    weight = _as_array(weight, "weight", fn)
    out = (_new_out("add_rms_norm", residual, rounding, residual, delta, weight) if out is None
           else _as_array(out, "out", fn))
    _ext.add_rms_norm(_desc(residual, "residual", fn, True), _desc(delta, "delta", fn),
                      _desc(weight, "weight", fn), _desc(out, "out", fn, True), eps, rounding,
                      weight_offset, normalize_rounded_sum)
    return out


def _opt_desc(a, name, fn):
    return _arrays.EMPTY if a is None else _desc(a, name, fn)


def _rope(fn, cos, sin, positions):
    """Descriptors of (cos, sin, positions), empty for None: the library checks them against
    rotary_dim (tables without rotary_dim, or rotary_dim without tables, are errors)."""
    return (_opt_desc(cos, "cos", fn), _opt_desc(sin, "sin", fn),
            _opt_desc(positions, "positions", fn))


def qk_norm(qkv, q_weight, k_weight, *, num_q_heads, num_k_heads, num_v_heads, head_dim,
            eps=GLM_RMS_NORM_EPS, rounding="cast-then-scale", weight_offset=0.0,
            rotary_dim=0, cos=None, sin=None, positions=None, out=None):
    """QK-norm of a fused QKV buffer, optionally fused with GLM's partial RoPE.

    ``qkv`` is [..., (num_q_heads + num_k_heads + num_v_heads) * head_dim] (any row stride, the
    heads contiguous inside a row: a slice of a larger buffer works). Each q head is normalised
    with ``q_weight`` and each k head with ``k_weight`` (both [head_dim]); v is neither read
    nor written. Semantics: Transformers' Glm4MoeAttention applies q_norm / k_norm
    (Glm4MoeRMSNorm over head_dim) and then apply_rotary_pos_emb with partial_rotary_factor
    0.5 (docs/SPEC.md §4.3-4.4).

    RoPE (rotary_dim > 0, even, <= head_dim; GLM-4.5: head_dim / 2): rotate-half over the
    first rotary_dim dims of each normalised head, in float32, rounded once. ``cos``, ``sin``:
    float32 [positions, rotary_dim / 2]; ``positions``: int64 rows of the tables, [tokens]
    (the flattened leading dims) or shaped like qkv's leading dims ([B, S]: Transformers'
    ``position_ids``; a dim of 1 is broadcast, so [1, S] serves every sequence). None: token t
    uses row t, for one sequence only: qkv [B, S, W] with B > 1 needs positions (ValueError
    otherwise).

    Args:
      out: same shape and dtype family as qkv; ``out=qkv`` normalises in place (the usual
        call: only the q and k columns are written). None: a new array of qkv's dtype, its
        q and k columns normalised from qkv's and its v columns copied (as
        ``torch.ops.glmnorm.qk_norm``).

    Returns: ``out``.
    Raises: ValueError (heads, strides, tables, a position out of range), TypeError (dtypes).
    """
    fn = "glmnorm.qk_norm"  # named in error messages
    qkv = _as_array(qkv, "qkv", fn)
    new_out = out is None
    if new_out:
        # A new array: q and k normalised into it, then v's columns copied, as the torch op
        # does (one pass over qkv, and the library judges qkv's layout in both).
        din = _desc(qkv, "qkv", fn)
        out = _arrays.empty_like(qkv, qkv.shape, din[1])
        dout = _desc(out, "out", fn, True)
    else:
        out = _as_array(out, "out", fn)
        dout = _desc(out, "out", fn, True)
        din = dout if out is qkv else _desc(qkv, "qkv", fn)
    _ext.qk_norm(din, dout, num_q_heads, num_k_heads, num_v_heads, head_dim,
                 _desc(q_weight, "q_weight", fn), _desc(k_weight, "k_weight", fn), eps, rounding,
                 weight_offset, rotary_dim, *_rope(fn, cos, sin, positions))
    if new_out:  # the heads were checked by the library: whole numbers
        v_begin = (int(num_q_heads) + int(num_k_heads)) * int(head_dim)
        out[..., v_begin:] = qkv[..., v_begin:]
    return out


def _quant_out(fn, x, shape, dtype, out, scale, scales):
    code = _arrays.code_of(dtype, "dtype", fn)
    if code not in (I8, F8E4M3):
        raise TypeError(f"{fn}: dtype must be int8 or float8_e4m3fn, got {dtype!r}")
    out = _arrays.empty_like(x, shape, code) if out is None else _as_array(out, "out", fn)
    if scale is None:
        scales = (_arrays.empty_like(x, (_math.prod(shape[:-1]),), F32) if scales is None
                  else _as_array(scales, "scales", fn))
        return out, scales, _desc(scales, "scales", fn, True)
    return out, None, _arrays.EMPTY


def rms_norm_quant(x, weight, *, dtype="f8e4m3", scale=None, eps=GLM_RMS_NORM_EPS,
                   rounding="cast-then-scale", weight_offset=0.0, out=None, scales=None):
    """RMSNorm with a quantised output, for an FP8 or int8 GEMM next.

        q = saturate(RNE(y / scale))   y exactly as rms_norm would store it (docs/DECODER.md)

    Args:
      x, weight: as rms_norm (weight float32 or x's dtype).
      dtype: "f8e4m3" (OCP e4m3fn, saturating at +-448) or "int8" (saturating at +-127); also
        torch / numpy dtypes.
      scale: a static per-tensor scale (finite, > 0); None: a dynamic scale per row (token),
        max|finite y| / qmax, written to ``scales``.
      out: [..., D] int8 / float8_e4m3fn, must not overlap x; None: a new array.
      scales: float32 [rows] (dynamic only); None: a new array.

    Returns: (q, scales); scales is None with a static scale. Dequantise as q * scale.
    Raises: ValueError, TypeError as rms_norm.
    """
    fn = "glmnorm.rms_norm_quant"  # named in error messages
    x = _as_array(x, "x", fn)
    out, scales, sd = _quant_out(fn, x, x.shape, dtype, out, scale, scales)
    _ext.rms_norm_quant(_desc(x, "x", fn), _desc(weight, "weight", fn), _desc(out, "out", fn, True),
                        scale, sd, eps, rounding, weight_offset)
    return out, scales


def add_rms_norm_quant(residual, delta, weight, *, dtype="f8e4m3", scale=None,
                       eps=GLM_RMS_NORM_EPS, rounding="cast-then-scale", weight_offset=0.0,
                       normalize_rounded_sum=True, out=None, scales=None):
    """``residual += delta`` IN PLACE, then rms_norm_quant of the sum (see add_rms_norm and
    rms_norm_quant). ``out`` must not overlap residual or delta. Returns (q, scales)."""
    fn = "glmnorm.add_rms_norm_quant"  # named in error messages
    residual = _as_array(residual, "residual", fn)
    out, scales, sd = _quant_out(fn, residual, residual.shape, dtype, out, scale, scales)
    _ext.add_rms_norm_quant(_desc(residual, "residual", fn, True), _desc(delta, "delta", fn),
                            _desc(weight, "weight", fn), _desc(out, "out", fn, True), scale, sd,
                            eps, rounding, weight_offset, normalize_rounded_sum)
    return out, scales


# --- backward (docs/BACKWARD.md) -----------------------------------------------------------

def _float_code(a):
    """a's dtype code when it is a float activation dtype, else F32 (the call itself then
    reports the dtype)."""
    code = _arrays.dtype_code(a)
    return code if 0 <= code <= F16 else F32


def _code_or(dtype, default, name, fn):
    if dtype is None:
        return default
    code = _arrays.code_of(dtype, name, fn)
    if code not in (F32, BF16, F16):
        raise TypeError(f"{fn}: {name} must be float32, bfloat16 or float16, got {dtype!r}")
    return code


def rms_norm_backward(x, weight, dy, *, eps=GLM_RMS_NORM_EPS, rounding="cast-then-scale",
                      weight_offset=0.0, rstd=None, dweight_dtype=None, out=None):
    """Gradients (dx, dweight) of ``y = rms_norm(x, weight, ...)`` given dy = dL/dy.

    What torch autograd computes through Transformers' Glm4MoeRMSNorm (cast-then-scale) or
    through F.rms_norm's op order ("single"), with float32 accumulation and a
    deterministic dweight: the bits do not depend on the thread count (docs/BACKWARD.md).

    Args:
      x: [..., D] the forward's input, float32 / bfloat16 / float16.
      weight: [D] the forward's weight.
      dy: [..., D] like x, in the forward's output dtype (promote(weight, x) for
        "cast-then-scale", x's dtype for "single").
      eps, rounding, weight_offset: the forward's.
      rstd: optional float32 [rows] 1/rms per row as the forward computed it; None:
        recomputed (same bits).
      dweight_dtype: dtype of dweight (float32 / bfloat16 / float16, names or torch / numpy
        dtypes); None: weight's dtype.
      out: dx [..., D] in x's dtype (or float32); may be ``dy`` (in place, same dtype).
        None: a new array of x's kind and dtype.

    Returns: (dx, dweight); dweight is [D], a new array.
    Raises:
      ValueError: shapes, strides, eps, overlaps (message from C++).
      TypeError: unsupported dtypes or objects.
    """
    fn = "glmnorm.rms_norm_backward"  # named in error messages
    x = _as_array(x, "x", fn)
    weight = _as_array(weight, "weight", fn)
    out = _arrays.empty_like(x, x.shape, _float_code(x)) if out is None else _as_array(
        out, "out", fn)
    dweight = _arrays.empty_like(x, (weight.shape[-1] if len(weight.shape) else 0,),
                                 _code_or(dweight_dtype, _float_code(weight), "dweight_dtype", fn))
    _ext.rms_norm_backward(_desc(x, "x", fn), _desc(weight, "weight", fn), _desc(dy, "dy", fn),
                           _desc(out, "out", fn, True), _desc(dweight, "dweight", fn, True),
                           _opt_desc(rstd, "rstd", fn), eps, rounding, weight_offset)
    return out, dweight


def add_rms_norm_backward(residual, weight, dy, d_residual_out=None, *,
                          eps=GLM_RMS_NORM_EPS, rounding="cast-then-scale", weight_offset=0.0,
                          normalize_rounded_sum=True, rstd=None, delta_dtype=None,
                          dweight_dtype=None, out=None):
    """Gradients of ``y = add_rms_norm(residual, delta, weight, ...)`` in one pass.

    Args:
      residual: [..., D] the residual AFTER the forward (h = R(residual + delta)).
      weight: [D]; dy: [..., D] in the forward's output dtype (as rms_norm_backward).
      d_residual_out: [..., D] in residual's dtype: the gradient reaching the updated residual
        from later layers; None: zero.
      normalize_rounded_sum: must be True when residual is 16-bit (ValueError otherwise).
      rstd, dweight_dtype, eps, rounding, weight_offset: as rms_norm_backward.
      delta_dtype: delta's dtype when it differs from residual's (float32 residual stream,
        bf16 activations): a second gradient in that dtype is returned; None: the same.
      out: d_residual [..., D] in residual's dtype; may be ``d_residual_out`` or ``dy``.

    Returns: (d_residual, d_delta, dweight). d_residual is the gradient of the residual
    input (and of delta); d_delta is d_residual itself unless delta_dtype differs.
    Raises: ValueError, TypeError as rms_norm_backward.
    """
    fn = "glmnorm.add_rms_norm_backward"  # named in error messages
    residual = _as_array(residual, "residual", fn)
    weight = _as_array(weight, "weight", fn)
    rc = _float_code(residual)
    out = _arrays.empty_like(residual, residual.shape, rc) if out is None else _as_array(
        out, "out", fn)
    d_delta = None
    if delta_dtype is not None:
        dc = _code_or(delta_dtype, rc, "delta_dtype", fn)
        if dc != rc:
            d_delta = _arrays.empty_like(residual, residual.shape, dc)
    dweight = _arrays.empty_like(residual, (weight.shape[-1] if len(weight.shape) else 0,),
                                 _code_or(dweight_dtype, _float_code(weight), "dweight_dtype", fn))
    _ext.add_rms_norm_backward(
        _desc(residual, "residual", fn), _desc(weight, "weight", fn), _desc(dy, "dy", fn),
        _opt_desc(d_residual_out, "d_residual_out", fn), _desc(out, "out", fn, True),
        _arrays.EMPTY if d_delta is None else _desc(d_delta, "d_delta", fn, True),
        _desc(dweight, "dweight", fn, True), _opt_desc(rstd, "rstd", fn), eps, rounding, weight_offset,
        normalize_rounded_sum)
    return out, (out if d_delta is None else d_delta), dweight


def qk_norm_backward(qkv, q_weight, k_weight, dqkv, *, num_q_heads, num_k_heads, num_v_heads,
                     head_dim, eps=GLM_RMS_NORM_EPS, rounding="cast-then-scale",
                     weight_offset=0.0, rotary_dim=0, cos=None, sin=None, positions=None,
                     dweight_dtype=None, out=None):
    """Gradients of ``qk_norm``: (dqkv_in, dq_weight, dk_weight).

    Args:
      qkv: the forward's input [..., (nq + nk + nv) * head_dim].
      dqkv: gradient of the forward's output, same layout, the forward's output dtype.
      rotary_dim, cos, sin, positions: the forward's RoPE (0: it had none). With RoPE, dqkv
        is the gradient of the rotated heads: it is rotated back (float64 products and sum,
        rounded to float32 and its dtype) before the norm's backward, as torch autograd through Transformers'
        apply_rotary_pos_emb would (and no less accurately).
      out: gradient of qkv, same layout, qkv's dtype; its q and k columns are written, its v
        columns are not touched (the v gradient is dqkv's v columns: ``out=dqkv``, in place,
        gives the full gradient). None: a new array of qkv's dtype and shape holding the
        full gradient (v's columns: dqkv's, converted to qkv's dtype).
      dweight_dtype: dtype of dq_weight / dk_weight; None: q_weight's dtype.
    Raises: ValueError (heads, strides, RoPE tables or positions), TypeError.
    """
    fn = "glmnorm.qk_norm_backward"  # named in error messages
    qkv = _as_array(qkv, "qkv", fn)
    dqkv = _as_array(dqkv, "dqkv", fn)
    q_weight = _as_array(q_weight, "q_weight", fn)
    heads = dict(num_q_heads=num_q_heads, num_k_heads=num_k_heads, num_v_heads=num_v_heads,
                 head_dim=head_dim, rotary_dim=rotary_dim)
    _ext.check_args(fn, heads)  # integers, before any size is used below
    qkv_desc = _desc(qkv, "qkv", fn)
    dout = _desc(dqkv, "dqkv", fn)  # checked by the library as given: no copy, no conversion
    fresh = out is None  # then qkv's dtype and shape; v's columns copied from dqkv after the call
    out = _arrays.empty_like(qkv, qkv.shape, qkv_desc[1]) if fresh else _as_array(out, "out", fn)
    din = _desc(out, "out", fn, True)
    if out is dqkv:
        dout = din
    code = _code_or(dweight_dtype, _float_code(q_weight), "dweight_dtype", fn)
    # A head_dim that cannot be right (the library then says why) gets empty
    # gradients instead of an allocation of that size.
    width = qkv.shape[-1] if len(qkv.shape) else 0
    n = head_dim if 1 <= head_dim <= width else 0
    dq = _arrays.empty_like(qkv, (n,), code)
    dk = _arrays.empty_like(qkv, (n,), code)
    _ext.qk_norm_backward(qkv_desc, dout, din, num_q_heads,
                          num_k_heads, num_v_heads, head_dim, _desc(q_weight, "q_weight", fn),
                          _desc(k_weight, "k_weight", fn), _desc(dq, "dq_weight", fn, True),
                          _desc(dk, "dk_weight", fn, True), eps, rounding, weight_offset,
                          rotary_dim, *_rope(fn, cos, sin, positions))
    if fresh and num_v_heads > 0:
        v = slice((num_q_heads + num_k_heads) * head_dim, None)
        out[..., v] = dqkv[..., v]  # converted to out's dtype (numpy and torch alike)
    return out, dq, dk


def set_num_threads(n):
    """Threads (caller included) of glmnorm's own pool; n >= 1 (ValueError otherwise).
    The pool uses min(n, the CPUs this process may run on), and num_threads() reports
    that; the default is every such CPU. Work under ~2 us per thread runs on fewer
    threads; workers spin for 50 us after a call before they sleep, and a call under ~50 us
    of work wakes no sleeping worker (GLMNORM_SPIN_US=0 turns the spin off;
    include/glmnorm/execution.h). The torch ops use the same pool (one native library,
    libglmnorm.so); independent of torch.set_num_threads."""
    _ext.set_num_threads(n)


def num_threads():
    """Threads of glmnorm's pool (see set_num_threads)."""
    return _ext.num_threads()


NormInfo = _namedtuple("NormInfo", ["name", "role", "layer", "expected_width", "present",
                                     "shard", "dtype", "shape", "usable"])
NormInfo.__doc__ = """One expected norm of a checkpoint.

name ("model.layers.3.self_attn.q_norm.weight"), role ("input_layernorm",
"post_attention_layernorm", "q_norm", "k_norm", "final_norm", "mtp_enorm", "mtp_hnorm",
"mtp_shared_head_norm"), layer (-1 for model.norm), expected_width, present, shard,
dtype (safetensors name, "BF16"), shape (as stored), usable (passed every check)."""


class Checkpoint:
    """The RMSNorms of a GLM-4.5 (glm4_moe) checkpoint directory, found and checked.

    Reads config.json and the shard index, maps only the shards holding norms (read-only)
    and checks every norm (docs/CHECKPOINTS.md). ``gamma(name)`` returns a zero-copy,
    read-only numpy array into the mapping (bf16 as ml_dtypes.bfloat16) that keeps the
    mapping alive.

    Raises ValueError (one line: the file and why) when the directory cannot be read.
    """

    def __init__(self, path):
        if isinstance(path, bytes):
            path = _os.fsdecode(path)
        if not isinstance(path, (str, _os.PathLike)):
            raise TypeError(f"glmnorm.Checkpoint: path must be a str or os.PathLike, got "
                            f"{type(path).__name__}")
        self._c = _Checkpoint(_os.fspath(path))
        self.dir = self._c.dir
        self.model_name = self._c.model_name
        self.model_type = self._c.model_type
        self.hidden_size = self._c.hidden_size
        self.use_qk_norm = self._c.use_qk_norm
        self.problems = list(self._c.problems)
        self.mapped_shards = list(self._c.mapped_shards)
        self.norms = [NormInfo(*n) for n in self._c.norms()]

    @property
    def sound(self):
        """True when problems is empty."""
        return not self.problems

    @property
    def eps(self):
        """rms_norm_eps from config.json as float32 (ValueError when absent)."""
        return self._c.eps()

    def gamma(self, name):
        """The gamma of norm tensor `name`: read-only numpy [width] (float32, float16 or
        ml_dtypes.bfloat16), zero-copy. ValueError when it is not a norm of this model or
        failed its checks."""
        array, dtype = self._c.gamma(name)
        if dtype == "bf16":
            array = array.view(_arrays._NP_DTYPES[BF16])
        return array

    def __repr__(self):
        return (f"Checkpoint({self.dir!r}, model={self.model_name!r}, norms={len(self.norms)}, "
                f"problems={len(self.problems)})")
