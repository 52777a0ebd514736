// What one AVX-512 instruction of the bf16 row loop costs on this CPU, as
// reciprocal throughput relative to VMULPS zmm (same run): the machines have
// no hardware counters and their clock is unknown, so ratios are what we can
// measure. Eight independent instructions per iteration, 10^8 iterations.
// Used by docs/PERFORMANCE.md ("bf16 conversions"); x86-64 only.
//
//   build/release/bench/bf16_convert_cost
#include <algorithm>
#include <chrono>
#include <cstdio>

#if defined(__x86_64__)
#include <cpuid.h>

namespace {

bool HasAvx512Bf16() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return (a >> 5) & 1;  // CPUID.(EAX=7,ECX=1):EAX[5] AVX512_BF16
}

bool HasAvx512Bw() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return ((b >> 16) & 1) && ((b >> 30) & 1);  // AVX512F, AVX512BW
}

constexpr long kIterations = 100000000;

#define GLMNORM_X8(insn)                                                                    \
  insn " %%zmm0, %%zmm1, %%zmm2\n" insn " %%zmm0, %%zmm1, %%zmm3\n" insn                    \
       " %%zmm0, %%zmm1, %%zmm4\n" insn " %%zmm0, %%zmm1, %%zmm5\n" insn                    \
       " %%zmm0, %%zmm1, %%zmm6\n" insn " %%zmm0, %%zmm1, %%zmm7\n" insn                    \
       " %%zmm0, %%zmm1, %%zmm8\n" insn " %%zmm0, %%zmm1, %%zmm9\n"

// The same for one-source instructions: insn src, dst.
#define GLMNORM_X8_1(insn, src)                                                            \
  insn " %%" src ", %%zmm2\n" insn " %%" src ", %%zmm3\n" insn " %%" src ", %%zmm4\n"       \
  insn " %%" src ", %%zmm5\n" insn " %%" src ", %%zmm6\n" insn " %%" src ", %%zmm7\n"       \
  insn " %%" src ", %%zmm8\n" insn " %%" src ", %%zmm9\n"

// Seconds for kIterations of `body` (eight instructions).
#define GLMNORM_TIME(body)                                                                  \
  [] {                                                                                      \
    const auto t0 = std::chrono::steady_clock::now();                                       \
    for (long i = 0; i < kIterations; ++i) {                                                \
      asm volatile(body ::: "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9"); \
    }                                                                                       \
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();    \
  }

}  // namespace

int main() {
  if (!HasAvx512Bw()) {
    std::printf("no AVX-512BW on this CPU: nothing to measure\n");
    return 0;
  }
  // The best of three, so a scheduling hiccup does not count.
  const auto best = [](double (*f)()) {
    double b = f();
    for (int i = 0; i < 2; ++i) b = std::min(b, f());
    return b;
  };
  const double mul = best(GLMNORM_TIME(GLMNORM_X8("vmulps")));
  struct Row {
    const char* what;
    double seconds;
  };
  const Row rows[] = {
      {"vmulps zmm (the unit)", mul},
      {"vpaddd zmm", best(GLMNORM_TIME(GLMNORM_X8("vpaddd")))},
      {"vpandd zmm", best(GLMNORM_TIME(GLMNORM_X8("vpandd")))},
      {"vpermw zmm (word permute)", best(GLMNORM_TIME(GLMNORM_X8("vpermw")))},
      {"vpermt2w zmm (two-table word permute)", best(GLMNORM_TIME(GLMNORM_X8("vpermt2w")))},
      {"vpunpcklwd zmm", best(GLMNORM_TIME(GLMNORM_X8("vpunpcklwd")))},
      {"vpminuw zmm", best(GLMNORM_TIME(GLMNORM_X8("vpminuw")))},
      // The bf16 load's widening: zero-extend 16 words, then shift them up.
      {"vpmovzxwd ymm->zmm (16 values)", best(GLMNORM_TIME(GLMNORM_X8_1("vpmovzxwd", "ymm0")))},
      {"vpslld $16, zmm", best(GLMNORM_TIME(GLMNORM_X8_1("vpslld $16,", "zmm0")))},
      // The native store's guard: which lanes are subnormal (k1-k7 are not
      // clobbers the compiler accepts here, and this file never uses them).
      {"vfpclassps $0x20, zmm -> k", best(GLMNORM_TIME(
          "vfpclassps $0x20, %%zmm0, %%k1\n vfpclassps $0x20, %%zmm1, %%k2\n"
          "vfpclassps $0x20, %%zmm0, %%k3\n vfpclassps $0x20, %%zmm1, %%k4\n"
          "vfpclassps $0x20, %%zmm0, %%k5\n vfpclassps $0x20, %%zmm1, %%k6\n"
          "vfpclassps $0x20, %%zmm0, %%k7\n vfpclassps $0x20, %%zmm1, %%k1\n"))},
  };
  std::printf("instruction                          cost (VMULPS zmm = 1)\n");
  for (const Row& r : rows) std::printf("%-36s %.2f\n", r.what, r.seconds / mul);
  if (!HasAvx512Bf16()) {
    std::printf("no AVX512-BF16: the native conversions are not measured\n");
    return 0;
  }
  const double cvt2 = best(GLMNORM_TIME(GLMNORM_X8("vcvtne2ps2bf16")));
  const double cvt = best(GLMNORM_TIME(
      "vcvtneps2bf16 %%zmm0, %%ymm2\n vcvtneps2bf16 %%zmm0, %%ymm3\n"
      "vcvtneps2bf16 %%zmm0, %%ymm4\n vcvtneps2bf16 %%zmm0, %%ymm5\n"
      "vcvtneps2bf16 %%zmm0, %%ymm6\n vcvtneps2bf16 %%zmm0, %%ymm7\n"
      "vcvtneps2bf16 %%zmm0, %%ymm8\n vcvtneps2bf16 %%zmm0, %%ymm9\n"));
  std::printf("%-36s %.2f\n", "vcvtneps2bf16 zmm->ymm (16 values)", cvt / mul);
  std::printf("%-36s %.2f\n", "vcvtne2ps2bf16 zmm (32 values)", cvt2 / mul);
  // The sum of squares of native bf16 rows (reduction-inl.h): acc + x * x.
  const double dot = best(GLMNORM_TIME(GLMNORM_X8("vdpbf16ps")));
  std::printf("%-36s %.2f\n", "vdpbf16ps zmm (16 dot pairs)", dot / mul);
  return 0;
}

#else
int main() {
  std::printf("x86-64 only\n");
  return 0;
}
#endif
