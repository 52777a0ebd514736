// What one element (one value of a row) of each op costs one thread, in
// nanoseconds, in cache: the front ends turn a job's element count into
// JobSize::work_ns, and the thread split (backend/cpu/execution.cc) starts a
// second thread only when each share is worth the handoff. A share is judged
// by its time, not its bytes: an e4m3 quantisation moves 3 bytes a value in
// the time RmsNorm moves 12 (docs/PERFORMANCE.md, "Threads for small calls").
//
// Measured on Zen 4 (glmnorm bench, 16 and 32 tokens, 1 thread), the middle
// of the bf16 and f32 figures, which differ by up to 1.4x. Only their ratios
// to kMinNsPerThread matter, so a slower CPU splits a little later than it
// could, never sooner.
#ifndef GLMNORM_SRC_CORE_WORK_COST_H_
#define GLMNORM_SRC_CORE_WORK_COST_H_

#include <cstdint>

namespace glmnorm::work_cost {

constexpr double kRmsNorm = 0.16;          // bf16 rows of 5120 0.13, f32 0.18; heads 0.18-0.23
constexpr double kAddRmsNorm = 0.24;       // bf16 0.22, f32 0.27
constexpr double kRmsNormQuant = 0.45;     // bf16 0.52, f32 0.40 (the e4m3 / int8 encoder)
constexpr double kAddRmsNormQuant = 0.55;  // bf16 0.63, f32 0.47
constexpr double kQkNorm = 0.18;           // bf16 0.16, f32 0.19
constexpr double kQkNormRope = 0.21;       // bf16 0.21, f32 0.22
constexpr double kNormBackward = 0.35;     // bf16 0.34, f32 0.37
constexpr double kAddNormBackward = 0.5;   // bf16 0.50, f32 0.52 (d_residual_out added)
constexpr double kQkRopeBackward = 0.75;   // bf16 0.87, f32 0.64 (un-rotation in the row loop)
// Not measured alone (estimates): one float read and added per element; the
// rotation of the wide heads' own pass (QkNormBackward, head_dim > 1024).
constexpr double kDGammaReduce = 0.05;
constexpr double kRopeBackwardPass = 0.3;

// work_ns of `elements` elements at `ns_per_element`.
inline int64_t Ns(int64_t elements, double ns_per_element) {
  return static_cast<int64_t>(static_cast<double>(elements) * ns_per_element);
}

}  // namespace glmnorm::work_cost

#endif  // GLMNORM_SRC_CORE_WORK_COST_H_
