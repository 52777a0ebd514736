"""Type stubs of glmnorm (docstrings in __init__.py; semantics in docs/SPEC.md).

Array arguments: numpy arrays (bf16 / fp8-e4m3 through ml_dtypes), torch CPU tensors, or
objects with __dlpack__ or the buffer protocol. Outputs are of the kind of the main input.
Shapes: [..., D] means rank 1 to 4 with D the last (contiguous) axis.
"""

from collections.abc import Sequence
from os import PathLike
from typing import Any, Literal, NamedTuple, TypeVar

import numpy as np

ArrayLike = Any  # numpy.ndarray | torch.Tensor | DLPack / buffer-protocol object
A = TypeVar("A")  # the kind of the main input: numpy.ndarray or torch.Tensor
Rounding = Literal["cast-then-scale", "single"]
QuantDtype = Any  # "f8e4m3" | "int8" | torch.int8 | torch.float8_e4m3fn | numpy dtypes

GLM_RMS_NORM_EPS: float
__version__: str

def rms_norm(x: A, weight: ArrayLike, *, eps: float = 1e-5, rounding: Rounding = ...,
             weight_offset: float = 0.0, out: A | None = None) -> A:
    """y = weight * x / sqrt(mean(x^2) + eps) over the last axis; x [..., D] f32/bf16/f16,
    weight [D]. Raises ValueError (shapes, eps, overlap) / TypeError (dtypes)."""

def add_rms_norm(residual: A, delta: ArrayLike, weight: ArrayLike, *, eps: float = 1e-5,
                 rounding: Rounding = ..., weight_offset: float = 0.0,
                 normalize_rounded_sum: bool = True, out: A | None = None) -> A:
    """residual += delta IN PLACE (rounded to residual's dtype); returns rms_norm(residual)."""

def qk_norm(qkv: A, q_weight: ArrayLike, k_weight: ArrayLike, *, num_q_heads: int,
            num_k_heads: int, num_v_heads: int, head_dim: int, eps: float = 1e-5,
            rounding: Rounding = ..., weight_offset: float = 0.0, rotary_dim: int = 0,
            cos: ArrayLike | None = None, sin: ArrayLike | None = None,
            positions: ArrayLike | None = None, out: A | None = None) -> A:
    """QK-norm (+ partial RoPE) of a fused QKV [..., (nq + nk + nv) * head_dim]; out=qkv:
    in place, v untouched."""

def rms_norm_quant(x: A, weight: ArrayLike, *, dtype: QuantDtype = "f8e4m3",
                   scale: float | None = None, eps: float = 1e-5, rounding: Rounding = ...,
                   weight_offset: float = 0.0, out: A | None = None,
                   scales: A | None = None) -> tuple[A, A | None]:
    """(q, scales): q int8 / e4m3fn [..., D]; scales f32 [rows] (dynamic) or None (static)."""

def add_rms_norm_quant(residual: A, delta: ArrayLike, weight: ArrayLike, *,
                       dtype: QuantDtype = "f8e4m3", scale: float | None = None,
                       eps: float = 1e-5, rounding: Rounding = ..., weight_offset: float = 0.0,
                       normalize_rounded_sum: bool = True, out: A | None = None,
                       scales: A | None = None) -> tuple[A, A | None]:
    """residual += delta IN PLACE; then rms_norm_quant of the sum."""

DTypeLike = Any  # "f32" | "bf16" | "f16" | torch / numpy dtypes

def rms_norm_backward(x: A, weight: ArrayLike, dy: ArrayLike, *, eps: float = 1e-5,
                      rounding: Rounding = ..., weight_offset: float = 0.0,
                      rstd: ArrayLike | None = None, dweight_dtype: DTypeLike | None = None,
                      out: A | None = None) -> tuple[A, A]:
    """(dx, dweight) of y = rms_norm(x, weight): x, dy [..., D] (dy in y's dtype), weight [D];
    dx in x's dtype (out may be dy), dweight [D] in weight's dtype or dweight_dtype; rstd
    optional f32 [rows]. Deterministic. Raises ValueError (shapes, eps, overlap) / TypeError
    (dtypes)."""

def add_rms_norm_backward(residual: A, weight: ArrayLike, dy: ArrayLike,
                          d_residual_out: ArrayLike | None = None, *, eps: float = 1e-5,
                          rounding: Rounding = ..., weight_offset: float = 0.0,
                          normalize_rounded_sum: bool = True, rstd: ArrayLike | None = None,
                          delta_dtype: DTypeLike | None = None,
                          dweight_dtype: DTypeLike | None = None,
                          out: A | None = None) -> tuple[A, A, A]:
    """(d_residual, d_delta, dweight) of y = add_rms_norm(residual, delta, weight); residual
    is the UPDATED residual h [..., D]; d_residual_out [..., D] the gradient reaching h from
    later layers (None: zero). d_delta is d_residual unless delta_dtype differs."""

def qk_norm_backward(qkv: A, q_weight: ArrayLike, k_weight: ArrayLike, dqkv: ArrayLike, *,
                     num_q_heads: int, num_k_heads: int, num_v_heads: int, head_dim: int,
                     eps: float = 1e-5, rounding: Rounding = ..., weight_offset: float = 0.0,
                     rotary_dim: int = 0, cos: ArrayLike | None = None,
                     sin: ArrayLike | None = None, positions: ArrayLike | None = None,
                     dweight_dtype: DTypeLike | None = None,
                     out: A | None = None) -> tuple[A, A, A]:
    """(dqkv_in, dq_weight, dk_weight) of qk_norm, with the forward's RoPE arguments when it
    had RoPE; v columns of dqkv_in are dqkv's (out=dqkv: in place). Raises ValueError /
    TypeError."""

def set_num_threads(n: int) -> None:
    """Threads of glmnorm's pool (caller included), n >= 1 (ValueError otherwise)."""

def num_threads() -> int: ...

class NormInfo(NamedTuple):
    name: str
    role: str
    layer: int
    expected_width: int
    present: bool
    shard: str
    dtype: str
    shape: list[int]
    usable: bool

class Checkpoint:
    """The norms of a GLM-4.5 checkpoint directory (ValueError when unreadable)."""
    dir: str
    model_name: str
    model_type: str
    hidden_size: int
    use_qk_norm: bool
    problems: list[str]
    mapped_shards: list[str]
    norms: list[NormInfo]
    def __init__(self, path: str | PathLike[str]) -> None: ...
    @property
    def sound(self) -> bool: ...
    @property
    def eps(self) -> float: ...
    def gamma(self, name: str) -> np.ndarray:
        """Read-only, zero-copy [width] array (float32 / float16 / ml_dtypes.bfloat16)."""
