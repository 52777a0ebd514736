// libglmnorm.so, the package's one native library: the glmnorm and
// glmnorm_io archives linked whole (python/CMakeLists.txt). This file only
// gives the target a source; the code is the library's.
#include "glmnorm/glmnorm.h"
