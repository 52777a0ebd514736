// Compiles quant-inl.h once per SIMD target and exports its dispatch table
// (Highway's foreach_target pattern). One file per kernel family, so the
// families compile in parallel.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels_quant.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "quant-inl.h"

#if HWY_ONCE
#include "kernels.h"

namespace glmnorm::kernels {

HWY_EXPORT(RmsNormQuantRows);
void RmsNormQuantRows(const RmsNormQuantJob& job, int64_t row_begin, int64_t row_end) {
  HWY_DYNAMIC_DISPATCH(RmsNormQuantRows)(job, row_begin, row_end);
}

}  // namespace glmnorm::kernels
#endif  // HWY_ONCE
