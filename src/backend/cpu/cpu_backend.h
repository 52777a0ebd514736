// The CPU backend: splits the rows of a job over the executor (the default
// pool or the caller's); small jobs run on the calling thread. Which rows a
// task gets never changes a row's result (each row is computed alone, in a
// fixed order). The per-row kernels are each op's <op>_cpu.cc, compiled once
// per SIMD target and dispatched at run time by Highway.
#ifndef GLMNORM_SRC_BACKEND_CPU_CPU_BACKEND_H_
#define GLMNORM_SRC_BACKEND_CPU_CPU_BACKEND_H_

#include <algorithm>
#include <cstdint>

#include "backend/cpu/thread_pool.h"
#include "core/job.h"
#include "glmnorm/execution.h"

namespace glmnorm::cpu {

// Below this many bytes moved, waking threads costs more than it saves.
constexpr int64_t kMinParallelBytes = 512 * 1024;
constexpr int kTasksPerThread = 4;

// Outputs at least this large are written with streaming (non-temporal)
// stores: they would not stay in cache anyway, and streaming skips the read
// of each destination line. Smaller outputs stay cached for the next op.
constexpr int64_t kStreamMinBytes = int64_t{4} << 20;

// fn(row_begin, row_end) over [0, size.rows).
template <class Fn>
void RunRows(const Execution& execution, const JobSize& size, const Fn& fn) {
  const int64_t rows = size.rows;
  if (rows <= 0) return;
  Executor exec;
  int threads = 1;
  if (execution.executor != nullptr) {
    exec = *execution.executor;
    threads = 16;  // the caller's executor decides where tasks run
  } else if (size.bytes_moved >= kMinParallelBytes && rows > 1) {
    exec = DefaultExecutor();
    threads = NumThreads();
  }
  if (threads <= 1 || exec.run == nullptr) {
    fn(int64_t{0}, rows);
    return;
  }
  struct Ctx {
    const Fn* fn;
    int64_t rows;
    int64_t num_tasks;
  };
  Ctx ctx{&fn, rows, std::min<int64_t>(rows, int64_t{threads} * kTasksPerThread)};
  exec.run(exec.ctx, static_cast<size_t>(ctx.num_tasks),
           [](void* c, size_t i) {
             const Ctx& t = *static_cast<const Ctx*>(c);
             const int64_t begin = t.rows * static_cast<int64_t>(i) / t.num_tasks;
             const int64_t end = t.rows * static_cast<int64_t>(i + 1) / t.num_tasks;
             (*t.fn)(begin, end);
           },
           &ctx);
}

}  // namespace glmnorm::cpu

#endif  // GLMNORM_SRC_BACKEND_CPU_CPU_BACKEND_H_
