// Text the tool prints that may hold bytes from file names or file contents.
#ifndef GLMNORM_TOOLS_PRINTABLE_H_
#define GLMNORM_TOOLS_PRINTABLE_H_

#include <string>
#include <string_view>

namespace glmnorm::tools {

// `text` safe to show on one terminal line: control characters become \n,
// \r, \t or \xNN (C1 controls too, as the \xNN of their UTF-8 bytes), and
// every byte that is not part of valid UTF-8 becomes \xNN. Other UTF-8 is
// kept, so names in any script stay readable. Backslashes are kept as they
// are, so messages that quote an escape (e.g. \x93NUMPY) read as written.
std::string Printable(std::string_view text);

// The one line on stderr of a failing command: "glmnorm: <Printable(what)>".
void PrintError(std::string_view what);

}  // namespace glmnorm::tools

#endif  // GLMNORM_TOOLS_PRINTABLE_H_
