// Whole-file writes that either fully happen or leave nothing behind.
#ifndef GLMNORM_CHECKPOINT_ATOMIC_FILE_H_
#define GLMNORM_CHECKPOINT_ATOMIC_FILE_H_

#include <cstddef>
#include <span>
#include <string>

namespace glmnorm::checkpoint {

// Writes `bytes` to a temporary file next to `path`, flushes it to disk and
// renames it over `path`: readers see the old file or the complete new one,
// never a partial one. On failure the temporary file is removed and
// glmnorm::Error "<path>: ..." is thrown.
void WriteFileAtomically(const std::string& path, std::span<const std::byte> bytes);

}  // namespace glmnorm::checkpoint

#endif  // GLMNORM_CHECKPOINT_ATOMIC_FILE_H_
