// Where the work of a call runs: every op takes an optional Execution as its
// last argument. The maths (eps, rounding) is in NormOptions (base.h).
//
// By default a call splits its rows over a process-wide pool of persistent
// worker threads (created once, on first use; never per call), each thread
// taking a share of at least about 2 us of work (estimated from the op and
// its element count): smaller inputs run on the calling thread. After a call
// the workers spin for 50 us (yielding the CPU each round) before they sleep,
// so that back-to-back calls find them running; a call never waits for a
// sleeping worker to wake, and a call of under about 50 us of work does not
// wake one at all (the wake-up costs more than it saves): it runs on the
// calling thread unless a worker is still spinning or calls come back to
// back. The environment variable GLMNORM_SPIN_US sets the spin in
// microseconds (0: sleep at once, for cores shared with other busy work; then
// calls under 50 us always run on the calling thread), read when the pool is
// first built; a value that is not a whole number from 0 to 1000000 makes that
// call fail with glmnorm::Error. Callers that own their threads pass an
// Executor.
#ifndef GLMNORM_EXECUTION_H_
#define GLMNORM_EXECUTION_H_

#include <cstddef>

namespace glmnorm {

// Runs task(task_ctx, i) for every i in [0, num_tasks), on any threads, and
// returns when all have finished. Plain function pointers: no allocation.
struct Executor {
  using Task = void (*)(void* task_ctx, size_t i);
  void (*run)(void* executor_ctx, size_t num_tasks, Task task, void* task_ctx) = nullptr;
  void* ctx = nullptr;
};

// Where one call runs. Today: the CPU, on the default pool or the caller's
// executor. A device backend (CUDA) will add its device and stream here.
struct Execution {
  // nullptr: the default pool. Otherwise the caller's own; must outlive the call.
  const Executor* executor = nullptr;
};

// Number of threads (caller included) the default pool uses.
//
// SetNumThreads(n) asks for n threads; the pool uses min(n, the CPUs this
// process may run on: sched_getaffinity, so taskset and cpusets count),
// because the kernels are bound by memory and compute, and more threads than
// CPUs only add handoffs. NumThreads() reports the threads actually used (the
// request is kept: a later call with a different affinity, or a fork()
// child, applies the same rule again). The default is every available CPU.
// Setting a different count swaps in a new pool (built on the next call);
// calls in flight finish on the old one. n < 1 is an error (glmnorm::Error).
//
// fork(): safe. The child forgets the parent's workers (they do not exist
// there) and starts its own on its first call; the parent's pool is
// unaffected, also when another thread of the parent was inside a call.
void SetNumThreads(int n);
int NumThreads();

// An Executor that runs every task on the calling thread.
Executor SerialExecutor();

}  // namespace glmnorm

#endif  // GLMNORM_EXECUTION_H_
