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
                                       num_v_heads, head_dim, eps, rounding, weight_offset,
                                       rotary_dim, cos, sin, positions)
                                         -> (dqkv_in, dq_weight, dk_weight)

``!`` marks the arguments an op mutates (declared in its schema, so torch.compile and
functionalization see the write). Each op has a fake (meta) kernel: ``torch.compile
(fullgraph=True)`` keeps them in the graph. Semantics, dtypes and errors are those of the
functions of the same name in ``glmnorm`` (docs/SPEC.md); ``rounding`` is
"cast-then-scale" (Transformers' Glm4MoeRMSNorm) or "single". With a static ``scale``
(>0) the quant ops return scales = [scale]; with ``scale=None`` one float32 scale per row.

Errors: ValueError / TypeError naming the op and the argument, as the package's functions
(``glmnorm.rms_norm``...). The wrappers below also turn an argument of the wrong Python type
into a TypeError; ``torch.ops.glmnorm.*`` called directly report that as every torch op does
(torch's RuntimeError quoting the schema).

Registration: the schemas and fake kernels are registered here (torch.library); the CPU
and Autograd kernels come from the C++ library ``libglmnorm_torch`` (TORCH_LIBRARY_IMPL,
built against the torch of the environment glmnorm was installed into): a call goes from
the dispatcher straight to C++, 2.5-4.2 us over the kernel alone on a 1 x 5120 bf16 row
(docs/PYTHON.md). There is no other kernel set: without that library, or with a torch other
than the one it was built against, importing this module raises ImportError with the
command that fixes it.

Autograd: ``rms_norm`` (hence ``RMSNorm`` and a patched model) and the functional ``qk_norm``
(with or without RoPE; the cos / sin tables get no gradient) have a backward, through ``rms_norm_backward`` / ``qk_norm_backward``
(deterministic; the gradients torch autograd computes through Glm4MoeRMSNorm, docs/BACKWARD.md).
The autograd is C++ (torch::autograd::Function in torch_ops.cc: calls that need no graph
pay no Python frame). The ops that update an input in
place (add_rms_norm, qk_norm_, add_rms_norm_quant) and the quant ops raise a
RuntimeError saying so when called with inputs that require grad in grad mode. The backward ops
themselves have no backward (no double backward).
"""

import functools
import inspect

try:
    import torch
except ImportError as _e:  # ModuleNotFoundError, or a torch that fails to load
    raise ImportError(
        f"glmnorm.torch needs PyTorch, which cannot be imported here ({_e}): install torch "
        "(pip install torch), then reinstall glmnorm from its source directory so that its "
        "torch ops are built against it: pip install --force-reinstall --no-deps .") from _e
from torch import nn

from . import _arrays
from . import _glmnorm as _ext

__all__ = ["RMSNorm", "patch_glm4_moe", "rms_norm", "add_rms_norm", "qk_norm_", "qk_norm",
           "rms_norm_quant", "add_rms_norm_quant", "rms_norm_backward", "qk_norm_backward"]

_arrays._load_torch()


def _out_dtype(op, *tensors_and_rounding):
    """The dtype of a new output of `op` (the C++ library's rule)."""
    *tensors, rounding = tensors_and_rounding
    code = _ext.output_dtype(op, [_arrays.dtype_code(t) for t in tensors], rounding)
    return _arrays._TORCH_DTYPES[code]


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
                        "float weight_offset=0., int rotary_dim=0, Tensor? cos=None, "
                        "Tensor? sin=None, Tensor? positions=None) -> (Tensor, Tensor, Tensor)",
}

_lib = torch.library.Library("glmnorm", "DEF")
for _schema in _SCHEMAS.values():
    _lib.define(_schema)


_REINSTALL = ("reinstall glmnorm in this environment, from its source directory: "
              "pip install --force-reinstall --no-deps .")


def _load_kernels():
    """Loads libglmnorm_torch, the C++ CPU and Autograd kernels of the ops; ImportError when
    it is missing or was built against another torch (its C++ ABI is torch's)."""
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    lib = os.path.join(here, "libglmnorm_torch.so")
    if not os.path.exists(lib):
        raise ImportError("glmnorm.torch: glmnorm was built without torch (torch was not "
                          "installed in this environment when glmnorm was built), so it has "
                          f"no torch ops; {_REINSTALL}")
    try:
        with open(lib[:-3] + ".torch_version") as f:
            built_for = f.read().strip()
    except OSError:
        built_for = "unknown"
    if built_for != torch.__version__:
        raise ImportError(f"glmnorm.torch: glmnorm's torch ops were built for torch {built_for}, "
                          f"this is torch {torch.__version__} (torch's C++ ABI changes between "
                          f"versions); {_REINSTALL}")
    torch.ops.load_library(lib)


_load_kernels()


# --- fake (meta) kernels: shapes and dtypes only, for torch.compile --------------------

def _fake(op):
    """torch.library.register_fake for glmnorm::op, after the check PyTorch's own ops make
    first: every tensor argument on one device. The fake kernel is also the Meta kernel,
    and the dispatcher picks it whenever one argument is on meta, so without the check a
    CPU input with a weight left on meta (a model built on meta and never materialised)
    got an uninitialised CPU tensor back instead of an error."""
    names = [a.name for a in getattr(torch.ops.glmnorm, op).default._schema.arguments]

    def register(fn):
        def checked(*args, **kwargs):
            tensors = [(n, a) for n, a in [*zip(names, args), *kwargs.items()]
                       if isinstance(a, torch.Tensor)]
            first_name, first = tensors[0]
            for name, t in tensors[1:]:
                if t.device != first.device:
                    raise ValueError(f"glmnorm.{op}: {name} is on {t.device} but {first_name} "
                                     f"is on {first.device}; every tensor argument must be on "
                                     "one device")
            return fn(*args, **kwargs)
        torch.library.register_fake(f"glmnorm::{op}")(checked)
        return fn
    return register


@_fake("rms_norm")
def _(x, weight, eps=1e-5, rounding="cast-then-scale", weight_offset=0.0):
    return x.new_empty(x.shape, dtype=_out_dtype("rms_norm", x, weight, rounding))


@_fake("add_rms_norm")
def _(residual, delta, weight, eps=1e-5, rounding="cast-then-scale", weight_offset=0.0,
      normalize_rounded_sum=True):
    return residual.new_empty(residual.shape,
                              dtype=_out_dtype("add_rms_norm", residual, delta, weight, rounding))


@_fake("qk_norm_")
def _(qkv, *args, **kwargs):
    return None


@_fake("qk_norm")
def _(qkv, *args, **kwargs):
    return qkv.new_empty(qkv.shape)


def _quant_buffers(like, dtype, scale):
    q = like.new_empty(like.shape, dtype=dtype)
    rows = like.numel() // max(like.shape[-1], 1) if like.dim() else 1
    return q, like.new_empty((rows,) if scale is None else (1,), dtype=torch.float32)


@_fake("rms_norm_quant")
def _(x, weight, dtype, scale=None, *args, **kwargs):
    return _quant_buffers(x, dtype, scale)


@_fake("add_rms_norm_quant")
def _(residual, delta, weight, dtype, scale=None, *args, **kwargs):
    return _quant_buffers(residual, dtype, scale)


@_fake("rms_norm_backward")
def _(x, weight, dy, *args, **kwargs):
    return x.new_empty(x.shape), weight.new_empty(weight.shape)


@_fake("qk_norm_backward")
def _(qkv, q_weight, k_weight, dqkv, *args, **kwargs):
    return (qkv.new_empty(qkv.shape), q_weight.new_empty(q_weight.shape),
            k_weight.new_empty(k_weight.shape))


# --- Python entry points (thin wrappers over torch.ops.glmnorm) -------------------------

def _explain(op, error, args):
    """Re-raises torch's RuntimeError for an argument of the wrong Python type (the
    dispatcher's message quotes the whole schema) as the TypeError / ValueError the
    package's functions give, naming the op and the argument; any other error as it was.
    `args`: the wrapper's arguments by name. Runs only after a call failed:
    the calls that succeed pay nothing for it."""
    fn = f"glmnorm.{op}"
    for a in getattr(torch.ops.glmnorm, op).default._schema.arguments:
        value = args.get(a.name)
        kind = str(a.type)  # "Tensor", or "Optional[Tensor]" for cos / sin / positions
        if a.name == "dtype" and not isinstance(value, torch.dtype):  # the quant ops' ScalarType
            raise TypeError(f"{fn}: {a.name} must be a torch.dtype (torch.int8 or "
                            f"torch.float8_e4m3fn), got {value!r}") from None
        if kind not in ("Tensor", "Optional[Tensor]", "Tensor?"):
            continue
        if value is None:
            if kind == "Tensor":  # torch says "tensor does not have a device", naming nothing
                raise TypeError(f"{fn}: {a.name} must be a torch.Tensor, got None") from None
            continue
        if not isinstance(value, torch.Tensor):
            what = "a torch.Tensor" if kind == "Tensor" else "a torch.Tensor or None"
            raise TypeError(f"{fn}: {a.name} must be {what}, got "
                            f"{type(value).__name__}") from None
        if value.layout != torch.strided:  # the dispatcher's "Could not run ... SparseCPU"
            raise TypeError(f"{fn}: {a.name}: glmnorm takes dense (strided) tensors, got "
                            f"layout {value.layout}; call .to_dense() first") from None
    _ext.check_args(fn, args)  # the package's conversion rules (raise on a bad one)
    raise error


def _entry(op):
    """Decorator: the decorated function (a signature and a docstring) becomes a call of
    torch.ops.glmnorm.<op> with the same arguments; on torch's RuntimeError for an
    argument of the wrong Python type, the package's TypeError / ValueError (_explain).
    Defaults the schema lacks (the quant ops' dtype) come from the function's signature;
    an op that returns nothing (qk_norm_) returns its first argument."""
    overload = getattr(torch.ops.glmnorm, op).default
    schema_defaults = {a.name: a.default_value for a in overload._schema.arguments
                       if a.has_default_value()}

    def wrap(fn):
        params = list(inspect.signature(fn).parameters.values())
        for p in params:  # the schema's default applies: the signature must show the same
            if p.name in schema_defaults and p.default != schema_defaults[p.name]:
                raise AssertionError(f"glmnorm.torch.{fn.__name__}: default {p.name}="
                                     f"{p.default!r}, the schema's is "
                                     f"{schema_defaults[p.name]!r}")
        names = [p.name for p in params]
        defaults = {p.name: p.default for p in params if p.default is not p.empty}
        extra = [(k, p.name, p.default) for k, p in enumerate(params)
                 if p.default is not p.empty and p.name not in schema_defaults]

        @functools.wraps(fn)
        def call(*args, **kwargs):
            for k, name, default in extra:
                if len(args) <= k and name not in kwargs:
                    kwargs[name] = default
            try:
                out = overload(*args, **kwargs)
            except RuntimeError as e:
                _explain(op, e, {**defaults, **dict(zip(names, args)), **kwargs})
            return (args[0] if args else kwargs[names[0]]) if out is None else out
        return call
    return wrap


@_entry("rms_norm")
def rms_norm(x, weight, eps=1e-5, rounding="cast-then-scale", weight_offset=0.0):
    """torch.ops.glmnorm.rms_norm: y = RMSNorm(x) (see glmnorm.rms_norm)."""


@_entry("add_rms_norm")
def add_rms_norm(residual, delta, weight, eps=1e-5, rounding="cast-then-scale",
                 weight_offset=0.0, normalize_rounded_sum=True):
    """torch.ops.glmnorm.add_rms_norm: residual += delta in place; returns the norm."""


@_entry("qk_norm_")
def qk_norm_(qkv, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads, head_dim,
             eps=1e-5, rounding="cast-then-scale", weight_offset=0.0, rotary_dim=0, cos=None,
             sin=None, positions=None):
    """torch.ops.glmnorm.qk_norm_: QK-norm (+ RoPE) of a fused QKV tensor in place; v
    untouched. Returns qkv."""


@_entry("qk_norm")
def qk_norm(qkv, q_weight, k_weight, num_q_heads, num_k_heads, num_v_heads, head_dim,
            eps=1e-5, rounding="cast-then-scale", weight_offset=0.0, rotary_dim=0, cos=None,
            sin=None, positions=None):
    """torch.ops.glmnorm.qk_norm: out-of-place qk_norm_ (a new tensor, v copied)."""


@_entry("rms_norm_quant")
def rms_norm_quant(x, weight, dtype=torch.float8_e4m3fn, scale=None, eps=1e-5,
                   rounding="cast-then-scale", weight_offset=0.0):
    """torch.ops.glmnorm.rms_norm_quant: (q, scales) (see glmnorm.rms_norm_quant)."""


@_entry("add_rms_norm_quant")
def add_rms_norm_quant(residual, delta, weight, dtype=torch.float8_e4m3fn, scale=None,
                       eps=1e-5, rounding="cast-then-scale", weight_offset=0.0,
                       normalize_rounded_sum=True):
    """torch.ops.glmnorm.add_rms_norm_quant: residual += delta in place; (q, scales)."""


@_entry("rms_norm_backward")
def rms_norm_backward(x, weight, dy, eps=1e-5, rounding="cast-then-scale", weight_offset=0.0):
    """torch.ops.glmnorm.rms_norm_backward: (dx, dweight) of rms_norm given dy (dx in x's
    dtype, dweight in weight's; see glmnorm.rms_norm_backward)."""


@_entry("qk_norm_backward")
def qk_norm_backward(qkv, q_weight, k_weight, dqkv, num_q_heads, num_k_heads, num_v_heads,
                     head_dim, eps=1e-5, rounding="cast-then-scale", weight_offset=0.0,
                     rotary_dim=0, cos=None, sin=None, positions=None):
    """torch.ops.glmnorm.qk_norm_backward: (dqkv_in, dq_weight, dk_weight) of qk_norm, with the
    forward's RoPE arguments when it had RoPE (dqkv is then the gradient of the rotated
    heads); v's gradient passed through from dqkv."""


# --- nn.Module and the Glm4Moe patch ----------------------------------------------------

_RMS_NORM = torch.ops.glmnorm.rms_norm.default


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
        # The options are checked now (as every call would check them), not at the first
        # forward: RMSNorm(64, eps=-1) raises ValueError here.
        _ext.check_args("glmnorm.torch.RMSNorm",
                        dict(eps=eps, rounding=rounding, weight_offset=weight_offset))
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
        """hidden_states [..., hidden_size] of rank 1 to 4 (ValueError otherwise, as the op;
        Glm4Moe's norms see rank 3 and, for q_norm / k_norm, rank 4)."""
        # Written for the per-call cost at decode (docs/PYTHON.md, "Per-call cost on Zen 1"):
        # the weight from _parameters (nn.Module.__getattr__ costs ~1.8 us) unless something
        # moved it out (parametrizations, pruning, weight_norm, a buffer: self.weight then),
        # the op itself with the schema's defaults left out (torch's binding converts each
        # scalar passed, 0.3-1 us each).
        weight = self._parameters.get("weight")
        if weight is None:
            weight = self.weight
        eps, rounding, offset = self.variance_epsilon, self.rounding, self.weight_offset
        if rounding == "cast-then-scale" and offset == 0.0:
            args = (hidden_states, weight) if eps == 1e-5 else (hidden_states, weight, eps)
            try:
                return _RMS_NORM(*args)
            except RuntimeError as e:  # torch's own argument errors, explained as the wrapper does
                _explain("rms_norm", e, dict(x=hidden_states, weight=weight, eps=eps,
                                             rounding=rounding, weight_offset=offset))
        return rms_norm(hidden_states, weight, eps, rounding, offset)

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

    if not isinstance(model, nn.Module):
        raise TypeError(f"patch_glm4_moe: model must be a torch.nn.Module (a Transformers "
                        f"Glm4Moe model), got {type(model).__name__}")
    targets = [(name, mod) for name, mod in model.named_modules()
               if isinstance(mod, Glm4MoeRMSNorm)]
    if not targets:
        raise TypeError(f"patch_glm4_moe: {type(model).__name__} holds no Glm4MoeRMSNorm")
    for name, mod in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, RMSNorm.from_module(mod))
    return model


# --- PyTorch distributed: DTensor sharding rules of the ops (glmnorm/distributed.py) ------

from . import distributed as _distributed  # noqa: E402,F401 - registers with DTensor once imported
