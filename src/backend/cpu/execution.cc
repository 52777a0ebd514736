#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>

#include "core/validate.h"
#include "glmnorm/error.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/thread_pool.h"

namespace glmnorm {

namespace {

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// How long a worker spins after a job before it sleeps, and how long a caller
// spins for the workers' last tasks before it sleeps. Waking a sleeping thread
// costs a futex call on each side, several microseconds in a VM: more than a
// whole 16-token norm (docs/PERFORMANCE.md, "Threads for small calls").
// GLMNORM_SPIN_US=0 turns the spin off (machines whose cores are shared with
// other busy work: OpenMP's OMP_WAIT_POLICY=passive is the same choice).
int64_t ThreadPool::SpinNanosFrom(const char* env) {
  return validate::WholeNumberSetting("GLMNORM_SPIN_US", env, 50, 1000000, "microseconds") * 1000;
}

int64_t ThreadPool::DefaultSpinNanos() {
  static const int64_t nanos = SpinNanosFrom(std::getenv("GLMNORM_SPIN_US"));
  return nanos;
}

// Spins until done() or spin_nanos_ have passed; returns done(). A spin reads
// an atomic and yields the CPU each round: a worker woken onto its caller's
// CPU (the scheduler does that) must not take the caller's time while the
// caller still works.
template <class Done>
bool ThreadPool::SpinFor(const Done& done) const {
  if (spin_nanos_ == 0) return done();
  const int64_t until = NowNanos() + spin_nanos_;
  for (int i = 0;; ++i) {
    if (done()) return true;
    sched_yield();
    if ((i & 7) == 7 && NowNanos() > until) return done();
  }
}

ThreadPool::ThreadPool(int num_threads, int64_t spin_nanos) : spin_nanos_(spin_nanos) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  // The pool is used once every worker has started. Otherwise a fork() right
  // after the first call could copy a worker still inside its thread start,
  // holding an allocator lock that no thread of the child releases: ASan's
  // allocator (GCC 12) has no fork handlers, and such children hung in calloc
  // (Threading.ForkChildRunsOpsResizesAndExits under ASan, once a lower split
  // gate made its parent's call the one that started the workers). At most
  // 2 s: a worker that cannot start (a child forked while another thread of
  // its parent was in ASan's allocator) must not hang the caller, who runs
  // the tasks alone meanwhile.
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait_for(lock, std::chrono::seconds(2), [&] { return started_ == workers_.size(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    ++generation_;  // ends the spins too
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
  uint64_t seen;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++started_;
    seen = generation_.load();  // a job posted before now is the caller's alone
  }
  done_.notify_all();
  bool after_job = false;  // spin only after a job: a new worker sleeps until the first
  for (;;) {
    if (after_job) {
      spinning_.fetch_add(1, std::memory_order_relaxed);
      SpinFor([&] { return generation_.load(std::memory_order_acquire) != seen; });
      spinning_.fetch_sub(1, std::memory_order_relaxed);
    }
    after_job = true;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
      if (stop_) return;
      seen = generation_.load();
      if (!open_) continue;  // woke too late: the caller took every task
      ++active_;
    }
    Drain();
    bool last;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last = --active_ == 0 && !open_;
    }
    if (last) done_.notify_all();
  }
}

bool ThreadPool::ShortJobMaySplit() const {
  return spinning_.load(std::memory_order_relaxed) > 0 ||
         NowNanos() - last_end_ns_.load(std::memory_order_relaxed) < spin_nanos_;
}

void ThreadPool::MarkJobEnd() { last_end_ns_.store(NowNanos(), std::memory_order_relaxed); }

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
    open_ = true;
    ++generation_;
  }
  wake_.notify_all();  // no system call when every worker is spinning
  Drain();
  {
    // Every task is taken: no worker joins from now on.
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = false;
  }
  // Wait for the workers still running their last task.
  if (SpinFor([&] { return active_.load() == 0; })) return;
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return active_.load() == 0; });
}

int AvailableCpus() {
  int n = 0;
#if defined(__linux__)
  // Sized for machines with more than CPU_SETSIZE (1024) CPUs.
  for (int cpus = CPU_SETSIZE; cpus <= (1 << 20) && n == 0; cpus *= 4) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    if (set == nullptr) break;
    const size_t size = CPU_ALLOC_SIZE(cpus);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) n = CPU_COUNT_S(size, set);
    CPU_FREE(set);
    if (n == 0 && errno != EINVAL) break;
  }
#endif
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, n);
}

namespace {

std::mutex g_pool_mutex;  // guards g_pool and g_requested
std::shared_ptr<ThreadPool> g_pool;
int g_requested = 0;  // SetNumThreads' n; 0: every available CPU

// fork(): only the forking thread exists in the child, so the parent's
// workers are gone and their pool can be neither used nor destroyed (joining
// a thread that does not exist blocks forever; its mutexes may be held by a
// thread that was inside Run). The child keeps the requested thread count,
// forgets the pool (its memory is left as it is: it is never touched again)
// and builds a fresh one on first use. g_pool_mutex is held across fork() so
// that the child never sees it held by a thread it does not have.
alignas(std::shared_ptr<ThreadPool>) unsigned char g_forgotten[sizeof(std::shared_ptr<ThreadPool>)];

void BeforeFork() { g_pool_mutex.lock(); }
void AfterForkInParent() { g_pool_mutex.unlock(); }
void AfterForkInChild() {
  // Placement new, no destructor: the pool's shared_ptr (and any earlier
  // forgotten one) is leaked on purpose; no allocation in the child handler.
  new (g_forgotten) std::shared_ptr<ThreadPool>(std::move(g_pool));
  g_pool_mutex.unlock();
}

void RegisterForkHandlers() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(BeforeFork, AfterForkInParent, AfterForkInChild); });
}

// The executor of a Split on the default pool: ctx is the pool, which the
// Split holds for the call.
void RunOnPool(void* pool, size_t num_tasks, Executor::Task task, void* ctx) {
  static_cast<ThreadPool*>(pool)->Run(num_tasks, task, ctx);
}

void RunSerially(void*, size_t num_tasks, Executor::Task task, void* ctx) {
  for (size_t i = 0; i < num_tasks; ++i) task(ctx, i);
}

}  // namespace

std::shared_ptr<ThreadPool> DefaultPool() {
  RegisterForkHandlers();
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (!g_pool) {
    const int cpus = AvailableCpus();
    g_pool = std::make_shared<ThreadPool>(g_requested > 0 ? std::min(g_requested, cpus) : cpus);
  }
  return g_pool;
}

Executor SerialExecutor() {
  Executor e;
  e.run = RunSerially;
  return e;
}

void SetNumThreads(int n) {
  if (n < 1) throw Error("SetNumThreads: n must be >= 1, got " + std::to_string(n));
  RegisterForkHandlers();
  const int threads = std::min(n, AvailableCpus());
  std::shared_ptr<ThreadPool> old;
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    g_requested = n;
    if (g_pool && g_pool->num_threads() == threads) return;  // already that size
    old = std::move(g_pool);  // the next call builds the new pool
  }
  // `old` is destroyed here, or by the last call still running on it.
}

int NumThreads() { return DefaultPool()->num_threads(); }

namespace cpu {

namespace {

// A thread joins a job only if its share is at least this much work, as
// the front end estimated it (JobSize::work_ns, core/work_cost.h). Workers
// spin between jobs (ThreadPool), so in back-to-back calls a share of 2 us
// pays for the handoff: on Zen 4, 2 threads took qk_norm_rope 2x104x128
// bf16 from 5.8 to 4.2 us and rms_norm 8x5120 f32 from 6.5 to 3.8 us. Shares
// of 1.2-1.6 us won 1.1-1.25x in most runs but lost up to 1.6x in some (the
// VM's scheduling); rms_norm 2x4096 f32 (1.3 us of work) lost 1.2x
// (docs/PERFORMANCE.md, "Threads for small calls").
constexpr int64_t kMinNsPerThread = 2000;
// Waking a sleeping worker costs the caller 5-15 us in a VM (a futex call and
// an interrupt to an idle virtual CPU), on top of the wait for a worker that
// woke in time to take a task: after a pause, 2 threads made rms_norm
// 16x5120 f32 1.4x slower than 1 thread. A job shorter than this wakes no
// sleeping worker: it splits only when a worker is awake or calls come back
// to back (ThreadPool::ShortJobMaySplit, the end of the last job marked by
// RunRows). Such a job then stays one task on the caller: its row loop's
// look-ahead runs across all its rows.
constexpr int64_t kWakeNs = 50000;
constexpr int64_t kTasksPerThread = 4;

}  // namespace

void JobEnded(ThreadPool& pool) { pool.MarkJobEnd(); }

Split ChooseSplit(const Execution& execution, const JobSize& size) {
  Split split;
  if (size.rows <= 1) return split;
  if (execution.executor != nullptr) {
    // The caller's executor decides where tasks run.
    split.exec = *execution.executor;
    split.num_tasks = std::min<int64_t>(size.rows, 16 * kTasksPerThread);
    return split;
  }
  const int64_t by_size = size.work_ns / kMinNsPerThread;
  if (by_size < 2) return split;
  std::shared_ptr<ThreadPool> pool = DefaultPool();
  const int64_t threads = std::min<int64_t>(by_size, pool->num_threads());
  if (threads < 2) return split;
  split.pool = std::move(pool);
  if (size.work_ns < kWakeNs && !split.pool->ShortJobMaySplit()) return split;
  split.exec.run = RunOnPool;
  split.exec.ctx = split.pool.get();
  split.num_tasks = std::min<int64_t>(size.rows, threads * kTasksPerThread);
  return split;
}

void* Scratch(int slot, size_t bytes) {
  struct Arena {
    std::unique_ptr<unsigned char[]> bytes;
    size_t size = 0;
  };
  thread_local Arena arenas[kScratchSlots];
  Arena& a = arenas[slot];
  if (a.size < bytes) {
    a.bytes.reset(new unsigned char[bytes]);
    a.size = bytes;
  }
  return a.bytes.get();
}

}  // namespace cpu

}  // namespace glmnorm
