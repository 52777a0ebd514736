// The pool: caller executors, concurrent callers, resizing.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

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
  SetNumThreads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
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
    EXPECT_EQ(NumThreads(), n);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  caller.join();
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace glmnorm
