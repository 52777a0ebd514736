#include "cli_runner.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "fixtures.h"

extern char** environ;

namespace glmnorm::test {
namespace {

constexpr int kCannotDropDac = 125;  // the child's exit status when prctl fails

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

long CliResult::ErrLines() const { return std::count(err.begin(), err.end(), '\n'); }

CliResult RunCli(const std::vector<std::string>& args, const CliOptions& options) {
  TempDir io;
  const std::string out_path = options.stdout_path.empty() ? io / "stdout" : options.stdout_path;
  const std::string err_path = io / "stderr";
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls.
  std::vector<std::string> argv_strings = {GLMNORM_CLI};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.insert(env_strings.end(), options.env.begin(), options.env.end());
  std::vector<char*> argv = CStrings(argv_strings);
  std::vector<char*> envp = CStrings(env_strings);
  const bool drop_dac = options.without_dac_override && geteuid() == 0;

  CliResult r;
  const pid_t pid = fork();
  if (pid < 0) return r;
  if (pid == 0) {
    const int in = open("/dev/null", O_RDONLY);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0 || err < 0) _exit(127);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    // As from an interactive shell, whatever the test runner inherited
    // (a background job ignores SIGINT).
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (drop_dac && (prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) != 0 ||
                     prctl(PR_CAPBSET_DROP, CAP_DAC_READ_SEARCH, 0, 0, 0) != 0)) {
      _exit(kCannotDropDac);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  if (options.while_running) options.while_running(pid);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.timeout_s);
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0) return r;
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) r.status = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.dac_not_dropped = drop_dac && r.status == kCannotDropDac;
  if (options.stdout_path.empty()) r.out = ReadFile(out_path);
  r.err = ReadFile(err_path);
  return r;
}

std::string Q(const std::string& path) {
  std::string out = "'";
  for (char c : path) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

CliRun Glmnorm(const std::string& args) {
  TempDir tmp;
  const std::string err_path = tmp / "stderr";
  const std::string command = Q(GLMNORM_CLI) + " " + args + " 2>" + Q(err_path);
  CliRun r;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = ReadFile(err_path);
  return r;
}

}  // namespace glmnorm::test
