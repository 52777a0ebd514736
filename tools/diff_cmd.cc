// glmnorm diff A B [--json]: did a conversion keep the norms?
//
// A and B are checkpoints in either format (a Transformers directory or a
// GGUF file / split set). Every norm is matched by its Transformers name and
// compared bit for bit after exact widening to float32 (BF16 and F16 widen
// exactly, so a faithful BF16 -> F32 conversion is identical); eps is compared
// as float32 (GGUF stores it so: a faithful conversion of 1e-5 is equal).
//
// Exit status: 0 identical, 1 differences (one line each on stdout: missing
// on one side, dtype not comparable, shape, how many elements differ and the
// largest difference, eps), 2 a checkpoint could not be read (main prints
// the error: one line on stderr).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "core/format_number.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/dtype.h"
#include "glmnorm/error.h"
#include "printable.h"

namespace glmnorm::tools {
namespace {

constexpr int kIdentical = 0;
constexpr int kDifferent = 1;

struct DiffArgs {
  std::string a;
  std::string b;
  bool json = false;
};

struct Difference {
  std::string name;  // a norm's Transformers name, or "eps"
  std::string kind;  // missing_in_a, missing_in_b, dtype, shape, values, eps
  std::string text;  // the line printed
  nlohmann::ordered_json detail = nlohmann::ordered_json::object();
};

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::optional<DType> FloatDType(const std::string& name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return std::nullopt;
}

float Widen(const std::byte* p, DType dtype) {
  if (dtype == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == DType::kBF16 ? F32FromBF16(h) : F32FromF16(h);
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::string Where(const NormTensor& n, const CheckpointNorms& ck) {
  return ck.format() == "gguf" ? " (" + n.stored_name + ")" : "";
}

void CompareNorm(const NormTensor& a, const NormTensor& b, const CheckpointNorms& ca,
                 const CheckpointNorms& cb, std::vector<Difference>& out) {
  Difference d;
  d.name = a.name;
  const std::optional<DType> ta = FloatDType(a.dtype), tb = FloatDType(b.dtype);
  if (!ta || !tb) {
    d.kind = "dtype";
    d.text = a.name + ": dtype " + a.dtype + " in A, " + b.dtype + " in B; only F32, F16 and " +
             "BF16 gammas can be compared";
    d.detail = {{"a", a.dtype}, {"b", b.dtype}};
    out.push_back(std::move(d));
    return;
  }
  if (a.shape != b.shape) {
    d.kind = "shape";
    d.text = a.name + ": shape " + ShapeString(a.shape) + " in A" + Where(a, ca) + ", " +
             ShapeString(b.shape) + " in B" + Where(b, cb);
    d.detail = {{"a", a.shape}, {"b", b.shape}};
    out.push_back(std::move(d));
    return;
  }
  const size_t n = a.stored_bytes.size() / SizeOf(*ta);
  int64_t differing = 0, first = -1, worst_index = -1;
  double worst = -1.0;
  for (size_t i = 0; i < n; ++i) {
    const float x = Widen(a.stored_bytes.data() + i * SizeOf(*ta), *ta);
    const float y = Widen(b.stored_bytes.data() + i * SizeOf(*tb), *tb);
    if (Bits(x) == Bits(y)) continue;
    ++differing;
    if (first < 0) first = static_cast<int64_t>(i);
    // NaN against anything counts as the largest difference.
    const double diff = std::isnan(x) || std::isnan(y)
                            ? std::numeric_limits<double>::infinity()
                            : std::fabs(static_cast<double>(x) - static_cast<double>(y));
    if (diff > worst) {
      worst = diff;
      worst_index = static_cast<int64_t>(i);
    }
  }
  if (differing == 0) return;
  const float wa = Widen(a.stored_bytes.data() + worst_index * SizeOf(*ta), *ta);
  const float wb = Widen(b.stored_bytes.data() + worst_index * SizeOf(*tb), *tb);
  d.kind = "values";
  d.text = a.name + ": " + std::to_string(differing) + " of " + std::to_string(n) +
           " elements differ; largest difference " +
           (std::isinf(worst) ? std::string("NaN") : ShortestString(worst)) + " at index " +
           std::to_string(worst_index) + " (" + ShortestString(wa) + " in A, " +
           ShortestString(wb) + " in B)";
  d.detail = {{"elements", n},
              {"differing", differing},
              {"first_index", first},
              {"largest_index", worst_index},
              {"largest_difference", std::isinf(worst) ? nlohmann::ordered_json(nullptr)
                                                       : nlohmann::ordered_json(worst)},
              {"a", std::isfinite(wa) ? nlohmann::ordered_json(wa) : nlohmann::ordered_json(ShortestString(wa))},
              {"b", std::isfinite(wb) ? nlohmann::ordered_json(wb) : nlohmann::ordered_json(ShortestString(wb))}};
  out.push_back(std::move(d));
}

std::vector<Difference> Compare(const CheckpointNorms& ca, const CheckpointNorms& cb) {
  std::vector<Difference> out;
  // Every norm present on either side, in A's model order, then B's extras.
  auto missing = [&](const NormTensor& n, const char* side, const CheckpointNorms& has) {
    Difference d;
    d.name = n.name;
    d.kind = std::string("missing_in_") + side;
    d.text = n.name + Where(n, has) + ": missing in " + (side[0] == 'a' ? "A" : "B");
    out.push_back(std::move(d));
  };
  for (const NormTensor& a : ca.norms()) {
    const NormTensor* b = cb.Find(a.name);
    const bool in_b = b != nullptr && b->present;
    if (!a.present && !in_b) continue;
    if (!in_b) {
      missing(a, "b", ca);
    } else if (!a.present) {
      missing(*b, "a", cb);
    } else {
      CompareNorm(a, *b, ca, cb, out);
    }
  }
  for (const NormTensor& b : cb.norms()) {
    if (b.present && ca.Find(b.name) == nullptr) missing(b, "a", cb);
  }
  // eps as float32, the kernels' (and GGUF's) type.
  const std::optional<double> ea = ca.config().rms_norm_eps, eb = cb.config().rms_norm_eps;
  auto show = [](const std::optional<double>& e) {
    return e ? ShortestString(static_cast<float>(*e)) : std::string("missing");
  };
  if (ea.has_value() != eb.has_value() ||
      (ea && Bits(static_cast<float>(*ea)) != Bits(static_cast<float>(*eb)))) {
    Difference d;
    d.name = "eps";
    d.kind = "eps";
    d.text = "eps: " + show(ea) + " in A, " + show(eb) + " in B (compared as float32)";
    d.detail = {{"a", ea ? nlohmann::ordered_json(static_cast<float>(*ea)) : nullptr},
                {"b", eb ? nlohmann::ordered_json(static_cast<float>(*eb)) : nullptr}};
    out.push_back(std::move(d));
  }
  return out;
}

int RunDiff(const DiffArgs& args) {
  // Unreadable: the error propagates to main, which exits 2.
  const CheckpointNorms a = CheckpointNorms::Open(args.a);
  const CheckpointNorms b = CheckpointNorms::Open(args.b);
  const std::vector<Difference> diffs = Compare(a, b);
  size_t compared = 0;
  for (const NormTensor& n : a.norms()) {
    const NormTensor* m = b.Find(n.name);
    if (n.present && m != nullptr && m->present) ++compared;
  }
  if (args.json) {
    nlohmann::ordered_json out;
    out["a"] = {{"path", a.dir()}, {"format", std::string(a.format())}};
    out["b"] = {{"path", b.dir()}, {"format", std::string(b.format())}};
    out["norms_compared"] = compared;
    out["identical"] = diffs.empty();
    out["differences"] = nlohmann::ordered_json::array();
    for (const Difference& d : diffs) {
      nlohmann::ordered_json entry = {{"name", d.name}, {"kind", d.kind}};
      for (auto& [k, v] : d.detail.items()) entry[k] = v;
      entry["text"] = d.text;
      out["differences"].push_back(std::move(entry));
    }
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (diffs.empty()) {
    std::printf("identical: %zu norms bit for bit (as float32), eps %s\n", compared,
                a.config().rms_norm_eps
                    ? ShortestString(static_cast<float>(*a.config().rms_norm_eps)).c_str()
                    : "missing on both sides");
  } else {
    for (const Difference& d : diffs) std::printf("%s\n", Printable(d.text).c_str());
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    throw Error(std::string("cannot write the report to standard output: ") +
                (errno != 0 ? std::strerror(errno) : "write error"));
  }
  return diffs.empty() ? kIdentical : kDifferent;
}

}  // namespace

void RegisterDiff(CLI::App& app, CommandRunner& runner) {
  auto args = std::make_shared<DiffArgs>();
  CLI::App* cmd = app.add_subcommand(
      "diff",
      "Compare the RMSNorms and eps of two checkpoints, each a Transformers directory or a GGUF "
      "file (exit 0 identical, 1 differences, 2 unreadable)");
  cmd->add_option("a", args->a, "first checkpoint (directory, .gguf file or first split file)")
      ->required();
  cmd->add_option("b", args->b, "second checkpoint")->required();
  cmd->add_flag("--json", args->json,
                "one JSON object: a, b, norms_compared, identical, differences");
  cmd->callback([args, &runner] { runner = [args] { return RunDiff(*args); }; });
}

}  // namespace glmnorm::tools
