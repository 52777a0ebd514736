// A small persistent thread pool: workers are created once; between jobs each
// spins for a short while (spin_nanos, 50 us by default) before it sleeps, so
// that back-to-back calls (a model's layers, a decode loop) hand work to a
// running thread instead of waking a sleeping one. One job runs at a time;
// the calling thread works on it too.
#ifndef GLMNORM_SRC_THREAD_POOL_H_
#define GLMNORM_SRC_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "glmnorm/execution.h"

namespace glmnorm {

class ThreadPool {
 public:
  // num_threads: caller included (spawns n - 1). spin_nanos: how long a worker
  // spins after a job, and the caller for the workers' last tasks, before
  // sleeping; 0 sleeps at once.
  explicit ThreadPool(int num_threads, int64_t spin_nanos = DefaultSpinNanos());
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs task(ctx, i) for i in [0, num_tasks) and waits. If another thread
  // is already running a job on this pool, runs everything on the caller
  // instead of waiting (concurrent callers stay safe and never block).
  // The caller takes tasks too and never waits for a sleeping worker to wake:
  // a worker that wakes after every task was taken skips the job.
  void Run(size_t num_tasks, Executor::Task task, void* ctx);

  // Whether a short job (shorter than a wake-up call is worth: it costs the
  // caller 5-15 us in a VM) should be split over the pool: true while a
  // worker is spinning after a job (it answers without a wake-up call), or
  // when the last job (MarkJobEnd) ended within the spin time: calls come
  // back to back, and the next ones will find the workers spinning (a worker
  // just woken by the last job may not spin yet).
  bool ShortJobMaySplit() const;
  // Marks the end of a job that the pool was asked about (cpu::RunRows),
  // whether it was split or ran on the caller alone.
  void MarkJobEnd();

  // GLMNORM_SPIN_US (microseconds, 0 to 1000000) when set, else 50 us; read
  // once per process. glmnorm::Error when it is not such a number.
  static int64_t DefaultSpinNanos();
  static int64_t SpinNanosFrom(const char* env);  // the rule, for a value

 private:
  template <class Done>
  bool SpinFor(const Done& done) const;
  void WorkerLoop();
  void Drain();  // takes tasks of the current job until none are left

  const int64_t spin_nanos_;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // held by the caller whose job is running

  std::mutex mutex_;  // guards the fields below with the condition variables
  std::condition_variable wake_;
  std::condition_variable done_;
  // Bumped (under mutex_) for each job and at shutdown; read without the lock
  // by spinning workers.
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;

  // The current job; written under mutex_ before generation_ is bumped.
  Executor::Task task_ = nullptr;
  void* ctx_ = nullptr;
  size_t num_tasks_ = 0;
  std::atomic<size_t> next_{0};
  // Workers join a job only while it is open (under mutex_) and are counted
  // in active_ until they leave it. Run closes the job once its own Drain
  // found no task left and waits for active_ == 0: every task has then
  // finished, and no worker can carry a stale job into the next one.
  // active_ is changed under mutex_ and read without it by a caller spinning
  // for the last tasks to finish.
  bool open_ = false;
  std::atomic<size_t> active_{0};
  // Workers spinning after a job (they answer a new one without a wake-up
  // call), and when the last job ended (NowNanos; MarkJobEnd).
  std::atomic<int> spinning_{0};
  std::atomic<int64_t> last_end_ns_{0};
  size_t started_ = 0;  // workers that reached WorkerLoop (the constructor waits for all)
};

// The number of CPUs this process may run on (sched_getaffinity on Linux,
// else std::thread::hardware_concurrency), at least 1.
int AvailableCpus();

// The process-wide pool that cpu::ChooseSplit splits jobs over, created on
// first use.
// Callers hold the shared_ptr while they run on it, so SetNumThreads cannot
// pull it away. After fork() the child forgets the parent's pool (its workers
// do not exist in the child) and creates a fresh one on first use.
std::shared_ptr<ThreadPool> DefaultPool();

}  // namespace glmnorm

#endif  // GLMNORM_SRC_THREAD_POOL_H_
