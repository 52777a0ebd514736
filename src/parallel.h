// Splits the rows of a job over the executor: small jobs run on the calling
// thread, larger ones in a few tasks per thread. Which rows a task gets never
// changes a row's result (each row is computed alone, in a fixed order).
#ifndef GLMNORM_SRC_PARALLEL_H_
#define GLMNORM_SRC_PARALLEL_H_

#include <algorithm>
#include <cstdint>

#include "glmnorm/threading.h"
#include "thread_pool.h"

namespace glmnorm {

// Below this many bytes moved, waking threads costs more than it saves.
constexpr int64_t kMinParallelBytes = 512 * 1024;
constexpr int kTasksPerThread = 4;

// fn(row_begin, row_end) over [0, rows).
template <class Fn>
void ForEachRowRange(const Executor* executor, int64_t rows, int64_t bytes_moved,
                     const Fn& fn) {
  if (rows <= 0) return;
  Executor exec;
  int threads = 1;
  if (executor != nullptr) {
    exec = *executor;
    threads = 16;  // the caller's executor decides where tasks run
  } else if (bytes_moved >= kMinParallelBytes && rows > 1) {
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

}  // namespace glmnorm

#endif  // GLMNORM_SRC_PARALLEL_H_
