// Memory for the fresh outputs of bindings that return a new tensor per call
// (torch.ops.glmnorm.*), so that large outputs freed and allocated again call
// after call (a model's layers, one after another) land in memory that is
// already mapped.
//
// Why: a large allocation from malloc is a fresh mmap() each time (glibc maps
// every allocation over 32 MiB anew and unmaps it on free), so an op's first
// write faults it in and the OS zeroes every page. At 4096 x 5120 that cost
// 4-7x the kernel's own time with 4 KiB pages, and ~2x with huge pages
// (docs/PYTHON.md, "Fresh outputs").
//
// A block is whole 2 MiB pages, aligned and advised MADV_HUGEPAGE before its
// first touch. A released block is kept for the next request of its size
// class (its size rounded up to 2 MiB); the cache keeps at most
// GLMNORM_TORCH_OUTPUT_CACHE_MB (default 512) MiB of released blocks and
// frees the oldest beyond that; 0 keeps none (every block is then a fresh,
// advised mapping). The name is older than the package's use of the cache: it
// governs every output the package allocates (numpy ones too). The variable is
// read at the first call; a value that is not a whole number from 0 to
// 1048576 (digits only) makes every AcquireOutputBlock throw Error naming it
// (the bindings ask for blocks for outputs of kOutputCacheMinBytes or more,
// so smaller calls do not see it).
// Thread-safe and fork-safe (the cache's lock is held across fork()).
#ifndef GLMNORM_OUTPUT_CACHE_H_
#define GLMNORM_OUTPUT_CACHE_H_

#include <cstddef>

namespace glmnorm {

// Outputs smaller than this gain nothing from the cache (malloc's heap
// reuses them already): bindings allocate them as usual.
inline constexpr size_t kOutputCacheMinBytes = size_t{4} << 20;

struct OutputBlock {
  void* data = nullptr;   // at least the bytes asked for, 2 KiB into a 4 KiB page
  void* owner = nullptr;  // what ReleaseOutputBlock takes back
};

// A block of at least `bytes` bytes: a cached one of the same size class, or
// a new one. Throws std::bad_alloc when memory runs out, Error when the
// setting is invalid.
OutputBlock AcquireOutputBlock(size_t bytes);

// Gives a block back (its `owner`); it may be reused by the next
// AcquireOutputBlock of its size class. Never throws.
void ReleaseOutputBlock(void* owner) noexcept;

// The cache's limit in bytes as GLMNORM_TORCH_OUTPUT_CACHE_MB sets it (`env`
// is the variable's value, nullptr when unset): the rule, for tests.
size_t OutputCacheLimitFrom(const char* env);

}  // namespace glmnorm

#endif  // GLMNORM_OUTPUT_CACHE_H_
