"""Array plumbing: numpy / torch / buffer / DLPack objects <-> view descriptors.

A descriptor is what the extension takes for every array argument:
``(address, dtype code, shape, strides in elements)``. Nothing is copied: the
address is the caller's memory. Outputs are allocated here (numpy or torch,
the kind of the main input) only when the caller passes no ``out``.
"""

import math

import numpy as np

try:
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    _ml = None

# glmnorm::DType codes (include/glmnorm/dtype.h): kF32, kBF16, kF16, kI8,
# kF8E4M3, kI64.
F32, BF16, F16, I8, F8E4M3, I64 = range(6)
NAMES = ("f32", "bf16", "f16", "i8", "f8e4m3", "i64")

_NP_CODES = {np.dtype(np.float32): F32, np.dtype(np.float16): F16,
             np.dtype(np.int8): I8, np.dtype(np.int64): I64}
if _ml is not None:
    _NP_CODES[np.dtype(_ml.bfloat16)] = BF16
    _NP_CODES[np.dtype(_ml.float8_e4m3fn)] = F8E4M3
_NP_DTYPES = {code: dt for dt, code in _NP_CODES.items()}

from . import _glmnorm as _ext

_MAX_RANK = _ext.MAX_RANK  # glmnorm::kMaxRank: the dims a descriptor holds

_torch = None  # the torch module once a tensor has been seen
_Tensor = type("_NoTensorYet", (), {})  # torch.Tensor once _torch is set (isinstance: no None test)
_TORCH_CODES = {}
_TORCH_DTYPES = {}
_strided = None  # torch.strided once _torch is set
_KINDS = (np.ndarray,)  # the kinds taken as they are: numpy, and torch.Tensor once seen


def _load_torch():
    global _torch, _Tensor, _strided, _KINDS
    import torch
    _TORCH_CODES.update({torch.float32: F32, torch.bfloat16: BF16, torch.float16: F16,
                         torch.int8: I8, torch.float8_e4m3fn: F8E4M3, torch.int64: I64})
    _TORCH_DTYPES.update({c: t for t, c in _TORCH_CODES.items()})
    _Tensor = torch.Tensor
    _strided = torch.strided
    _KINDS = (np.ndarray, torch.Tensor)
    _torch = torch
    return torch


def is_torch(a):
    t = type(a)
    if _torch is None:
        if not t.__module__.startswith("torch"):
            return False
        _load_torch()
    return isinstance(a, _torch.Tensor)


def _fail_rank(fn, name, shape):
    # A descriptor holds 1..4 dims, and rank 0 is the library's "absent" for the optional
    # tensors (RoPE tables, positions, scales): a 0-d array given for one must not be read as
    # absent. The torch ops' words (torch_ops.cc, View).
    raise ValueError(f"{fn}: {name}.rank must be 1..{_MAX_RANK}, got {len(shape)} "
                     f"(shape {list(shape)})")


def _torch_desc(a, name, writable, fn):
    # Ordered and written for speed (a decode call pays this per tensor; docs/PYTHON.md,
    # "Per-call cost"): attributes that build no Python object first (is_cpu, not
    # device.type: 0.2 against 1.2 us on Zen 1), grad mode read only for a tensor that
    # requires grad, one increment_version on a tuple.
    code = _TORCH_CODES.get(a.dtype)
    if code is None:
        raise TypeError(f"{fn}: {name}: unsupported dtype {a.dtype} (glmnorm takes float32, "
                        "bfloat16, float16; int8 / float8_e4m3fn outputs; int64 positions)")
    if not a.is_cpu:
        raise ValueError(f"{fn}: {name}: glmnorm runs on the CPU; got a tensor on {a.device}")
    if a.layout is not _strided:
        raise TypeError(f"{fn}: {name}: glmnorm takes dense (strided) tensors, got layout "
                        f"{a.layout}; call .to_dense() first")
    if a.is_neg():
        # A lazily negated view (torch._neg_view): its memory holds -value, which the
        # kernels would read (or write) as is. PyTorch's own ops resolve it; glmnorm
        # copies nothing, so it refuses.
        raise ValueError(f"{fn}: {name}: is a lazily negated view (Tensor.is_neg()); its "
                         f"memory is not its value: pass {name}.resolve_neg()")
    if a.requires_grad and _torch.is_grad_enabled():
        raise RuntimeError(f"{fn}: {name}: requires grad; glmnorm's functions do not record "
                           "autograd: use glmnorm.torch's ops (torch.ops.glmnorm.rms_norm and "
                           "qk_norm are differentiable), or torch.no_grad()")
    shape = a.shape
    if not 0 < len(shape) <= _MAX_RANK:
        _fail_rank(fn, name, shape)
    if writable:
        if a.is_inference() and not _torch.is_inference_mode_enabled():
            raise RuntimeError(f"{fn}: {name}: Inplace update to inference tensor outside "
                               "InferenceMode is not allowed (as PyTorch's in-place ops); "
                               "call it under torch.inference_mode() or clone the tensor")
        # As PyTorch's in-place ops: autograd then refuses a backward through the old
        # value, and an inference tensor is refused outside inference mode.
        _torch._C._increment_version((a,))
    return (a.data_ptr(), code, shape, a.stride())


def _numpy_desc(a, name, writable, fn):
    code = _NP_CODES.get(a.dtype)
    if code is None:
        raise TypeError(f"{fn}: {name}: unsupported dtype {a.dtype} (glmnorm takes float32, "
                        "ml_dtypes.bfloat16, float16; int8 / ml_dtypes.float8_e4m3fn "
                        "outputs; int64 positions)")
    if writable and not a.flags.writeable:
        raise ValueError(f"{fn}: {name}: the array is read-only and glmnorm writes to it")
    item = a.itemsize
    strides = []
    for s in a.strides:
        if s % item:
            raise ValueError(f"{fn}: {name}: strides must be whole elements, got {a.strides} bytes")
        strides.append(s // item)
    if not 0 < len(strides) <= _MAX_RANK:
        _fail_rank(fn, name, a.shape)
    return (a.__array_interface__["data"][0], code, a.shape, strides)


def as_array(a, name, fn):
    """numpy or torch view of `a` (zero-copy); other kinds through DLPack or
    the buffer protocol, as numpy. Errors name the function `fn` and the argument."""
    if isinstance(a, _KINDS) or is_torch(a):
        return a
    if hasattr(a, "__dlpack__"):
        try:
            return np.from_dlpack(a)
        except (TypeError, BufferError, RuntimeError) as e:
            raise TypeError(f"{fn}: {name}: cannot read it through DLPack: {e}") from None
    try:
        return np.asarray(memoryview(a))
    except TypeError:
        raise TypeError(f"{fn}: {name}: expected a numpy array, a torch CPU tensor, or an object "
                        f"with __dlpack__ or the buffer protocol; got {type(a).__name__}"
                        ) from None


def desc(a, name, fn, writable=False):
    """The descriptor of array `a` (as_array's kinds). The rank is the library's to check
    (1..4); one a descriptor cannot hold (over 4) is refused here, by name."""
    if isinstance(a, np.ndarray):
        return _numpy_desc(a, name, writable, fn)
    if isinstance(a, _Tensor) or is_torch(a):
        return _torch_desc(a, name, writable, fn)
    return desc(as_array(a, name, fn), name, fn, writable)


EMPTY = (0, F32, (), ())


def dtype_code(a):
    if isinstance(a, np.ndarray):
        return _NP_CODES.get(a.dtype, -1)
    return _TORCH_CODES.get(a.dtype, -1)


def empty_like(a, shape, code):
    """A new contiguous array of the kind of `a` (numpy or torch). Large ones (4 MiB and
    more) live in a block of the library's output cache, so that a freed output's memory
    serves the next call already mapped (docs/PYTHON.md, "Fresh outputs")."""
    dtype = _NP_DTYPES[code]
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < _ext.OUTPUT_CACHE_MIN_BYTES:
        if isinstance(a, np.ndarray):
            return np.empty(shape, dtype)
        # Sizes as separate ints: a torch.Size or tuple argument costs torch's argument
        # parser 1.5-4 us more per call (Zen 1).
        return _torch.empty(*shape, dtype=_TORCH_DTYPES[code]) if len(shape) else _torch.empty(
            (), dtype=_TORCH_DTYPES[code])
    block = _ext.output_block(nbytes)  # uint8, owns the block
    if isinstance(a, np.ndarray):
        return block.view(dtype).reshape(shape)
    return _torch.from_numpy(block).view(_TORCH_DTYPES[code]).view(shape)


def code_of(dtype, name, fn):
    """Dtype code of a numpy dtype, torch dtype or name ('bf16', 'int8'...); errors name
    the function `fn` and the argument `name`."""
    aliases = {"f32": F32, "float32": F32, "bf16": BF16, "bfloat16": BF16, "f16": F16,
               "float16": F16, "i8": I8, "int8": I8, "f8e4m3": F8E4M3, "e4m3": F8E4M3,
               "float8_e4m3fn": F8E4M3, "fp8": F8E4M3}
    if isinstance(dtype, str) and dtype in aliases:
        return aliases[dtype]
    if dtype is None:  # np.dtype(None) would be float64
        raise TypeError(f"{fn}: {name}: a dtype is required, got None")
    if _torch is None and type(dtype).__module__.startswith("torch"):
        _load_torch()
    if _torch is not None and isinstance(dtype, _torch.dtype):
        code = _TORCH_CODES.get(dtype)
        shown = str(dtype)  # torch.float64
    else:
        try:
            np_dtype = np.dtype(dtype)
        except TypeError:
            what = "unknown dtype name" if isinstance(dtype, str) else "not a dtype:"
            raise TypeError(f"{fn}: {name}: {what} {dtype!r} (glmnorm's dtypes: float32, "
                            "bfloat16, float16, int8, float8_e4m3fn)") from None
        code = _NP_CODES.get(np_dtype)
        # float64 for np.float64, 'float64' and np.dtype('float64'); '>f4' for a non-native
        # byte order (same name, other bytes)
        shown = np_dtype.name if np_dtype.isnative else np_dtype.str
    if code is None:
        raise TypeError(f"{fn}: {name}: unsupported dtype {shown} (glmnorm's dtypes: float32, "
                        "bfloat16, float16, int8, float8_e4m3fn)")
    return code
