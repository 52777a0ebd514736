#include "checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "glmnorm/error.h"

namespace glmnorm::checkpoint {

void WriteFileAtomically(const std::string& path, std::span<const std::byte> bytes) {
  // Same directory as the target, so rename() never crosses file systems.
  std::string temp = path + ".tmp.XXXXXX";
  std::vector<char> name(temp.begin(), temp.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) throw Error(path + ": cannot create a temporary file: " + std::strerror(errno));
  temp = name.data();
  auto fail = [&](const char* what) {
    const std::string reason = std::strerror(errno);
    close(fd);
    unlink(temp.c_str());
    throw Error(path + ": cannot " + what + " " + temp + ": " + reason);
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write");
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) fail("flush");
  // mkstemp creates 0600; an output file should get the usual permissions.
  const mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd, 0666 & ~mask) != 0) fail("set permissions of");
  if (close(fd) != 0) {
    const std::string reason = std::strerror(errno);
    unlink(temp.c_str());
    throw Error(path + ": cannot close " + temp + ": " + reason);
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    unlink(temp.c_str());
    throw Error(path + ": cannot rename " + temp + " to it: " + reason);
  }
}

}  // namespace glmnorm::checkpoint
