#include "atomic_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "glmnorm/error.h"

namespace glmnorm::checkpoint {
namespace {

constexpr char kTempPrefix[] = ".glmnorm-tmp-";
constexpr int kTempRandomChars = 6;
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

// The temporary file in existence, shared with the signal handler. A writer
// changes it only while holding g_slot_lock with the cleanup signals blocked
// in its own thread; a handler on another thread takes the lock too (and
// keeps it: the process is ending), so it never sees the slot half-changed
// and the writer can neither create nor rename after the handler looked.
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<int> g_slot_lock{0};
std::atomic<int> g_temp_dir_fd{-1};  // -1: no temporary file exists
char g_temp_name[sizeof(kTempPrefix) + kTempRandomChars];

// One write at a time owns the slot.
std::mutex g_write_mutex;

void LockSlot() {
  int expected = 0;
  while (!g_slot_lock.compare_exchange_weak(expected, 1)) expected = 0;
}
void UnlockSlot() { g_slot_lock.store(0); }

// Async-signal-safe: atomics, unlinkat and raise only.
void OnCleanupSignal(int sig) {
  const int saved_errno = errno;
  LockSlot();
  const int dir_fd = g_temp_dir_fd.load();
  if (dir_fd >= 0) unlinkat(dir_fd, g_temp_name, 0);
  // SA_RESETHAND restored the default action, and the signal stays blocked
  // until this handler returns: then it ends the process as it would have.
  raise(sig);
  errno = saved_errno;
}

// Blocks the cleanup signals in this thread for its lifetime, so a handler
// never runs on a thread that holds the slot lock.
class BlockCleanupSignals {
 public:
  BlockCleanupSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kCleanupSignals) sigaddset(&set, sig);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~BlockCleanupSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  BlockCleanupSignals(const BlockCleanupSignals&) = delete;
  BlockCleanupSignals& operator=(const BlockCleanupSignals&) = delete;

 private:
  sigset_t old_;
};

std::string Reason(int err) { return std::strerror(err); }

// A name not in use yet; O_EXCL makes the final decision.
std::string TempName(int attempt) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  // splitmix64 of the time, pid and attempt.
  uint64_t x = static_cast<uint64_t>(ts.tv_nsec) ^ (static_cast<uint64_t>(ts.tv_sec) << 30) ^
               (static_cast<uint64_t>(getpid()) << 40) ^ static_cast<uint64_t>(attempt);
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string name = kTempPrefix;
  for (int i = 0; i < kTempRandomChars; ++i) {
    name += kChars[x % (sizeof(kChars) - 1)];
    x /= sizeof(kChars) - 1;
  }
  return name;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// The temporary file: created published in the slot, removed on destruction
// unless it was renamed into place.
class TempFile {
 public:
  TempFile(const std::string& path, int dir_fd, const std::string& dir)
      : path_(path), dir_fd_(dir_fd) {
    int err = EEXIST;
    for (int attempt = 0; attempt < 100 && err == EEXIST; ++attempt) {
      name_ = TempName(attempt);
      BlockCleanupSignals block;
      LockSlot();
      // 0666: the umask gives the output the usual permissions.
      fd_ = openat(dir_fd_, name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                   0666);
      err = errno;
      if (fd_ >= 0) {
        std::memcpy(g_temp_name, name_.c_str(), name_.size() + 1);
        g_temp_dir_fd.store(dir_fd_);
      }
      UnlockSlot();
      if (fd_ >= 0) break;
    }
    display_ = (dir == "/" ? "" : dir) + "/" + name_;
    if (fd_ < 0) {
      throw Error(path_ + ": cannot create a temporary file in " + dir + ": " + Reason(err));
    }
  }
  ~TempFile() {
    if (fd_ >= 0) close(fd_);
    if (!renamed_) {
      BlockCleanupSignals block;
      LockSlot();
      unlinkat(dir_fd_, name_.c_str(), 0);
      g_temp_dir_fd.store(-1);
      UnlockSlot();
    }
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  [[noreturn]] void Fail(const char* what, int err) const {
    throw Error(path_ + ": cannot " + what + " " + display_ + ": " + Reason(err));
  }

  void Write(std::span<const std::byte> bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) Fail("write", errno);
      if (n == 0) Fail("write", EIO);
      done += static_cast<size_t>(n);
    }
    if (fsync(fd_) != 0) Fail("flush", errno);
    const int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) Fail("close", errno);
  }

  void RenameTo(const std::string& base) {
    int err = 0;
    {
      BlockCleanupSignals block;
      LockSlot();
      if (renameat(dir_fd_, name_.c_str(), dir_fd_, base.c_str()) == 0) {
        renamed_ = true;
        g_temp_dir_fd.store(-1);
      } else {
        err = errno;
      }
      UnlockSlot();
    }
    if (!renamed_) throw Error(path_ + ": cannot rename " + display_ + " to it: " + Reason(err));
  }

  const std::string& display() const { return display_; }

 private:
  std::string path_;
  int dir_fd_;
  std::string name_;
  std::string display_;  // dir/name, for messages
  int fd_ = -1;
  bool renamed_ = false;
};

}  // namespace

void WriteFileAtomically(const std::string& path, std::span<const std::byte> bytes,
                         const std::function<void(const std::string& temp_path)>& before_rename) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") {
    throw Error(path + ": names a directory, expected a file name");
  }
  std::lock_guard<std::mutex> one_at_a_time(g_write_mutex);
  // The directory stays open: the temporary file is created, renamed and
  // removed relative to it, and it is flushed after the rename.
  Fd dir_fd;
  dir_fd.fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd.fd < 0)
    throw Error(path + ": cannot open its directory " + dir + ": " + Reason(errno));
  // Refuse an over-long name now, not at the rename after all the writing.
  const long name_max = fpathconf(dir_fd.fd, _PC_NAME_MAX);
  if (name_max > 0 && base.size() > static_cast<size_t>(name_max)) {
    throw Error(path + ": the file name is " + std::to_string(base.size()) +
                " bytes, more than the " + std::to_string(name_max) + " its file system allows (" +
                Reason(ENAMETOOLONG) + ")");
  }
  {
    TempFile temp(path, dir_fd.fd, dir);
    temp.Write(bytes);
    if (before_rename) before_rename(temp.display());
    temp.RenameTo(base);
  }
  // Without this the rename itself may not survive a crash. Some file
  // systems cannot flush a directory (EINVAL); there is nothing more to do.
  if (fsync(dir_fd.fd) != 0 && errno != EINVAL) {
    throw Error(path + ": written and renamed into place, but flushing its directory " + dir +
                " failed: " + Reason(errno));
  }
}

void RemoveTempFileOnSignals() {
  struct sigaction action {};
  action.sa_handler = OnCleanupSignal;
  // While one handler runs, the other cleanup signals wait: a second handler
  // on the same thread would spin on the slot lock the first one holds.
  sigemptyset(&action.sa_mask);
  for (int sig : kCleanupSignals) sigaddset(&action.sa_mask, sig);
  action.sa_flags = SA_RESETHAND;
  for (int sig : kCleanupSignals) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) continue;
    // Keep what the parent chose: `nohup` ignores SIGHUP, a background job SIGINT.
    if ((old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sig, &action, nullptr);
  }
}

}  // namespace glmnorm::checkpoint
