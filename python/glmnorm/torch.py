"""glmnorm for PyTorch: ``torch.ops.glmnorm.*`` ops, an RMSNorm module, a Glm4Moe patch.

Ops (namespace ``glmnorm``; CPU tensors):

    torch.ops.glmnorm.rms_norm(x, weight, eps, rounding, weight_offset) -> y
    torch.ops.glmnorm.add_rms_norm(residual!, delta, weight, eps, rounding, weight_offset,
                                   normalize_rounded_sum) -> y          (residual updated)
    torch.ops.glmnorm.qk_norm_(qkv!, q_weight, k_weight, num_q_heads, num_k_heads,
                               num_v_heads, head_dim, eps, rounding, weight_offset,
                               rotary_dim, cos, sin, positions) -> ()   (in place)
    torch.ops.glmnorm.rms_norm_quant(x, weight, dtype, scale, eps, rounding,
                                     weight_offset) -> (q, scales)
    torch.ops.glmnorm.add_rms_norm_quant(residual!, delta, weight, dtype, scale, eps, rounding,
                                         weight_offset, normalize_rounded_sum) -> (q, scales)
    torch.ops.glmnorm.rms_norm_backward(x, weight, dy, eps, rounding, weight_offset)
                                         -> (dx, dweight)
    torch.ops.glmnorm.qk_norm_backward(qkv, q_weight, k_weight, dqkv, num_q_heads, num_k_heads,
                                       num_v_heads, head_dim, eps, rounding, weight_offset)
                                         -> (dqkv_in, dq_weight, dk_weight)

``!`` marks the arguments an op mutates (declared in its schema, so torch.compile and
functionalization see the write). Each op has a fake (meta) kernel: ``torch.compile
(fullgraph=True)`` keeps them in the graph. Semantics, dtypes and errors are those of the
functions of the same name in ``glmnorm`` (docs/SPEC.md); ``rounding`` is
"cast-then-scale" (Transformers' Glm4MoeRMSNorm) or "single". With a static ``scale``
(>0) the quant ops return scales = [scale]; with ``scale=None`` one float32 scale per row.

Registration: the schemas, fake kernels and autograd are registered here (torch.library);
the CPU kernels come from the C++ library ``libglmnorm_torch`` (TORCH_LIBRARY_IMPL, built
next to the extension when torch is present at build time): a call goes from the dispatcher
straight to C++, 2.5-4.2 us over the kernel alone on a 1 x 5120 bf16 row, against ~11.6 us
for a Python ``custom_op`` (docs/PYTHON.md). Without that library (glmnorm built without torch)
the same ops get Python CPU kernels calling the extension: same results, slower calls;
``glmnorm.torch.BACKEND`` says which ("cpp" or "python").

Autograd: ``rms_norm`` (hence ``RMSNorm`` and a patched model) and the functional ``qk_norm``
without RoPE have a backward, through ``rms_norm_backward`` / ``qk_norm_backward``
(deterministic; the gradients torch autograd computes through Glm4MoeRMSNorm, docs/BACKWARD.md).
With libglmnorm_torch the autograd is C++ (torch::autograd::Function in torch_ops.cc: calls
that need no graph cost what they did before); with the Python kernels it is
torch.library.register_autograd (``_register_autograd`` below). The ops that update an input in
place (add_rms_norm, qk_norm_, add_rms_norm_quant), the quant ops and qk_norm with RoPE raise a
RuntimeError saying so when called with inputs that require grad in grad mode. The backward ops
themselves have no backward (no double backward).
"""

import torch
from torch import nn

from . import _arrays
from . import _glmnorm as _ext

__all__ = ["RMSNorm", "patch_glm4_moe", "rms_norm", "add_rms_norm", "qk_norm_", "qk_norm",
           "rms_norm_quant", "add_rms_norm_quant", "rms_norm_backward", "qk_norm_backward",
           "BACKEND"]

_ROUNDING = {"cast-then-scale": 0, "single": 1}
_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2, torch.int8: 3,
          torch.float8_e4m3fn: 4, torch.int64: 5}
_EMPTY = _arrays.EMPTY
_arrays._load_torch()


def _d(t, name):
    """Descriptor of a CPU tensor (the hot path: no checks beyond dtype and device;
    the C++ side checks shapes and strides)."""
    code = _CODES.get(t.dtype)
    if code is None or t.device.type != "cpu":
        return _arrays._torch_desc(t, name, False)  # raises the right error
    return (t.data_ptr(), code, t.shape, t.stride())


def _mode(rounding):
    try:
        return _ROUNDING[rounding]
    except KeyError:
        raise ValueError(f"rounding must be 'cast-then-scale' or 'single', got {rounding!r}"
                         ) from None


def _norm_dtype(weight_dtype, x_dtype, rounding):
    if rounding == "single" or weight_dtype == x_dtype:
        return x_dtype
    return torch.float32


def _rows(shape):
    n = 1
    for s in shape[:-1]:
        n *= s
    return n


# --- schemas (the one definition of every op) -------------------------------------------

_SCHEMAS = {
    "rms_norm": "rms_norm(Tensor x, Tensor weight, float eps=1e-05, "
                "str rounding='cast-then-scale', float weight_offset=0.) -> Tensor",
    "add_rms_norm": "add_rms_norm(Tensor(a!) residual, Tensor delta, Tensor weight, "
                    "float eps=1e-05, str rounding='cast-then-scale', float weight_offset=0., "
                    "bool normalize_rounded_sum=True) -> Tensor",
    "qk_norm_": "qk_norm_(Tensor(a!) qkv, Tensor q_weight, Tensor k_weight, int num_q_heads, "
                "int num_k_heads, int num_v_heads, int head_dim, float eps=1e-05, "
                "str rounding='cast-then-scale', float weight_offset=0., int rotary_dim=0, "
                "Tensor? cos=None, Tensor? sin=None, Tensor? positions=None) -> ()",
    "qk_norm": "qk_norm(Tensor qkv, Tensor q_weight, Tensor k_weight, int num_q_heads, "
               "int num_k_heads, int num_v_heads, int head_dim, float eps=1e-05, "
               "str rounding='cast-then-scale', float weight_offset=0., int rotary_dim=0, "
               "Tensor? cos=None, Tensor? sin=None, Tensor? positions=None) -> Tensor",
    "rms_norm_quant": "rms_norm_quant(Tensor x, Tensor weight, ScalarType dtype, "
                      "float? scale=None, float eps=1e-05, str rounding='cast-then-scale', "
                      "float weight_offset=0.) -> (Tensor, Tensor)",
    "add_rms_norm_quant": "add_rms_norm_quant(Tensor(a!) residual, Tensor delta, "
                          "Tensor weight, ScalarType dtype, float? scale=None, "
                          "float eps=1e-05, str rounding='cast-then-scale', "
                          "float weight_offset=0., bool normalize_rounded_sum=True) "
                          "-> (Tensor, Tensor)",
    "rms_norm_backward": "rms_norm_backward(Tensor x, Tensor weight, Tensor dy, "
                         "float eps=1e-05, str rounding='cast-then-scale', "
                         "float weight_offset=0.) -> (Tensor, Tensor)",
    "qk_norm_backward": "qk_norm_backward(Tensor qkv, Tensor q_weight, Tensor k_weight, "
                        "Tensor dqkv, int num_q_heads, int num_k_heads, int num_v_heads, "
                        "int head_dim, float eps=1e-05, str rounding='cast-then-scale', "
                        "float weight_offset=0.) -> (Tensor, Tensor, Tensor)",
}

_lib = torch.library.Library("glmnorm", "DEF")
for _schema in _SCHEMAS.values():
    _lib.define(_schema)


def _load_cpp_kernels():
    """Loads libglmnorm_torch (the C++ CPU kernels) when it was built, for this torch
    version; returns whether. GLMNORM_TORCH_PYTHON_KERNELS=1 forces the Python kernels."""
    import os
    import warnings
    here = os.path.dirname(os.path.abspath(__file__))
    lib = os.path.join(here, "libglmnorm_torch.so")
    if not os.path.exists(lib) or os.environ.get("GLMNORM_TORCH_PYTHON_KERNELS") == "1":
        return False
    try:
        with open(lib[:-3] + ".torch_version") as f:
            built_for = f.read().strip()
    except OSError:
        built_for = "unknown"
    if built_for != torch.__version__:
        warnings.warn(f"glmnorm: libglmnorm_torch was built for torch {built_for}, this is "
                      f"torch {torch.__version__}; using the slower Python kernels (rebuild "
                      "glmnorm to get the C++ ones)", RuntimeWarning, stacklevel=3)
        return False
    torch.ops.load_library(lib)
    _share_thread_count(lib)
    return True


def _share_thread_count(lib):
    """libglmnorm_torch has its own copy of the kernels' thread pool: make
    glmnorm.set_num_threads set it too, and give it the current count now."""
    import ctypes
    import glmnorm
    handle = ctypes.CDLL(lib)  # the library torch just loaded (same handle)
    setter, getter = handle.GlmnormTorchSetNumThreads, handle.GlmnormTorchNumThreads
    setter.argtypes, setter.restype, getter.restype = [ctypes.c_int], ctypes.c_int, ctypes.c_int
    glmnorm._THREAD_HOOKS.append(setter)
    global _cpp_num_threads
    _cpp_num_threads = getter
    if getter() != glmnorm.num_threads():
        setter(glmnorm.num_threads())


def _cpp_num_threads():
    """Threads of libglmnorm_torch's pool (tests); None with the Python kernels."""
    return None


# --- Python CPU kernels (used only without libglmnorm_torch) -----------------------------

def _py_rms_norm(x, weight, eps=1e-5, rounding="cast-then-scale", weight_offset=0.0):
    y = torch.empty(x.shape, dtype=_norm_dtype(weight.dtype, x.dtype, rounding))
    _ext.rms_norm(_d(x, "x"), _d(weight, "weight"), _d(y, "out"), eps, _mode(rounding),
                  weight_offset)
    return y


def _add_dtype(residual, delta, weight, rounding):
    if rounding == "single":
        return delta.dtype
    return _norm_dtype(weight.dtype, residual.dtype, rounding)


def _py_add_rms_norm(residual, delta, weight, eps=1e-5, rounding="cast-then-scale",
                     weight_offset=0.0, normalize_rounded_sum=True):
    y = torch.empty(residual.shape, dtype=_add_dtype(residual, delta, weight, rounding))
    _ext.add_rms_norm(_d(residual, "residual"), _d(delta, "delta"), _d(weight, "weight"),
                      _d(y, "out"), eps, _mode(rounding), weight_offset,
                      normalize_rounded_sum)
    return y


def _py_qk_norm_(qkv, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads, head_dim,
                 eps=1e-5, rounding="cast-then-scale", weight_offset=0.0, rotary_dim=0,
                 cos=None, sin=None, positions=None):
    from . import _rows_2d
    d = _rows_2d(_d(qkv, "qkv"), "qkv")
    rope = (_EMPTY, _EMPTY, _EMPTY)
    if rotary_dim:
        if cos is None or sin is None:
            raise ValueError("qk_norm: rotary_dim > 0 needs cos and sin tables")
        rope = (_d(cos, "cos"), _d(sin, "sin"),
                _EMPTY if positions is None else _d(positions, "positions"))
    _ext.qk_norm(d, d, num_q_heads, num_k_heads, num_v_heads, head_dim,
                 _d(q_weight, "q_weight"), _d(k_weight, "k_weight"), eps, _mode(rounding),
                 weight_offset, rotary_dim, *rope)


def _py_qk_norm(qkv, *args, **kwargs):
    out = torch.empty(qkv.shape, dtype=qkv.dtype)
    out.copy_(qkv)
    _py_qk_norm_(out, *args, **kwargs)
    return out


def _quant_buffers(like, dtype, scale):
    if dtype not in (torch.int8, torch.float8_e4m3fn):
        raise TypeError(f"dtype must be torch.int8 or torch.float8_e4m3fn, got {dtype}")
    q = like.new_empty(like.shape, dtype=dtype)
    scales = like.new_empty((_rows(like.shape),) if scale is None else (1,),
                            dtype=torch.float32)
    return q, scales


def _py_rms_norm_quant(x, weight, dtype, scale=None, eps=1e-5, rounding="cast-then-scale",
                       weight_offset=0.0):
    q, scales = _quant_buffers(x, dtype, scale)
    dyn = scale is None
    _ext.rms_norm_quant(_d(x, "x"), _d(weight, "weight"), _d(q, "out"), dyn,
                        1.0 if dyn else scale, _d(scales, "scales") if dyn else _EMPTY, eps,
                        _mode(rounding), weight_offset)
    if not dyn:
        scales.fill_(scale)
    return q, scales


def _py_add_rms_norm_quant(residual, delta, weight, dtype, scale=None, eps=1e-5,
                           rounding="cast-then-scale", weight_offset=0.0,
                           normalize_rounded_sum=True):
    q, scales = _quant_buffers(residual, dtype, scale)
    dyn = scale is None
    _ext.add_rms_norm_quant(_d(residual, "residual"), _d(delta, "delta"), _d(weight, "weight"),
                            _d(q, "out"), dyn, 1.0 if dyn else scale,
                            _d(scales, "scales") if dyn else _EMPTY, eps, _mode(rounding),
                            weight_offset, normalize_rounded_sum)
    if not dyn:
        scales.fill_(scale)
    return q, scales


def _py_rms_norm_backward(x, weight, dy, eps=1e-5, rounding="cast-then-scale",
                         weight_offset=0.0):
    dx = torch.empty(x.shape, dtype=x.dtype)
    dweight = torch.empty(weight.shape, dtype=weight.dtype)
    _ext.rms_norm_backward(_d(x, "x"), _d(weight, "weight"), _d(dy, "dy"), _d(dx, "dx"),
                           _d(dweight, "dweight"), _EMPTY, eps, _mode(rounding), weight_offset)
    if rounding == "cast-then-scale" and weight.dtype != x.dtype:
        # torch autograd rounds dh = dy * g to x's dtype here (see torch_ops.cc)
        dh = (dy.float() * (weight.float() + weight_offset)).to(x.dtype)
        ones = torch.ones(weight.shape, dtype=x.dtype)
        unused = torch.empty_like(ones)  # held: the kernel writes it
        _ext.rms_norm_backward(_d(x, "x"), _d(ones, "weight"), _d(dh, "dy"), _d(dx, "dx"),
                               _d(unused, "dweight"), _EMPTY, eps, 0, 0.0)
    return dx, dweight


def _py_qk_norm_backward(qkv, q_weight, k_weight, dqkv, num_q_heads, num_k_heads, num_v_heads,
                         head_dim, eps=1e-5, rounding="cast-then-scale", weight_offset=0.0):
    from . import _rows_2d
    din = torch.empty(qkv.shape, dtype=qkv.dtype)
    din.copy_(dqkv)
    dq = torch.empty(q_weight.shape, dtype=q_weight.dtype)
    dk = torch.empty(k_weight.shape, dtype=k_weight.dtype)
    d = _rows_2d(_d(din, "dqkv"), "dqkv")
    _ext.qk_norm_backward(_rows_2d(_d(qkv, "qkv"), "qkv"), d, d, num_q_heads, num_k_heads,
                          num_v_heads, head_dim, _d(q_weight, "q_weight"),
                          _d(k_weight, "k_weight"), _d(dq, "dq_weight"), _d(dk, "dk_weight"),
                          eps, _mode(rounding), weight_offset)
    return din, dq, dk


_PY_KERNELS = {"rms_norm": _py_rms_norm, "add_rms_norm": _py_add_rms_norm,
               "qk_norm_": _py_qk_norm_, "qk_norm": _py_qk_norm,
               "rms_norm_quant": _py_rms_norm_quant,
               "add_rms_norm_quant": _py_add_rms_norm_quant,
               "rms_norm_backward": _py_rms_norm_backward,
               "qk_norm_backward": _py_qk_norm_backward}

if _load_cpp_kernels():
    BACKEND = "cpp"
else:
    BACKEND = "python"
    for _name, _fn in _PY_KERNELS.items():
        _lib.impl(_name, _fn, "CPU")


# --- fake (meta) kernels: shapes and dtypes only, for torch.compile --------------------

@torch.library.register_fake("glmnorm::rms_norm")
def _(x, weight, eps=1e-5, rounding="cast-then-scale", weight_offset=0.0):
    return x.new_empty(x.shape, dtype=_norm_dtype(weight.dtype, x.dtype, rounding))


@torch.library.register_fake("glmnorm::add_rms_norm")
def _(residual, delta, weight, eps=1e-5, rounding="cast-then-scale", weight_offset=0.0,
      normalize_rounded_sum=True):
    return residual.new_empty(residual.shape,
                              dtype=_add_dtype(residual, delta, weight, rounding))


@torch.library.register_fake("glmnorm::qk_norm_")
def _(qkv, *args, **kwargs):
    return None


@torch.library.register_fake("glmnorm::qk_norm")
def _(qkv, *args, **kwargs):
    return qkv.new_empty(qkv.shape)


@torch.library.register_fake("glmnorm::rms_norm_quant")
def _(x, weight, dtype, scale=None, *args, **kwargs):
    return _quant_buffers(x, dtype, scale)


@torch.library.register_fake("glmnorm::add_rms_norm_quant")
def _(residual, delta, weight, dtype, scale=None, *args, **kwargs):
    return _quant_buffers(residual, dtype, scale)


@torch.library.register_fake("glmnorm::rms_norm_backward")
def _(x, weight, dy, *args, **kwargs):
    return x.new_empty(x.shape), weight.new_empty(weight.shape)


@torch.library.register_fake("glmnorm::qk_norm_backward")
def _(qkv, q_weight, k_weight, dqkv, *args, **kwargs):
    return (qkv.new_empty(qkv.shape), q_weight.new_empty(q_weight.shape),
            k_weight.new_empty(k_weight.shape))


# --- autograd ---------------------------------------------------------------------------

_NO_BACKWARD = ("glmnorm: torch.ops.glmnorm.{} has no backward (it updates its input in place "
                "or quantises: the differentiable ops are rms_norm and qk_norm without RoPE; in "
                "training use them, or add the residual in PyTorch). Run under torch.no_grad() "
                "/ torch.inference_mode(), or detach the inputs.")
_NO_ROPE_BACKWARD = ("glmnorm: torch.ops.glmnorm.qk_norm has no backward with rotary_dim > 0 "
                     "(the backward of the fused RoPE is not implemented): call it with "
                     "rotary_dim=0 and apply RoPE in PyTorch, or run under torch.no_grad() / "
                     "torch.inference_mode()")
_DIFFERENTIABLE = ("rms_norm", "qk_norm")


def _rms_norm_setup(ctx, inputs, output):
    x, weight, eps, rounding, weight_offset = (list(inputs) + [1e-5, "cast-then-scale", 0.0]
                                               )[:5]
    ctx.save_for_backward(x, weight)
    ctx.args = (eps, rounding, weight_offset)


def _rms_norm_backward(ctx, dy):
    if dy is None:
        return None, None, None, None, None
    x, weight = ctx.saved_tensors
    dx, dweight = torch.ops.glmnorm.rms_norm_backward(x, weight, dy.contiguous(), *ctx.args)
    return dx, dweight, None, None, None


def _qk_norm_setup(ctx, inputs, output):
    full = list(inputs) + [1e-5, "cast-then-scale", 0.0, 0, None, None, None][len(inputs) - 7:]
    if full[10]:
        raise RuntimeError(_NO_ROPE_BACKWARD)
    ctx.save_for_backward(*full[:3])
    ctx.args = tuple(full[3:10])


def _qk_norm_backward(ctx, dout):
    if dout is None:
        return (None,) * 14
    qkv, qw, kw = ctx.saved_tensors
    nq, nk, nv, hd, eps, rounding, offset = ctx.args
    dqkv, dq, dk = torch.ops.glmnorm.qk_norm_backward(qkv, qw, kw, dout.contiguous(), nq, nk,
                                                      nv, hd, eps, rounding, offset)
    return (dqkv, dq, dk) + (None,) * 11


def _register_autograd():
    """The autograd of the ops, for the Python kernel set.

    With libglmnorm_torch everything is registered in C++ (torch_ops.cc: RmsNormFunction,
    QkNormFunction, RefuseGrad for the ops without a backward), so calls pay no Python frame.
    With the Python kernels: torch.library.register_autograd for rms_norm and qk_norm, and a
    refusing Autograd kernel for the others (PyTorch's default for an op without autograd
    would warn and silently produce no gradient)."""
    if BACKEND == "cpp":
        return
    torch.library.register_autograd("glmnorm::rms_norm", _rms_norm_backward,
                                    setup_context=_rms_norm_setup, lib=_lib)
    torch.library.register_autograd("glmnorm::qk_norm", _qk_norm_backward,
                                    setup_context=_qk_norm_setup, lib=_lib)

    def refuse(name):
        op = getattr(torch.ops.glmnorm, name).default

        def kernel(*args, **kwargs):
            if torch.is_grad_enabled() and any(
                    isinstance(a, torch.Tensor) and a.requires_grad for a in args):
                raise RuntimeError(_NO_BACKWARD.format(name))
            with torch._C._AutoDispatchBelowAutograd():
                return op(*args, **kwargs)
        return kernel

    for name in _SCHEMAS:
        if name not in _DIFFERENTIABLE:
            _lib.impl(name, refuse(name), "Autograd")


_register_autograd()


# --- Python entry points (thin wrappers over torch.ops.glmnorm) -------------------------

def rms_norm(x, weight, eps=1e-5, rounding="cast-then-scale", weight_offset=0.0):
    """torch.ops.glmnorm.rms_norm: y = RMSNorm(x) (see glmnorm.rms_norm)."""
    return torch.ops.glmnorm.rms_norm(x, weight, eps, rounding, weight_offset)


def add_rms_norm(residual, delta, weight, eps=1e-5, rounding="cast-then-scale",
                 weight_offset=0.0, normalize_rounded_sum=True):
    """torch.ops.glmnorm.add_rms_norm: residual += delta in place; returns the norm."""
    return torch.ops.glmnorm.add_rms_norm(residual, delta, weight, eps, rounding,
                                          weight_offset, normalize_rounded_sum)


def qk_norm_(qkv, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads, head_dim,
             eps=1e-5, rounding="cast-then-scale", weight_offset=0.0, rotary_dim=0, cos=None,
             sin=None, positions=None):
    """torch.ops.glmnorm.qk_norm_: QK-norm (+ RoPE) of a fused QKV tensor in place; v
    untouched. Returns qkv."""
    torch.ops.glmnorm.qk_norm_(qkv, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads,
                               head_dim, eps, rounding, weight_offset, rotary_dim, cos, sin,
                               positions)
    return qkv


def qk_norm(qkv, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads, head_dim,
            eps=1e-5, rounding="cast-then-scale", weight_offset=0.0, rotary_dim=0, cos=None,
            sin=None, positions=None):
    """torch.ops.glmnorm.qk_norm: out-of-place qk_norm_ (a new tensor, v copied)."""
    return torch.ops.glmnorm.qk_norm(qkv, q_weight, k_weight, num_q_heads, num_k_heads,
                                     num_v_heads, head_dim, eps, rounding, weight_offset,
                                     rotary_dim, cos, sin, positions)


def rms_norm_quant(x, weight, dtype=torch.float8_e4m3fn, scale=None, eps=1e-5,
                   rounding="cast-then-scale", weight_offset=0.0):
    """torch.ops.glmnorm.rms_norm_quant: (q, scales) (see glmnorm.rms_norm_quant)."""
    return torch.ops.glmnorm.rms_norm_quant(x, weight, dtype, scale, eps, rounding,
                                            weight_offset)


def add_rms_norm_quant(residual, delta, weight, dtype=torch.float8_e4m3fn, scale=None,
                       eps=1e-5, rounding="cast-then-scale", weight_offset=0.0,
                       normalize_rounded_sum=True):
    """torch.ops.glmnorm.add_rms_norm_quant: residual += delta in place; (q, scales)."""
    return torch.ops.glmnorm.add_rms_norm_quant(residual, delta, weight, dtype, scale, eps,
                                                rounding, weight_offset,
                                                normalize_rounded_sum)


def rms_norm_backward(x, weight, dy, eps=1e-5, rounding="cast-then-scale", weight_offset=0.0):
    """torch.ops.glmnorm.rms_norm_backward: (dx, dweight) of rms_norm given dy (dx in x's
    dtype, dweight in weight's; see glmnorm.rms_norm_backward)."""
    return torch.ops.glmnorm.rms_norm_backward(x, weight, dy, eps, rounding, weight_offset)


def qk_norm_backward(qkv, q_weight, k_weight, dqkv, num_q_heads, num_k_heads, num_v_heads,
                     head_dim, eps=1e-5, rounding="cast-then-scale", weight_offset=0.0):
    """torch.ops.glmnorm.qk_norm_backward: (dqkv_in, dq_weight, dk_weight) of qk_norm without
    RoPE (v's gradient passed through from dqkv)."""
    return torch.ops.glmnorm.qk_norm_backward(qkv, q_weight, k_weight, dqkv, num_q_heads,
                                              num_k_heads, num_v_heads, head_dim, eps, rounding,
                                              weight_offset)


# --- nn.Module and the Glm4Moe patch ----------------------------------------------------

class RMSNorm(nn.Module):
    """Drop-in for Transformers' Glm4MoeRMSNorm, computed by glmnorm.

    Same parameter (``weight`` [hidden_size], initialised to ones), same attribute
    ``variance_epsilon``, so ``load_state_dict`` of a Glm4MoeRMSNorm works unchanged, and the
    same output bits (cast-then-scale order; bf16 outputs bit-identical, f32 within the ulp
    bound of docs/SPEC.md §2). Input [..., hidden_size], float32 / bfloat16 / float16, on the
    CPU; output dtype as the reference's (weight * x in PyTorch's promotion).
    Differentiable: x.grad and weight.grad as torch autograd through Glm4MoeRMSNorm computes
    them (glmnorm.torch.rms_norm_backward; docs/PYTHON.md "Autograd").
    """

    def __init__(self, hidden_size, eps=1e-5, *, rounding="cast-then-scale",
                 weight_offset=0.0, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.variance_epsilon = eps
        self.rounding = rounding
        self.weight_offset = weight_offset

    @classmethod
    def from_module(cls, module):
        """A glmnorm RMSNorm sharing `module`'s weight Parameter (no copy) and eps."""
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.weight = module.weight
        new.variance_epsilon = module.variance_epsilon
        new.rounding = "cast-then-scale"
        new.weight_offset = 0.0
        return new

    def forward(self, hidden_states):
        shape = hidden_states.shape
        if hidden_states.dim() > 4:
            hidden_states = hidden_states.reshape(-1, shape[-1])
        y = torch.ops.glmnorm.rms_norm(hidden_states, self.weight, self.variance_epsilon,
                                       self.rounding, self.weight_offset)
        return y.view(shape) if len(shape) > 4 else y

    def extra_repr(self):
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}, glmnorm"


def patch_glm4_moe(model):
    """Replaces every Glm4MoeRMSNorm of a Transformers Glm4Moe model in place by
    glmnorm.torch.RMSNorm (sharing the weight Parameters: the state dict is unchanged) and
    returns the model.

    Covers the decoder layers' input_layernorm and post_attention_layernorm, the q_norm /
    k_norm of attention (when config.use_qk_norm), model.norm, and any other module of the
    class (MTP layers where a model defines them). The residual add is not fused into the
    following norm: Glm4MoeDecoderLayer.forward is left as Transformers wrote it, so the
    patched model computes the same bits with the same code around the norms
    (docs/PYTHON.md). Returns the model; raises TypeError when it holds no Glm4MoeRMSNorm.
    """
    from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRMSNorm

    targets = [(name, mod) for name, mod in model.named_modules()
               if isinstance(mod, Glm4MoeRMSNorm)]
    if not targets:
        raise TypeError(f"patch_glm4_moe: {type(model).__name__} holds no Glm4MoeRMSNorm")
    for name, mod in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, RMSNorm.from_module(mod))
    return model
