// QkNormBackward front end (qk_norm_backward.h): the q heads and the k heads
// of the fused QKV gradient as two norm backward runs over 3-D views
// [tokens, heads, head_dim] (ops/rms_norm/rms_norm_backward.cc). With RoPE,
// the gradient of the rotated heads is rotated back as the norm backward
// reads it (heads up to kMaxRopeRowWidth), or by a pass of its own before
// (qk_norm_backward_cpu.cc).
#include "glmnorm/qk_norm_backward.h"

#include <string>
#include <type_traits>

#include "backend/backend.h"
#include "core/validate.h"
#include "core/work_cost.h"
#include "ops/qk_norm/qk_norm_job.h"
#include "ops/rms_norm/rms_norm_backward_job.h"

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
  const int64_t width = detail::ValidateQkHeads(kFn, heads);
  // [..., W] views of rank 1..4 as [tokens, W], as QkNorm takes them.
  const ConstTensorView qkv = validate::Rows(kFn, "qkv", qkv_any);
  const ConstTensorView dqkv_out = validate::Rows(kFn, "dqkv_out", dqkv_out_any);
  const TensorView dqkv_in = validate::Rows(kFn, "dqkv_in", dqkv_in_any);
  for (const auto* v : {&qkv, &dqkv_out}) {
    const char* name = v == &qkv ? "qkv" : "dqkv_out";
    validate::Activation(kFn, name, *v);
    if (v->shape[1] != width) detail::FailQkWidth(kFn, name, heads, width, v->shape[1]);
  }
  validate::Activation(kFn, "dqkv_in", dqkv_in);
  validate::SameShape(kFn, "qkv", qkv, "dqkv_in", dqkv_in);
  validate::SameShape(kFn, "qkv", qkv, "dqkv_out", dqkv_out);
  if (dqkv_in.dtype != qkv.dtype) {
    validate::FailDType(kFn, "dqkv_in.dtype must be " + std::string(Name(qkv.dtype)) +
                            " (qkv's dtype), got " + std::string(Name(dqkv_in.dtype)));
  }
  detail::ValidateQkGammaDTypes(kFn, q_gamma.dtype, k_gamma.dtype, qkv.dtype, "qkv");
  const int64_t hd = heads.head_dim;
  detail::NormBackwardArgs q, k;
  q.x = Heads(qkv, 0, heads.num_q_heads, hd);
  q.dy = Heads(dqkv_out, 0, heads.num_q_heads, hd);
  q.dx = Heads(dqkv_in, 0, heads.num_q_heads, hd);
  q.gamma = q_gamma;
  q.gamma_name = "q_gamma";
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
  k.gamma_name = "k_gamma";
  k.dgamma = dk_gamma;
  k.dgamma_name = "dk_gamma";
  detail::ValidateNormBackward(kFn, q, options, execution);
  detail::ValidateNormBackward(kFn, k, options, execution);
  // The q columns written must not be the k columns read, and vice versa:
  // only the same buffer in place, or disjoint buffers.
  validate::NoPartialOverlap(kFn, "qkv", qkv, "dqkv_in", dqkv_in, false);
  validate::NoPartialOverlap(kFn, "dqkv_out", dqkv_out, "dqkv_in", dqkv_in, true);
  validate::NoPartialOverlap(kFn, "dq_gamma", dq_gamma, "dk_gamma", dk_gamma, false);
  validate::NoPartialOverlap(kFn, "k_gamma", k_gamma, "dq_gamma", dq_gamma, false);
  validate::NoPartialOverlap(kFn, "q_gamma", q_gamma, "dk_gamma", dk_gamma, false);
  const int64_t tokens = qkv.shape[0];
  const RopeTables tables =
      detail::ValidateRope(kFn, rope, hd, tokens, qkv_any, "qkv", dqkv_in, "dqkv_in", execution);
  if (rope.rotary_dim != 0) {
    // The k heads' run reads the tables and positions after the q heads' run
    // has written dq_gamma.
    for (const TensorView* g : {&dq_gamma, &dk_gamma}) {
      const char* g_name = g == &dq_gamma ? "dq_gamma" : "dk_gamma";
      validate::NoPartialOverlap(kFn, "rope.cos", rope.cos, g_name, *g, false);
      validate::NoPartialOverlap(kFn, "rope.sin", rope.sin, g_name, *g, false);
      if (rope.positions.rank != 0) {
        validate::NoPartialOverlap(kFn, "rope.positions", rope.positions, g_name, *g, false);
      }
    }
    if (hd <= kMaxRopeRowWidth) {
      // The norm backward un-rotates each head's gradient as it reads it: one
      // pass over the gradient, none through memory in between.
      q.rope = k.rope = tables;
    } else if (tokens > 0) {
      // Wider heads: the norm's dy is the un-rotated gradient (the same dtype
      // as dqkv_out), in a private buffer [tokens, (nq + nk) * head_dim]:
      // dqkv_in may be dqkv_out, which the norm backward then overwrites while
      // reading it. (ValidateQkHeads: nq + nk >= 1.)
      const int64_t qk_heads = int64_t{heads.num_q_heads} + heads.num_k_heads;
      const int64_t qk_cols = qk_heads * hd;
      void* unrotated = backend::Scratch(
          backend::ScratchSlot::kRopeBackward,
          static_cast<size_t>(tokens * qk_cols) * SizeOf(dqkv_out.dtype), execution);
      QkRopeBackwardJob job;
      job.type = dqkv_out.dtype;
      job.in = dqkv_out.data;
      job.in_row_stride = dqkv_out.stride[0];
      job.out = unrotated;
      job.out_row_stride = qk_cols;
      job.heads = qk_heads;
      job.head_dim = hd;
      job.rope = tables;
      job.size.rows = tokens;
      job.size.work_ns = work_cost::Ns(tokens * qk_cols, work_cost::kRopeBackwardPass);
      backend::Run(job, execution);
      const ConstTensorView u =
          Rows<const void*>(unrotated, dqkv_out.dtype, tokens, qk_cols, qk_cols);
      q.dy = Heads(u, 0, heads.num_q_heads, hd);
      k.dy = Heads(u, heads.num_q_heads, heads.num_k_heads, hd);
    }
  }
  detail::RunNormBackward(kFn, q, options, workspace, execution);
  detail::RunNormBackward(kFn, k, options, workspace, execution);
}

}  // namespace glmnorm
