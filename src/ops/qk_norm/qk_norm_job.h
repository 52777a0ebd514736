// QkNorm's jobs: qk_norm.cc -> qk_norm_cpu.cc (the forward, the check of the
// RoPE positions) and qk_norm_backward.cc -> qk_norm_backward_cpu.cc (the
// RoPE backward of heads wider than kMaxRopeRowWidth; the norm backward,
// which un-rotates narrower heads itself, is ops/rms_norm/'s).
#ifndef GLMNORM_SRC_OPS_QK_NORM_QK_NORM_JOB_H_
#define GLMNORM_SRC_OPS_QK_NORM_QK_NORM_JOB_H_

#include <cstdint>

#include "core/job.h"
#include "glmnorm/qk_norm.h"

namespace glmnorm {

struct RopeTables;  // below

namespace detail {
// The checks of the head counts shared by QkNorm and QkNormBackward (`fn`
// names the public function): head_dim >= 1, counts >= 0, at least one q or
// k head, and (q + k + v) * head_dim a valid width, which it returns.
int64_t ValidateQkHeads(const char* fn, const QkHeads& heads);

// The gammas' dtypes, shared by QkNorm and QkNormBackward: q and k alike,
// and f32 or the QKV tensor's dtype (named `qkv_name`).
void ValidateQkGammaDTypes(const char* fn, DType q, DType k, DType qkv, const char* qkv_name);

// The checks of a Rope argument, shared by QkNorm and QkNormBackward (`fn`
// names the public function): rotary_dim even and <= head_dim, f32 tables
// [positions, rotary_dim/2] with contiguous rows, positions i64 in range,
// shaped [tokens] or like the caller's leading dims (`qkv`, named
// `qkv_name`: [B, S] for [B, S, W], a dim of 1 broadcast), or absent (tokens
// <= the tables' positions), none overlapping `out` (named `out_name`).
// With rotary_dim 0 no table may be given. Without positions, `qkv` must
// hold one sequence: leading dims [B, S] with B > 1 would take table rows
// 0..B*S-1, not 0..S-1 per sequence. Returns the tables as the kernels read
// them.
RopeTables ValidateRope(const char* fn, const Rope& rope, int64_t head_dim, int64_t tokens,
                        const ConstTensorView& qkv, const char* qkv_name, const TensorView& out,
                        const char* out_name, const Execution& execution);

// The error for a QKV view `name` of width `got` that is not
// (nq + nk + nv) * head_dim = `width` (QkNorm and QkNormBackward alike).
[[noreturn]] void FailQkWidth(const char* fn, const char* name, const QkHeads& heads,
                              int64_t width, int64_t got);
}  // namespace detail

// A validated Rope (ValidateRope) as the kernels read it, shared by the
// forward's and the backward's jobs.
struct RopeTables {
  int64_t rotary_dim = 0;      // 0: no RoPE
  const float* cos = nullptr;  // [positions, rotary_dim/2]
  const float* sin = nullptr;
  int64_t cos_row_stride = 0;
  int64_t sin_row_stride = 0;
  const int64_t* positions = nullptr;  // null: token t uses row t
  RowLayout positions_layout;          // token t's position: positions[Offset(t)]

  // The table rows of token t.
  const float* Cos(int64_t t) const { return cos + Position(t) * cos_row_stride; }
  const float* Sin(int64_t t) const { return sin + Position(t) * sin_row_stride; }
  int64_t Position(int64_t t) const {
    return positions != nullptr ? positions[positions_layout.Offset(t)] : t;
  }
};

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
  RopeTables rope;  // rope.rotary_dim 0: no RoPE
};

template <>
struct OpKernels<QkNormJob> {
  static void CpuRows(const QkNormJob& job, int64_t row_begin, int64_t row_end);
};

// The check of RoPE positions (ValidateRope): the first of `tokens` tokens
// whose position is outside [0, limit), into *bad_token and *bad_position
// (*bad_token left as it is when every position is in range). The positions
// are tensor data, so a backend reads them, not the front end. One task
// (size.rows = 1): a token's position is 8 bytes.
struct RopePositionsCheckJob {
  JobSize size;
  const int64_t* positions = nullptr;
  RowLayout layout;  // token t's position: positions[layout.Offset(t)]
  int64_t tokens = 0;
  int64_t limit = 0;  // the tables' positions
  int64_t* bad_token = nullptr;
  int64_t* bad_position = nullptr;
};

template <>
struct OpKernels<RopePositionsCheckJob> {
  static void CpuRows(const RopePositionsCheckJob& job, int64_t row_begin, int64_t row_end);
};

// The RoPE backward as a pass of its own (QkNormBackward with
// rope.rotary_dim > 0 and head_dim > kMaxRopeRowWidth): rows are tokens; the
// q and k heads of `in` (dqkv_out's first heads * head_dim columns) rotated
// back (UnrotateHead) into `out`. in and out have the dtype `type`.
struct QkRopeBackwardJob {
  JobSize size;
  DType type = DType::kF32;
  const void* in = nullptr;
  int64_t in_row_stride = 0;   // elements
  void* out = nullptr;
  int64_t out_row_stride = 0;  // elements
  int64_t heads = 0;  // q + k heads
  int64_t head_dim = 0;
  RopeTables rope;
};

template <>
struct OpKernels<QkRopeBackwardJob> {
  static void CpuRows(const QkRopeBackwardJob& job, int64_t row_begin, int64_t row_end);
};

}  // namespace glmnorm

#endif  // GLMNORM_SRC_OPS_QK_NORM_QK_NORM_JOB_H_
