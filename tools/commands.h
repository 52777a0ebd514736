// Subcommands of the glmnorm tool. Each lives in its own *_cmd.cc file and
// registers itself on the CLI11 app; main.cc runs the one chosen.
#ifndef GLMNORM_TOOLS_COMMANDS_H_
#define GLMNORM_TOOLS_COMMANDS_H_

#include <functional>

#include <CLI/CLI.hpp>

namespace glmnorm::tools {

// A registered subcommand returns the function that runs it; that function
// returns the process exit status. Errors it cannot handle itself propagate
// as exceptions; main prints them as one line on stderr and exits 2.
using CommandRunner = std::function<int()>;

void RegisterBench(CLI::App& app, CommandRunner& runner);
void RegisterInspect(CLI::App& app, CommandRunner& runner);
void RegisterApply(CLI::App& app, CommandRunner& runner);
void RegisterCheck(CLI::App& app, CommandRunner& runner);
void RegisterDiff(CLI::App& app, CommandRunner& runner);

}  // namespace glmnorm::tools

#endif  // GLMNORM_TOOLS_COMMANDS_H_
