// Plain descriptions of the work a kernel does, filled by the validating
// front ends (rms_norm.cc, ...) and read by the per-target kernels.
#ifndef GLMNORM_SRC_KERNEL_ARGS_H_
#define GLMNORM_SRC_KERNEL_ARGS_H_

#include <cstdint>

#include "glmnorm/dtype.h"
#include "glmnorm/rms_norm.h"
#include "glmnorm/tensor.h"

namespace glmnorm {

// Where row r of a view starts: the leading dims decompose r row-major.
struct RowLayout {
  int num_lead = 0;  // rank - 1
  int64_t shape[kMaxRank - 1] = {1, 1, 1};
  int64_t stride[kMaxRank - 1] = {0, 0, 0};  // elements

  template <typename Ptr>
  static RowLayout Of(const BasicTensorView<Ptr>& v) {
    RowLayout l;
    l.num_lead = v.rank - 1;
    for (int i = 0; i < l.num_lead; ++i) {
      l.shape[i] = v.shape[i];
      l.stride[i] = v.stride[i];
    }
    return l;
  }
  int64_t Offset(int64_t row) const {
    int64_t off = 0;
    for (int i = num_lead - 1; i >= 0; --i) {
      off += (row % shape[i]) * stride[i];
      row /= shape[i];
    }
    return off;
  }
};

// The per-row maths shared by every norm kernel.
struct NormParams {
  DType x_type = DType::kF32;  // T: the norm's input dtype
  DType w_type = DType::kF32;  // W: gamma's dtype
  DType y_type = DType::kF32;  // the output dtype
  Rounding rounding = Rounding::kCastThenScale;
  float eps = kGlmRmsNormEps;
  float weight_offset = 0.0f;
  int64_t width = 0;
};

struct RmsNormJob {
  NormParams p;
  const void* x = nullptr;
  RowLayout x_rows;
  void* y = nullptr;
  RowLayout y_rows;
  const void* gamma = nullptr;
};

}  // namespace glmnorm

#endif  // GLMNORM_SRC_KERNEL_ARGS_H_
