// Argument checks shared by the front ends. Each throws glmnorm::Error with a
// message naming the function, the argument and what was expected.
#ifndef GLMNORM_SRC_VALIDATE_H_
#define GLMNORM_SRC_VALIDATE_H_

#include <cstdint>
#include <string>

#include "glmnorm/rms_norm.h"
#include "glmnorm/tensor.h"

namespace glmnorm::validate {

[[noreturn]] void Fail(const char* fn, const std::string& what);

// rank 1..4, non-negative shape, last dim contiguous, float activation dtype,
// aligned data, non-null data when non-empty.
template <typename Ptr>
void Activation(const char* fn, const char* name, const BasicTensorView<Ptr>& v);

// 1-D contiguous gamma of `width` float elements.
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

std::string ShapeString(const int64_t* shape, int rank);

}  // namespace glmnorm::validate

#endif  // GLMNORM_SRC_VALIDATE_H_
