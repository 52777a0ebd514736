// glmnorm: the command-line tool. `glmnorm --help` lists the subcommands.
//
// Every failure, whether of the arguments or of the command, exits 2 with
// exactly one line on stderr (tools/printable.h escapes what cannot be
// printed, so a file name cannot break the line or drive the terminal).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "atomic_file.h"
#include "commands.h"
#include "printable.h"

int main(int argc, char** argv) {
  // An interrupted `apply` leaves no temporary file behind.
  glmnorm::checkpoint::RemoveTempFileOnSignals();
  CLI::App app{"glmnorm: the RMSNorm of GLM-4.5, exact and fast"};
  app.require_subcommand(1);
  glmnorm::tools::CommandRunner runner;
  glmnorm::tools::RegisterBench(app, runner);
  glmnorm::tools::RegisterInspect(app, runner);
  glmnorm::tools::RegisterApply(app, runner);
  glmnorm::tools::RegisterCheck(app, runner);
  glmnorm::tools::RegisterDiff(app, runner);
  // CLI11 would only say "A subcommand is required".
  const std::string first = argc > 1 ? argv[1] : "";
  if (!first.empty() && first[0] != '-' &&
      app.get_subcommands([&](const CLI::App* sub) { return sub->check_name(first); }).empty()) {
    glmnorm::tools::PrintError("unknown command \"" + first +
                               "\"; expected bench, inspect, apply, check or diff");
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    glmnorm::tools::PrintError(e.what());
    return 2;
  }
  try {
    if (!runner) {
      glmnorm::tools::PrintError("no command given (glmnorm --help lists them)");
      return 2;
    }
    const int status = runner();
    // The output is the command's result: losing it (a full disk, a closed
    // pipe) is a failure, not a success with no output.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      glmnorm::tools::PrintError(std::string("cannot write to standard output: ") +
                                 (errno != 0 ? std::strerror(errno) : "write error"));
      return 2;
    }
    return status;
  } catch (const std::exception& e) {
    glmnorm::tools::PrintError(e.what());
    return 2;
  }
}
