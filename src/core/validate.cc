#include "core/validate.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <sstream>
#include <utility>

#include "core/format_number.h"
#include "glmnorm/error.h"
#include "glmnorm/rules.h"

namespace glmnorm::validate {

void Fail(const char* fn, const std::string& what) {
  throw Error(std::string(fn) + ": " + what);
}

void FailDType(const char* fn, const std::string& what) {
  throw DTypeError(std::string(fn) + ": " + what);
}

void FailNotContiguous(const char* fn, const std::string& field, int64_t stride) {
  Fail(fn, field + " must be 1 (contiguous), got " + std::to_string(stride) +
               "; glmnorm copies nothing: pass a copy with that dim contiguous "
               "(.contiguous() in PyTorch, numpy.ascontiguousarray)");
}

std::string ShapeString(const int64_t* shape, int rank) {
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < rank && i < kMaxRank; ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

template <typename Ptr>
void View(const char* fn, const char* name, const BasicTensorView<Ptr>& v) {
  const std::string n(name);
  if (v.rank < 1 || v.rank > kMaxRank) {
    Fail(fn, n + ".rank must be 1.." + std::to_string(kMaxRank) + ", got " +
                 std::to_string(v.rank));
  }
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] < 0) {
      Fail(fn, n + ".shape[" + std::to_string(i) + "] must be >= 0, got " +
                   std::to_string(v.shape[i]));
    }
  }
  if (Empty(v)) return;  // no element is addressed: any pointer and strides
  for (int i = 0; i < v.rank; ++i) {
    // Negative strides are not supported: the overlap checks assume them away.
    if (v.stride[i] < 0) {
      Fail(fn, n + ".stride[" + std::to_string(i) + "] must be >= 0, got " +
                   std::to_string(v.stride[i]));
    }
  }
  // Element count and the span of element offsets, checked for overflow
  // before anything multiplies them (rows() does not check).
  int64_t elements = 1, span = 0;
  for (int i = 0; i < v.rank; ++i) {
    int64_t reach = 0;
    const int64_t stride = v.stride[i] < 0 ? -v.stride[i] : v.stride[i];
    if (v.stride[i] == INT64_MIN || __builtin_mul_overflow(elements, v.shape[i], &elements) ||
        elements > kMaxElements || __builtin_mul_overflow(v.shape[i] - 1, stride, &reach) ||
        __builtin_add_overflow(span, reach, &span) || span > kMaxElements) {
      Fail(fn, n + " shape " + ShapeString(v.shape, v.rank) + " with strides " +
                   ShapeString(v.stride, v.rank) + " spans more than 2^59 elements");
    }
  }
  if (v.data == nullptr) {
    Fail(fn, n + ".data is null but " + n + " has shape " + ShapeString(v.shape, v.rank));
  }
}
template void View(const char*, const char*, const TensorView&);
template void View(const char*, const char*, const ConstTensorView&);

template <typename Ptr>
BasicTensorView<Ptr> Rows(const char* fn, const char* name, const BasicTensorView<Ptr>& v) {
  View(fn, name, v);
  if (v.rank == 2) return v;
  BasicTensorView<Ptr> r = v;
  const int last = v.rank - 1;
  r.rank = 2;
  r.shape[0] = 1;
  r.shape[1] = v.shape[last];
  r.stride[1] = v.stride[last];
  r.stride[0] = v.shape[last];  // one row: any stride >= the width
  int64_t inner_stride = -1, inner_size = 1;  // the innermost leading dim seen so far
  const bool empty = Empty(v);  // no element: its strides address nothing
  for (int i = last - 1; i >= 0; --i) {
    // No overflow: View bounded the element count of a view with elements
    // (an empty one has 0 rows: its other dims are not bounded).
    r.shape[0] = empty ? 0 : r.shape[0] * v.shape[i];
    if (v.shape[i] == 1) continue;
    if (inner_stride < 0) {
      r.stride[0] = v.stride[i];
    } else if (!empty && v.stride[i] != inner_stride * inner_size) {
      Fail(fn, std::string(name) + ": the leading dims of shape " + ShapeString(v.shape, v.rank) +
                   " with strides " + ShapeString(v.stride, v.rank) +
                   " do not form rows of one stride");
    }
    inner_stride = v.stride[i];
    inner_size = v.shape[i];
  }
  for (int i = 2; i < kMaxRank; ++i) r.shape[i] = 0, r.stride[i] = 0;
  return r;
}
template TensorView Rows(const char*, const char*, const TensorView&);
template ConstTensorView Rows(const char*, const char*, const ConstTensorView&);

template <typename Ptr>
void Output(const char* fn, const char* name, const BasicTensorView<Ptr>& v) {
  if (Empty(v)) return;
  struct Dim {
    int index;
    int64_t shape, stride;
  };
  Dim dims[kMaxRank];
  int n = 0;
  for (int i = 0; i + 1 < v.rank; ++i) {
    if (v.shape[i] > 1) dims[n++] = {i, v.shape[i], v.stride[i]};
  }
  // Insertion sort by stride (at most kMaxRank - 1 dims; std::sort here made
  // GCC 12 warn about impossible out-of-bounds subscripts).
  for (int k = 1; k < n; ++k) {
    for (int j = k; j > 0 && dims[j].stride < dims[j - 1].stride; --j) {
      std::swap(dims[j], dims[j - 1]);
    }
  }
  int64_t span = v.width();  // elements a row covers (last dim contiguous)
  for (int k = 0; k < n; ++k) {
    if (dims[k].stride < span) {
      Fail(fn, std::string(name) + ".stride[" + std::to_string(dims[k].index) + "] must be >= " +
                   std::to_string(span) + " so that the rows written do not overlap, got " +
                   std::to_string(dims[k].stride));
    }
    span += (dims[k].shape - 1) * dims[k].stride;  // View() bounded these products
  }
}
template void Output(const char*, const char*, const TensorView&);

template <typename Ptr>
void Activation(const char* fn, const char* name, const BasicTensorView<Ptr>& v) {
  const std::string n(name);
  View(fn, name, v);
  if (v.stride[v.rank - 1] != 1 && !Empty(v)) {
    FailNotContiguous(fn, n + ".stride[" + std::to_string(v.rank - 1) + "] (last dim)",
                      v.stride[v.rank - 1]);
  }
  if (!IsFloatActivation(v.dtype)) {
    FailDType(fn, n + ".dtype must be f32, bf16 or f16, got " + std::string(Name(v.dtype)));
  }
  if (reinterpret_cast<uintptr_t>(v.data) % SizeOf(v.dtype) != 0) {
    Fail(fn, n + ".data must be aligned to " + std::to_string(SizeOf(v.dtype)) + " bytes for " +
                 std::string(Name(v.dtype)));
  }
}
template void Activation(const char*, const char*, const TensorView&);
template void Activation(const char*, const char*, const ConstTensorView&);

void Gamma(const char* fn, const char* name, const ConstTensorView& g, int64_t width) {
  const std::string n(name);
  if (g.rank != 1) Fail(fn, n + " must be 1-D, got rank " + std::to_string(g.rank));
  if (g.shape[0] != width) {
    Fail(fn, n + " length must equal the width " + std::to_string(width) + ", got " +
                 std::to_string(g.shape[0]));
  }
  if (g.stride[0] != 1 && width > 0) {
    FailNotContiguous(fn, n + ".stride[0]", g.stride[0]);
  }
  if (!IsFloatActivation(g.dtype)) {
    FailDType(fn, n + ".dtype must be f32, bf16 or f16, got " + std::string(Name(g.dtype)));
  }
  if (g.data == nullptr && width > 0) {
    Fail(fn, n + ".data is null but width is " + std::to_string(width));
  }
  if (reinterpret_cast<uintptr_t>(g.data) % SizeOf(g.dtype) != 0) {
    Fail(fn, n + ".data must be aligned to " + std::to_string(SizeOf(g.dtype)) + " bytes");
  }
}

template <typename Pa, typename Pb>
void SameShape(const char* fn, const char* a_name, const BasicTensorView<Pa>& a,
               const char* b_name, const BasicTensorView<Pb>& b) {
  bool same = a.rank == b.rank;
  for (int i = 0; same && i < a.rank; ++i) same = a.shape[i] == b.shape[i];
  if (!same) {
    Fail(fn, std::string(b_name) + " shape must equal " + a_name + " shape " +
                 ShapeString(a.shape, a.rank) + ", got " + ShapeString(b.shape, b.rank));
  }
}
template void SameShape(const char*, const char*, const ConstTensorView&, const char*,
                        const TensorView&);
template void SameShape(const char*, const char*, const ConstTensorView&, const char*,
                        const ConstTensorView&);
template void SameShape(const char*, const char*, const TensorView&, const char*,
                        const ConstTensorView&);
template void SameShape(const char*, const char*, const TensorView&, const char*,
                        const TensorView&);

void Options(const char* fn, const NormOptions& o) {
  if (!std::isfinite(o.eps) || o.eps < 0.0f) {
    Fail(fn, "eps must be finite and >= 0 (GLM-4.5: 1e-5), got " + ShortestString(o.eps));
  }
  if (!std::isfinite(o.weight_offset)) {
    Fail(fn, "weight_offset must be finite (0 or 1), got " + ShortestString(o.weight_offset));
  }
  if (o.rounding != Rounding::kCastThenScale && o.rounding != Rounding::kSingle) {
    Fail(fn, "rounding must be kCastThenScale or kSingle");
  }
}

void OutputDType(const char* fn, const char* y_name, DType y, DType w, DType t,
                 Rounding rounding) {
  if (rounding == Rounding::kSingle && y != t && y != DType::kF32) {
    FailDType(fn, std::string(y_name) + ".dtype must be the input dtype " + std::string(Name(t)) +
                 " or f32 in single-rounding mode, got " + std::string(Name(y)));
  }
  if (rounding == Rounding::kCastThenScale && y != Promote(w, t)) {
    FailDType(fn, std::string(y_name) + ".dtype must be " + std::string(Name(Promote(w, t))) +
                 " in cast-then-scale mode (PyTorch's promotion of gamma " +
                 std::string(Name(w)) + " with input " + std::string(Name(t)) + "), got " +
                 std::string(Name(y)));
  }
}

namespace {

// Byte range [begin, end) that a view touches.
template <typename Ptr>
void Extent(const BasicTensorView<Ptr>& v, uintptr_t* begin, uintptr_t* end) {
  const auto base = reinterpret_cast<uintptr_t>(v.data);
  // An empty view touches nothing, whatever its other dims (which View()
  // has not bounded: their products may overflow).
  if (Empty(v)) {
    *begin = *end = base;
    return;
  }
  int64_t last = 0;
  for (int i = 0; i < v.rank; ++i) last += (v.shape[i] - 1) * v.stride[i];
  // Strides are >= 0 (View() refuses negative ones).
  *begin = base;
  *end = base + (last + 1) * static_cast<int64_t>(SizeOf(v.dtype));
  (void)last;
}

template <typename Pa, typename Pb>
bool SameLayout(const BasicTensorView<Pa>& a, const BasicTensorView<Pb>& b) {
  if (a.data != b.data || a.rank != b.rank || SizeOf(a.dtype) != SizeOf(b.dtype)) return false;
  for (int i = 0; i < a.rank; ++i) {
    if (a.shape[i] != b.shape[i] || a.stride[i] != b.stride[i]) return false;
  }
  return true;
}

// Rows of two 2-D views with the same row stride S (bytes) sit at fixed
// offsets inside each S-byte period: they are disjoint when those segments
// do not meet on the circle of length S.
template <typename Pa, typename Pb>
bool DisjointColumnSlices(const BasicTensorView<Pa>& a, const BasicTensorView<Pb>& b) {
  if (a.rank != 2 || b.rank != 2) return false;
  const int64_t s = a.stride[0] * static_cast<int64_t>(SizeOf(a.dtype));
  if (s <= 0 || s != b.stride[0] * static_cast<int64_t>(SizeOf(b.dtype))) return false;
  const int64_t la = a.shape[1] * static_cast<int64_t>(SizeOf(a.dtype));
  const int64_t lb = b.shape[1] * static_cast<int64_t>(SizeOf(b.dtype));
  if (la > s || lb > s) return false;
  const auto diff = static_cast<int64_t>(reinterpret_cast<uintptr_t>(b.data) -
                                         reinterpret_cast<uintptr_t>(a.data));
  const int64_t off = ((diff % s) + s) % s;  // b's segment start, relative to a's
  return off >= la && off + lb <= s;
}

}  // namespace

template <typename Pa, typename Pb>
void NoPartialOverlap(const char* fn, const char* a_name, const BasicTensorView<Pa>& a,
                      const char* b_name, const BasicTensorView<Pb>& b, bool allow_same) {
  uintptr_t a0, a1, b0, b1;
  Extent(a, &a0, &a1);
  Extent(b, &b0, &b1);
  if (a1 <= b0 || b1 <= a0) return;  // disjoint ranges (or empty)
  if (SameLayout(a, b)) {
    if (allow_same) return;
    Fail(fn, std::string(b_name) + " must not be the same memory as " + a_name);
  }
  if (DisjointColumnSlices(a, b)) return;
  Fail(fn, std::string(b_name) + " overlaps " + a_name + " without being the same view; " +
               "pass the same view for in-place or use disjoint memory");
}
template void NoPartialOverlap(const char*, const char*, const ConstTensorView&, const char*,
                               const TensorView&, bool);
template void NoPartialOverlap(const char*, const char*, const TensorView&, const char*,
                               const TensorView&, bool);

void Rstd(const char* fn, const TensorView& rstd, int64_t rows) {
  View(fn, "rstd", rstd);
  if (rstd.rank != 1 || rstd.shape[0] != rows) {
    Fail(fn, "rstd must be 1-D of length rows " + std::to_string(rows) + ", got shape " +
                 ShapeString(rstd.shape, rstd.rank));
  }
  if (rstd.dtype != DType::kF32) {
    FailDType(fn, "rstd.dtype must be f32, got " + std::string(Name(rstd.dtype)));
  }
  if (rows > 1 && rstd.stride[0] == 0) {
    Fail(fn, "rstd.stride[0] must be >= 1 for " + std::to_string(rows) + " rows, got 0");
  }
}

int64_t WholeNumberSetting(const char* name, const char* text, int64_t unset, int64_t max,
                           const char* unit) {
  if (text == nullptr || *text == '\0') return unset;
  int64_t value = 0;
  const char* c = text;
  for (; *c >= '0' && *c <= '9' && value <= max; ++c) value = value * 10 + (*c - '0');
  if (c == text || *c != '\0' || value > max) {
    throw Error(std::string(name) + " must be a whole number of " + unit + " from 0 to " +
                std::to_string(max) + ", got '" + text + "'");
  }
  return value;
}

}  // namespace glmnorm::validate

namespace glmnorm {

std::string_view RoundingName(Rounding rounding) {
  return rounding == Rounding::kSingle ? "single" : "cast-then-scale";
}

Rounding RoundingFromName(std::string_view name) {
  if (name == "cast-then-scale") return Rounding::kCastThenScale;
  if (name == "single") return Rounding::kSingle;
  throw Error("rounding must be 'cast-then-scale' or 'single', got '" + std::string(name) + "'");
}

void CheckNormOptions(const NormOptions& options) { validate::Options("NormOptions", options); }

float Float32Argument(std::string_view name, double value) {
  if (std::isfinite(value) && std::fabs(value) > FLT_MAX) {
    throw Error(std::string(name) + " must fit in float32, got " + ShortestString(value));
  }
  const float f = static_cast<float>(value);
  if (f == 0.0f && value != 0.0) {  // 1e-46 would become 0: a value the caller never gave
    throw Error(std::string(name) + " must fit in float32 (it would round to 0), got " +
                ShortestString(value));
  }
  return f;
}

int Int32Argument(std::string_view name, int64_t value) {
  if (value < INT32_MIN || value > INT32_MAX) {
    throw Error(std::string(name) + " must fit in 32 bits, got " + std::to_string(value));
  }
  return static_cast<int>(value);
}

NormOptions NormOptionsFrom(double eps, std::string_view rounding, double weight_offset) {
  NormOptions o;
  o.eps = Float32Argument("eps", eps);
  o.rounding = RoundingFromName(rounding);
  o.weight_offset = Float32Argument("weight_offset", weight_offset);
  return o;
}

QkHeads QkHeadsFrom(int64_t num_q_heads, int64_t num_k_heads, int64_t num_v_heads,
                    int64_t head_dim) {
  QkHeads h;
  h.num_q_heads = Int32Argument("num_q_heads", num_q_heads);
  h.num_k_heads = Int32Argument("num_k_heads", num_k_heads);
  h.num_v_heads = Int32Argument("num_v_heads", num_v_heads);
  h.head_dim = Int32Argument("head_dim", head_dim);
  return h;
}

}  // namespace glmnorm
