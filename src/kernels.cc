// Compiles the *-inl.h kernels once per SIMD target and exports one dispatch
// table per entry point (Highway's foreach_target pattern).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "rms_norm-inl.h"
#include "add_rms_norm-inl.h"
#include "qk_norm-inl.h"
#include "quant-inl.h"

#if HWY_ONCE
#include "kernels.h"

namespace glmnorm::kernels {

HWY_EXPORT(RmsNormRows);

void RmsNormRows(const RmsNormJob& job, int64_t row_begin, int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(RmsNormRows)(job, row_begin, row_end);
}

HWY_EXPORT(AddRmsNormRows);
HWY_EXPORT(AddRmsNormQuantRows);
HWY_EXPORT(RmsNormQuantRows);
HWY_EXPORT(QkNormRows);

void AddRmsNormRows(const AddRmsNormJob& job, int64_t row_begin, int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(AddRmsNormRows)(job, row_begin, row_end);
}
void AddRmsNormQuantRows(const AddRmsNormJob& job, int64_t row_begin, int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(AddRmsNormQuantRows)(job, row_begin, row_end);
}
void RmsNormQuantRows(const RmsNormQuantJob& job, int64_t row_begin, int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(RmsNormQuantRows)(job, row_begin, row_end);
}
void QkNormRows(const QkNormJob& job, int64_t row_begin, int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(QkNormRows)(job, row_begin, row_end);
}

}  // namespace glmnorm::kernels
#endif  // HWY_ONCE
