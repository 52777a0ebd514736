// glmnorm: the command-line tool. `glmnorm --help` lists the subcommands.
#include <cstdio>
#include <exception>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"glmnorm: the RMSNorm of GLM-4.5, exact and fast"};
  app.require_subcommand(1);
  glmnorm::tools::CommandRunner runner;
  glmnorm::tools::RegisterBench(app, runner);
  glmnorm::tools::RegisterInspect(app, runner);
  glmnorm::tools::RegisterApply(app, runner);
  glmnorm::tools::RegisterCheck(app, runner);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "glmnorm: %s\n", e.what());
    return 2;
  }
  try {
    return runner ? runner() : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "glmnorm: %s\n", e.what());
    return 2;
  }
}
