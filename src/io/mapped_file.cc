#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "glmnorm/error.h"

namespace glmnorm::checkpoint {
namespace {

std::string Reason() { return std::strerror(errno); }

// Closes the descriptor on every path out of Open.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

[[noreturn]] void NotRegular(const std::string& path, mode_t mode) {
  throw Error(path + ": is " + std::string(FileTypeName(mode)) + ", expected a regular file");
}

int OpenRegular(const std::string& path, Fd& fd, struct stat& st) {
  // Look before opening: opening a FIFO waits for a writer, and opening a
  // device can have effects (a tape rewinds, a terminal becomes ours).
  if (stat(path.c_str(), &st) != 0) throw Error(path + ": cannot open: " + Reason());
  if (!S_ISREG(st.st_mode)) NotRegular(path, st.st_mode);
  // O_NONBLOCK: should the path be swapped for a FIFO after the stat, open
  // still returns at once and the fstat below refuses it.
  fd.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd.fd < 0) throw Error(path + ": cannot open: " + Reason());
  if (fstat(fd.fd, &st) != 0) throw Error(path + ": cannot stat: " + Reason());
  if (!S_ISREG(st.st_mode)) NotRegular(path, st.st_mode);
  return fd.fd;
}

}  // namespace

MappedFile MappedFile::Open(const std::string& path) {
  Fd fd;
  struct stat st {};
  OpenRegular(path, fd, st);
  MappedFile file;
  file.path_ = path;
  if (st.st_size == 0) return file;  // mmap of length 0 is an error; nothing to map
  void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (p == MAP_FAILED) throw Error(path + ": cannot map: " + Reason());
  // Norm tensors are a few KB scattered over multi-GB shards: readahead would
  // read megabytes around each one for nothing.
  madvise(p, static_cast<size_t>(st.st_size), MADV_RANDOM);
  file.data_ = static_cast<const std::byte*>(p);
  file.size_ = static_cast<size_t>(st.st_size);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ != nullptr) munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

std::string_view FileTypeName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a file of unknown type";
}

std::string ReadSmallFile(const std::string& path, size_t max_bytes) {
  Fd fd;
  struct stat st {};
  OpenRegular(path, fd, st);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    throw Error(path + ": larger than " + std::to_string(max_bytes) + " bytes");
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = read(fd.fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(path + ": cannot read: " + Reason());
    if (n == 0) break;  // shrank while reading
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

}  // namespace glmnorm::checkpoint
