// QkNormBackward front end (qk_norm_backward.h): the q heads and the k heads
// of the fused QKV gradient as two RmsNormBackward runs over 3-D views
// [tokens, heads, head_dim] (ops/rms_norm_backward/).
#include "glmnorm/qk_norm_backward.h"

#include <string>
#include <type_traits>

#include "core/validate.h"
#include "ops/qk_norm/qk_norm_job.h"
#include "ops/rms_norm_backward/rms_norm_backward_job.h"

namespace glmnorm {

namespace {

constexpr const char* kFn = "QkNormBackward";

// Columns [first_head, first_head + heads) * head_dim of a 2-D QKV view as
// [tokens, heads, head_dim].
template <typename Ptr>
BasicTensorView<Ptr> Heads(const BasicTensorView<Ptr>& qkv, int64_t first_head, int64_t heads,
                           int64_t head_dim) {
  BasicTensorView<Ptr> v;
  v.dtype = qkv.dtype;
  v.rank = 3;
  v.shape[0] = qkv.shape[0];
  v.shape[1] = heads;
  v.shape[2] = head_dim;
  v.stride[0] = qkv.stride[0];
  v.stride[1] = head_dim;
  v.stride[2] = 1;
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Ptr>>, const char, char>;
  v.data = qkv.data == nullptr
               ? nullptr
               : static_cast<Ptr>(static_cast<Byte*>(qkv.data) +
                                  first_head * head_dim * int64_t(SizeOf(qkv.dtype)));
  return v;
}

// Element access of one storage type (uint16_t: bf16 or f16 bits).
template <DType kT>
struct Elem {
  using Storage = std::conditional_t<kT == DType::kF32, float, uint16_t>;
  static double Load(const Storage* p, int64_t i) {
    if constexpr (kT == DType::kBF16) return F32FromBF16(p[i]);
    else if constexpr (kT == DType::kF16) return F32FromF16(p[i]);
    else return p[i];
  }
  // Rounds once to float32 (exact for f32 storage); a 16-bit dtype then
  // rounds that float: a double rounding at 2^-24 of the value, far below the
  // 2^-8 of the 16-bit result.
  static void Store(Storage* p, int64_t i, double v) {
    const float f = static_cast<float>(v);
    if constexpr (kT == DType::kBF16) p[i] = BF16FromF32(f);
    else if constexpr (kT == DType::kF16) p[i] = F16FromF32(f);
    else p[i] = f;
  }
};

// The RoPE backward: the gradient of QkNorm's rotated q and k heads
// (dqkv_out's q and k columns) turned into the gradient of the normalised
// heads, written to `dst` [tokens, (nq + nk) * head_dim], dqkv_out's dtype.
// The forward stored, for i < half = rotary_dim / 2, a = h[i], b = h[i + half]:
//   lo = a*cos[i] - b*sin[i],  hi = b*cos[i] + a*sin[i]
// so (the transposed rotation)
//   da = dlo*cos[i] + dhi*sin[i],  db = dhi*cos[i] - dlo*sin[i],
// computed in float64 and rounded once; dims from rotary_dim on pass as they
// are. Torch autograd through Transformers' apply_rotary_pos_emb rounds each
// product and sum to the dtype: this is as accurate or more (python/tests).
template <DType kT>
void UnrotateGradientTyped(const ConstTensorView& dqkv_out, const QkHeads& heads,
                           const Rope& rope, void* dst_bytes) {
  using E = Elem<kT>;
  using S = typename E::Storage;
  const int64_t tokens = dqkv_out.shape[0], hd = heads.head_dim, half = rope.rotary_dim / 2;
  const int64_t cols = (int64_t{heads.num_q_heads} + heads.num_k_heads) * hd;
  const auto* src_base = static_cast<const S*>(dqkv_out.data);
  auto* dst_base = static_cast<S*>(dst_bytes);
  const auto* pos = static_cast<const int64_t*>(rope.positions.data);
  for (int64_t tok = 0; tok < tokens; ++tok) {
    const int64_t row = pos != nullptr ? pos[tok * rope.positions.stride[0]] : tok;
    const float* cos = static_cast<const float*>(rope.cos.data) + row * rope.cos.stride[0];
    const float* sin = static_cast<const float*>(rope.sin.data) + row * rope.sin.stride[0];
    for (int64_t head = 0; head < cols; head += hd) {
      const S* src = src_base + tok * dqkv_out.stride[0] + head;
      S* dst = dst_base + tok * cols + head;
      for (int64_t i = 0; i < half; ++i) {
        const double lo = E::Load(src, i), hi = E::Load(src, half + i);
        E::Store(dst, i, lo * cos[i] + hi * sin[i]);
        E::Store(dst, half + i, hi * cos[i] - lo * sin[i]);
      }
      for (int64_t i = 2 * half; i < hd; ++i) dst[i] = src[i];  // not rotated: copied
    }
  }
}

void UnrotateGradient(const ConstTensorView& dqkv_out, const QkHeads& heads, const Rope& rope,
                      void* dst) {
  switch (dqkv_out.dtype) {
    case DType::kBF16: return UnrotateGradientTyped<DType::kBF16>(dqkv_out, heads, rope, dst);
    case DType::kF16: return UnrotateGradientTyped<DType::kF16>(dqkv_out, heads, rope, dst);
    default: return UnrotateGradientTyped<DType::kF32>(dqkv_out, heads, rope, dst);
  }
}

// The un-rotated gradient's buffer: its own per-thread arena (the norm
// backward's arena holds the workspace of the same call).
void* UnrotatedBuffer(size_t bytes) {
  thread_local detail::ScratchArena arena;
  return arena.For(bytes);
}

}  // namespace

void QkNormBackward(const ConstTensorView& qkv, const ConstTensorView& dqkv_out,
                    const TensorView& dqkv_in, const QkHeads& heads,
                    const ConstTensorView& q_gamma, const ConstTensorView& k_gamma,
                    const TensorView& dq_gamma, const TensorView& dk_gamma,
                    const NormOptions& options, const Workspace& workspace,
                    const Execution& execution) {
  QkNormBackward(qkv, dqkv_out, dqkv_in, heads, q_gamma, k_gamma, dq_gamma, dk_gamma, options,
                 Rope{}, workspace, execution);
}

void QkNormBackward(const ConstTensorView& qkv_any, const ConstTensorView& dqkv_out_any,
                    const TensorView& dqkv_in_any, const QkHeads& heads,
                    const ConstTensorView& q_gamma, const ConstTensorView& k_gamma,
                    const TensorView& dq_gamma, const TensorView& dk_gamma,
                    const NormOptions& options, const Rope& rope, const Workspace& workspace,
                    const Execution& execution) {
  if (heads.head_dim < 1 || heads.num_q_heads < 0 || heads.num_k_heads < 0 ||
      heads.num_v_heads < 0) {
    validate::Fail(kFn, "heads must have head_dim >= 1 and head counts >= 0, got head_dim " +
                            std::to_string(heads.head_dim));
  }
  // [..., W] views of rank 1..4 as [tokens, W], as QkNorm takes them.
  const ConstTensorView qkv = validate::Rows(kFn, "qkv", qkv_any);
  const ConstTensorView dqkv_out = validate::Rows(kFn, "dqkv_out", dqkv_out_any);
  const TensorView dqkv_in = validate::Rows(kFn, "dqkv_in", dqkv_in_any);
  const int64_t total = int64_t{heads.num_q_heads} + heads.num_k_heads + heads.num_v_heads;
  for (const auto* v : {&qkv, &dqkv_out}) {
    const char* name = v == &qkv ? "qkv" : "dqkv_out";
    validate::Activation(kFn, name, *v);
    if (v->shape[1] != total * heads.head_dim) {
      validate::Fail(kFn, std::string(name) + " must be [..., " +
                              std::to_string(total * heads.head_dim) + "], got shape " +
                              validate::ShapeString(v->shape, v->rank));
    }
  }
  validate::Activation(kFn, "dqkv_in", dqkv_in);
  validate::SameShape(kFn, "qkv", qkv, "dqkv_in", dqkv_in);
  validate::SameShape(kFn, "qkv", qkv, "dqkv_out", dqkv_out);
  if (dqkv_in.dtype != qkv.dtype) {
    validate::FailDType(kFn, "dqkv_in.dtype must be " + std::string(Name(qkv.dtype)) +
                            " (qkv's dtype), got " + std::string(Name(dqkv_in.dtype)));
  }
  const int64_t hd = heads.head_dim;
  detail::NormBackwardArgs q, k;
  q.x = Heads(qkv, 0, heads.num_q_heads, hd);
  q.dy = Heads(dqkv_out, 0, heads.num_q_heads, hd);
  q.dx = Heads(dqkv_in, 0, heads.num_q_heads, hd);
  q.gamma = q_gamma;
  q.dgamma = dq_gamma;
  q.x_name = "qkv";
  q.dy_name = "dqkv_out";
  q.dx_name = "dqkv_in";
  q.dgamma_name = "dq_gamma";
  k = q;
  k.x = Heads(qkv, heads.num_q_heads, heads.num_k_heads, hd);
  k.dy = Heads(dqkv_out, heads.num_q_heads, heads.num_k_heads, hd);
  k.dx = Heads(dqkv_in, heads.num_q_heads, heads.num_k_heads, hd);
  k.gamma = k_gamma;
  k.dgamma = dk_gamma;
  k.dgamma_name = "dk_gamma";
  detail::ValidateNormBackward(kFn, q, options);
  detail::ValidateNormBackward(kFn, k, options);
  // The q columns written must not be the k columns read, and vice versa:
  // only the same buffer in place, or disjoint buffers.
  validate::NoPartialOverlap(kFn, "qkv", qkv, "dqkv_in", dqkv_in, false);
  validate::NoPartialOverlap(kFn, "dqkv_out", dqkv_out, "dqkv_in", dqkv_in, true);
  validate::NoPartialOverlap(kFn, "dq_gamma", dq_gamma, "dk_gamma", dk_gamma, false);
  validate::NoPartialOverlap(kFn, "k_gamma", k_gamma, "dq_gamma", dq_gamma, false);
  validate::NoPartialOverlap(kFn, "q_gamma", q_gamma, "dk_gamma", dk_gamma, false);
  const int64_t tokens = qkv.shape[0];
  detail::ValidateRope(kFn, rope, hd, tokens, dqkv_in, "dqkv_in");
  if (rope.rotary_dim != 0 && tokens > 0 && heads.num_q_heads + heads.num_k_heads > 0) {
    // The norm's dy is the un-rotated gradient (the same dtype as dqkv_out),
    // in a private buffer [tokens, (nq + nk) * head_dim]: dqkv_in may be
    // dqkv_out, which the norm backward then overwrites while reading it.
    const int64_t qk_cols = (int64_t{heads.num_q_heads} + heads.num_k_heads) * hd;
    void* unrotated = UnrotatedBuffer(static_cast<size_t>(tokens * qk_cols) *
                                      SizeOf(dqkv_out.dtype));
    UnrotateGradient(dqkv_out, heads, rope, unrotated);
    const ConstTensorView u =
        Rows<const void*>(unrotated, dqkv_out.dtype, tokens, qk_cols, qk_cols);
    q.dy = Heads(u, 0, heads.num_q_heads, hd);
    k.dy = Heads(u, heads.num_q_heads, heads.num_k_heads, hd);
  }
  detail::RunNormBackward(kFn, q, options, workspace, execution);
  detail::RunNormBackward(kFn, k, options, workspace, execution);
}

}  // namespace glmnorm
