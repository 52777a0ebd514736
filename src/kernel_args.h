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
    // rows < shape[0] always, so one leading dim needs no division.
    if (num_lead == 1) return row * stride[0];
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

  static NormParams Of(DType x, DType w, DType y, int64_t width, const NormOptions& o) {
    NormParams p;
    p.x_type = x;
    p.w_type = w;
    p.y_type = y;
    p.rounding = o.rounding;
    p.eps = o.eps;
    p.weight_offset = o.weight_offset;
    p.width = width;
    return p;
  }
};

// Outputs at least this large are written with streaming (non-temporal)
// stores: they would not stay in cache anyway, and streaming skips the read
// of each destination line. Smaller outputs stay cached for the next op.
constexpr int64_t kStreamMinBytes = int64_t{4} << 20;

struct RmsNormJob {
  NormParams p;
  bool stream = false;  // see kStreamMinBytes
  const void* x = nullptr;
  RowLayout x_rows;
  void* y = nullptr;
  RowLayout y_rows;
  const void* gamma = nullptr;
};


// ---------------------------------------------------------------- decoder ops
// (docs/DECODER.md)

// Quantised output of a norm (quant.h): q = saturate(RNE(value / scale)).
struct QuantParams {
  DType q_type = DType::kI8;  // kI8 or kF8E4M3
  bool dynamic = false;       // per-token scale = max|value| / qmax, written to scales
  float scale = 1.0f;         // static per-tensor scale
  float* scales = nullptr;    // dynamic: one per row, in row order
};

// AddRmsNorm (and AddRmsNormQuant): residual <- R(residual + delta); y <- norm.
// p.x_type is residual's dtype R (the norm's T); p.y_type is y's dtype (the
// value dtype before quantising, when quantize).
struct AddRmsNormJob {
  NormParams p;
  DType delta_type = DType::kF32;
  bool normalize_rounded_sum = true;
  void* residual = nullptr;
  RowLayout residual_rows;
  const void* delta = nullptr;
  RowLayout delta_rows;
  void* y = nullptr;  // y, or q when quantize
  RowLayout y_rows;
  const void* gamma = nullptr;
  bool quantize = false;
  QuantParams quant;
};

// RmsNormQuant: p.y_type is the value dtype quantised (f32 in single-rounding
// mode, Promote(w, x) in cast-then-scale mode).
struct RmsNormQuantJob {
  NormParams p;
  const void* x = nullptr;
  RowLayout x_rows;
  void* q = nullptr;
  RowLayout q_rows;
  const void* gamma = nullptr;
  QuantParams quant;
};

// QkNorm: rows are tokens; p.width is head_dim; p.w_type is the gammas' dtype.
struct QkNormJob {
  NormParams p;
  const void* in = nullptr;
  int64_t in_row_stride = 0;   // elements
  void* out = nullptr;
  int64_t out_row_stride = 0;  // elements
  int64_t num_q_heads = 0;
  int64_t num_k_heads = 0;
  const void* q_gamma = nullptr;
  const void* k_gamma = nullptr;
  int64_t rotary_dim = 0;      // 0: no RoPE
  const float* cos = nullptr;  // [positions, rotary_dim/2]
  const float* sin = nullptr;
  int64_t cos_row_stride = 0;
  int64_t sin_row_stride = 0;
  const int64_t* positions = nullptr;  // null: token t uses row t
};

}  // namespace glmnorm

#endif  // GLMNORM_SRC_KERNEL_ARGS_H_
