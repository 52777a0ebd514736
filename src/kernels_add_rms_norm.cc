// Compiles add_rms_norm-inl.h once per SIMD target and exports its dispatch table
// (Highway's foreach_target pattern). One file per kernel family, so the
// families compile in parallel.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels_add_rms_norm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "add_rms_norm-inl.h"

#if HWY_ONCE
#include "kernels.h"

namespace glmnorm::kernels {

HWY_EXPORT(AddRmsNormRows);
void AddRmsNormRows(const AddRmsNormJob& job, int64_t row_begin, int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(AddRmsNormRows)(job, row_begin, row_end);
}

HWY_EXPORT(AddRmsNormQuantRows);
void AddRmsNormQuantRows(const AddRmsNormJob& job, int64_t row_begin, int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(AddRmsNormQuantRows)(job, row_begin, row_end);
}

}  // namespace glmnorm::kernels
#endif  // HWY_ONCE
