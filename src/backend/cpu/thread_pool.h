// A small persistent thread pool: workers are created once and sleep between
// jobs. One job runs at a time; the calling thread works on it too.
#ifndef GLMNORM_SRC_THREAD_POOL_H_
#define GLMNORM_SRC_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "glmnorm/execution.h"

namespace glmnorm {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // caller included: spawns n - 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs task(ctx, i) for i in [0, num_tasks) and waits. If another thread
  // is already running a job on this pool, runs everything on the caller
  // instead of waiting (concurrent callers stay safe and never block).
  void Run(size_t num_tasks, Executor::Task task, void* ctx);

 private:
  void WorkerLoop();
  void Drain();  // takes tasks of the current job until none are left

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // held by the caller whose job is running

  std::mutex mutex_;  // guards the fields below with the condition variables
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  bool stop_ = false;

  // The current job; written under mutex_ before generation_ is bumped.
  Executor::Task task_ = nullptr;
  void* ctx_ = nullptr;
  size_t num_tasks_ = 0;
  std::atomic<size_t> next_{0};
  // Workers that joined the current job and have not yet left it. Run waits
  // until every worker has joined and left, so no worker can carry a stale
  // job into the next one.
  size_t joined_ = 0;
  size_t left_ = 0;
};

// The process-wide pool behind the default executor. Callers hold the
// shared_ptr while they run on it, so SetNumThreads cannot pull it away.
std::shared_ptr<ThreadPool> DefaultPool();
// Executor that runs on DefaultPool().
Executor DefaultExecutor();

}  // namespace glmnorm

#endif  // GLMNORM_SRC_THREAD_POOL_H_
