// QkNorm front end (qk_norm.h): validates the heads, strides, gammas and
// RoPE tables into a job and hands it to the backend.
#include "glmnorm/qk_norm.h"

#include <string>
#include <utility>

#include "backend/backend.h"
#include "core/validate.h"
#include "core/work_cost.h"
#include "ops/qk_norm/qk_norm_job.h"

namespace glmnorm {

namespace {

constexpr const char* kFn = "QkNorm";

std::string Str(int64_t v) { return std::to_string(v); }

template <typename Ptr>
void ValidateQkv(const char* name, const BasicTensorView<Ptr>& v, int64_t width,
                 const QkHeads& h) {
  const std::string n(name);
  validate::Activation(kFn, name, v);
  if (v.width() != width) detail::FailQkWidth(kFn, name, h, width, v.width());
  if (v.shape[0] > 1 && v.stride[0] < width) {
    validate::Fail(kFn, n + ".stride[0] (row stride) must be >= the QKV width " + Str(width) +
                            " or rows would overlap heads, got " + Str(v.stride[0]));
  }
}

void ValidateTable(const char* fn, const char* name, const ConstTensorView& t, int64_t half) {
  const std::string n = std::string("rope.") + name;
  if (t.dtype != DType::kF32) {
    validate::FailDType(fn, n + ".dtype must be f32, got " + std::string(Name(t.dtype)));
  }
  if (t.rank != 2 || t.shape[1] != half) {
    validate::Fail(fn, n + " must be 2-D [positions, rotary_dim/2 = " + Str(half) + "], got " +
                            validate::ShapeString(t.shape, t.rank));
  }
  if (t.stride[1] != 1 && t.shape[0] > 0) {  // an empty table has no layout
    validate::FailNotContiguous(fn, n + ".stride[1]", t.stride[1]);
  }
  if (t.shape[0] < 0) validate::Fail(fn, n + ".shape[0] must be >= 0, got " + Str(t.shape[0]));
  if (t.shape[0] > 0 && t.data == nullptr) {
    validate::Fail(fn, n + ".data is null but " + n + " has " + Str(t.shape[0]) + " positions");
  }
  validate::View(fn, n.c_str(), t);
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) {
    validate::Fail(fn, n + ".data must be aligned to 4 bytes");
  }
}

// Token t's index in the caller's positions `pv`: "t" for [tokens], "b, s"
// for positions shaped like qkv's leading dims (0 on a broadcast dim).
std::string PositionIndex(int64_t t, const ConstTensorView& pv, const ConstTensorView& qkv) {
  if (pv.rank == 1) return Str(t);
  std::string index;
  for (int i = pv.rank - 1; i >= 0; --i) {
    const int64_t at = pv.shape[i] == 1 ? 0 : t % qkv.shape[i];
    t /= qkv.shape[i];
    index = Str(at) + (index.empty() ? "" : ", ") + index;
  }
  return index;
}

}  // namespace

namespace detail {

void FailQkWidth(const char* fn, const char* name, const QkHeads& h, int64_t width,
                 int64_t got) {
  validate::Fail(fn, std::string(name) +
                         " width must be (num_q_heads + num_k_heads + num_v_heads) * head_dim = (" +
                         Str(h.num_q_heads) + " + " + Str(h.num_k_heads) + " + " +
                         Str(h.num_v_heads) + ") * " + Str(h.head_dim) + " = " + Str(width) +
                         ", got " + Str(got));
}

int64_t ValidateQkHeads(const char* fn, const QkHeads& heads) {
  if (heads.head_dim < 1) validate::Fail(fn, "heads.head_dim must be >= 1, got " + Str(heads.head_dim));
  if (heads.num_q_heads < 0 || heads.num_k_heads < 0 || heads.num_v_heads < 0) {
    validate::Fail(fn, "heads.num_q_heads, num_k_heads and num_v_heads must be >= 0, got " +
                           Str(heads.num_q_heads) + ", " + Str(heads.num_k_heads) + ", " +
                           Str(heads.num_v_heads));
  }
  if (int64_t{heads.num_q_heads} + heads.num_k_heads < 1) {  // int64: no overflow
    validate::Fail(fn, "heads.num_q_heads + num_k_heads must be >= 1, got 0");
  }
  int64_t width = 0;
  if (__builtin_mul_overflow(int64_t{heads.num_q_heads} + heads.num_k_heads + heads.num_v_heads,
                             heads.head_dim, &width) ||
      width > validate::kMaxElements) {
    validate::Fail(fn, "(num_q_heads + num_k_heads + num_v_heads) * head_dim overflows");
  }
  return width;
}

void ValidateQkGammaDTypes(const char* fn, DType q, DType k, DType qkv, const char* qkv_name) {
  if (k != q) {
    validate::FailDType(fn, "k_gamma.dtype must equal q_gamma.dtype " + std::string(Name(q)) +
                                ", got " + std::string(Name(k)));
  }
  if (q != DType::kF32 && q != qkv) {
    const std::string allowed = qkv == DType::kF32
                                    ? "f32 (" + std::string(qkv_name) + "'s dtype)"
                                    : "f32 or " + std::string(qkv_name) + "'s dtype " +
                                          std::string(Name(qkv));
    validate::FailDType(fn, "q_gamma.dtype must be " + allowed + ", got " + std::string(Name(q)));
  }
}

RopeTables ValidateRope(const char* fn, const Rope& rope, int64_t head_dim, int64_t tokens,
                        const ConstTensorView& qkv, const char* qkv_name, const TensorView& out,
                        const char* out_name, const Execution& execution) {
  RopeTables tables;
  if (rope.rotary_dim == 0) {
    // A table given without rotary_dim is a forgotten rotary_dim, not a
    // request for no RoPE: refused rather than silently unread.
    for (const auto& [name, t] :
         {std::pair{"rope.cos", &rope.cos}, std::pair{"rope.sin", &rope.sin},
          std::pair{"rope.positions", &rope.positions}}) {
      if (t->rank != 0) {
        validate::Fail(fn, std::string(name) +
                               " is given but rope.rotary_dim is 0 (no RoPE): "
                               "set rope.rotary_dim (GLM-4.5: head_dim / 2 = " +
                               Str(head_dim / 2) +
                               ") or leave out rope.cos, rope.sin and rope.positions");
      }
    }
    return tables;
  }
  if (rope.rotary_dim < 0 || rope.rotary_dim % 2 != 0 || rope.rotary_dim > head_dim) {
    validate::Fail(fn, "rope.rotary_dim must be 0 (no RoPE) or even and <= head_dim " +
                           Str(head_dim) + ", got " + Str(rope.rotary_dim));
  }
  const int64_t half = rope.rotary_dim / 2;
  for (const auto& [name, t] :
       {std::pair{"rope.cos", &rope.cos}, std::pair{"rope.sin", &rope.sin}}) {
    if (t->rank == 0) {
      validate::Fail(fn, "rope.rotary_dim " + Str(rope.rotary_dim) + " needs " + name +
                             ", f32 [positions, rotary_dim / 2 = " + Str(half) +
                             "]; none was given");
    }
  }
  ValidateTable(fn, "cos", rope.cos, half);
  ValidateTable(fn, "sin", rope.sin, half);
  if (rope.sin.shape[0] != rope.cos.shape[0]) {
    validate::Fail(fn, "rope.sin must have as many positions as rope.cos (" +
                           Str(rope.cos.shape[0]) + "), got " + Str(rope.sin.shape[0]));
  }
  validate::NoPartialOverlap(fn, "rope.cos", rope.cos, out_name, out, false);
  validate::NoPartialOverlap(fn, "rope.sin", rope.sin, out_name, out, false);
  tables.rotary_dim = rope.rotary_dim;
  tables.cos = static_cast<const float*>(rope.cos.data);
  tables.sin = static_cast<const float*>(rope.sin.data);
  tables.cos_row_stride = rope.cos.stride[0];
  tables.sin_row_stride = rope.sin.stride[0];
  const int64_t positions = rope.cos.shape[0];
  const ConstTensorView& pv = rope.positions;
  const int num_lead = qkv.rank - 1;  // the caller's leading dims: [B, S] of [B, S, W]
  if (pv.rank == 0) {
    // Leading dims [..., B, S]: more than one sequence unless all but the
    // last leading dim are 1.
    int64_t sequences = 1;
    for (int i = 0; i + 1 < num_lead; ++i) sequences *= qkv.shape[i];
    if (sequences > 1 && tokens > 0) {
      validate::Fail(fn, "rope.positions is required when " + std::string(qkv_name) +
                             " holds several sequences (leading dims " +
                             validate::ShapeString(qkv.shape, num_lead) +
                             "): without it token t takes table row t of all " + Str(tokens) +
                             " tokens; pass i64 " + validate::ShapeString(qkv.shape, num_lead) +
                             " (Transformers' position_ids) or [tokens = " + Str(tokens) + "]");
    }
    if (tokens > positions) {
      validate::Fail(fn, "rope.cos has " + Str(positions) + " positions but there are " +
                              Str(tokens) + " tokens and no rope.positions");
    }
    return tables;
  }
  if (pv.dtype != DType::kI64) {
    validate::FailDType(fn, "rope.positions.dtype must be i64, got " +
                                std::string(Name(pv.dtype)));
  }
  // [tokens], or the leading dims' shape with dims of 1 broadcast (stride 0):
  // Transformers' position_ids [B, S], or [1, S] shared by the batch.
  bool like_lead = pv.rank == num_lead && num_lead > 1;
  for (int i = 0; like_lead && i < num_lead; ++i) {
    like_lead = pv.shape[i] == qkv.shape[i] || pv.shape[i] == 1;
  }
  if (!(pv.rank == 1 && pv.shape[0] == tokens) && !like_lead) {
    validate::Fail(fn, "rope.positions must be i64 [tokens = " + Str(tokens) + "]" +
                           (num_lead > 1 ? " or shaped like " + std::string(qkv_name) +
                                               "'s leading dims " +
                                               validate::ShapeString(qkv.shape, num_lead) +
                                               " (a dim of 1 is broadcast)"
                                         : std::string()) +
                           ", got " + std::string(Name(pv.dtype)) + " " +
                           validate::ShapeString(pv.shape, pv.rank));
  }
  validate::View(fn, "rope.positions", pv);
  validate::NoPartialOverlap(fn, "rope.positions", pv, out_name, out, false);
  if (tokens == 0) return tables;  // nothing to read (View skips an empty view's strides)
  // Token t's position as a row offset: the view [lead..., 1] with pv's
  // strides (0 on broadcast dims), rows in the tokens' order.
  ConstTensorView rows;
  rows.rank = pv.rank + 1;
  for (int i = 0; i < pv.rank; ++i) {
    rows.shape[i] = pv.rank == 1 ? tokens : qkv.shape[i];
    rows.stride[i] = pv.shape[i] == 1 && rows.shape[i] != 1 ? 0 : pv.stride[i];
  }
  rows.shape[pv.rank] = 1;
  rows.stride[pv.rank] = 1;
  tables.positions = static_cast<const int64_t*>(pv.data);
  tables.positions_layout = RowLayout::Of(rows);
  int64_t bad_token = tokens, bad_position = 0;
  RopePositionsCheckJob check;
  check.positions = tables.positions;
  check.layout = tables.positions_layout;
  check.tokens = tokens;
  check.limit = positions;
  check.bad_token = &bad_token;
  check.bad_position = &bad_position;
  check.size.rows = 1;
  backend::Run(check, execution);
  if (bad_token < tokens) {
    validate::Fail(fn, "rope.positions[" + PositionIndex(bad_token, pv, qkv) + "] must be in [0, " +
                           Str(positions) + "), got " + Str(bad_position));
  }
  return tables;
}

}  // namespace detail

void QkNorm(const ConstTensorView& qkv_in_any, const TensorView& qkv_out_any,
            const QkHeads& heads, const ConstTensorView& q_gamma, const ConstTensorView& k_gamma,
            const NormOptions& options, const Rope& rope, const Execution& execution) {
  validate::Options(kFn, options);
  const ConstTensorView qkv_in = validate::Rows(kFn, "qkv_in", qkv_in_any);
  const TensorView qkv_out = validate::Rows(kFn, "qkv_out", qkv_out_any);
  const int64_t width = detail::ValidateQkHeads(kFn, heads);
  ValidateQkv("qkv_in", qkv_in, width, heads);
  ValidateQkv("qkv_out", qkv_out, width, heads);
  validate::SameShape(kFn, "qkv_in", qkv_in, "qkv_out", qkv_out);
  validate::Gamma(kFn, "q_gamma", q_gamma, heads.head_dim);
  validate::Gamma(kFn, "k_gamma", k_gamma, heads.head_dim);
  detail::ValidateQkGammaDTypes(kFn, q_gamma.dtype, k_gamma.dtype, qkv_in.dtype, "qkv_in");
  validate::OutputDType(kFn, "qkv_out", qkv_out.dtype, q_gamma.dtype, qkv_in.dtype,
                        options.rounding);
  validate::NoPartialOverlap(kFn, "qkv_in", qkv_in, "qkv_out", qkv_out, /*allow_same=*/true);
  validate::NoPartialOverlap(kFn, "q_gamma", q_gamma, "qkv_out", qkv_out, /*allow_same=*/false);
  validate::NoPartialOverlap(kFn, "k_gamma", k_gamma, "qkv_out", qkv_out, /*allow_same=*/false);
  const int64_t tokens = qkv_in.shape[0];
  const RopeTables tables = detail::ValidateRope(kFn, rope, heads.head_dim, tokens, qkv_in_any,
                                                "qkv_in", qkv_out, "qkv_out", execution);

  QkNormJob job;
  job.p = NormParams::Of(qkv_in.dtype, q_gamma.dtype, qkv_out.dtype, heads.head_dim, options);
  job.in = qkv_in.data;
  job.in_row_stride = qkv_in.stride[0];
  job.out = qkv_out.data;
  job.out_row_stride = qkv_out.stride[0];
  job.num_q_heads = heads.num_q_heads;
  job.num_k_heads = heads.num_k_heads;
  job.q_gamma = q_gamma.data;
  job.k_gamma = k_gamma.data;
  job.rope = tables;
  const int64_t qk_elems = (int64_t{heads.num_q_heads} + heads.num_k_heads) * heads.head_dim;
  job.size.rows = tokens;
  job.size.work_ns = work_cost::Ns(tokens * qk_elems, rope.rotary_dim != 0
                                                         ? work_cost::kQkNormRope
                                                         : work_cost::kQkNorm);
  backend::Run(job, execution);
}

}  // namespace glmnorm
