// The seam between the op front ends and the backends: a front end validates
// its arguments into a job (core/job.h, ops/<op>/<op>_job.h) and calls
// backend::Run; the backend decides where and how the job runs. Front ends
// know no thread, no SIMD target and no device.
//
// Today there is one backend, the CPU (backend/cpu/). A device backend adds
// its entry to OpKernels, a branch here on Execution (in Run and Scratch), and
// its kernels in each op folder; no front end changes. Front ends never read
// or write tensor data themselves: checks of data (RoPE positions in range),
// scratch memory and every reduction are jobs or calls here.
#ifndef GLMNORM_SRC_BACKEND_BACKEND_H_
#define GLMNORM_SRC_BACKEND_BACKEND_H_

#include <cstddef>
#include <cstdint>

#include "backend/cpu/cpu_backend.h"
#include "core/job.h"
#include "glmnorm/execution.h"

namespace glmnorm::backend {

// Runs a validated job (it has a `size` member, JobSize). Empty jobs return
// at once.
template <class Job>
void Run(const Job& job, const Execution& execution) {
  if (job.size.rows <= 0) return;
  cpu::RunRows(execution, job.size, [&job](int64_t row_begin, int64_t row_end) {
    OpKernels<Job>::CpuRows(job, row_begin, row_end);
  });
}

// Users of scratch memory within one call, kept apart (the RoPE backward's
// un-rotated gradient is read while the norm backward uses its own scratch).
enum class ScratchSlot : int { kNormBackward = 0, kRopeBackward = 1, kCount = 2 };
static_assert(static_cast<int>(ScratchSlot::kCount) <= cpu::kScratchSlots);

// Scratch memory of at least `bytes` where the jobs of `execution` run, for
// the rest of the calling thread's current call (see cpu::Scratch).
inline void* Scratch(ScratchSlot slot, size_t bytes, const Execution& /*execution*/) {
  return cpu::Scratch(static_cast<int>(slot), bytes);
}

}  // namespace glmnorm::backend

#endif  // GLMNORM_SRC_BACKEND_BACKEND_H_
