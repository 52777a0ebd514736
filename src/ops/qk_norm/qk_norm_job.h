// QkNorm's job: qk_norm.cc -> qk_norm_cpu.cc.
#ifndef GLMNORM_SRC_OPS_QK_NORM_QK_NORM_JOB_H_
#define GLMNORM_SRC_OPS_QK_NORM_QK_NORM_JOB_H_

#include <cstdint>

#include "core/job.h"
#include "glmnorm/qk_norm.h"

namespace glmnorm {

namespace detail {
// The checks of a Rope argument, shared by QkNorm and QkNormBackward (`fn`
// names the public function): rotary_dim even and <= head_dim, f32 tables
// [positions, rotary_dim/2] with contiguous rows, positions i64 [tokens] in
// range (or absent: tokens <= the tables' positions), none overlapping `out`
// (named `out_name`).
// Nothing to check when rope.rotary_dim is 0.
void ValidateRope(const char* fn, const Rope& rope, int64_t head_dim, int64_t tokens,
                  const TensorView& out, const char* out_name);
}  // namespace detail

// QkNorm: rows are tokens; p.width is head_dim; p.w_type is the gammas' dtype.
struct QkNormJob {
  JobSize size;
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
  int64_t positions_stride = 1;        // elements
};

template <>
struct OpKernels<QkNormJob> {
  static void CpuRows(const QkNormJob& job, int64_t row_begin, int64_t row_end);
};

}  // namespace glmnorm

#endif  // GLMNORM_SRC_OPS_QK_NORM_QK_NORM_JOB_H_
