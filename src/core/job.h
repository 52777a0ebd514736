// The device-neutral vocabulary of jobs: what a validating front end
// (src/ops/<op>/<op>.cc) fills and a backend (src/backend/) runs. A job is
// plain data: dtypes, pointers, row layouts, the norm maths; no thread,
// no SIMD, no device. Each op defines its job in <op>_job.h.
#ifndef GLMNORM_SRC_CORE_JOB_H_
#define GLMNORM_SRC_CORE_JOB_H_

#include <cstdint>

#include "glmnorm/base.h"

namespace glmnorm {

// Where row r of a view starts: the leading dims decompose r row-major.
// Of() drops leading dims of size 1 and merges a dim into the one after it
// where the view is contiguous across them ([1, 104, 128] heads: one dim of
// 104 rows), so most views need no division per row: Offset runs several
// times per row, and two 64-bit divisions per call cost more than normalising
// a head of 128. Same addresses, so the same bits.
struct RowLayout {
  int num_lead = 0;  // leading dims left after merging (<= rank - 1)
  int64_t shape[kMaxRank - 1] = {1, 1, 1};
  int64_t stride[kMaxRank - 1] = {0, 0, 0};  // elements

  template <typename Ptr>
  static RowLayout Of(const BasicTensorView<Ptr>& v) {
    RowLayout l;
    for (int i = 0; i < v.rank - 1; ++i) {
      if (v.shape[i] == 1) continue;  // row % 1 == 0: contributes nothing
      if (l.num_lead > 0 && l.stride[l.num_lead - 1] == v.shape[i] * v.stride[i]) {
        l.shape[l.num_lead - 1] *= v.shape[i];  // contiguous with the dim before it
        l.stride[l.num_lead - 1] = v.stride[i];
        continue;
      }
      l.shape[l.num_lead] = v.shape[i];
      l.stride[l.num_lead] = v.stride[i];
      ++l.num_lead;
    }
    return l;
  }
  int64_t Offset(int64_t row) const {
    // rows < shape[0] always, so one leading dim needs no division.
    if (num_lead <= 1) return num_lead == 1 ? row * stride[0] : 0;
    // The outermost dim needs no division: row < shape[0] once the inner
    // dims are divided out (one 64-bit division per inner dim; the % and /
    // of a dim share one).
    int64_t off = 0;
    for (int i = num_lead - 1; i > 0; --i) {
      off += (row % shape[i]) * stride[i];
      row /= shape[i];
    }
    return off + row * stride[0];
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

// Quantised output of a norm (quant.h): q = saturate(RNE(value / scale)).
struct QuantParams {
  DType q_type = DType::kI8;  // kI8 or kF8E4M3
  bool dynamic = false;       // per-token scale = max|value| / qmax, written to scales
  float scale = 1.0f;         // static per-tensor scale
  float* scales = nullptr;    // dynamic: one per row, at scales[row * scales_stride]
  int64_t scales_stride = 1;  // elements
};

// How much work a job is: rows for the thread split (its unit), and the time
// one thread would take, for the decision to split at all. The front end
// estimates work_ns from the job's elements (core/work_cost.h).
struct JobSize {
  int64_t rows = 0;
  int64_t work_ns = 0;
};

// The entry points of an op's kernels, one per backend. Each op's job header
// specialises it for its job type:
//   template <> struct OpKernels<RmsNormJob> {
//     // Rows [row_begin, row_end) of the job on this CPU (Highway dispatch).
//     static void CpuRows(const RmsNormJob& job, int64_t row_begin, int64_t row_end);
//   };
// and the op's <op>_cpu.cc defines it. A second backend adds its entry here.
template <class Job>
struct OpKernels;

}  // namespace glmnorm

#endif  // GLMNORM_SRC_CORE_JOB_H_
