// `glmnorm bench` cases of the decoder-path kernels (docs/DECODER.md):
// add_rms_norm, add_then_rms_norm (the unfused baseline), qk_norm,
// qk_norm_rope, rms_norm_quant, add_rms_norm_quant.
#ifndef GLMNORM_TOOLS_BENCH_DECODER_H_
#define GLMNORM_TOOLS_BENCH_DECODER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_runner.h"

namespace glmnorm::tools {

// Appends the cases of `kernel` (empty: all decoder kernels; a name that is
// not one of them: none) for each token count and activation dtype.
void AddDecoderCases(const std::string& kernel, const std::vector<int64_t>& tokens,
                     const std::vector<std::string>& dtypes, int threads,
                     std::vector<BenchCase>& cases, std::vector<std::shared_ptr<void>>& keep);

}  // namespace glmnorm::tools

#endif  // GLMNORM_TOOLS_BENCH_DECODER_H_
