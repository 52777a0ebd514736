#include <algorithm>
#include <memory>
#include <string>

#include "glmnorm/error.h"
#include "backend/cpu/thread_pool.h"

namespace glmnorm {

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Drain() {
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= num_tasks_) return;
    task_(ctx_, i);
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++joined_;
    }
    Drain();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++left_;
    }
    done_.notify_all();
  }
}

void ThreadPool::Run(size_t num_tasks, Executor::Task task, void* ctx) {
  std::unique_lock<std::mutex> run_lock(run_mutex_, std::try_to_lock);
  if (!run_lock.owns_lock() || workers_.empty() || num_tasks <= 1) {
    for (size_t i = 0; i < num_tasks; ++i) task(ctx, i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = task;
    ctx_ = ctx;
    num_tasks_ = num_tasks;
    next_.store(0, std::memory_order_relaxed);
    joined_ = 0;
    left_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  Drain();
  // Every worker joins every job (most find it already drained), and Run
  // returns only after all have left: the job fields are then free to reuse.
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return left_ == workers_.size(); });
}

namespace {

std::mutex g_pool_mutex;  // guards g_pool replacement
std::shared_ptr<ThreadPool> g_pool;

int DefaultThreadCount() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

void RunOnDefaultPool(void*, size_t num_tasks, Executor::Task task, void* ctx) {
  DefaultPool()->Run(num_tasks, task, ctx);
}

void RunSerially(void*, size_t num_tasks, Executor::Task task, void* ctx) {
  for (size_t i = 0; i < num_tasks; ++i) task(ctx, i);
}

}  // namespace

std::shared_ptr<ThreadPool> DefaultPool() {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (!g_pool) g_pool = std::make_shared<ThreadPool>(DefaultThreadCount());
  return g_pool;
}

Executor DefaultExecutor() {
  Executor e;
  e.run = RunOnDefaultPool;
  return e;
}

Executor SerialExecutor() {
  Executor e;
  e.run = RunSerially;
  return e;
}

void SetNumThreads(int n) {
  if (n < 1) throw Error("SetNumThreads: n must be >= 1, got " + std::to_string(n));
  auto fresh = std::make_shared<ThreadPool>(n);
  std::shared_ptr<ThreadPool> old;
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    old = std::move(g_pool);
    g_pool = std::move(fresh);
  }
  // `old` is destroyed here, or by the last call still running on it.
}

int NumThreads() { return DefaultPool()->num_threads(); }

}  // namespace glmnorm
