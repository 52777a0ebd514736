// AddRmsNormBackward front end (add_rms_norm_backward.h): RmsNormBackward of
// the norm of h with d_residual_out added to dx in the same pass
// (ops/rms_norm/).
#include "glmnorm/add_rms_norm_backward.h"

#include <string>

#include "core/validate.h"
#include "ops/rms_norm/rms_norm_backward_job.h"

namespace glmnorm {

namespace {
constexpr const char* kFn = "AddRmsNormBackward";
}  // namespace

void AddRmsNormBackward(const ConstTensorView& h, const ConstTensorView& gamma,
                        const ConstTensorView& dy, const ConstTensorView& d_residual_out,
                        const TensorView& d_h, const TensorView& d_delta,
                        const TensorView& dgamma, const AddNormOptions& options,
                        const ConstTensorView& rstd, const Workspace& workspace,
                        const Execution& execution) {
  detail::NormBackwardArgs a;
  a.x = h;
  a.gamma = gamma;
  a.dy = dy;
  a.dres = d_residual_out;
  a.dx = d_h;
  a.dx2 = d_delta;
  a.dgamma = dgamma;
  a.rstd = rstd;
  a.x_name = "h";
  a.dx_name = "d_h";
  detail::ValidateNormBackward(kFn, a, options, execution);
  if (d_h.dtype != h.dtype) {
    validate::FailDType(kFn, "d_h.dtype must be " + std::string(Name(h.dtype)) +
                            " (the residual's dtype), got " + std::string(Name(d_h.dtype)));
  }
  if (!options.normalize_rounded_sum && h.dtype != DType::kF32) {
    validate::Fail(kFn, "options.normalize_rounded_sum must be true for a " +
                            std::string(Name(h.dtype)) +
                            " residual (the forward does not keep the float32 sum it normalised)");
  }
  detail::RunNormBackward(kFn, a, options, workspace, execution);
}

}  // namespace glmnorm
