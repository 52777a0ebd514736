// glmnorm apply DIR --norm NAME --input FILE --output FILE [--rounding ...]:
// one norm of a checkpoint applied to an array from a file.
//
// The output is written to a temporary file and renamed into place; when the
// command fails, an output file left from an earlier run is removed too, so
// the path never holds a partial or stale result.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "checkpoint/array_file.h"
#include "checkpoint/atomic_file.h"
#include "commands.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"
#include "glmnorm/rms_norm.h"

namespace glmnorm::tools {
namespace {

struct ApplyArgs {
  std::string dir;
  std::string norm;
  std::string input;
  std::string output;
  std::string rounding = "cast-then-scale";
};

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

void Apply(const ApplyArgs& args) {
  checkpoint::FormatOf(args.output);  // refuse a bad extension before any work
  const Rounding rounding =
      args.rounding == "single" ? Rounding::kSingle : Rounding::kCastThenScale;

  const CheckpointNorms ck = CheckpointNorms::Open(args.dir);
  if (!ck.sound()) {
    std::fprintf(stderr, "glmnorm: warning: %s has %zu problem(s); see `glmnorm inspect %s`\n",
                 args.dir.c_str(), ck.problems().size(), args.dir.c_str());
  }
  const ConstTensorView gamma = ck.Gamma(args.norm);
  const NormOptions options = ck.Options(rounding);

  checkpoint::HostArray x = checkpoint::ReadArray(args.input, "x");
  if (x.shape.empty()) {
    throw Error(args.input + ": x is a scalar; expected rows of width " +
                std::to_string(gamma.width()));
  }
  if (x.shape.back() != gamma.width()) {
    throw Error(args.input + ": x has shape " + ShapeString(x.shape) + " but " + args.norm +
                " normalises rows of width " + std::to_string(gamma.width()));
  }
  // The norm works on rows: any leading dims flatten into them.
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < x.shape.size(); ++i) rows *= x.shape[i];
  const int64_t width = x.shape.back();

  checkpoint::HostArray y;
  y.dtype = Promote(gamma.dtype, x.dtype);  // PyTorch's result dtype (docs/SPEC.md §2)
  y.shape = x.shape;
  y.data.resize(static_cast<size_t>(rows * width) * SizeOf(y.dtype));
  if (rows > 0) {
    RmsNorm(Rows<const void*>(x.data.data(), x.dtype, rows, width, width), gamma,
            Rows<void*>(y.data.data(), y.dtype, rows, width, width), options);
  }

  const std::map<std::string, std::string> metadata = {
      {"norm", args.norm},
      {"eps", std::to_string(options.eps)},
      {"rounding", args.rounding},
      {"checkpoint", args.dir},
  };
  const std::vector<std::byte> bytes = checkpoint::EncodeArray(args.output, "y", y, metadata);
  checkpoint::WriteFileAtomically(args.output, bytes);
  std::printf("wrote %s: y %s %s\n", args.output.c_str(), ShapeString(y.shape).c_str(),
              std::string(Name(y.dtype)).c_str());
}

int RunApply(const ApplyArgs& args) {
  // Writing over the input would lose it, and the stale-output cleanup below
  // would delete it on failure.
  if (SameFile(args.input, args.output)) {
    throw Error(args.output + ": is the input file; choose another --output");
  }
  try {
    Apply(args);
  } catch (const std::exception& e) {
    std::string what = e.what();
    // unlink, not remove: never a directory.
    if (unlink(args.output.c_str()) == 0) {
      what += " (removed the earlier " + args.output + " so no stale result remains)";
    }
    throw Error(what);
  }
  return 0;
}

}  // namespace

void RegisterApply(CLI::App& app, CommandRunner& runner) {
  auto args = std::make_shared<ApplyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "apply", "Apply one norm of a checkpoint to an array (.npy or .safetensors: x in, y out)");
  cmd->add_option("dir", args->dir, "checkpoint directory")->required();
  cmd->add_option("--norm", args->norm,
                  "norm tensor name, e.g. model.layers.0.input_layernorm.weight")
      ->required();
  cmd->add_option("--input", args->input,
                  "input: .npy ('<f4', '<f2', or '<u2' = raw bf16 bits) or .safetensors tensor x")
      ->required();
  cmd->add_option("--output", args->output, "output: .npy or .safetensors (tensor y)")->required();
  cmd->add_option("--rounding", args->rounding,
                  "cast-then-scale (Transformers, default) or single (one rounding)")
      ->check(CLI::IsMember({"cast-then-scale", "single"}));
  cmd->callback([args, &runner] { runner = [args] { return RunApply(*args); }; });
}

}  // namespace glmnorm::tools
