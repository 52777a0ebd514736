// RmsNormBackward front end (rms_norm_backward.h), and the checks, workspace
// and run that AddRmsNormBackward and QkNormBackward share.
#include "glmnorm/rms_norm_backward.h"

#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "core/format_number.h"
#include "core/validate.h"
#include "core/work_cost.h"
#include "ops/rms_norm/rms_norm_backward_job.h"

namespace glmnorm {

namespace {

constexpr const char* kFn = "RmsNormBackward";
constexpr int64_t kPartialAlign = 16;  // floats: one AVX-512 vector

int64_t Blocks(int64_t rows) { return (rows + kDGammaRowBlock - 1) / kDGammaRowBlock; }
int64_t Leaves(int64_t rows) { return (rows + kDGammaLeafRows - 1) / kDGammaLeafRows; }
int64_t PartialStride(int64_t width) {
  return (width + kPartialAlign - 1) / kPartialAlign * kPartialAlign;
}

float* AlignedPartials(void* base) {
  const auto p = reinterpret_cast<uintptr_t>(base);
  return reinterpret_cast<float*>((p + 63) / 64 * 64);
}

}  // namespace

size_t NormBackwardWorkspaceBytes(int64_t rows, int64_t width) {
  if (rows <= 0 || width <= 0) return 0;
  // Per leaf: its dgamma sum; per block: a row of xf and one of dh.
  return static_cast<size_t>((Leaves(rows) + 2 * Blocks(rows)) * PartialStride(width)) *
             sizeof(float) +
         64;
}

namespace detail {

void ValidateNormBackward(const char* fn, const NormBackwardArgs& a, const NormOptions& options,
                          const Execution& execution) {
  validate::Options(fn, options);
  validate::Activation(fn, a.x_name, a.x);
  validate::Activation(fn, a.dy_name, a.dy);
  validate::Activation(fn, a.dx_name, a.dx);
  validate::SameShape(fn, a.x_name, a.x, a.dy_name, a.dy);
  validate::SameShape(fn, a.x_name, a.x, a.dx_name, a.dx);
  validate::Gamma(fn, a.gamma_name, a.gamma, a.x.width());
  validate::OutputDType(fn, a.dy_name, a.dy.dtype, a.gamma.dtype, a.x.dtype, options.rounding);
  if (a.dx.dtype != a.x.dtype && a.dx.dtype != DType::kF32) {
    validate::FailDType(fn, std::string(a.dx_name) + ".dtype must be " +
                           std::string(Name(a.x.dtype)) + " (" + a.x_name +
                           "'s dtype) or f32, got " + std::string(Name(a.dx.dtype)));
  }
  validate::Output(fn, a.dx_name, a.dx);
  // dgamma: 1-D [width], contiguous, a float dtype (the same rules as gamma).
  validate::View(fn, a.dgamma_name, a.dgamma);
  validate::Gamma(fn, a.dgamma_name, AsConst(a.dgamma), a.x.width());
  if (a.rstd.rank != 0) {
    validate::View(fn, "rstd", a.rstd);
    if (a.rstd.rank != 1 || a.rstd.shape[0] != a.x.rows()) {
      validate::Fail(fn, "rstd must be 1-D of length rows " + std::to_string(a.x.rows()) +
                             ", got shape " + validate::ShapeString(a.rstd.shape, a.rstd.rank));
    }
    if (a.rstd.dtype != DType::kF32) {
      validate::FailDType(fn, "rstd.dtype must be f32, got " + std::string(Name(a.rstd.dtype)));
    }
    // 1/rms is never negative; NaN (a row holding NaN) and +inf (a zero row
    // with eps 0) are what the forward saves for such rows. One pass over
    // `rows` floats: nothing beside the pass over the rows themselves.
    int64_t bad_row = a.rstd.shape[0];
    float bad_value = 0.0f;
    RstdCheckJob check;
    check.rstd = static_cast<const float*>(a.rstd.data);
    check.stride = a.rstd.stride[0];
    check.rows = a.rstd.shape[0];
    check.bad_row = &bad_row;
    check.bad_value = &bad_value;
    check.size.rows = check.rows > 0 ? 1 : 0;
    backend::Run(check, execution);
    if (bad_row < a.rstd.shape[0]) {
      validate::Fail(fn, "rstd[" + std::to_string(bad_row) + "] must be >= 0 or NaN (1/rms as "
                         "RmsNormWithRstd saves it), got " + ShortestString(bad_value));
    }
  }
  if (a.dres.rank != 0) {
    validate::Activation(fn, "d_residual_out", a.dres);
    validate::SameShape(fn, a.x_name, a.x, "d_residual_out", a.dres);
    if (a.dres.dtype != a.dx.dtype) {
      validate::FailDType(fn, "d_residual_out.dtype must be " + std::string(Name(a.dx.dtype)) +
                             " (" + a.dx_name + "'s dtype), got " +
                             std::string(Name(a.dres.dtype)));
    }
  }
  if (a.dx2.rank != 0) {
    validate::Activation(fn, "d_delta", a.dx2);
    validate::SameShape(fn, a.x_name, a.x, "d_delta", a.dx2);
    validate::Output(fn, "d_delta", a.dx2);
  }
  // Overlaps: dx may be dy or d_residual_out (in place, same dtype); nothing
  // else may overlap an output.
  validate::NoPartialOverlap(fn, a.x_name, a.x, a.dx_name, a.dx, false);
  validate::NoPartialOverlap(fn, a.dy_name, a.dy, a.dx_name, a.dx, a.dy.dtype == a.dx.dtype);
  validate::NoPartialOverlap(fn, a.gamma_name, a.gamma, a.dx_name, a.dx, false);
  validate::NoPartialOverlap(fn, a.gamma_name, a.gamma, a.dgamma_name, a.dgamma, false);
  validate::NoPartialOverlap(fn, a.x_name, a.x, a.dgamma_name, a.dgamma, false);
  validate::NoPartialOverlap(fn, a.dy_name, a.dy, a.dgamma_name, a.dgamma, false);
  validate::NoPartialOverlap(fn, a.dx_name, a.dx, a.dgamma_name, a.dgamma, false);
  if (a.rstd.rank != 0) {
    validate::NoPartialOverlap(fn, "rstd", a.rstd, a.dx_name, a.dx, false);
    validate::NoPartialOverlap(fn, "rstd", a.rstd, a.dgamma_name, a.dgamma, false);
  }
  if (a.dres.rank != 0) {
    validate::NoPartialOverlap(fn, "d_residual_out", a.dres, a.dx_name, a.dx, true);
    validate::NoPartialOverlap(fn, "d_residual_out", a.dres, a.dgamma_name, a.dgamma, false);
  }
  if (a.dx2.rank != 0) {
    validate::NoPartialOverlap(fn, a.x_name, a.x, "d_delta", a.dx2, false);
    validate::NoPartialOverlap(fn, a.dy_name, a.dy, "d_delta", a.dx2, false);
    validate::NoPartialOverlap(fn, a.dx_name, a.dx, "d_delta", a.dx2, false);
    validate::NoPartialOverlap(fn, a.gamma_name, a.gamma, "d_delta", a.dx2, false);
    validate::NoPartialOverlap(fn, a.dgamma_name, a.dgamma, "d_delta", a.dx2, false);
    if (a.dres.rank != 0) {
      validate::NoPartialOverlap(fn, "d_residual_out", a.dres, "d_delta", a.dx2, false);
    }
  }
}

void RunNormBackward(const char* fn, const NormBackwardArgs& a, const NormOptions& options,
                     const Workspace& workspace, const Execution& execution) {
  const int64_t width = a.x.width();
  if (width == 0) return;
  const int64_t rows = validate::Empty(a.x) ? 0 : a.x.rows();
  const size_t need = NormBackwardWorkspaceBytes(rows, width);
  void* base = workspace.data;
  if (base != nullptr && workspace.bytes < need) {
    validate::Fail(fn, "workspace.bytes must be at least " + std::to_string(need) + " for " +
                           std::to_string(rows) + " rows of width " + std::to_string(width) +
                           " (NormBackwardWorkspaceBytes), got " +
                           std::to_string(workspace.bytes));
  }
  // The internal arena (rms_norm_backward.h): the backend's scratch.
  if (base == nullptr && need > 0) base = backend::Scratch(backend::ScratchSlot::kNormBackward, need, execution);
  const int64_t blocks = Blocks(rows);
  const int64_t stride = PartialStride(width);
  float* partials = need > 0 ? AlignedPartials(base) : nullptr;
  if (rows > 0) {
    RmsNormBackwardJob job;
    job.p = NormParams::Of(a.x.dtype, a.gamma.dtype, a.dy.dtype, width, options);
    job.rows = rows;
    job.x = a.x.data;
    job.x_rows = RowLayout::Of(a.x);
    job.dy = a.dy.data;
    job.dy_rows = RowLayout::Of(a.dy);
    job.dx = a.dx.data;
    job.dx_type = a.dx.dtype;
    job.dx_rows = RowLayout::Of(a.dx);
    double ns_per_element = work_cost::kNormBackward;
    if (a.dres.rank != 0) {
      job.dres = a.dres.data;
      job.dres_rows = RowLayout::Of(a.dres);
      job.round_before_dres = options.rounding == Rounding::kCastThenScale;
      ns_per_element = work_cost::kAddNormBackward;
    }
    if (a.dx2.rank != 0) {
      job.dx2 = a.dx2.data;
      job.dx2_type = a.dx2.dtype;
      job.dx2_rows = RowLayout::Of(a.dx2);
    }
    job.gamma = a.gamma.data;
    if (a.rstd.rank != 0) {
      job.rstd = static_cast<const float*>(a.rstd.data);
      job.rstd_stride = a.rstd.stride[0];
    }
    if (a.rope.rotary_dim != 0) {
      // The kernel's row buffer holds kMaxRopeRowWidth values; rows are the
      // heads of [tokens, heads, head_dim] (QkNormBackward, the only caller).
      if (width > kMaxRopeRowWidth || a.x.rank != 3) {
        validate::Fail(fn, "internal: RoPE rows must be [tokens, heads, head_dim <= " +
                               std::to_string(kMaxRopeRowWidth) + "]");
      }
      job.rope = a.rope;
      job.rope_rows_per_token = a.x.shape[1];
      ns_per_element = work_cost::kQkRopeBackward;
    }
    job.partials = partials;
    job.partial_stride = stride;
    job.scratch = partials + Leaves(rows) * stride;
    job.size.rows = blocks;
    job.size.work_ns = work_cost::Ns(rows * width, ns_per_element);
    backend::Run(job, execution);
  }
  DGammaReduceJob reduce;
  reduce.partials = partials;
  reduce.leaves = Leaves(rows);
  reduce.partial_stride = stride;
  reduce.width = width;
  reduce.dgamma = a.dgamma.data;
  reduce.dgamma_type = a.dgamma.dtype;
  reduce.size.rows = (width + kDGammaColumns - 1) / kDGammaColumns;
  reduce.size.work_ns = work_cost::Ns(reduce.leaves * width, work_cost::kDGammaReduce);
  backend::Run(reduce, execution);  // no rows (leaves 0): dgamma is zeros
}

}  // namespace detail

void RmsNormBackward(const ConstTensorView& x, const ConstTensorView& gamma,
                     const ConstTensorView& dy, const TensorView& dx, const TensorView& dgamma,
                     const NormOptions& options, const ConstTensorView& rstd,
                     const Workspace& workspace, const Execution& execution) {
  detail::NormBackwardArgs a;
  a.x = x;
  a.gamma = gamma;
  a.dy = dy;
  a.dx = dx;
  a.dgamma = dgamma;
  a.rstd = rstd;
  detail::ValidateNormBackward(kFn, a, options, execution);
  detail::RunNormBackward(kFn, a, options, workspace, execution);
}

}  // namespace glmnorm
