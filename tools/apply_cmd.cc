// glmnorm apply DIR --norm NAME --input FILE --output FILE [--rounding ...]:
// one norm of a checkpoint applied to an array from a file.
//
// The command never deletes, truncates or replaces anything but the output it
// has just completed. The output is written to a temporary file and renamed
// into place only on success; a failure or an interrupt leaves every file as
// it was. An existing --output is replaced only if it is a regular file of
// the kind apply writes (an .npy array it can read, or a .safetensors file
// holding one tensor "y"); anything else is refused before any work, so a
// mistyped --output cannot destroy an input, a shard or a config.json.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "array_file.h"
#include "atomic_file.h"
#include "io/mapped_file.h"
#include "npy.h"
#include "commands.h"
#include "core/format_number.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"
#include "glmnorm/rms_norm.h"
#include "glmnorm/safetensors.h"
#include "printable.h"

namespace glmnorm::tools {
namespace {

// Test hook: with GLMNORM_TEST_PAUSE_BEFORE_RENAME=FILE in the environment,
// apply writes the path of its complete temporary file to FILE and waits for
// a signal just before renaming it into place, so a test can interrupt it at
// the one moment a temporary file exists. Only tests set it.
constexpr char kPauseHook[] = "GLMNORM_TEST_PAUSE_BEFORE_RENAME";

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

std::string Reason() { return std::strerror(errno); }

// What was at --output when the command started: nothing, or this inode.
struct OutputState {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
};

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Why the regular file `path` is not an output apply could have written, or
// nullopt when it is one.
std::optional<std::string> NotOurOutput(const std::string& path) {
  try {
    if (checkpoint::FormatOf(path) == checkpoint::ArrayFormat::kNpy) {
      const checkpoint::MappedFile file = checkpoint::MappedFile::Open(path);
      checkpoint::ParseNpy(file.bytes(), path);
      return std::nullopt;
    }
    const SafetensorsFile file = SafetensorsFile::Open(path);
    if (file.tensors().size() != 1 || file.tensors()[0].name != "y") {
      return "it holds " + std::to_string(file.tensors().size()) +
             " tensor(s), apply writes one named \"y\"";
    }
    const std::optional<DType> dtype = DTypeFromSafetensors(file.tensors()[0].dtype);
    if (!dtype || !IsFloatActivation(*dtype)) {
      return "its tensor \"y\" is " + file.tensors()[0].dtype + ", apply writes BF16, F16 or F32";
    }
    return std::nullopt;
  } catch (const std::exception& e) {
    // The reader's message starts with the path, which the caller names.
    std::string why = e.what();
    if (why.starts_with(path + ": ")) why.erase(0, path.size() + 2);
    return why;
  }
}

// Every check of --output that needs no work, before any work: the command
// refuses a path it must not write rather than find out after computing.
OutputState CheckOutput(const ApplyArgs& args) {
  checkpoint::FormatOf(args.output);  // the extension
  struct stat in {
  }, out{};
  // stat follows links: a symlink or hard link to the input is the input.
  if (stat(args.input.c_str(), &in) == 0 && stat(args.output.c_str(), &out) == 0 &&
      in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
    throw Error(args.output + ": is the input file; choose another --output");
  }
  const std::string dir = DirOf(args.output);
  struct stat d {};
  if (stat(dir.c_str(), &d) != 0) {
    throw Error(args.output + ": cannot write into " + dir + ": " + Reason());
  }
  if (!S_ISDIR(d.st_mode)) {
    throw Error(args.output + ": " + dir + " is " +
                std::string(checkpoint::FileTypeName(d.st_mode)) + ", expected a directory");
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    throw Error(args.output + ": cannot write into " + dir + ": " + Reason());
  }
  OutputState state;
  if (lstat(args.output.c_str(), &out) != 0) {
    if (errno == ENOENT) return state;
    throw Error(args.output + ": cannot use as --output: " + Reason());  // e.g. name too long
  }
  const std::string hint = "; remove it or choose another --output";
  if (!S_ISREG(out.st_mode)) {
    throw Error(args.output + ": exists and is " +
                std::string(checkpoint::FileTypeName(out.st_mode)) +
                "; apply replaces only a regular file it could have written" + hint);
  }
  if (const std::optional<std::string> why = NotOurOutput(args.output)) {
    throw Error(args.output + ": exists and is not an output apply could have written (" + *why +
                ")" + hint);
  }
  state.exists = true;
  state.dev = out.st_dev;
  state.ino = out.st_ino;
  return state;
}

// Just before the rename: --output must still be what CheckOutput approved.
void CheckOutputUnchanged(const std::string& output, const OutputState& before) {
  struct stat st {};
  const bool exists = lstat(output.c_str(), &st) == 0;
  if (exists != before.exists || (exists && (st.st_dev != before.dev || st.st_ino != before.ino))) {
    throw Error(output + ": changed while apply ran; not replacing it");
  }
}

// The test hook above: never returns; the signal that ends the wait ends
// the process.
void PauseForTest(const char* report_path, const std::string& temp_path) {
  const int fd = open(report_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    const std::string line = temp_path + "\n";
    (void)!write(fd, line.data(), line.size());
    close(fd);
  }
  for (;;) pause();
}

int RunApply(const ApplyArgs& args) {
  const OutputState output_state = CheckOutput(args);
  const Rounding rounding =
      args.rounding == "single" ? Rounding::kSingle : Rounding::kCastThenScale;

  const CheckpointNorms ck = CheckpointNorms::Open(args.dir);
  ConstTensorView gamma = ck.Gamma(args.norm);
  // llama.cpp stores every norm as F32; converting GLM-4.5 (BF16) widens
  // them exactly. Such a gamma is applied as the BF16 it was, so the output
  // (dtype promotion included) has the bits the safetensors checkpoint
  // gives (docs/CHECKPOINTS.md, "GGUF").
  std::vector<uint16_t> narrowed;
  if (ck.format() == "gguf" && gamma.dtype == DType::kF32) {
    const auto* f = static_cast<const float*>(gamma.data);
    bool exact = true;
    for (int64_t i = 0; i < gamma.width() && exact; ++i) exact = (BitsOf(f[i]) & 0xFFFFu) == 0;
    if (exact) {
      narrowed.resize(static_cast<size_t>(gamma.width()));
      for (int64_t i = 0; i < gamma.width(); ++i) narrowed[i] = BF16FromF32(f[i]);
      gamma.data = narrowed.data();
      gamma.dtype = DType::kBF16;
    }
  }
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
  // The norm works on rows: any leading dims flatten into them. The readers
  // bound the size by the file's, but only for the product of all dims.
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < x.shape.size(); ++i) {
    if (__builtin_mul_overflow(rows, x.shape[i], &rows)) {
      throw Error(args.input + ": x has shape " + ShapeString(x.shape) +
                  ", more rows than fit in 64 bits");
    }
  }
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
      {"eps", ShortestString(options.eps)},  // reads back as the same float
      {"rounding", args.rounding},
      {"checkpoint", args.dir},
  };
  const std::vector<std::byte> bytes = checkpoint::EncodeArray(args.output, "y", y, metadata);
  const char* pause_report = std::getenv(kPauseHook);
  checkpoint::WriteFileAtomically(args.output, bytes, [&](const std::string& temp_path) {
    CheckOutputUnchanged(args.output, output_state);
    if (pause_report != nullptr && *pause_report != '\0') PauseForTest(pause_report, temp_path);
  });
  std::printf("wrote %s: y %s %s\n", Printable(args.output).c_str(), ShapeString(y.shape).c_str(),
              std::string(Name(y.dtype)).c_str());
  std::fflush(stdout);
  // Only now: a failing command prints its one error line and nothing else.
  if (!ck.sound()) {
    std::fprintf(stderr, "glmnorm: warning: %s has %zu problem(s); see `glmnorm inspect %s`\n",
                 Printable(args.dir).c_str(), ck.problems().size(), Printable(args.dir).c_str());
  }
  return 0;
}

}  // namespace

void RegisterApply(CLI::App& app, CommandRunner& runner) {
  auto args = std::make_shared<ApplyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "apply", "Apply one norm of a checkpoint to an array (.npy or .safetensors: x in, y out)");
  cmd->add_option("dir", args->dir, "checkpoint directory, or GGUF file (first file of a split set)")
      ->required();
  cmd->add_option("--norm", args->norm,
                  "norm tensor name, e.g. model.layers.0.input_layernorm.weight (for any "
                  "checkpoint also llama.cpp's name, e.g. blk.0.attn_norm.weight)")
      ->required();
  cmd->add_option("--input", args->input,
                  "input: .npy ('<f4', '<f2', or '<u2' = raw bf16 bits) or .safetensors tensor x")
      ->required();
  cmd->add_option("--output", args->output,
                  "output: .npy or .safetensors (tensor y); an existing file is replaced, on "
                  "success only, if apply could have written it")
      ->required();
  cmd->add_option("--rounding", args->rounding,
                  "cast-then-scale (Transformers, default) or single (one rounding)")
      ->check(CLI::IsMember({"cast-then-scale", "single"}));
  cmd->callback([args, &runner] { runner = [args] { return RunApply(*args); }; });
}

}  // namespace glmnorm::tools
