// Uses the installed headers and libraries only: a bf16 RmsNorm checked
// against values worked out by hand, and the norms of a checkpoint.
// Usage: consumer CHECKPOINT_DIR. Exit 0 on success.
#include <cstdio>
#include <vector>

#include "glmnorm/glmnorm.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer CHECKPOINT_DIR\n");
    return 2;
  }
  // x = [3, 4] in bf16: mean(x^2) = 12.5, r = 1/sqrt(12.5 + 1e-5);
  // 3r = 0.848528..., 4r = 1.131370... rounded to bf16: 0.84765625, 1.1328125.
  std::vector<uint16_t> x = {glmnorm::BF16FromF32(3.0f), glmnorm::BF16FromF32(4.0f)};
  std::vector<uint16_t> g = {glmnorm::BF16FromF32(1.0f), glmnorm::BF16FromF32(1.0f)};
  std::vector<uint16_t> y(2);
  glmnorm::RmsNorm(glmnorm::Contiguous<const void*>(x.data(), glmnorm::DType::kBF16, {1, 2}),
                   glmnorm::Contiguous<const void*>(g.data(), glmnorm::DType::kBF16, {2}),
                   glmnorm::Contiguous<void*>(y.data(), glmnorm::DType::kBF16, {1, 2}));
  if (glmnorm::F32FromBF16(y[0]) != 0.84765625f || glmnorm::F32FromBF16(y[1]) != 1.1328125f) {
    std::fprintf(stderr, "consumer: wrong RmsNorm output %g %g\n", glmnorm::F32FromBF16(y[0]),
                 glmnorm::F32FromBF16(y[1]));
    return 1;
  }
  try {
    const auto ck = glmnorm::CheckpointNorms::Open(argv[1]);
    std::printf("consumer: RmsNorm ok; %s has %zu norms, eps %g\n", argv[1], ck.norms().size(),
                static_cast<double>(ck.eps()));
    return ck.norms().empty() ? 1 : 0;
  } catch (const glmnorm::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
