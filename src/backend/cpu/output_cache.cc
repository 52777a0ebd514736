// The cache of large output blocks (include/glmnorm/output_cache.h).
#include "glmnorm/output_cache.h"

#include <pthread.h>
#include <sys/mman.h>

#include <cstdlib>
#include <mutex>
#include <new>
#include <string>

#include "core/validate.h"
#include "glmnorm/error.h"

namespace glmnorm {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// The data starts half a page into the block (the Block header sits at its
// start). Why: the bf16 kernels slowed down up to 2.2x when y lay just past x
// modulo 4 KiB (loads of x that match a pending store to y in their low 12
// address bits wait for it: "4K aliasing"); the pair loop now loads ahead of
// its stores, but other offsets and loops still pay. Large numpy arrays start 16 bytes
// into a page and torch's 64, so a block whose data started 64 bytes in sat
// 48 bytes past a numpy x: glmnorm.rms_norm(x, w) on 4096 x 5120 bf16 took
// 8.5 ms against 4.4 ms with out=. Half a page is as far as can be from both
// (docs/PERFORMANCE.md, "Where the output lies").
constexpr size_t kHeader = 2048;

struct Block {
  size_t bytes;  // the size class: whole huge pages, header included
  Block* next;
};

class Cache {
 public:
  static Cache& Get() {
    static Cache* cache = new Cache;  // never destroyed: outputs may outlive exit
    return *cache;
  }

  OutputBlock Acquire(size_t bytes) {
    if (!limit_error_.empty()) throw Error(limit_error_);
    if (bytes > SIZE_MAX - kHeader - kHugePage) {
      throw std::bad_alloc();
    }
    const size_t size_class = (bytes + kHeader + kHugePage - 1) & ~(kHugePage - 1);
    Block* block = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Block** p = &free_; *p != nullptr; p = &(*p)->next) {
        if ((*p)->bytes == size_class) {
          block = *p;
          *p = block->next;
          cached_ -= size_class;
          break;
        }
      }
    }
    if (block == nullptr) {
      void* base = nullptr;
      if (posix_memalign(&base, kHugePage, size_class) != 0) throw std::bad_alloc();
      madvise(base, size_class, MADV_HUGEPAGE);  // before the first touch: 2 MiB pages
      block = new (base) Block{size_class, nullptr};
    }
    return {reinterpret_cast<char*>(block) + kHeader, block};
  }

  // The released block goes to the front of the free list; the oldest blocks
  // are freed while the list holds more than the limit (the newest are the
  // likeliest to be asked for again: a model's shapes repeat).
  void Release(Block* block) noexcept {
    Block* evicted = nullptr;
    if (block->bytes <= limit_) {
      std::lock_guard<std::mutex> lock(mu_);
      block->next = free_;
      free_ = block;
      cached_ += block->bytes;
      while (cached_ > limit_) {
        Block** oldest = &free_;
        while ((*oldest)->next != nullptr) oldest = &(*oldest)->next;
        cached_ -= (*oldest)->bytes;
        (*oldest)->next = evicted;
        evicted = *oldest;
        *oldest = nullptr;
      }
    } else {
      evicted = block;
      evicted->next = nullptr;
    }
    while (evicted != nullptr) {  // unmapped outside the lock
      Block* next = evicted->next;
      std::free(evicted);
      evicted = next;
    }
  }

 private:
  Cache() {
    try {
      limit_ = OutputCacheLimitFrom(std::getenv("GLMNORM_TORCH_OUTPUT_CACHE_MB"));
    } catch (const Error& e) {
      limit_error_ = e.what();  // every Acquire reports it
    }
    // fork(): the child must not inherit a lock held by another thread.
    pthread_atfork([] { Get().mu_.lock(); }, [] { Get().mu_.unlock(); },
                   [] { Get().mu_.unlock(); });
  }

  std::mutex mu_;
  Block* free_ = nullptr;  // the released blocks, newest first
  size_t cached_ = 0;      // their bytes
  size_t limit_ = 0;
  std::string limit_error_;
};

}  // namespace

size_t OutputCacheLimitFrom(const char* env) {
  return static_cast<size_t>(validate::WholeNumberSetting("GLMNORM_TORCH_OUTPUT_CACHE_MB", env,
                                                          512, 1 << 20, "MiB")) << 20;
}

OutputBlock AcquireOutputBlock(size_t bytes) { return Cache::Get().Acquire(bytes); }

void ReleaseOutputBlock(void* owner) noexcept {
  if (owner != nullptr) Cache::Get().Release(static_cast<Block*>(owner));
}

}  // namespace glmnorm
