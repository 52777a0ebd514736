// Rules the library owns and its bindings ask for instead of restating them:
// the dtype of a new output, the names of the rounding modes, the kind of an
// error. (python/src/*.cc use these; so can any other binding.)
#ifndef GLMNORM_RULES_H_
#define GLMNORM_RULES_H_

#include <cstdint>
#include <string_view>

#include "glmnorm/base.h"
#include "glmnorm/dtype.h"
#include "glmnorm/error.h"
#include "glmnorm/qk_norm.h"

namespace glmnorm {

// The Error thrown when a dtype, or a combination of dtypes, is not accepted
// (every other invalid argument throws a plain Error): bindings map it to
// their language's type error (Python: TypeError, else ValueError).
class DTypeError : public Error {
 public:
  using Error::Error;
};

// The option names of the bindings: "cast-then-scale", "single".
// RoundingFromName throws Error naming `rounding` for any other string.
std::string_view RoundingName(Rounding rounding);
Rounding RoundingFromName(std::string_view name);

// Scalar arguments as a binding receives them (Python's float and int,
// torch's double and int64) -> the library's float and int, refused rather
// than narrowed: Error "<name> must fit in float32, got <value>" for a finite
// value past float32's range or a non-zero one that would round to 0 (inf
// and NaN pass on: the op judges them), and
// "<name> must fit in 32 bits, got <value>" for an integer past int32's.
float Float32Argument(std::string_view name, double value);
int Int32Argument(std::string_view name, int64_t value);

// The options every norm takes, and QkNorm's heads, from a binding's scalars
// by the rules above (each argument named as the option: "eps", "rounding",
// "weight_offset", "num_q_heads", ...). The values are checked by the op.
NormOptions NormOptionsFrom(double eps, std::string_view rounding, double weight_offset);
QkHeads QkHeadsFrom(int64_t num_q_heads, int64_t num_k_heads, int64_t num_v_heads,
                    int64_t head_dim);

// The checks every op makes of its NormOptions (eps finite and >= 0,
// weight_offset finite), for a binding that takes options before any call
// (a module's constructor): throws Error as the ops would.
void CheckNormOptions(const NormOptions& options);

// The dtype of y that RmsNorm (and the norm of RmsNormQuant) requires of a
// new output: Promote(gamma, x) with kCastThenScale (PyTorch's promotion in
// Glm4MoeRMSNorm), x's dtype with kSingle.
DType RmsNormOutputDType(DType x, DType gamma, Rounding rounding);

// The dtype of a new y of AddRmsNorm: Promote(gamma, residual) with
// kCastThenScale, delta's dtype with kSingle.
DType AddRmsNormOutputDType(DType residual, DType delta, DType gamma, Rounding rounding);

}  // namespace glmnorm

#endif  // GLMNORM_RULES_H_
