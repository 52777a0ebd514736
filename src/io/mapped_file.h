// A read-only memory map of a whole file. Mapping costs no I/O: the kernel
// reads a page only when it is touched, so a reader that looks at a 5 GB
// shard's header and a few norm tensors reads a few pages of it.
#ifndef GLMNORM_CHECKPOINT_MAPPED_FILE_H_
#define GLMNORM_CHECKPOINT_MAPPED_FILE_H_

#include <sys/types.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace glmnorm::checkpoint {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws glmnorm::Error "<path>: cannot open: <reason>", "<path>: is a
  // FIFO, expected a regular file" (never opens or waits on anything but a
  // regular file), or "<path>: cannot map: ...". An empty file maps to an
  // empty span.
  static MappedFile Open(const std::string& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void Reset();

  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) file into a string, for the JSON files. Throws
// "<path>: cannot open: <reason>", "<path>: is a directory, expected a
// regular file" or "<path>: larger than <max> bytes".
std::string ReadSmallFile(const std::string& path, size_t max_bytes);

// "a directory", "a FIFO", "a character device", ... for messages about a
// path that is not a regular file; "a regular file" for one that is.
std::string_view FileTypeName(mode_t mode);

}  // namespace glmnorm::checkpoint

#endif  // GLMNORM_CHECKPOINT_MAPPED_FILE_H_
