// The glmnorm CLI and the user's files: a command never deletes, truncates or
// replaces anything but the output it has just completed; a failure, an
// interrupt or a refused argument leaves the file system as it was. Also:
// non-regular files, names at the OS limits, unprintable bytes in messages,
// numbers that round-trip, and one stderr line for every failure.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "array_file.h"
#include "cli_runner.h"
#include "fixtures.h"
#include "glmnorm/checkpoint.h"
#include "glmnorm/error.h"
#include "glmnorm/safetensors.h"
#include "printable.h"

namespace glmnorm {
namespace {

using test::CliResult;
using test::RunCli;
using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr char kNorm[] = "model.norm.weight";                        // width 8
constexpr char kQNorm[] = "model.layers.0.self_attn.q_norm.weight";  // width 4
constexpr char kShard1[] = "model-00001-of-00003.safetensors";       // holds norms
constexpr char kShard3[] = "model-00003-of-00003.safetensors";       // lm_head only

// Everything under `dir`, hidden files included: relative path -> kind and,
// for a regular file, its bytes. Never opens anything but regular files.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(e.path(), dir).string();
    const fs::file_status st = e.symlink_status();
    if (st.type() == fs::file_type::regular) {
      out[rel] = "file " + test::ReadFile(e.path().string());
    } else if (st.type() == fs::file_type::symlink) {
      out[rel] = "link " + fs::read_symlink(e.path()).string();
    } else {
      out[rel] = "type " + std::to_string(static_cast<int>(st.type()));
    }
  }
  return out;
}

bool HasControlBytes(std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) return true;
  }
  return false;
}

// A failure as the README promises it: exit 2, nothing on stdout, exactly
// one printable line on stderr that holds `what`.
void ExpectFailure(const CliResult& r, const std::string& what) {
  EXPECT_FALSE(r.timed_out) << "the command hung";
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_THAT(r.out, IsEmpty());
  EXPECT_EQ(r.ErrLines(), 1) << r.err;
  EXPECT_THAT(r.err, AllOf(StartsWith("glmnorm: "), EndsWith("\n"), HasSubstr(what)));
  EXPECT_FALSE(HasControlBytes(std::string_view(r.err).substr(0, r.err.size() - 1))) << r.err;
}

checkpoint::HostArray F32Array(int64_t rows, int64_t width, float base) {
  checkpoint::HostArray a;
  a.dtype = DType::kF32;
  a.shape = {rows, width};
  std::vector<float> v;
  for (int64_t i = 0; i < rows * width; ++i) v.push_back(base + 0.25f * static_cast<float>(i));
  a.data = test::BytesOf(v);
  return a;
}

void WriteArray(const std::string& path, const std::string& name, const checkpoint::HostArray& a) {
  test::WriteFile(path, checkpoint::EncodeArray(path, name, a));
}

// An .npy file with the given header dict and `data_bytes` zero bytes.
std::string NpyWithHeader(std::string dict, size_t data_bytes) {
  dict.append((64 - (10 + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\0';
  out += static_cast<char>(dict.size() & 0xFF);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + std::string(data_bytes, '\0');
}

// For a command that must fail at once: a hang fails the test in 20 s.
test::CliOptions Quick() {
  test::CliOptions options;
  options.timeout_s = 20;
  return options;
}

void MakeDir(const std::string& path, mode_t mode = 0700) {
  ASSERT_EQ(mkdir(path.c_str(), mode), 0) << path << ": " << std::strerror(errno);
}

// A small checkpoint (test::FakeCheckpoint: hidden 8, head_dim 4) in ck_, and
// an f32 input x_ of 2 rows of 8 in work_.
class ApplyFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    ck_ = root_ / "ck";
    work_ = root_ / "work";
    MakeDir(ck_);
    MakeDir(work_);
    test::FakeCheckpoint().Write(ck_);
    x_ = work_ + "/x.npy";
    WriteArray(x_, "x", F32Array(2, 8, 0.5f));
  }
  std::vector<std::string> Apply(const std::string& in, const std::string& out,
                                 const std::string& norm = kNorm) const {
    return {"apply", ck_, "--norm", norm, "--input", in, "--output", out};
  }
  std::string W(const std::string& name) const { return work_ + "/" + name; }

  test::TempDir root_;
  std::string ck_;
  std::string work_;
  std::string x_;
};

// --- what apply may replace ------------------------------------------------

TEST_F(ApplyFiles, BadExtensionOnAnExistingFileKeepsIt) {
  test::WriteFile(W("notes.txt"), std::string("my notes\n"));
  const auto before = Snapshot(root_.path());
  ExpectFailure(RunCli(Apply(x_, W("notes.txt"))),
                W("notes.txt") + ": unknown file type; expected a .npy or .safetensors file");
  EXPECT_EQ(Snapshot(root_.path()), before);
  EXPECT_EQ(test::ReadFile(W("notes.txt")), "my notes\n");
}

TEST_F(ApplyFiles, CheckpointFilesAreNeverOutputs) {
  const auto before = Snapshot(root_.path());
  const std::string config = ck_ + "/config.json";
  ExpectFailure(RunCli(Apply(x_, config)), config + ": unknown file type");
  const std::string index = ck_ + "/model.safetensors.index.json";
  ExpectFailure(RunCli(Apply(x_, index)), index + ": unknown file type");
  for (const char* shard : {kShard1, kShard3}) {
    const std::string path = ck_ + "/" + shard;
    ExpectFailure(RunCli(Apply(x_, path)),
                  path + ": exists and is not an output apply could have written (it holds ");
  }
  EXPECT_EQ(Snapshot(root_.path()), before);
  EXPECT_TRUE(CheckpointNorms::Open(ck_).sound());
}

TEST_F(ApplyFiles, TheInputIsNeverTheOutput) {
  ASSERT_EQ(link(x_.c_str(), W("hard.npy").c_str()), 0);
  ASSERT_EQ(symlink(x_.c_str(), W("soft.npy").c_str()), 0);
  const auto before = Snapshot(root_.path());
  for (const std::string& out : {x_, W("hard.npy"), W("soft.npy")}) {
    ExpectFailure(RunCli(Apply(x_, out)), out + ": is the input file; choose another --output");
  }
  ExpectFailure(RunCli(Apply(W("soft.npy"), x_)), x_ + ": is the input file");
  EXPECT_EQ(Snapshot(root_.path()), before);
}

TEST_F(ApplyFiles, AnExistingOutputIsReplacedOnlyIfApplyCouldHaveWrittenIt) {
  // Earlier outputs of apply (here made with other values) are replaced: the
  // usual rerun of a command.
  ASSERT_EQ(RunCli(Apply(x_, W("fresh.npy"))).status, 0);
  const std::string fresh = test::ReadFile(W("fresh.npy"));
  for (const char* name : {"y.npy", "y.safetensors"}) {
    WriteArray(W(name), "y", F32Array(3, 8, 9.0f));
    const CliResult r = RunCli(Apply(x_, W(name)));
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "wrote " + W(name) + ": y [2, 8] f32\n");
    const checkpoint::HostArray y = checkpoint::ReadArray(W(name), "y");
    EXPECT_EQ(y.shape, (std::vector<int64_t>{2, 8})) << name;
  }
  EXPECT_EQ(test::ReadFile(W("y.npy")), fresh);

  // Anything else is refused before any work, and kept.
  test::WriteFile(W("tokens.npy"),
                  NpyWithHeader("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", 24));
  test::WriteFile(W("empty.npy"), std::string());
  WriteArray(W("input.safetensors"), "x", F32Array(2, 8, 1.0f));
  const std::vector<std::byte> int_bytes(8);  // the entry only points at them
  const SafetensorsEntry ints{"y", "I32", {2}, int_bytes};
  test::WriteFile(W("ints.safetensors"), EncodeSafetensors(std::span(&ints, 1), {}));
  ASSERT_EQ(symlink(W("fresh.npy").c_str(), W("link.npy").c_str()), 0);
  MakeDir(W("dir.npy"));
  ASSERT_EQ(mkfifo(W("fifo.npy").c_str(), 0600), 0);
  const auto before = Snapshot(root_.path());
  const std::string not_ours = ": exists and is not an output apply could have written (";
  const std::string hint = "; remove it or choose another --output";
  ExpectFailure(RunCli(Apply(x_, W("tokens.npy"))),
                W("tokens.npy") + not_ours + ".npy dtype '<i8' is not supported");
  ExpectFailure(RunCli(Apply(x_, W("empty.npy"))), W("empty.npy") + not_ours + "not a .npy file");
  ExpectFailure(RunCli(Apply(x_, W("input.safetensors"))),
                W("input.safetensors") + not_ours +
                    "it holds 1 tensor(s), apply writes one named \"y\")" + hint);
  ExpectFailure(RunCli(Apply(x_, W("ints.safetensors"))),
                W("ints.safetensors") + not_ours + "its tensor \"y\" is I32");
  ExpectFailure(RunCli(Apply(x_, W("link.npy"))),
                W("link.npy") +
                    ": exists and is a symbolic link; apply replaces only a regular "
                    "file it could have written" +
                    hint);
  ExpectFailure(RunCli(Apply(x_, W("dir.npy"))), W("dir.npy") + ": exists and is a directory");
  ExpectFailure(RunCli(Apply(x_, W("fifo.npy")), Quick()),
                W("fifo.npy") + ": exists and is a FIFO");
  EXPECT_EQ(Snapshot(root_.path()), before);
}

TEST_F(ApplyFiles, AFailingCommandKeepsEveryFile) {
  ASSERT_EQ(RunCli(Apply(x_, W("y.npy"))).status, 0);     // an earlier result
  WriteArray(W("other.npy"), "x", F32Array(2, 4, 3.0f));  // another input array
  const auto before = Snapshot(root_.path());
  // Failures after the arguments were accepted: the shape, the norm, the input.
  for (const char* out : {"y.npy", "other.npy"}) {
    ExpectFailure(
        RunCli(Apply(x_, W(out), kQNorm)),
        "x.npy: x has shape [2, 8] but " + std::string(kQNorm) + " normalises rows of width 4");
    ExpectFailure(RunCli(Apply(x_, W(out), "model.norm")), "is not a norm of this glm4_moe model");
    ExpectFailure(RunCli(Apply(W("missing.npy"), W(out))), "missing.npy: cannot open");
  }
  EXPECT_EQ(Snapshot(root_.path()), before);
}

TEST_F(ApplyFiles, OutputDirectoryMissingOrNotWritable) {
  const auto before = Snapshot(root_.path());
  ExpectFailure(
      RunCli(Apply(x_, W("no/such/y.npy"))),
      W("no/such/y.npy") + ": cannot write into " + W("no/such") + ": No such file or directory");
  ExpectFailure(RunCli(Apply(x_, x_ + "/y.npy")),
                x_ + "/y.npy: " + x_ + " is a regular file, expected a directory");
  EXPECT_EQ(Snapshot(root_.path()), before);

  MakeDir(W("ro"), 0555);
  const auto before_ro = Snapshot(root_.path());
  test::CliOptions as_user;
  as_user.without_dac_override = true;
  const CliResult r = RunCli(Apply(x_, W("ro/y.npy")), as_user);
  chmod(W("ro").c_str(), 0700);
  if (r.dac_not_dropped) GTEST_SKIP() << "root cannot give up CAP_DAC_OVERRIDE here";
  ExpectFailure(r, W("ro/y.npy") + ": cannot write into " + W("ro") + ": Permission denied");
  EXPECT_EQ(Snapshot(root_.path()), before_ro);
}

// The one moment a temporary file exists is made to last (the test hook of
// tools/apply_cmd.cc) and the command is interrupted there.
TEST_F(ApplyFiles, SignalDuringTheWriteLeavesNoTemporaryFile) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    ASSERT_EQ(RunCli(Apply(x_, W("y.npy"))).status, 0);  // an earlier result, to be kept
    const auto before = Snapshot(root_.path());
    test::TempDir side;  // outside the snapshot
    const std::string report = side / "temp_path";
    std::string temp_path;
    bool temp_existed = false;
    test::CliOptions options;
    options.env = {"GLMNORM_TEST_PAUSE_BEFORE_RENAME=" + report};
    options.while_running = [&](pid_t pid) {
      for (int i = 0; i < 6000 && temp_path.empty(); ++i) {  // 30 s at most
        const std::string text = test::ReadFile(report);
        if (!text.empty() && text.back() == '\n') {
          temp_path = text.substr(0, text.size() - 1);
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
      temp_existed = !temp_path.empty() && test::Exists(temp_path);
      kill(pid, sig);
    };
    const CliResult r = RunCli(Apply(x_, W("y.npy")), options);
    EXPECT_TRUE(temp_existed) << "no complete temporary file was reported: " << r.err;
    EXPECT_THAT(temp_path, StartsWith(work_ + "/.glmnorm-tmp-"));
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.signal, sig) << "status " << r.status << ": " << r.err;
    EXPECT_THAT(r.err, IsEmpty());
    EXPECT_FALSE(test::Exists(temp_path));
    EXPECT_EQ(Snapshot(root_.path()), before);
  }
}

// --- names, non-regular files, bytes in messages ---------------------------

TEST_F(ApplyFiles, NamesAtTheLengthLimit) {
  // 255 bytes, the limit of a name: the temporary name must not push it over.
  const std::string longest = std::string(251, 'y') + ".npy";
  CliResult r = RunCli(Apply(x_, W(longest)));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(checkpoint::ReadArray(W(longest), "y").shape, (std::vector<int64_t>{2, 8}));

  const std::string too_long = std::string(252, 'y') + ".npy";  // 256 bytes
  const auto before = Snapshot(root_.path());
  ExpectFailure(RunCli(Apply(x_, W(too_long))),
                W(too_long) + ": cannot use as --output: File name too long");
  ExpectFailure(RunCli(Apply(W(too_long), W("y.npy"))),
                W(too_long) + ": cannot open: File name too long");
  ExpectFailure(RunCli({"inspect", W(too_long)}), "File name too long");
  EXPECT_EQ(Snapshot(root_.path()), before);
}

TEST_F(ApplyFiles, NonRegularInputsFailAtOnce) {
  ASSERT_EQ(mkfifo(W("fifo.npy").c_str(), 0600), 0);
  ASSERT_EQ(mkfifo(W("fifo.safetensors").c_str(), 0600), 0);
  MakeDir(W("dir.npy"));
  ASSERT_EQ(symlink("/dev/zero", W("zero.npy").c_str()), 0);
  const auto before = Snapshot(root_.path());
  const test::CliOptions quick = Quick();
  ExpectFailure(RunCli(Apply(W("fifo.npy"), W("y.npy")), quick),
                W("fifo.npy") + ": is a FIFO, expected a regular file");
  ExpectFailure(RunCli(Apply(W("fifo.safetensors"), W("y.npy")), quick),
                W("fifo.safetensors") + ": is a FIFO, expected a regular file");
  ExpectFailure(RunCli(Apply(W("dir.npy"), W("y.npy")), quick),
                W("dir.npy") + ": is a directory, expected a regular file");
  ExpectFailure(RunCli(Apply(W("zero.npy"), W("y.npy")), quick),
                W("zero.npy") + ": is a character device, expected a regular file");
  EXPECT_EQ(Snapshot(root_.path()), before);
}

TEST_F(ApplyFiles, UnprintableBytesInNamesAreEscaped) {
  // A newline, an ANSI colour sequence, a byte that is not UTF-8, a C1
  // control (U+009B), and UTF-8 that is printable as it is.
  const std::string raw = "x\n\x1b[31m\xff\xc2\x9b-caf\xc3\xa9";
  const std::string shown = "x\\n\\x1b[31m\\xff\\xc2\\x9b-caf\xc3\xa9";
  ExpectFailure(RunCli(Apply(W(raw + ".npy"), W("y.npy"))),
                W(shown + ".npy") + ": cannot open: No such file or directory");
  test::WriteFile(W(raw + ".txt"), std::string("notes"));
  ExpectFailure(RunCli(Apply(x_, W(raw + ".txt"))), W(shown + ".txt") + ": unknown file type");
  EXPECT_EQ(test::ReadFile(W(raw + ".txt")), "notes");
  ExpectFailure(RunCli({"inspect", W(raw)}), W(shown) + "/config.json: cannot open");
  // An argument CLI11 rejects is escaped too.
  std::vector<std::string> args = Apply(x_, W("y.npy"));
  args.push_back("--bogus\x1b[2J");
  ExpectFailure(RunCli(args), "--bogus\\x1b[2J");
}

TEST(Printable, EscapesWhatATerminalWouldInterpret) {
  using tools::Printable;
  EXPECT_EQ(Printable("plain /a/b.npy"), "plain /a/b.npy");
  EXPECT_EQ(Printable(std::string("a\nb\rc\td\0e\x7f", 10)), "a\\nb\\rc\\td\\x00e\\x7f");
  EXPECT_EQ(Printable("\xe6\x97\xa5\xe6\x9c\xac caf\xc3\xa9 \xf0\x9f\x98\x80"),
            "\xe6\x97\xa5\xe6\x9c\xac caf\xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(Printable("\xc2\x85"), "\\xc2\\x85");                    // NEL, a C1 control
  EXPECT_EQ(Printable("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(Printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a UTF-16 surrogate
  EXPECT_EQ(Printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(Printable("\xe6\x97"), "\\xe6\\x97");                    // truncated
  EXPECT_EQ(Printable("\\x93NUMPY"), "\\x93NUMPY");                  // backslashes kept
}

// --- inspect and the checkpoint's own files --------------------------------

TEST(InspectFiles, NonRegularCheckpointFilesAreReportedNotWaitedOn) {
  struct Case {
    std::string file;  // replaced in a fresh checkpoint
    std::string kind;  // "fifo", "dir" or "zero"
    std::string what;
  };
  const std::vector<Case> cases = {
      {"config.json", "fifo", "config.json: is a FIFO, expected a regular file"},
      {"config.json", "dir", "config.json: is a directory, expected a regular file"},
      {"config.json", "zero", "config.json: is a character device, expected a regular file"},
      {"model.safetensors.index.json", "dir",
       "model.safetensors.index.json: is a directory, expected a regular file"},
      {"model.safetensors.index.json", "fifo",
       "model.safetensors.index.json: is a FIFO, expected a regular file"},
      {kShard1, "fifo", std::string(kShard1) + ": is a FIFO, expected a regular file"},
      {kShard1, "dir", std::string(kShard1) + ": is a directory, expected a regular file"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file + " as " + c.kind);
    test::TempDir dir;
    test::FakeCheckpoint().Write(dir.path());
    const std::string path = dir / c.file;
    ASSERT_EQ(unlink(path.c_str()), 0);
    if (c.kind == "fifo") {
      ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
    } else if (c.kind == "dir") {
      MakeDir(path);
    } else {
      ASSERT_EQ(symlink("/dev/zero", path.c_str()), 0);
    }
    ExpectFailure(RunCli({"inspect", dir.path()}, Quick()), c.what);
  }
  // A shard without norms is only looked at: reported as a problem.
  test::TempDir dir;
  test::FakeCheckpoint().Write(dir.path());
  const std::string shard3 = dir / kShard3;
  ASSERT_EQ(unlink(shard3.c_str()), 0);
  ASSERT_EQ(mkfifo(shard3.c_str(), 0600), 0);
  const CliResult r = RunCli({"inspect", dir.path()}, Quick());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.out, HasSubstr("names shard " + std::string(kShard3) +
                               " (1 tensors), which is a FIFO, expected a regular file"));
  EXPECT_THAT(r.err, IsEmpty());
}

TEST(InspectFiles, AReportThatCannotBeWrittenIsAFailure) {
  if (!test::Exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  test::TempDir dir;
  test::FakeCheckpoint().Write(dir.path());
  test::CliOptions to_full;
  to_full.stdout_path = "/dev/full";
  ExpectFailure(RunCli({"inspect", dir.path()}, to_full),
                "cannot write the report to standard output: No space left on device");
}

// Every command, not only inspect: a result that cannot be written is a
// failure (exit 2, one line), never a success with no output.
TEST(CliFiles, EveryCommandFailsWhenItsOutputCannotBeWritten) {
  if (!test::Exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::string tiny = std::string(GLMNORM_TEST_DATA) + "/tiny_glm45";
  test::CliOptions to_full;
  to_full.stdout_path = "/dev/full";
  ExpectFailure(RunCli({"check", tiny}, to_full), "cannot write to standard output");
  ExpectFailure(RunCli({"bench", "--kernel", "rms_norm", "--tokens", "1", "--threads", "1",
                        "--dtype", "f32", "--min-time", "0.001"},
                       to_full),
                "cannot write to standard output");
}

// --- numbers and messages --------------------------------------------------

TEST_F(ApplyFiles, EpsRoundTripsThroughTheOutputMetadata) {
  test::TempDir dir;
  test::FakeCheckpoint fake;
  fake.config["rms_norm_eps"] = 1e-9;  // std::to_string would write "0.000000"
  fake.Write(dir.path());
  const CliResult r =
      RunCli({"apply", dir.path(), "--norm", kNorm, "--input", x_, "--output", W("y.safetensors")});
  ASSERT_EQ(r.status, 0) << r.err;
  const SafetensorsFile y = SafetensorsFile::Open(W("y.safetensors"));
  const std::string eps = y.metadata().at("eps");
  EXPECT_EQ(eps, "1e-09");
  EXPECT_EQ(std::stof(eps), CheckpointNorms::Open(dir.path()).eps());
  EXPECT_THAT(RunCli({"inspect", dir.path()}).out, HasSubstr("eps          1e-09\n"));
}

TEST(Messages, NumbersInMessagesAreExact) {
  test::TempDir dir;
  test::FakeCheckpoint fake;
  fake.config["rms_norm_eps"] = 1.0000001;  // six significant digits would print "1"
  fake.Write(dir.path());
  const CheckpointNorms ck = CheckpointNorms::Open(dir.path());
  EXPECT_THAT(ck.problems(),
              testing::Contains(
                  "config.json: rms_norm_eps = 1.0000001 is not a small non-negative number"));
  EXPECT_THAT([&] { (void)ck.eps(); },
              testing::ThrowsMessage<Error>(HasSubstr("rms_norm_eps = 1.0000001 is invalid")));
}

TEST_F(ApplyFiles, UnsoundCheckpointWarnsOnlyWhenTheCommandSucceeds) {
  const std::string unsound = root_ / "unsound";
  MakeDir(unsound);
  test::FakeCheckpoint fake;
  fake.tensors.erase("model.layers.0.self_attn.k_norm.weight");
  fake.Write(unsound);
  auto apply = [&](const std::string& norm) {
    return RunCli({"apply", unsound, "--norm", norm, "--input", x_, "--output", W("y.npy")});
  };
  ExpectFailure(apply(kQNorm), "normalises rows of width 4");
  ExpectFailure(apply("model.layers.0.self_attn.k_norm.weight"),
                "cannot use model.layers.0.self_attn.k_norm.weight: missing norm");
  const CliResult ok = apply(kNorm);
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(ok.out, "wrote " + W("y.npy") + ": y [2, 8] f32\n");
  EXPECT_EQ(ok.err, "glmnorm: warning: " + unsound + " has 1 problem(s); see `glmnorm inspect " +
                        unsound + "`\n");
}

TEST_F(ApplyFiles, EveryFailureExitsTwoWithOneLine) {
  ASSERT_EQ(RunCli(Apply(x_, W("y.npy"))).status, 0);
  // (0, 2**62, 2**62) holds no element, but NumPy refuses it as too big.
  test::WriteFile(W("huge.npy"),
                  NpyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (0, "
                                "4611686018427387904, 4611686018427387904), }",
                                0));
  test::WriteFile(W("bad.npy"), std::string("not numpy"));
  const std::string bad_index = root_ / "bad_index";
  const std::string bad_config = root_ / "bad_config";
  MakeDir(bad_index);
  MakeDir(bad_config);
  test::FakeCheckpoint().Write(bad_index);
  test::WriteFile(bad_index + "/model.safetensors.index.json", std::string("{\"weight_map\": "));
  test::FakeCheckpoint().Write(bad_config);
  test::WriteFile(bad_config + "/config.json", std::string("[1, 2]"));
  const std::string y = W("y.npy");
  auto with = [](std::vector<std::string> args, std::vector<std::string> more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  struct Case {
    std::vector<std::string> args;
    std::string what;
  };
  const std::vector<Case> cases = {
      {{}, "subcommand is required"},
      {{"frobnicate"},
       "unknown command \"frobnicate\"; expected bench, inspect, apply, check or diff"},
      {{"apply", ck_}, "--norm"},
      {with(Apply(x_, y), {"--rounding", "fast"}), "--rounding"},
      {with(Apply(x_, y), {"--bogus"}), "--bogus"},
      {Apply(x_, W("y.bin")), "y.bin: unknown file type"},
      {Apply(x_, y, "model.norm"), "is not a norm of this glm4_moe model"},
      {Apply(x_, y, kQNorm), "normalises rows of width 4"},
      {Apply(W("missing.npy"), y), "missing.npy: cannot open: No such file or directory"},
      {Apply(W("huge.npy"), y),
       "huge.npy: .npy shape (0, 4611686018427387904, "
       "4611686018427387904) of '<f4' is too big"},
      {Apply(W("bad.npy"), y), "bad.npy: not a .npy file"},
      {{"apply", root_ / "nonexistent", "--norm", kNorm, "--input", x_, "--output", y},
       "nonexistent/config.json: cannot open: No such file or directory"},
      {{"apply", bad_index, "--norm", kNorm, "--input", x_, "--output", y},
       "model.safetensors.index.json: not valid JSON"},
      {{"inspect"}, "dir"},
      {{"inspect", ck_, "--bogus"}, "--bogus"},
      {{"inspect", root_ / "nonexistent"}, "config.json: cannot open: No such file or directory"},
      {{"inspect", "--json", bad_index}, "model.safetensors.index.json: not valid JSON"},
      {{"inspect", bad_config}, "config.json: not a JSON object"},
      {{"inspect", x_},
       "x.npy: is a regular file, expected a checkpoint directory (config.json, safetensors "
       "shards) or a .gguf file"},
      // bench: bad numbers and names are errors, not a crash or an empty table.
      {{"bench", "--tokens", "0"}, "bench: --tokens must be in [1, 16777216], got 0"},
      {{"bench", "--tokens", "1000000000000000"}, "--tokens must be in [1, 16777216]"},
      {{"bench", "--threads", "0"}, "bench: --threads must be >= 1, got 0"},
      {{"bench", "--min-time", "nan"}, "--min-time must be a finite number of seconds > 0"},
      {{"bench", "--kernel", "bogus"}, "--kernel must be one of rms_norm, add_rms_norm"},
      {{"bench", "--checkpoint", ck_, "--kernel", "qk_norm"},
       "--checkpoint times rms_norm with the checkpoint's gammas"},
  };
  const auto before = Snapshot(root_.path());
  for (const Case& c : cases) {
    std::string line;
    for (const std::string& a : c.args) line += a + " ";
    SCOPED_TRACE(line);
    ExpectFailure(RunCli(c.args), c.what);
  }
  EXPECT_EQ(Snapshot(root_.path()), before);
}

}  // namespace
}  // namespace glmnorm
