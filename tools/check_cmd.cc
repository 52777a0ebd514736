// glmnorm check DIR [--goldens FILE]: recompute outputs that Transformers
// recorded for a checkpoint's norms, and report how many are bit-identical.
//
// The goldens file (default DIR/goldens.safetensors, as written by
// scripts/make_tiny_checkpoint.py) holds, for a norm tensor NAME:
//   x/NAME, y/NAME         an activation and Glm4MoeRMSNorm(NAME)'s output
//   xf32/NAME, yf32/NAME   the same with a float32 activation (optional)
//   stream/*               optional: one residual stream through every decoder
//                          layer (h0; attn_out.i, mlp_out.i the sublayers'
//                          fixed outputs; attn_in.i, mlp_in.i, h.i, final what
//                          Glm4MoeDecoderLayer.forward and model.norm produced)
// Each norm is applied with the checkpoint's own gamma and rms_norm_eps in the
// reference op order (cast-then-scale); the stream is replayed with
// ResidualStream (fused residual add + norm).
//
// Exit status: 0 every output within the library's promise (16-bit outputs
// bit-identical, f32 outputs within 4 ulp), 1 some are not (their lines say
// MISMATCH), 2 nothing could be compared (unreadable checkpoint or goldens,
// a goldens tensor of the wrong shape or dtype): one line on stderr.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/decoder.h"
#include "glmnorm/error.h"
#include "glmnorm/rms_norm.h"
#include "glmnorm/safetensors.h"
#include "reference/reference.h"

namespace glmnorm::tools {
namespace {

constexpr int kWithinPromise = 0;
constexpr int kOutsidePromise = 1;

struct CheckArgs {
  std::string dir;
  std::string goldens;  // empty: DIR/goldens.safetensors
};

// The library's accuracy promise against Transformers (README, Accuracy):
// 16-bit outputs bit for bit; f32 outputs within 4 ulp (the float32
// reduction order is glmnorm's own, not PyTorch's).
int64_t PromisedUlp(DType out) { return out == DType::kF32 ? 4 : 0; }

std::string ShapeText(const std::vector<int64_t>& shape, const char* sep) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? sep : "") + std::to_string(shape[i]);
  return s;
}

std::string Bits(DType t, const std::byte* p) {
  uint32_t u = 0;  // the float dtypes of a checkpoint's norms: at most 4 bytes
  std::memcpy(&u, p, std::min(SizeOf(t), sizeof u));
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", static_cast<int>(2 * SizeOf(t)), u);
  return buf;
}

double Value(DType t, const std::byte* p) {
  uint32_t u = 0;  // aligned copy: safetensors data need not be aligned
  std::memcpy(&u, p, SizeOf(t));
  return reference::Load(&u, t, 0);
}

// glmnorm's output against Transformers', element by element.
struct Comparison {
  int64_t elements = 0;
  int64_t identical = 0;
  int64_t max_ulp = 0;
  std::string first;  // where the first difference is, and both values
};

void Compare(DType t, const std::vector<int64_t>& shape, const std::byte* got,
             const std::byte* want, Comparison& c, const std::string& label = "") {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const size_t size = SizeOf(t);
  for (int64_t i = 0; i < n; ++i) {
    const std::byte* g = got + i * size;
    const std::byte* w = want + i * size;
    ++c.elements;
    if (std::memcmp(g, w, size) == 0) {
      ++c.identical;
      continue;
    }
    c.max_ulp = std::max(c.max_ulp, std::max<int64_t>(1, reference::UlpDistance(t, g, w)));
    if (c.first.empty()) {
      std::vector<int64_t> index(shape.size());
      for (int64_t k = static_cast<int64_t>(shape.size()) - 1, rest = i; k >= 0; --k) {
        index[k] = rest % shape[k];
        rest /= shape[k];
      }
      char values[160];
      std::snprintf(values, sizeof values, " glmnorm %s (%.9g), Transformers %s (%.9g)",
                    Bits(t, g).c_str(), Value(t, g), Bits(t, w).c_str(), Value(t, w));
      c.first = "first at " + label + "[" + ShapeText(index, ", ") + "]:" + values;
    }
  }
}

// One line of the report.
struct Row {
  std::string name;  // the norm, or "residual stream, ..."
  std::string what;  // shape and dtypes, e.g. "6 x 64 bf16"
  DType out;
  Comparison c;
  bool ok() const { return c.max_ulp <= PromisedUlp(out); }
};

int Digits(int64_t v) { return static_cast<int>(std::to_string(v).size()); }

void PrintRows(const std::vector<Row>& rows) {
  int name_w = 0, what_w = 0, count_w = 0;
  for (const Row& r : rows) {
    name_w = std::max(name_w, static_cast<int>(r.name.size()) + 1);
    what_w = std::max(what_w, static_cast<int>(r.what.size()));
    count_w = std::max(count_w, Digits(r.c.elements));
  }
  for (const Row& r : rows) {
    std::printf("%-*s %-*s  %*lld of %-*lld bit-identical, max %lld ulp", name_w,
                (r.name + ":").c_str(), what_w, r.what.c_str(), count_w,
                static_cast<long long>(r.c.identical), count_w,
                static_cast<long long>(r.c.elements), static_cast<long long>(r.c.max_ulp));
    if (!r.ok()) {
      std::printf("  MISMATCH (promise: %s); %s",
                  r.out == DType::kF32 ? "<= 4 ulp" : "bit-identical", r.c.first.c_str());
    }
    std::printf("\n");
  }
}

const SafetensorsTensor& Require(const SafetensorsFile& f, const std::string& key,
                                 const std::string& why) {
  const SafetensorsTensor* t = f.Find(key);
  if (t == nullptr) throw Error(f.path() + ": " + key + " missing (" + why + ")");
  return *t;
}

// One recorded activation x_key through norm `name`, against y_key.
struct Case {
  std::string name;   // the norm tensor
  std::string x_key;  // "x/NAME" or "xf32/NAME"
  std::string y_key;
};

Row CheckNorm(const CheckpointNorms& ck, const SafetensorsFile& goldens, const Case& c) {
  const SafetensorsTensor& xt = Require(goldens, c.x_key, "an activation without its output");
  const SafetensorsTensor& yt =
      Require(goldens, c.y_key, "the output Transformers recorded for " + c.x_key);
  std::vector<std::byte> x_copy;
  const ConstTensorView x = goldens.View(xt, &x_copy);
  const ConstTensorView gamma = ck.Gamma(c.name);
  const std::string where = goldens.path() + ": ";
  if (!IsFloatActivation(x.dtype)) {
    throw Error(where + c.x_key + " is " + xt.dtype + "; activations are BF16, F16 or F32");
  }
  if (xt.shape.empty() || x.width() != gamma.width()) {
    throw Error(where + c.x_key + " has shape [" + ShapeText(xt.shape, ", ") + "] but " + c.name +
                " normalises rows of width " + std::to_string(gamma.width()));
  }
  // PyTorch's result dtype of gamma * activation (SPEC.md §2).
  const DType out = Promote(gamma.dtype, x.dtype);
  if (yt.shape != xt.shape || yt.dtype != SafetensorsName(out)) {
    throw Error(where + c.y_key + " is " + yt.dtype + " [" + ShapeText(yt.shape, ", ") +
                "]; expected " + std::string(SafetensorsName(out)) + " [" +
                ShapeText(xt.shape, ", ") + "], the output of " + c.name + " on " + c.x_key);
  }
  std::vector<std::byte> y_bytes(yt.size());
  TensorView y;
  y.data = y_bytes.data();
  y.dtype = out;
  y.rank = x.rank;
  for (int i = 0; i < x.rank; ++i) {
    y.shape[i] = x.shape[i];
    y.stride[i] = x.stride[i];
  }
  RmsNorm(x, gamma, y, ck.Options());

  Comparison cmp;
  Compare(out, xt.shape, y_bytes.data(), goldens.Bytes(yt).data(), cmp);
  std::string what = ShapeText(xt.shape, " x ") + " " + std::string(Name(x.dtype));
  if (gamma.dtype != x.dtype) what += " (" + std::string(Name(gamma.dtype)) + " gamma)";
  if (out != x.dtype) what += " -> " + std::string(Name(out));
  return {c.name, what, out, cmp};
}

// A stream/* tensor: every one is [tokens, hidden] of h0's dtype.
struct StreamBuffer {
  std::vector<std::byte> bytes;
  DType dtype = DType::kBF16;
  int64_t rows = 0, width = 0;
  TensorView view() { return Rows<void*>(bytes.data(), dtype, rows, width, width); }
  ConstTensorView cview() const {
    return Rows<const void*>(bytes.data(), dtype, rows, width, width);
  }
};

StreamBuffer LoadStream(const SafetensorsFile& f, const std::string& key, const StreamBuffer* like,
                        int64_t hidden) {
  const SafetensorsTensor& t = Require(f, key, "part of the recorded residual stream");
  const std::optional<DType> dtype = DTypeFromSafetensors(t.dtype);
  const DType want = like ? like->dtype : dtype.value_or(DType::kI8);
  if (!dtype || !IsFloatActivation(*dtype) || *dtype != want || t.shape.size() != 2 ||
      t.shape[1] != hidden || (like && t.shape[0] != like->rows)) {
    throw Error(f.path() + ": " + key + " is " + t.dtype + " [" + ShapeText(t.shape, ", ") +
                "]; expected " +
                (like ? std::string(SafetensorsName(like->dtype)) + " [" +
                            std::to_string(like->rows) + ", " + std::to_string(hidden) + "]"
                      : "BF16, F16 or F32 [tokens, " + std::to_string(hidden) + "]"));
  }
  StreamBuffer b;
  b.dtype = *dtype;
  b.rows = t.shape[0];
  b.width = t.shape[1];
  const auto src = f.Bytes(t);
  b.bytes.assign(src.begin(), src.end());
  return b;
}

// Replays the recorded residual stream with ResidualStream (each residual add
// fused with the norm after it) and compares every normalised input and every
// h with Transformers'.
Row CheckStream(const CheckpointNorms& ck, const SafetensorsFile& goldens) {
  const ResidualStream stream = ResidualStream::FromCheckpoint(ck);
  const int64_t hidden = ck.config().hidden_size;
  StreamBuffer h = LoadStream(goldens, "stream/h0", nullptr, hidden);
  const std::vector<int64_t> shape = {h.rows, h.width};
  Comparison cmp;
  auto expect = [&](const StreamBuffer& got, const std::string& key) {
    const StreamBuffer want = LoadStream(goldens, key, &h, hidden);
    Compare(h.dtype, shape, got.bytes.data(), want.bytes.data(), cmp, key);
  };
  StreamBuffer normed = h;
  stream.Begin(0, h.cview(), normed.view());
  expect(normed, "stream/attn_in.0");
  for (int i = 0; i < stream.num_layers(); ++i) {
    const std::string n = std::to_string(i);
    StreamBuffer attn = LoadStream(goldens, "stream/attn_out." + n, &h, hidden);
    stream.AfterAttention(i, h.view(), attn.cview(), attn.view());  // mlp_in in place
    expect(attn, "stream/mlp_in." + n);
    StreamBuffer mlp = LoadStream(goldens, "stream/mlp_out." + n, &h, hidden);
    stream.AfterMlp(i, h.view(), mlp.cview(), mlp.view());  // next input in place
    expect(h, "stream/h." + std::to_string(i + 1));
    expect(mlp, i + 1 < stream.num_layers() ? "stream/attn_in." + std::to_string(i + 1)
                                            : std::string("stream/final"));
  }
  return {"residual stream, " + std::to_string(stream.num_layers()) + " layers + model.norm",
          ShapeText(shape, " x ") + " " + std::string(Name(h.dtype)), h.dtype, cmp};
}

// "transformers 4.56.1, torch 2.8.0" from the provenance metadata, or "".
std::string Provenance(const SafetensorsFile& goldens) {
  const auto it = goldens.metadata().find("provenance");
  if (it == goldens.metadata().end()) return "";
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  std::string s;
  for (const char* k : {"transformers", "torch"}) {
    if (j.contains(k) && j[k].is_string()) {
      s += (s.empty() ? "" : ", ") + std::string(k) + " " + j[k].get<std::string>();
    }
  }
  return s;
}

int RunCheck(const CheckArgs& args) {
  const CheckpointNorms ck = CheckpointNorms::Open(args.dir);
  const std::string path = args.goldens.empty() ? args.dir + "/goldens.safetensors" : args.goldens;
  const SafetensorsFile goldens = SafetensorsFile::Open(path);
  const float eps = ck.eps();  // throws when config.json has no rms_norm_eps

  // The recorded activations, in model order; every one must name a norm.
  std::vector<Case> cases;
  int unchecked = 0;
  for (const NormTensor& n : ck.norms()) {
    const size_t before = cases.size();
    for (const char* x : {"x/", "xf32/"}) {
      if (goldens.Find(x + n.name) != nullptr) {
        cases.push_back({n.name, x + n.name, std::string("y") + (x + 1) + n.name});
      }
    }
    unchecked += cases.size() == before ? 1 : 0;
  }
  for (const SafetensorsTensor& t : goldens.tensors()) {
    for (const std::string_view prefix : {"x/", "xf32/", "y/", "yf32/"}) {
      if (!std::string_view(t.name).starts_with(prefix)) continue;
      if (ck.Find(std::string_view(t.name).substr(prefix.size())) == nullptr) {
        throw Error(path + ": " + t.name + " names no norm of the checkpoint " + args.dir);
      }
      if (prefix[0] == 'y' && goldens.Find("x" + t.name.substr(1)) == nullptr) {
        throw Error(path + ": " + t.name + " has no activation x" + t.name.substr(1));
      }
    }
  }
  const bool has_stream = goldens.Find("stream/h0") != nullptr;
  if (cases.empty() && !has_stream) {
    throw Error(path +
                ": no recorded activations (x/NAME and y/NAME for a norm NAME, or stream/*)");
  }

  // Everything is computed before anything is printed: an error (exit 2)
  // leaves stdout empty.
  std::vector<Row> rows;
  for (const Case& c : cases) rows.push_back(CheckNorm(ck, goldens, c));
  if (has_stream) rows.push_back(CheckStream(ck, goldens));

  const std::string provenance = Provenance(goldens);
  std::printf("checkpoint  %s (%s, eps %g)\n", args.dir.c_str(), ck.model_name().c_str(),
              static_cast<double>(eps));
  std::printf(
      "goldens     %s\n            activations and the outputs Transformers' Glm4MoeRMSNorm "
      "made from them%s%s%s\n",
      path.c_str(), provenance.empty() ? "" : " (", provenance.c_str(),
      provenance.empty() ? "" : ")");
  std::printf(
      "glmnorm applies each norm (the checkpoint's gamma and eps) to the activations and\n"
      "compares its outputs with Transformers' bit for bit:\n\n");
  PrintRows(rows);

  int failed = 0;
  int64_t elements = 0, identical = 0;
  for (const Row& r : rows) {
    failed += r.ok() ? 0 : 1;
    elements += r.c.elements;
    identical += r.c.identical;
  }
  std::printf("\n%zu comparison(s), %lld of %lld elements bit-identical to Transformers",
              rows.size(), static_cast<long long>(identical), static_cast<long long>(elements));
  if (unchecked > 0) std::printf("; %d norm(s) have no recorded activations", unchecked);
  std::printf("\n");
  if (!ck.sound()) {
    std::printf("note: %s has %zu problem(s); see `glmnorm inspect %s`\n", args.dir.c_str(),
                ck.problems().size(), args.dir.c_str());
  }
  const char* promise = "bf16/f16 bit-identical, f32 within 4 ulp";
  if (failed > 0) {
    std::printf("FAIL: %d of %zu outside glmnorm's promise (%s)\n", failed, rows.size(), promise);
    return kOutsidePromise;
  }
  std::printf("PASS: all within glmnorm's promise (%s)\n", promise);
  return kWithinPromise;
}

}  // namespace

void RegisterCheck(CLI::App& app, CommandRunner& runner) {
  auto args = std::make_shared<CheckArgs>();
  CLI::App* cmd = app.add_subcommand(
      "check",
      "Recompute the norm outputs Transformers recorded for a checkpoint and count the "
      "bit-identical ones (exit 0 all within the promise, 1 some are not, 2 error)");
  cmd->add_option("dir", args->dir, "checkpoint directory (config.json, safetensors shards)")
      ->required();
  cmd->add_option("--goldens", args->goldens,
                  "safetensors file of x/NAME, y/NAME (xf32/, yf32/, stream/*) tensors "
                  "(default: DIR/goldens.safetensors)");
  cmd->callback([args, &runner] { runner = [args] { return RunCheck(*args); }; });
}

}  // namespace glmnorm::tools
