// Argument checks shared by the front ends. Each throws glmnorm::Error with a
// message naming the function, the argument and what was expected.
#ifndef GLMNORM_SRC_VALIDATE_H_
#define GLMNORM_SRC_VALIDATE_H_

#include <cstdint>
#include <string>

#include "glmnorm/base.h"
#include "glmnorm/tensor.h"

namespace glmnorm::validate {

[[noreturn]] void Fail(const char* fn, const std::string& what);
// The same for a dtype that is not accepted (throws glmnorm::DTypeError).
[[noreturn]] void FailDType(const char* fn, const std::string& what);
// "<field> must be 1 (contiguous), got <stride>", and what to do about it:
// the kernels read and write the caller's memory and copy nothing.
[[noreturn]] void FailNotContiguous(const char* fn, const std::string& field, int64_t stride);

// Any view: rank 1..4, non-negative shape and strides, element count and byte extent
// that fit in 64 bits (at most kMaxElements elements), non-null data unless
// the view has no elements (a zero-size tensor may have a null pointer).
template <typename Ptr>
void View(const char* fn, const char* name, const BasicTensorView<Ptr>& v);

// A view that is written: its rows must not overlap each other (a stride of
// 0, or smaller than the rows it spans, would make the result depend on the
// order of the writes, and so on the thread split). Checks the leading dims
// sorted by stride, each spanning at most the next one's stride.
template <typename Ptr>
void Output(const char* fn, const char* name, const BasicTensorView<Ptr>& v);

// View, plus: last dim contiguous, float activation dtype, aligned data.
template <typename Ptr>
void Activation(const char* fn, const char* name, const BasicTensorView<Ptr>& v);

// Views hold at most 2^59 elements, so byte counts of a few bytes per
// element never overflow int64.
constexpr int64_t kMaxElements = int64_t{1} << 59;

// True when the view has no elements (some dim is 0).
template <typename Ptr>
bool Empty(const BasicTensorView<Ptr>& v) {
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] == 0) return true;
  }
  return false;
}

// A view [..., W] of rank 1..4 as 2-D [rows, W], rows = the product of the
// leading dims, when those dims address rows of one stride (dims of size 1
// ignored; rank 1 is one row). QkNorm and QkNormBackward take their QKV views
// this way, so [tokens, width] and [batch, seq, width] work alike. Fails
// (naming `name`, its shape and strides) when the leading dims do not compose.
template <typename Ptr>
BasicTensorView<Ptr> Rows(const char* fn, const char* name, const BasicTensorView<Ptr>& v);

// 1-D contiguous gamma of `width` float elements (null data only if width 0).
void Gamma(const char* fn, const char* name, const ConstTensorView& g, int64_t width);

// Same rank and shape.
template <typename Pa, typename Pb>
void SameShape(const char* fn, const char* a_name, const BasicTensorView<Pa>& a,
               const char* b_name, const BasicTensorView<Pb>& b);

// eps finite and >= 0, weight_offset finite.
void Options(const char* fn, const NormOptions& o);

// The output dtype the rounding mode defines for (gamma, input) dtypes.
void OutputDType(const char* fn, const char* y_name, DType y, DType w, DType t,
                 Rounding rounding);

// Two views may be the same memory (in place) or disjoint, never partly
// overlapping. `allow_same` false forbids even exact aliasing.
template <typename Pa, typename Pb>
void NoPartialOverlap(const char* fn, const char* a_name, const BasicTensorView<Pa>& a,
                      const char* b_name, const BasicTensorView<Pb>& b, bool allow_same);

// The per-row rstd output of a forward (RmsNormWithRstd): f32 1-D [rows],
// any stride, rows not overlapping (Output).
void Rstd(const char* fn, const TensorView& rstd, int64_t rows);

std::string ShapeString(const int64_t* shape, int rank);

// An environment setting (`text`: its value, nullptr when unset): `unset`
// when unset or empty, else digits only (no sign, no spaces) from 0 to `max`.
// Anything else throws Error "<name> must be a whole number of <unit> from 0
// to <max>, got '<text>'". GLMNORM_SPIN_US and GLMNORM_TORCH_OUTPUT_CACHE_MB.
int64_t WholeNumberSetting(const char* name, const char* text, int64_t unset, int64_t max,
                           const char* unit);

}  // namespace glmnorm::validate

#endif  // GLMNORM_SRC_VALIDATE_H_
