// `glmnorm check` (and `glmnorm bench --quick`), run as `make demo` runs them:
// the tiny checkpoints' norms reproduce Transformers' recorded outputs; a
// goldens file with altered outputs is reported as a mismatch (exit 1); every
// input that cannot be compared is an error (exit 2, one line on stderr).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "fixtures.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/rms_norm.h"
#include "glmnorm/safetensors.h"

namespace glmnorm {
namespace {

using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

const std::string kData = GLMNORM_TEST_DATA;

using test::CliRun;
using test::Glmnorm;
using test::Q;

// An error: exit 2, nothing on stdout, exactly one line on stderr.
void ExpectOneLineError(const CliRun& r, const std::string& part) {
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.out, IsEmpty());
  EXPECT_THAT(r.err, AllOf(StartsWith("glmnorm: "), HasSubstr(part), EndsWith("\n")));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// The line of `out` that starts with `prefix` ("" when none does).
std::string LineOf(const std::string& out, const std::string& prefix) {
  size_t at = 0;
  while (at < out.size()) {
    const size_t end = std::min(out.find('\n', at), out.size());
    if (out.compare(at, prefix.size(), prefix) == 0) return out.substr(at, end - at);
    at = end + 1;
  }
  return "";
}

int64_t Count(const std::string& s, const std::string& part) {
  int64_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

// A goldens file's tensors, editable, written back with EncodeSafetensors.
struct Tensors {
  struct Owned {
    std::string dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
  };
  std::map<std::string, Owned> t;
  std::map<std::string, std::string> metadata;

  static Tensors Read(const std::string& path) {
    const SafetensorsFile f = SafetensorsFile::Open(path);
    Tensors out;
    out.metadata = f.metadata();
    for (const SafetensorsTensor& s : f.tensors()) {
      const auto bytes = f.Bytes(s);
      out.t[s.name] = {s.dtype, s.shape, {bytes.begin(), bytes.end()}};
    }
    return out;
  }
  void Write(const std::string& path) const {
    std::vector<SafetensorsEntry> entries;
    for (const auto& [name, o] : t) entries.push_back({name, o.dtype, o.shape, o.bytes});
    test::WriteFile(path, EncodeSafetensors(entries, metadata));
  }
  // Adds `delta` to the bit pattern of element i (of a 2- or 4-byte dtype):
  // for a positive finite value, `delta` ulp further from zero.
  void Bump(const std::string& name, size_t i, int delta) {
    Owned& o = t.at(name);
    const size_t size = o.dtype == "F32" ? 4 : 2;
    uint32_t u = 0;
    std::memcpy(&u, o.bytes.data() + i * size, size);
    u += static_cast<uint32_t>(delta);
    std::memcpy(o.bytes.data() + i * size, &u, size);
  }
};

const std::string kGlm = kData + "/tiny_glm45";

class TinyCheckpoint : public ::testing::TestWithParam<const char*> {};

TEST_P(TinyCheckpoint, EveryRecordedOutputIsBitIdentical) {
  const std::string dir = kData + "/" + GetParam();
  const CliRun r = Glmnorm("check " + Q(dir));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.err, IsEmpty());
  // One line per recorded activation, plus the residual stream.
  const SafetensorsFile goldens = SafetensorsFile::Open(dir + "/goldens.safetensors");
  int64_t recorded = 0, bf16_elements = 0;
  for (const SafetensorsTensor& t : goldens.tensors()) {
    if (t.name.starts_with("x/") || t.name.starts_with("xf32/")) ++recorded;
    if (t.name.starts_with("y/")) bf16_elements += static_cast<int64_t>(t.size() / 2);
  }
  EXPECT_EQ(Count(r.out, " bit-identical, max "), recorded + 1) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("MISMATCH")));
  const int64_t hidden = std::string(GetParam()) == "tiny_glm45" ? 64 : 48;
  const std::string n = std::to_string(6 * hidden);
  EXPECT_THAT(LineOf(r.out, "model.layers.0.input_layernorm.weight:"),
              ContainsRegex(": +6 x " + std::to_string(hidden) + " bf16 +" + n + " of " + n +
                            " +bit-identical, max 0 ulp$"));
  // The norms of the MTP layer (the layer after the decoder layers) too.
  const std::string mtp = std::string(GetParam()) == "tiny_glm45" ? "3" : "2";
  EXPECT_THAT(LineOf(r.out, "model.layers." + mtp + ".enorm.weight:"),
              ContainsRegex(n + " of " + n + " +bit-identical, max 0 ulp$"));
  // h0, then per layer mlp_in, h and the next norm's input, all 5 x hidden.
  const int layers = mtp == "3" ? 3 : 2;
  const std::string s = std::to_string(5 * hidden * (1 + 3 * layers));
  EXPECT_THAT(LineOf(r.out, "residual stream, "),
              ContainsRegex("^residual stream, " + mtp + " layers \\+ model\\.norm: +5 x " +
                            std::to_string(hidden) + " bf16 +" + s + " of " + s +
                            " bit-identical, max 0 ulp$"));
  EXPECT_THAT(r.out, HasSubstr("PASS: all within glmnorm's promise"));
  EXPECT_GT(bf16_elements, 1000);
}

INSTANTIATE_TEST_SUITE_P(Both, TinyCheckpoint, ::testing::Values("tiny_glm45", "tiny_air"));

TEST(Check, QkNormAndF32LinesNameTheirShapes) {
  const CliRun r = Glmnorm("check " + Q(kGlm));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  // q_norm on (batch, seq, heads, head_dim) views.
  EXPECT_THAT(LineOf(r.out, "model.layers.0.self_attn.q_norm.weight:"),
              ContainsRegex(": +1 x 2 x 6 x 16 bf16 +192 of 192 +bit-identical, max 0 ulp$"));
  // f32 activations with bf16 gammas give f32 outputs (within 4 ulp).
  EXPECT_THAT(r.out, ContainsRegex("\nmodel\\.norm\\.weight: +6 x 64 f32 \\(bf16 gamma\\) +"
                                   "[0-9]+ of 384 +bit-identical, max [0-4] ulp\n"));
}

TEST(Check, AlteredOutputsAreMismatches) {
  test::TempDir tmp;
  Tensors g = Tensors::Read(kGlm + "/goldens.safetensors");
  g.Bump("y/model.norm.weight", 64 + 5, 1);  // row 1, column 5: 1 ulp
  g.Bump("yf32/model.norm.weight", 7, 3);    // f32: 3 ulp more, within the 4 promised...
  g.Bump("yf32/model.layers.0.self_attn.q_norm.weight", 0, 64);  // ...64 ulp not
  g.Bump("stream/h.2", 3, 1);
  const std::string altered = tmp / "altered.safetensors";
  g.Write(altered);

  const CliRun r = Glmnorm("check " + Q(kGlm) + " --goldens " + Q(altered));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.err, IsEmpty());
  EXPECT_THAT(r.out, HasSubstr("goldens     " + altered));
  EXPECT_THAT(
      LineOf(r.out, "model.norm.weight:"),
      ContainsRegex(": +6 x 64 bf16 +383 of 384 +bit-identical, max 1 ulp  MISMATCH "
                    "\\(promise: bit-identical\\); first at \\[1, 5\\]: "
                    "glmnorm 0x[0-9a-f]{4} \\(.*\\), Transformers 0x[0-9a-f]{4} \\(.*\\)$"));
  // (The f32 goldens of tiny_glm45 are bit-identical: exactly the 3 added.)
  EXPECT_THAT(r.out, ContainsRegex("\nmodel\\.norm\\.weight: +6 x 64 f32 \\(bf16 gamma\\) +"
                                   "383 of 384 +bit-identical, max 3 ulp\n"));
  EXPECT_THAT(r.out, ContainsRegex("\nmodel\\.layers\\.0\\.self_attn\\.q_norm\\.weight: +1 x 2 x "
                                   "6 x 16 f32 \\(bf16 gamma\\) +191 of 192 +"
                                   "bit-identical, max 64 ulp  MISMATCH "
                                   "\\(promise: <= 4 ulp\\); first at \\[0, 0, 0, 0\\]"));
  EXPECT_THAT(LineOf(r.out, "residual stream, "),
              AllOf(HasSubstr("max 1 ulp  MISMATCH"), HasSubstr("first at stream/h.2[0, 3]")));
  // The untouched norms still pass.
  EXPECT_THAT(LineOf(r.out, "model.layers.1.input_layernorm.weight:"),
              ContainsRegex(" 384 of 384 +bit-identical, max 0 ulp$"));
  EXPECT_EQ(Count(r.out, "MISMATCH"), 3);
  EXPECT_THAT(r.out, ContainsRegex("\nFAIL: 3 of [0-9]+ outside glmnorm's promise"));
}

TEST(Check, GoldensOfAnotherModelAreRejected) {
  // tiny_glm45's activations include q_norm ones; tiny_air has no QK-norm.
  ExpectOneLineError(
      Glmnorm("check " + Q(kData + "/tiny_air") + " --goldens " + Q(kGlm + "/goldens.safetensors")),
      "names no norm of the checkpoint");
}

// A small fake checkpoint (hidden 8, head_dim 4) and a goldens file for it.
struct Fake {
  test::TempDir dir;
  Tensors goldens;
  Fake() { test::FakeCheckpoint().Write(dir.path()); }
  static Tensors::Owned Bf16Rows(int64_t rows, int64_t width) {
    std::vector<float> v;
    for (int64_t i = 0; i < rows * width; ++i) v.push_back(0.5f + static_cast<float>(i % 7));
    return {"BF16", {rows, width}, test::BytesOf(test::Bf16(v))};
  }
  CliRun Check() {
    goldens.Write(dir / "goldens.safetensors");
    return Glmnorm("check " + Q(dir.path()));
  }
};

TEST(Check, UnreadableInputsExitTwoWithOneLine) {
  ExpectOneLineError(Glmnorm("check /nonexistent/ckpt"),
                     "/nonexistent/ckpt/config.json: cannot open");
  ExpectOneLineError(Glmnorm("check " + Q(kGlm) + " --goldens /nonexistent/g.safetensors"),
                     "/nonexistent/g.safetensors: cannot open");
  Fake fake;  // no goldens.safetensors beside it
  ExpectOneLineError(Glmnorm("check " + Q(fake.dir.path())), "goldens.safetensors: cannot open");
  test::WriteFile(fake.dir / "goldens.safetensors", std::string("not safetensors"));
  ExpectOneLineError(Glmnorm("check " + Q(fake.dir.path())), "goldens.safetensors");
  ExpectOneLineError(Glmnorm("check"), "dir is required");
}

TEST(Check, GoldensThatCannotBeComparedExitTwo) {
  {
    Fake f;  // nothing recorded
    f.goldens.t["other"] = Fake::Bf16Rows(2, 8);
    ExpectOneLineError(f.Check(), "no recorded activations");
  }
  {
    Fake f;
    f.goldens.t["x/model.norm.weight"] = Fake::Bf16Rows(2, 4);
    f.goldens.t["y/model.norm.weight"] = Fake::Bf16Rows(2, 4);
    ExpectOneLineError(f.Check(),
                       "x/model.norm.weight has shape [2, 4] but model.norm.weight normalises "
                       "rows of width 8");
  }
  {
    Fake f;
    f.goldens.t["x/model.norm.weight"] = Fake::Bf16Rows(2, 8);
    ExpectOneLineError(f.Check(), "y/model.norm.weight missing");
  }
  {
    Fake f;
    f.goldens.t["x/model.norm.weight"] = Fake::Bf16Rows(2, 8);
    f.goldens.t["y/model.norm.weight"] = Fake::Bf16Rows(3, 8);
    ExpectOneLineError(f.Check(), "y/model.norm.weight is BF16 [3, 8]; expected BF16 [2, 8]");
  }
  {
    Fake f;
    f.goldens.t["y/model.norm.weight"] = Fake::Bf16Rows(2, 8);
    ExpectOneLineError(f.Check(), "y/model.norm.weight has no activation x/model.norm.weight");
  }
  {
    Fake f;
    f.goldens.t["x/model.layers.7.input_layernorm.weight"] = Fake::Bf16Rows(2, 8);
    ExpectOneLineError(f.Check(), "x/model.layers.7.input_layernorm.weight names no norm");
  }
  {
    Fake f;
    f.goldens.t["stream/h0"] = Fake::Bf16Rows(2, 8);
    f.goldens.t["stream/attn_in.0"] = Fake::Bf16Rows(2, 8);
    ExpectOneLineError(f.Check(), "stream/attn_out.0 missing");
  }
  {
    Fake f;
    f.goldens.t["stream/h0"] = Fake::Bf16Rows(2, 8);
    f.goldens.t["stream/attn_in.0"] = Fake::Bf16Rows(3, 8);
    ExpectOneLineError(f.Check(), "stream/attn_in.0 is BF16 [3, 8]; expected BF16 [2, 8]");
  }
}

TEST(Check, NormsWithoutRecordedActivationsAreCounted) {
  // One recorded norm, no stream. (Its "recorded" output is glmnorm's own:
  // this tests the command, not the arithmetic.)
  Fake f;
  const Tensors::Owned x = Fake::Bf16Rows(2, 8);
  Tensors::Owned y = x;
  const CheckpointNorms ck = CheckpointNorms::Open(f.dir.path());
  RmsNorm(Rows<const void*>(x.bytes.data(), DType::kBF16, 2, 8, 8), ck.Gamma("model.norm.weight"),
          Rows<void*>(y.bytes.data(), DType::kBF16, 2, 8, 8), ck.Options());
  f.goldens.t["x/model.norm.weight"] = x;
  f.goldens.t["y/model.norm.weight"] = y;
  const CliRun r = f.Check();
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.err, IsEmpty());
  EXPECT_THAT(r.out, HasSubstr("model.norm.weight: 2 x 8 bf16  16 of 16 bit-identical, max 0 ulp"));
  EXPECT_THAT(r.out, Not(HasSubstr("residual stream")));
  EXPECT_THAT(r.out, ContainsRegex("\n1 comparison\\(s\\), 16 of 16 elements bit-identical to "
                                   "Transformers; [0-9]+ norm\\(s\\) have no recorded "
                                   "activations\n"));
  EXPECT_THAT(r.out, HasSubstr("PASS"));
}

TEST(BenchQuick, RunsTheDemoCases) {
  // Most of the time goes into filling ~400 MB of inputs with random values.
  const CliRun r = Glmnorm("bench --quick --threads 1 --min-time 0.001 --json");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, IsEmpty());
  std::vector<std::string> cases;
  for (size_t at = 0; at < r.out.size();) {
    const size_t end = std::min(r.out.find('\n', at), r.out.size());
    const nlohmann::json j = nlohmann::json::parse(r.out.substr(at, end - at));
    cases.push_back(j.at("kernel").get<std::string>() + " " + j.at("shape").get<std::string>() +
                    " " + j.at("dtype").get<std::string>());
    EXPECT_GT(j.at("copy_fraction").get<double>(), 0.0);
    // The same-streams baseline is never slower than the copy (it takes the
    // faster): its fraction is at most the copy's.
    EXPECT_GT(j.at("streams_fraction").get<double>(), 0.0);
    EXPECT_LE(j.at("streams_fraction").get<double>(), j.at("copy_fraction").get<double>() + 1e-9);
    // Every case is checked against the float64 reference (-1: unchecked).
    EXPECT_GE(j.at("max_ulp").get<int64_t>(), 0) << j.dump();
    EXPECT_LE(j.at("max_ulp").get<int64_t>(), 1) << j.dump();
    at = end + 1;
  }
  EXPECT_THAT(cases,
              ::testing::ElementsAre("rms_norm 1x5120 bf16", "rms_norm 4096x5120 bf16",
                                     "add_rms_norm 4096x5120 bf16", "qk_norm 4096x104x128 bf16"));
}

// The decoder kernels' rows carry their error against the float64 reference:
// ulps of the output (qk_norm), ulps of the rotated pair's magnitude
// (qk_norm_rope: a*cos - b*sin may cancel), codes (quantised outputs).
TEST(BenchDecoder, EveryRowIsChecked) {
  for (const char* kernel : {"qk_norm", "qk_norm_rope", "rms_norm_quant", "add_rms_norm_quant",
                             "add_rms_norm"}) {
    const CliRun r = Glmnorm(std::string("bench --tokens 3 --threads 1 --min-time 0.001 --json "
                                         "--dtype bf16 f32 --kernel ") + kernel);
    ASSERT_EQ(r.status, 0) << r.err;
    int rows = 0;
    for (size_t at = 0; at < r.out.size();) {
      const size_t end = std::min(r.out.find('\n', at), r.out.size());
      const nlohmann::json j = nlohmann::json::parse(r.out.substr(at, end - at));
      const bool f32 = j.at("dtype") == "f32";
      const int64_t limit = std::string(kernel) == "qk_norm_rope" ? 8 : f32 ? 4 : 1;
      EXPECT_GE(j.at("max_ulp").get<int64_t>(), 0) << j.dump();
      EXPECT_LE(j.at("max_ulp").get<int64_t>(), limit) << j.dump();
      ++rows;
      at = end + 1;
    }
    EXPECT_EQ(rows, 2) << kernel << ": " << r.out;
  }
}

TEST(BenchQuick, ExcludesTheOptionsItFixes) {
  ExpectOneLineError(Glmnorm("bench --quick --tokens 16"), "--tokens excludes --quick");
  ExpectOneLineError(Glmnorm("bench --quick --kernel qk_norm"), "--kernel excludes --quick");
}

}  // namespace
}  // namespace glmnorm
