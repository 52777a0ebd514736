// The backward jobs of the norms: filled by rms_norm_backward.cc (and through
// it by add_rms_norm_backward.cc and qk_norm_backward.cc), run by
// rms_norm_backward_cpu.cc.
#ifndef GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_BACKWARD_JOB_H_
#define GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_BACKWARD_JOB_H_

#include <cstdint>

#include "core/job.h"
#include "glmnorm/rms_norm_backward.h"
#include "ops/qk_norm/qk_norm_job.h"

namespace glmnorm {

static_assert(kDGammaRowBlock % kDGammaLeafRows == 0, "a leaf never spans two blocks");

// The widest rows whose dy the kernel un-rotates itself (QkNormBackward with
// RoPE: a row's dy goes through a buffer on the kernel's stack, 4 KiB at
// most). Wider heads take a pass of their own (qk_norm_backward.cc).
constexpr int64_t kMaxRopeRowWidth = 1024;

// Pass 1, per block of kDGammaRowBlock rows: dx of each row and the float32
// dgamma sum of each leaf of kDGammaLeafRows rows in it. size.rows counts
// BLOCKS (the unit of the thread split), so a block is always computed whole
// by one task.
// p.x_type is T, p.y_type is dy's dtype.
struct RmsNormBackwardJob {
  JobSize size;
  NormParams p;
  int64_t rows = 0;  // rows of x
  const void* x = nullptr;
  RowLayout x_rows;
  const void* dy = nullptr;
  RowLayout dy_rows;
  void* dx = nullptr;
  DType dx_type = DType::kF32;
  RowLayout dx_rows;
  // Optional (null): added to dx before its rounding (AddRmsNormBackward's
  // d_residual_out), dtype dx_type.
  const void* dres = nullptr;
  RowLayout dres_rows;
  // Cast-then-scale (torch's order): dx is rounded to dx_type before dres is
  // added (autograd's x.grad of the norm is a tensor of h's dtype, and the
  // add is a second op); single rounding: one rounding of the float32 sum.
  bool round_before_dres = false;
  // Optional (null): a second copy of dx in its own dtype (d_delta).
  void* dx2 = nullptr;
  DType dx2_type = DType::kF32;
  RowLayout dx2_rows;
  const void* gamma = nullptr;
  const float* rstd = nullptr;  // optional: rstd[row * rstd_stride]
  int64_t rstd_stride = 0;
  float* partials = nullptr;    // leaves x partial_stride floats, 64-byte aligned
  int64_t partial_stride = 0;   // width rounded up to 16
  float* scratch = nullptr;     // blocks x 2 x partial_stride floats: a row's xf and dh
  // Optional (rope.rotary_dim 0: none; rows of kMaxRopeRowWidth at most): dy
  // is the gradient of RoPE-rotated heads, un-rotated row by row before use
  // (UnrotateHead, rope-inl.h); row r is a head of token r / rope_rows_per_token.
  RopeTables rope;
  int64_t rope_rows_per_token = 1;
};

// Pass 2: dgamma[j] = dG(pairwise tree over leaves b of partials[b][j]).
// size.rows counts groups of kDGammaColumns columns (each column is reduced
// alone, so any split gives the same bits). No leaves: dgamma is zeros.
constexpr int64_t kDGammaColumns = 16;  // divides partial_stride
struct DGammaReduceJob {
  JobSize size;
  const float* partials = nullptr;
  int64_t leaves = 0;
  int64_t partial_stride = 0;
  int64_t width = 0;
  void* dgamma = nullptr;
  DType dgamma_type = DType::kF32;
};

// The check of a given rstd (ValidateNormBackward): the first of `rows`
// values below 0, into *bad_row and *bad_value (*bad_row left as it is when
// there is none). The values are tensor data, so a backend reads them, not
// the front end. One task (size.rows = 1): a row's rstd is 4 bytes.
struct RstdCheckJob {
  JobSize size;
  const float* rstd = nullptr;
  int64_t stride = 1;  // elements
  int64_t rows = 0;
  int64_t* bad_row = nullptr;
  float* bad_value = nullptr;
};

template <>
struct OpKernels<RstdCheckJob> {
  static void CpuRows(const RstdCheckJob& job, int64_t row_begin, int64_t row_end);
};

template <>
struct OpKernels<RmsNormBackwardJob> {
  static void CpuRows(const RmsNormBackwardJob& job, int64_t block_begin, int64_t block_end);
};

template <>
struct OpKernels<DGammaReduceJob> {
  static void CpuRows(const DGammaReduceJob& job, int64_t group_begin, int64_t group_end);
};

namespace detail {

// The checks and the run shared by the three backward front ends. `fn` names
// the public function in error messages. x and dy may be 2-D to 4-D (QK heads
// are 3-D views). dres / dx2 are rank 0 when absent.
struct NormBackwardArgs {
  ConstTensorView x, gamma, dy, dres, rstd;
  TensorView dx, dx2, dgamma;
  // QkNormBackward: dy of rotated heads (RmsNormBackwardJob::rope), x 3-D
  // [tokens, heads, head_dim].
  RopeTables rope;
  const char* x_name = "x";
  const char* gamma_name = "gamma";
  const char* dy_name = "dy";
  const char* dx_name = "dx";
  const char* dgamma_name = "dgamma";
};
void ValidateNormBackward(const char* fn, const NormBackwardArgs& a, const NormOptions& options,
                          const Execution& execution);
// Runs validated arguments (call ValidateNormBackward first).
void RunNormBackward(const char* fn, const NormBackwardArgs& a, const NormOptions& options,
                     const Workspace& workspace, const Execution& execution);

}  // namespace detail
}  // namespace glmnorm

#endif  // GLMNORM_SRC_OPS_RMS_NORM_RMS_NORM_BACKWARD_JOB_H_
