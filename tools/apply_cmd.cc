// Placeholder until the checkpoint work (issue 4) lands: registers nothing.
#include "commands.h"

namespace glmnorm::tools {
void RegisterApply(CLI::App&, CommandRunner&) {}
}  // namespace glmnorm::tools
