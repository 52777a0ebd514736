// The CPU backend: splits the rows of a job over the executor (the default
// pool or the caller's); small jobs run on the calling thread. Which rows a
// task gets never changes a row's result (each row is computed alone, in a
// fixed order). The per-row kernels are each op's <op>_cpu.cc, compiled once
// per SIMD target and dispatched at run time by Highway.
#ifndef GLMNORM_SRC_BACKEND_CPU_CPU_BACKEND_H_
#define GLMNORM_SRC_BACKEND_CPU_CPU_BACKEND_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/job.h"
#include "glmnorm/execution.h"

namespace glmnorm {
class ThreadPool;  // thread_pool.h
}  // namespace glmnorm

namespace glmnorm::cpu {

// Where a job's tasks run and how many tasks to cut it into (execution.cc):
// the caller's executor, or the default pool when the job is large enough
// that every thread's share pays for the handoff (see kMinNsPerThread
// there), or the calling thread alone (num_tasks = 1, run = nullptr).
struct Split {
  Executor exec;
  int64_t num_tasks = 1;
  // The default pool when the job was large enough to ask it (held until
  // the job ends, which RunRows reports: JobEnded), else null.
  std::shared_ptr<ThreadPool> pool;
};
Split ChooseSplit(const Execution& execution, const JobSize& size);
// Marks the end of a job the pool was asked about, split or run on the
// caller alone (ThreadPool::MarkJobEnd): a short job right after it may use
// the workers (calls come back to back).
void JobEnded(ThreadPool& pool);

// Outputs at least this large are written with streaming (non-temporal)
// stores: they would not stay in cache anyway, and streaming skips the read
// of each destination line. Smaller outputs stay cached for the next op.
constexpr int64_t kStreamMinBytes = int64_t{4} << 20;

// How far ahead of its reads a kernel prefetches when it reads rows from
// cache after reducing them (rms_norm rows, qk_norm heads): a read of memory
// stays in flight. 4 KiB covers one memory latency of work (docs/PERFORMANCE.md,
// "Prefetch distance for narrow rows").
constexpr int64_t kPrefetchBytes = 4096;

// Scratch memory of at least `bytes` (backend::Scratch): a per-thread,
// per-slot arena that grows when a call needs more than any call before it
// on that thread and is never freed, so a thread allocates only until it has
// seen its largest call. Valid until this thread asks for the same slot again.
constexpr int kScratchSlots = 4;
void* Scratch(int slot, size_t bytes);  // slot in [0, kScratchSlots)

// fn(row_begin, row_end) over [0, size.rows).
template <class Fn>
void RunRows(const Execution& execution, const JobSize& size, const Fn& fn) {
  const int64_t rows = size.rows;
  if (rows <= 0) return;
  const Split split = ChooseSplit(execution, size);
  if (split.num_tasks <= 1 || split.exec.run == nullptr) {
    fn(int64_t{0}, rows);
    if (split.pool) JobEnded(*split.pool);
    return;
  }
  struct Ctx {
    const Fn* fn;
    int64_t rows;
    int64_t num_tasks;
  };
  Ctx ctx{&fn, rows, split.num_tasks};
  split.exec.run(split.exec.ctx, static_cast<size_t>(ctx.num_tasks),
           [](void* c, size_t i) {
             const Ctx& t = *static_cast<const Ctx*>(c);
             const int64_t begin = t.rows * static_cast<int64_t>(i) / t.num_tasks;
             const int64_t end = t.rows * static_cast<int64_t>(i + 1) / t.num_tasks;
             (*t.fn)(begin, end);
           },
           &ctx);
  if (split.pool) JobEnded(*split.pool);
}

}  // namespace glmnorm::cpu

#endif  // GLMNORM_SRC_BACKEND_CPU_CPU_BACKEND_H_
