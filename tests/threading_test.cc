// The pool: caller executors, concurrent callers, resizing, fork().
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/thread_pool.h"
#include "core/validate.h"
#include "core/work_cost.h"

#include "glmnorm/glmnorm.h"
#include "support/test_support.h"

namespace glmnorm {
namespace {

struct CountingExecutor {
  std::atomic<int> calls{0};
  std::atomic<int> tasks{0};
  static void Run(void* ctx, size_t n, Executor::Task task, void* task_ctx) {
    auto* self = static_cast<CountingExecutor*>(ctx);
    ++self->calls;
    // Run the tasks on two threads of "our own", in reverse order.
    std::thread t([&] {
      for (size_t i = 0; i < n; i += 2) task(task_ctx, n - 1 - i);
    });
    for (size_t i = 1; i < n; i += 2) task(task_ctx, n - 1 - i);
    t.join();
    self->tasks += int(n);
  }
};

TEST(Threading, CallerExecutorRunsTheWork) {
  const int64_t rows = 64, width = 512;
  test::Buffer x(DType::kBF16, rows * width), g(DType::kBF16, width), y(DType::kBF16, rows * width),
      ref(DType::kBF16, rows * width);
  test::FillRandom(x);
  test::FillGamma(g);
  const auto xv = Contiguous<const void*>(x.data(), DType::kBF16, {rows, width});
  const auto gv = Contiguous<const void*>(g.data(), DType::kBF16, {width});
  CountingExecutor counter;
  Executor exec;
  exec.run = CountingExecutor::Run;
  exec.ctx = &counter;
  Execution where;
  where.executor = &exec;
  RmsNorm(xv, gv, Contiguous<void*>(y.data(), DType::kBF16, {rows, width}), {}, where);
  EXPECT_EQ(counter.calls, 1);
  EXPECT_GT(counter.tasks, 1);
  RmsNorm(xv, gv, Contiguous<void*>(ref.data(), DType::kBF16, {rows, width}));
  EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), rows * width * 2));
}

TEST(Threading, ConcurrentCallersGetCorrectResults) {
  SetNumThreads(3);
  const int64_t rows = 200, width = 4096;
  test::Buffer x(DType::kF32, rows * width), g(DType::kF32, width), ref(DType::kF32, rows * width);
  test::FillRandom(x);
  test::FillGamma(g);
  const auto xv = Contiguous<const void*>(x.data(), DType::kF32, {rows, width});
  const auto gv = Contiguous<const void*>(g.data(), DType::kF32, {width});
  RmsNorm(xv, gv, Contiguous<void*>(ref.data(), DType::kF32, {rows, width}));
  std::vector<std::vector<float>> outs(4, std::vector<float>(rows * width));
  std::vector<std::thread> callers;
  for (auto& out : outs) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 5; ++rep) {
        RmsNorm(xv, gv, Contiguous<void*>(out.data(), DType::kF32, {rows, width}));
      }
    });
  }
  for (auto& t : callers) t.join();
  for (const auto& out : outs) {
    EXPECT_EQ(0, std::memcmp(out.data(), ref.data(), rows * width * 4));
  }
  SetNumThreads(AvailableCpus());
}

TEST(Threading, ResizeWhileOtherThreadsCall) {
  const int64_t rows = 128, width = 4096;
  std::vector<float> x(rows * width, 0.5f), g(width, 2.0f);
  const auto xv = Contiguous<const void*>(x.data(), DType::kF32, {rows, width});
  const auto gv = Contiguous<const void*>(g.data(), DType::kF32, {width});
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread caller([&] {
    std::vector<float> y(rows * width);
    while (!stop) {
      RmsNorm(xv, gv, Contiguous<void*>(y.data(), DType::kF32, {rows, width}));
      for (float v : y) bad += std::fabs(v - 2.0f) > 1e-4f;
    }
  });
  for (int n : {1, 4, 2, 8, 3, 2}) {
    SetNumThreads(n);
    EXPECT_EQ(NumThreads(), std::min(n, AvailableCpus()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  caller.join();
  EXPECT_EQ(bad, 0);
}


// Workers spin after a job and sleep when the spin ends; the caller spins,
// then sleeps, for the workers' last tasks. Back-to-back jobs, jobs after a
// pause (workers asleep) and a pool destroyed while its workers spin: every
// task of every job runs exactly once, and Run returns only after all of
// them finished (each job checks the previous job's counts).
TEST(Threading, EveryTaskRunsOnceWhetherWorkersSpinOrSleep) {
  constexpr size_t kTasks = 8;
  struct Job {
    std::atomic<int> runs[kTasks];
    // ~1 us of work before the count: a worker's task is then still running
    // when the caller has taken the last one.
    static void Task(void* ctx, size_t i) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(1);
      while (std::chrono::steady_clock::now() < until) {
      }
      ++static_cast<Job*>(ctx)->runs[i];
    }
  };
  for (int round = 0; round < 4; ++round) {
    // Rounds 0-2 spin (50 us); round 3 sleeps at once (GLMNORM_SPIN_US=0).
    ThreadPool pool(3, round < 3 ? ThreadPool::SpinNanosFrom(nullptr) : 0);
    Job job;
    for (int j = 0; j < 3000; ++j) {
      for (auto& r : job.runs) r.store(0);
      pool.Run(kTasks, &Job::Task, &job);
      for (size_t i = 0; i < kTasks; ++i) ASSERT_EQ(job.runs[i].load(), 1) << j << " " << i;
      // Every 500th job after a pause longer than the spin: workers asleep.
      if (j % 500 == 499) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }  // each pool is destroyed right after a job, its workers still spinning
}

// Restores the default thread count when a test ends, also when it fails
// or skips.
struct DefaultThreadsAtEnd {
  ~DefaultThreadsAtEnd() { SetNumThreads(AvailableCpus()); }
};

// A short job (one not worth a wake-up call) is split only while a worker
// is awake or calls come back to back: right after a job ended it may split;
// after a pause longer than the spin it stays on the caller.
TEST(Threading, ShortJobsDoNotWakeSleepingWorkers) {
  const auto job = [](void*, size_t) {};
  for (int64_t spin : {ThreadPool::SpinNanosFrom(nullptr), int64_t{0}}) {
    ThreadPool pool(2, spin);
    int alone = 0, back_to_back = 0;
    for (int round = 0; round < 10; ++round) {
      pool.Run(8, job, nullptr);
      pool.MarkJobEnd();  // as cpu::RunRows does
      // Right after a job (unless this thread is preempted for longer than
      // the spin: "most rounds"). Never without a spin.
      back_to_back += pool.ShortJobMaySplit();
      // Far longer than the spin (50 us): the worker sleeps, the last job
      // is old. A worker preempted in its spin, whose clock it reads every 8
      // yields, still counts as awake, and on a loaded machine (a build
      // beside the tests) it may stay preempted for the whole pause: so the
      // count is asserted without a spin only (as in stop 41).
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      alone += !pool.ShortJobMaySplit();
    }
    if (spin == 0) EXPECT_GE(alone, 8) << "sleeping workers were woken";
    if (spin > 0) {
      EXPECT_GE(back_to_back, 8) << "a job right after another was kept on the caller";
    } else {
      EXPECT_EQ(back_to_back, 0) << "without a spin, short jobs never wake a worker";
    }
  }
}

// The split of the library's calls asks the pool: a short call after a pause
// is one task on the caller (its row loop's look-ahead unbroken), and its
// end, not its start, counts: the next short call right after a 200 us one
// (longer than the spin) may split. A long call always splits.
TEST(Threading, ShortCallAfterPauseIsOneTask) {
  DefaultThreadsAtEnd restore;
  SetNumThreads(2);
  if (NumThreads() < 2) GTEST_SKIP() << "one CPU";
  if (ThreadPool::DefaultSpinNanos() == 0) GTEST_SKIP() << "GLMNORM_SPIN_US=0: never back to back";
  int one_task = 0, back_to_back_split = 0;
  for (int round = 0; round < 10; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // Short (as estimated): the rows, each once, on one task.
    std::vector<int> seen(64);
    cpu::RunRows({}, JobSize{.rows = 64, .work_ns = 20000}, [&](int64_t b, int64_t e) {
      one_task += b == 0 && e == 64;
      for (int64_t r = b; r < e; ++r) ++seen[r];
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      while (std::chrono::steady_clock::now() < until) {
      }
    });
    for (int c : seen) ASSERT_EQ(c, 1);
    back_to_back_split += cpu::ChooseSplit({}, JobSize{.rows = 64, .work_ns = 20000}).num_tasks > 1;
    EXPECT_GT(cpu::ChooseSplit({}, JobSize{.rows = 64, .work_ns = 200000}).num_tasks, 1);
  }
  EXPECT_GE(one_task, 8);
  EXPECT_GE(back_to_back_split, 8);
}

// GLMNORM_SPIN_US: microseconds, 0 turns the spin off; anything else is an
// error that names the variable and the value (the text's rule:
// Settings.WholeNumberSettingTakesDigitsOnly).
TEST(Threading, SpinSettingIsCheckedAndNamed) {
  EXPECT_EQ(ThreadPool::SpinNanosFrom(nullptr), 50000);
  EXPECT_EQ(ThreadPool::SpinNanosFrom("0"), 0);
  EXPECT_EQ(ThreadPool::SpinNanosFrom("200"), 200000);
  EXPECT_EQ(ThreadPool::SpinNanosFrom("1000000"), 1000000000);
  try {
    ThreadPool::SpinNanosFrom("1000001");
    ADD_FAILURE() << "1000001 was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "GLMNORM_SPIN_US must be a whole number of microseconds from 0 to "
                           "1000000, got '1000001'");
  }
}

// The environment settings' one rule (core/validate.h): digits only, no sign,
// no spaces, no unit, at most `max`; unset or empty gives the default.
TEST(Settings, WholeNumberSettingTakesDigitsOnly) {
  const auto read = [](const char* text) {
    return validate::WholeNumberSetting("GLMNORM_X", text, 7, 1000, "things");
  };
  EXPECT_EQ(read(nullptr), 7);
  EXPECT_EQ(read(""), 7);
  EXPECT_EQ(read("0"), 0);
  EXPECT_EQ(read("0042"), 42);
  EXPECT_EQ(read("1000"), 1000);
  for (const char* bad : {"-1", "1e3", "20us", "1001", "99999999999999999999", " 5", "+5",
                          "5 ", "0x10"}) {
    try {
      read(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("GLMNORM_X must be a whole number of things from 0 to 1000, got '") +
                    bad + "'");
    }
  }
}

// The default pool splits a job once each thread's share is 2 us of work as
// the front end estimates it (core/work_cost.h); smaller jobs stay on the
// caller. (Calls come back to back here, so short jobs may use the workers:
// ShortCallAfterPauseIsOneTask checks the other case.)
TEST(Threading, SmallJobsSplitOnlyWhenEachShareIsLargeEnough) {
  DefaultThreadsAtEnd restore;
  if (AvailableCpus() < 2) GTEST_SKIP() << "one CPU: every job stays on the caller";
  if (ThreadPool::DefaultSpinNanos() == 0) GTEST_SKIP() << "GLMNORM_SPIN_US=0: short jobs stay";
  SetNumThreads(2);
  const auto tasks = [](int64_t rows, double ns_per_element, int64_t width = 5120) {
    JobSize size;
    size.rows = rows;
    size.work_ns = work_cost::Ns(rows * width, ns_per_element);
    // Back to back: the call right after one that stayed on the caller. A
    // few tries, for a test preempted between the two (longer than the spin).
    int64_t n = 1;
    for (int tries = 0; tries < 20 && n == 1; ++tries) {
      DefaultPool()->MarkJobEnd();
      n = cpu::ChooseSplit({}, size).num_tasks;
    }
    return n;
  };
  EXPECT_GT(tasks(8, work_cost::kRmsNorm), 1);        // 6.6 us
  EXPECT_EQ(tasks(4, work_cost::kRmsNorm), 1);        // 3.3 us
  EXPECT_EQ(tasks(2, work_cost::kRmsNorm, 4096), 1);  // 1.3 us: 1.2x slower split
  EXPECT_GT(tasks(2, work_cost::kRmsNormQuant), 1);   // 4.6 us on 30 KiB
  EXPECT_EQ(tasks(1, 1e6), 1);                        // one row: nothing to split
  SetNumThreads(1);
  EXPECT_EQ(tasks(4096, work_cost::kRmsNorm), 1);
}

// More threads than CPUs only add handoffs: the pool is capped at the CPUs
// the process may run on, and NumThreads() says how many it uses.
TEST(Threading, ThreadCountCappedAtAvailableCpus) {
  const int cpus = AvailableCpus();
  ASSERT_GE(cpus, 1);
  SetNumThreads(1000);
  EXPECT_EQ(NumThreads(), std::min(1000, cpus));
  SetNumThreads(1);
  EXPECT_EQ(NumThreads(), 1);
  SetNumThreads(cpus);
  EXPECT_EQ(NumThreads(), cpus);
}

// x of ones [64, 4096] f32: large enough for the pool (2 MiB moved).
struct ForkCase {
  static constexpr int64_t kRows = 64, kWidth = 4096;
  std::vector<float> x = std::vector<float>(kRows * kWidth);
  std::vector<float> g = std::vector<float>(kWidth);
  ForkCase() {
    for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + 0.001f * static_cast<float>(i % 97);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.5f + 0.01f * static_cast<float>(i % 13);
  }
  std::vector<float> Run() const {
    std::vector<float> y(x.size());
    RmsNorm(Contiguous<const void*>(x.data(), DType::kF32, {kRows, kWidth}),
            Contiguous<const void*>(g.data(), DType::kF32, {kWidth}),
            Contiguous<void*>(y.data(), DType::kF32, {kRows, kWidth}));
    return y;
  }
};

// fork()s; the child runs `child` (its exit status) and _exits; the parent
// waits at most `limit`, so a hang fails the test instead of blocking it.
template <class Fn>
std::string ForkAndWait(const Fn& child, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    int status = 99;
    try {
      status = child();
    } catch (...) {
      status = 98;
    }
    _exit(status);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
      return "child exited with status " + std::to_string(status);
    }
    if (r < 0) return "waitpid failed";
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return "child hung (killed after the time limit)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

TEST(Threading, ForkChildRunsOpsResizesAndExits) {
  SetNumThreads(AvailableCpus());
  const ForkCase c;
  const std::vector<float> parent = c.Run();  // starts the pool's workers
  // The child: the parent's bits, a resize, the bits again; and a child that
  // only exits (destroying nothing it cannot).
  EXPECT_EQ("", ForkAndWait([&] {
              if (c.Run() != parent) return 1;
              SetNumThreads(1);
              if (NumThreads() != 1 || c.Run() != parent) return 2;
              SetNumThreads(AvailableCpus());
              if (c.Run() != parent) return 3;
              // A grandchild of a child that has its own pool.
              if (ForkAndWait([&] { return c.Run() == parent ? 0 : 1; }) != "") return 4;
              return 0;
            }));
  EXPECT_EQ("", ForkAndWait([] { return 0; }));
  EXPECT_EQ("", ForkAndWait([] {
              SetNumThreads(1);
              return 0;
            }));
  EXPECT_EQ(parent, c.Run());  // the parent's pool keeps working
}

// Another thread of the parent is inside the pool (or taking its lock) when
// the main thread forks: the child still gets the parent's bits.
TEST(Threading, ForkWhileAnotherThreadRuns) {
  SetNumThreads(AvailableCpus());
  const ForkCase c;
  const std::vector<float> parent = c.Run();
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread busy([&] {
    while (!stop) bad += c.Run() != parent;
  });
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ("", ForkAndWait([&] { return c.Run() == parent ? 0 : 1; })) << "fork " << i;
  }
  stop = true;
  busy.join();
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace glmnorm
