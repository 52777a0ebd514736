// Runs the glmnorm binary as a user would, with arguments passed as they are
// (no shell), so file names may hold any byte.
#ifndef GLMNORM_TESTS_CHECKPOINT_CLI_RUNNER_H_
#define GLMNORM_TESTS_CHECKPOINT_CLI_RUNNER_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace glmnorm::test {

struct CliResult {
  int status = -1;  // the exit status, or -1 when it did not exit
  int signal = 0;   // the signal that ended it, or 0
  bool timed_out = false;
  bool dac_not_dropped = false;  // without_dac_override was asked and could not be had
  std::string out;
  std::string err;
  long ErrLines() const;  // newlines on stderr
};

struct CliOptions {
  std::vector<std::string> env;  // NAME=VALUE added to the environment
  // Runs it without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH when the tests run
  // as root, so that file permissions apply to it as to any user.
  bool without_dac_override = false;
  // Called with its pid while it runs (e.g. to send it a signal).
  std::function<void(pid_t)> while_running;
  int timeout_s = 60;       // then it is killed: a hang fails the test, not the suite
  std::string stdout_path;  // non-empty: stdout goes there (e.g. /dev/full), not to `out`
};

CliResult RunCli(const std::vector<std::string>& args, const CliOptions& options = {});

// The same through the shell, for tests that write the arguments as one
// string: `args` with each path quoted by Q; stdout and stderr captured.
struct CliRun {
  int status = -1;
  std::string out;
  std::string err;
};
std::string Q(const std::string& path);  // a path as one shell word
CliRun Glmnorm(const std::string& args);

}  // namespace glmnorm::test

#endif  // GLMNORM_TESTS_CHECKPOINT_CLI_RUNNER_H_
