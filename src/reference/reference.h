// All float64 oracles, for tests and the benchmark's error column: the
// shared scalar helpers and each op's reference (src/ops/<op>/<op>_reference.h).
#ifndef GLMNORM_SRC_REFERENCE_REFERENCE_H_
#define GLMNORM_SRC_REFERENCE_REFERENCE_H_

#include "ops/add_rms_norm/add_rms_norm_reference.h"
#include "ops/qk_norm/qk_norm_reference.h"
#include "ops/quant/quant_reference.h"
#include "ops/rms_norm/rms_norm_reference.h"
#include "ops/rms_norm/rms_norm_backward_reference.h"
#include "reference/oracle.h"

#endif  // GLMNORM_SRC_REFERENCE_REFERENCE_H_
