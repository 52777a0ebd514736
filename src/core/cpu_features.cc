#include "core/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace glmnorm {

bool CpuHasAvx512Bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

namespace {
bool NativeByDefault() {
  const char* env = std::getenv("GLMNORM_PORTABLE_CONVERSIONS");
  const bool forced_portable = env != nullptr && std::strcmp(env, "") != 0 &&
                               std::strcmp(env, "0") != 0;
  return !forced_portable && CpuHasAvx512Bf16();
}
}  // namespace

bool g_native_bf16 = NativeByDefault();

bool SetNativeConversions(bool on) {
  g_native_bf16 = on && CpuHasAvx512Bf16();
  return g_native_bf16;
}

}  // namespace glmnorm
