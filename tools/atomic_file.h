// Whole-file writes that either fully happen or leave nothing behind.
#ifndef GLMNORM_CHECKPOINT_ATOMIC_FILE_H_
#define GLMNORM_CHECKPOINT_ATOMIC_FILE_H_

#include <cstddef>
#include <functional>
#include <span>
#include <string>

namespace glmnorm::checkpoint {

// Writes `bytes` to a new hidden file ".glmnorm-tmp-XXXXXX" in the directory
// of `path`, flushes it to disk, renames it over `path` and flushes the
// directory, so the rename survives a crash: readers see the old file or the
// complete new one, never a partial one. The short temporary name keeps a
// `path` whose last component is at the length limit (255 bytes) writable.
//
// `before_rename`, when given, runs with the complete temporary file in
// place (its path as argument) just before the rename; it may throw to
// cancel the write. On any failure the temporary file is removed, nothing
// else is touched, and glmnorm::Error "<path>: ..." is thrown; a failure to
// flush the directory after the rename says that the file was replaced.
void WriteFileAtomically(
    const std::string& path, std::span<const std::byte> bytes,
    const std::function<void(const std::string& temp_path)>& before_rename = {});

// For programs, not libraries (it replaces process-wide signal handlers):
// from now on SIGINT, SIGTERM and SIGHUP remove the temporary file of a
// WriteFileAtomically in progress and then end the process as the signal
// would have. Signals the process ignores stay ignored. Call once, early.
void RemoveTempFileOnSignals();

}  // namespace glmnorm::checkpoint

#endif  // GLMNORM_CHECKPOINT_ATOMIC_FILE_H_
