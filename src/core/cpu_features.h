// Run-time choice of the native conversion instructions that Highway 1.0.3
// has no target for (AVX512-BF16's VCVTNEPS2BF16 on Cooper Lake, Sapphire
// Rapids, Zen 4). The AVX-512 kernels use it when the CPU has it, unless the
// environment variable GLMNORM_PORTABLE_CONVERSIONS=1 forces the portable
// integer rounding (the benchmark and the tests measure and check both;
// the output bits are the same).
#ifndef GLMNORM_SRC_CORE_CPU_FEATURES_H_
#define GLMNORM_SRC_CORE_CPU_FEATURES_H_

namespace glmnorm {

// Read by the kernels on every vector: a plain global, set at start-up.
extern bool g_native_bf16;

// Whether this CPU has AVX512-BF16.
bool CpuHasAvx512Bf16();

// Turns the native path on (where the CPU has it) or off; returns whether it
// is now on. For the tests and the benchmark; not thread-safe against calls
// in flight.
bool SetNativeConversions(bool on);

}  // namespace glmnorm

#endif  // GLMNORM_SRC_CORE_CPU_FEATURES_H_
