// `glmnorm bench` cases of the backward kernels (docs/BACKWARD.md):
// rms_norm_backward and add_rms_norm_backward on the hidden size 5120.
#ifndef GLMNORM_TOOLS_BENCH_BACKWARD_H_
#define GLMNORM_TOOLS_BENCH_BACKWARD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_runner.h"

namespace glmnorm::tools {

// Appends the cases of `kernel` (empty: both backward kernels; another name:
// none) for each token count and activation dtype.
void AddBackwardCases(const std::string& kernel, const std::vector<int64_t>& tokens,
                      const std::vector<std::string>& dtypes, int threads,
                      std::vector<BenchCase>& cases, std::vector<std::shared_ptr<void>>& keep);

}  // namespace glmnorm::tools

#endif  // GLMNORM_TOOLS_BENCH_BACKWARD_H_
