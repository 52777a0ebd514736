// Umbrella header of the glmnorm library.
#ifndef GLMNORM_GLMNORM_H_
#define GLMNORM_GLMNORM_H_

#include "glmnorm/add_rms_norm.h"
#include "glmnorm/add_rms_norm_backward.h"
#include "glmnorm/base.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/decoder.h"
#include "glmnorm/dtype.h"
#include "glmnorm/error.h"
#include "glmnorm/qk_norm.h"
#include "glmnorm/qk_norm_backward.h"
#include "glmnorm/quant.h"
#include "glmnorm/rms_norm.h"
#include "glmnorm/rms_norm_backward.h"
#include "glmnorm/rules.h"
#include "glmnorm/safetensors.h"
#include "glmnorm/tensor.h"
#include "glmnorm/execution.h"

#endif  // GLMNORM_GLMNORM_H_
