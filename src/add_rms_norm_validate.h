// Checks and job set-up shared by AddRmsNorm and AddRmsNormQuant.
#ifndef GLMNORM_SRC_ADD_RMS_NORM_VALIDATE_H_
#define GLMNORM_SRC_ADD_RMS_NORM_VALIDATE_H_

#include "glmnorm/add_rms_norm.h"
#include "kernel_args.h"

namespace glmnorm::detail {

// residual, delta, gamma and options (not y).
void ValidateAddInputs(const char* fn, const TensorView& residual, const ConstTensorView& delta,
                       const ConstTensorView& gamma, const AddNormOptions& options);

AddRmsNormJob MakeAddJob(const TensorView& residual, const ConstTensorView& delta,
                         const ConstTensorView& gamma, const TensorView& y, DType value_type,
                         const AddNormOptions& options);

}  // namespace glmnorm::detail

#endif  // GLMNORM_SRC_ADD_RMS_NORM_VALIDATE_H_
