/// Files written atomically: a temporary file of the writer's own next to the target, flushed to disk,
/// then renamed over it, so a reader (or a crash) sees the old file or the whole new one.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "kiln/core/errors.hpp"

namespace kiln {

namespace detail {

/// How a failed write ends its message: "; TARGET is left as it was", or, where there was none,
/// "; TARGET was not created".
inline std::string left_as_it_was(const std::filesystem::path& target) {
  std::error_code ec;
  return "; " + target.string() +
         (std::filesystem::exists(std::filesystem::symlink_status(target, ec)) ? " is left as it was" : " was not created");
}

/// A temporary file next to `path` that no other writer has: `path`.tmp.<pid>.<k>, created with
/// O_EXCL (an existing file or link of that name is never opened), mode 0666 less the umask. Errors
/// are FileErrors naming `path`, the temporary file and that `path` was left as it was; given
/// `open_error`, a file that cannot be created sets it to the errno instead (the TempFile is then empty).
class TempFile {
 public:
  explicit TempFile(const std::filesystem::path& path, int* open_error = nullptr) : target_(path) {
    static std::atomic<unsigned> serial{0};
    for (int attempt = 0; fd_ < 0; ++attempt) {
      path_ = path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      const int error = errno;
      if (fd_ < 0 && (error != EEXIST || attempt == 100)) {
        if (!open_error) throw failure("creating", error);
        *open_error = error;
        path_.clear();
        return;
      }
    }
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  /// Removes the file unless it was renamed.
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  const std::filesystem::path& path() const { return path_; }
  /// Writes all of `bytes`, or throws naming the file.
  void write(const void* bytes, std::size_t n) {
    const char* p = static_cast<const char*>(bytes);
    while (n > 0) {
      const ::ssize_t w = ::write(fd_, p, n);
      const int error = errno;
      if (w < 0 && error == EINTR) continue;
      if (w < 0) throw failure("writing", error);
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  /// Gives the file the permission bits (0777: not setuid, setgid or sticky) of `target` when that is
  /// this user's file already: a checkpoint kept private, 0600, stays so. Another user's file is not
  /// copied (the new file is this user's, and its bits would apply to this user; the file keeps 0666
  /// less the umask, as a new one does). Best effort: a file system that refuses keeps the file's own.
  void keep_mode_of(const std::filesystem::path& target) {
    struct ::stat st;
    if (::stat(target.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid())
      (void)::fchmod(fd_, st.st_mode & 0777);
  }
  /// Flushes the file to disk (fsync, so that a rename over the old file never leaves an empty one
  /// after a power loss) and closes it.
  void flush_and_close() {
    if (::fsync(fd_) != 0) throw failure("flushing to disk", errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw failure("writing", errno);
  }
  /// Renames the flushed file to `to`; the error when it cannot (the file is then still removed).
  std::error_code rename_to(const std::filesystem::path& to) noexcept {
    std::error_code ec;
    std::filesystem::rename(path_, to, ec);
    if (ec) return ec;
    path_.clear();
    // The rename itself reaches the disk with the folder's entries (best effort: a file system may not
    // sync folders; the file is complete either way).
    const auto folder = to.has_parent_path() ? to.parent_path() : std::filesystem::path(".");
    const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      (void)::fsync(dir);
      ::close(dir);
    }
    return {};
  }
  /// keep_mode_of `to`, flush_and_close, then rename_to `to`, or throws naming both files.
  void commit(const std::filesystem::path& to) {
    keep_mode_of(to);
    flush_and_close();
    if (const auto ec = rename_to(to))
      throw FileError("kiln: cannot write " + to.string() + ": renaming " + path_.string() +
                      " over it failed: " + ec.message() + left_as_it_was(to));
  }

 private:
  /// "kiln: cannot write TARGET: <doing> TEMP failed: <errno's words>; TARGET is left as it was" (or,
  /// where there was none, "was not created").
  FileError failure(const char* doing, int error) const {
    return FileError("kiln: cannot write " + target_.string() + ": " + doing + " " + path_.string() +
                     " failed: " + std::strerror(error) + left_as_it_was(target_));
  }

  std::filesystem::path target_;  // the file this one replaces
  std::filesystem::path path_;
  int fd_ = -1;
};

/// Whether an error creating or renaming the temporary file is one where the file may still be written
/// in place: the folder takes no new file (not ours, read-only, the name too long for a suffix) or the
/// file cannot be replaced (a bind mount, another user's in a sticky folder). Not for a full disk, a
/// quota or an I/O error, where writing in place could leave half a file.
inline bool may_write_in_place(int error) {
  return error == EACCES || error == EPERM || error == EROFS || error == EBUSY || error == EXDEV ||
         error == ENAMETOOLONG;
}

/// Writes `bytes` straight into `path` (truncating it, created 0666 less the umask when new), or throws
/// naming it and errno's words. A regular file is flushed to disk (fsync) before it is closed; a FIFO or
/// a terminal (/dev/stdout) takes no fsync.
inline void write_in_place(const std::filesystem::path& path, std::string_view bytes) {
  // (O_TRUNC has emptied what the file held: a failure from here on leaves it incomplete)
  const auto fail = [&](const char* doing, int error) {
    return FileError("kiln: cannot write " + path.string() + ": " + doing + " failed: " + std::strerror(error) +
                     " (written in place, as no temporary file could replace it: it is left incomplete)");
  };
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int error = errno;
    throw FileError("kiln: cannot write " + path.string() + ": " + std::strerror(error));
  }
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};
  for (const char* p = bytes.data(); p != bytes.data() + bytes.size();) {
    const ::ssize_t w = ::write(fd, p, static_cast<std::size_t>(bytes.data() + bytes.size() - p));
    const int error = errno;
    if (w < 0 && error == EINTR) continue;
    if (w < 0) throw fail("writing", error);
    p += w;
  }
  struct ::stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::fsync(fd) != 0) throw fail("flushing to disk", errno);
  closer.fd = -1;
  if (::close(fd) != 0) throw fail("writing", errno);
}

/// The file write_file_atomically replaces through a temporary file and a rename: `path` itself when
/// it does not exist yet, the file a link names (so the link stays: a dangling link's target is
/// created, as open() would create it); none (write in place) for what is not a regular file or a link
/// that cannot be followed (a loop).
inline std::optional<std::filesystem::path> atomic_target(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);  // through links (ec is ENOENT for a new file)
  if (!fs::exists(status)) {
    fs::path p = path;
    for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {  // a dangling link: its target
      if (hops == 40) return std::nullopt;                                   // (Linux's ELOOP limit)
      const fs::path to = fs::read_symlink(p, ec);
      if (ec) return std::nullopt;
      p = to.is_absolute() ? to : p.parent_path() / to;
    }
    return p;
  }
  if (!fs::is_regular_file(status)) return std::nullopt;
  if (!fs::is_symlink(fs::symlink_status(path, ec))) return path;  // (its name as given, for the messages)
  std::error_code canonical_ec;
  auto target = fs::canonical(path, canonical_ec);
  if (canonical_ec) return std::nullopt;
  return target;
}

/// Whether a sticky folder (/tmp's mode 1777) keeps user `euid` from replacing `file` in it: a rename
/// over a file there is only for the file's owner, the folder's owner and root (EPERM for the rest).
inline bool sticky_keeps_out(const struct ::stat& folder, const struct ::stat& file, ::uid_t euid) {
  return (folder.st_mode & S_ISVTX) != 0 && euid != 0 && euid != file.st_uid && euid != folder.st_uid;
}

/// For root, whom access() does not stop: 0 when `where` takes a write (an existing regular file opened
/// for writing, not truncated, and written nothing: a write of no bytes changes no regular file, yet
/// /proc's and /sys's read-only files refuse it; a folder a new file of ours, removed at once), else the
/// errno.
inline int write_probe(const std::filesystem::path& where, bool file) {
  if (file) {
    struct ::stat st;
    if (::stat(where.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;  // a FIFO, a device: as access()
    const int fd = ::open(where.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    const int error = ::write(fd, "", 0) < 0 ? errno : 0;  // (root opens /proc/version; its writes fail, EIO)
    ::close(fd);
    return error;
  }
  static std::atomic<unsigned> serial{0};
  const auto probe = where / (".kiln-probe." + std::to_string(::getpid()) + "." + std::to_string(serial++));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  ::close(fd);
  ::unlink(probe.c_str());
  return 0;
}

}  // namespace detail

/// Why `path` cannot be written, or "" when it can: for a check before a long run that writes the file
/// only at its end. An existing file must be writable itself (it may be written in place: a FIFO,
/// /dev/stdout, a file appended to), else its folder must take a new file; with `new_file_only` (a file
/// replaced only whole, through a temporary file next to it, as write_safetensors does) the folder must
/// take one either way. An existing folder is refused ("Is a directory"). "cannot write PATH (reason)" or
/// "cannot write into FOLDER (reason)".
inline std::string why_unwritable(const std::filesystem::path& path, bool new_file_only = false) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // A folder can be written to (access() says yes), but never written as a file.
  if (fs::is_directory(path, ec)) return "cannot write " + path.string() + " (" + std::strerror(EISDIR) + ")";
  // The folder the temporary file goes to: the target's, through links (detail::atomic_target).
  const auto target = detail::atomic_target(path);
  if (new_file_only && !target) return "cannot write " + path.string() + " (not a regular file)";
  const bool file = !new_file_only && fs::exists(path, ec);
  const fs::path where = file ? path : fs::absolute(target ? *target : path, ec).parent_path();
  int error = 0;
  if (!file && fs::exists(where, ec) && !fs::is_directory(where, ec))
    error = ENOTDIR;  // (access() would say EACCES, for want of the execute bit)
  else if (::access(where.c_str(), file ? W_OK : W_OK | X_OK) != 0)
    error = errno;
  else if (::geteuid() == 0)  // root passes access() wherever the mode bits say no: try it (/proc, say)
    error = detail::write_probe(where, file);
  if (error != 0)
    return (file ? "cannot write " : "cannot write into ") + where.string() + " (" + std::strerror(error) +
           ")";
  if (new_file_only && target) {  // the rename over an existing file must be allowed too
    struct ::stat folder_st, file_st;
    if (::stat(where.c_str(), &folder_st) == 0 && ::lstat(target->c_str(), &file_st) == 0 &&
        detail::sticky_keeps_out(folder_st, file_st, ::geteuid()))
      return "cannot write " + path.string() + " (" + std::strerror(EPERM) + ": " + target->string() +
             " is another user's file in a sticky folder, which only its owner can replace)";
  }
  if (new_file_only) {  // the temporary file's name, NAME.tmp.<pid>.<n>, must fit the folder's limit too
    const std::string temp = (target ? *target : path).filename().string() + ".tmp." +
                             std::to_string(::getpid()) + "." + std::to_string(~0u);
    const long most = ::pathconf(where.c_str(), _PC_NAME_MAX);  // -1: no limit known
    if (most > 0 && temp.size() > static_cast<std::size_t>(most))
      return "cannot write " + path.string() + " (" + std::strerror(ENAMETOOLONG) +
             ": the temporary file next to it, " + "NAME.tmp.<pid>.<n>, may have " +
             std::to_string(temp.size()) + " bytes; the folder takes " + std::to_string(most) + ")";
  }
  return {};
}

/// Writes `bytes` to `path` so that no reader sees half of it: through a temporary file of this
/// writer's own in the same folder, flushed to disk and renamed over `path` (a link is followed: the
/// file it names is replaced, the link stays; the file keeps its permission bits). Where that cannot be done
/// it writes in place: `path` is not a regular file (a FIFO, /dev/stdout), the folder takes no new file, or
/// the file cannot be replaced (a bind-mounted file, another user's in a sticky folder:
/// detail::may_write_in_place). Throws FileError naming the file when it cannot be written at all, or when
/// the temporary file failed for another reason (a full disk, a quota): the old file is then left as it was.
inline void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  const auto target = detail::atomic_target(path);
  if (!target) return detail::write_in_place(path, bytes);
  int open_error = 0;
  detail::TempFile tmp(*target, &open_error);
  if (open_error != 0) {
    if (detail::may_write_in_place(open_error)) return detail::write_in_place(*target, bytes);
    throw FileError("kiln: cannot write " + target->string() + " through a temporary file next to it: " +
                    std::strerror(open_error));
  }
  tmp.write(bytes.data(), bytes.size());
  tmp.keep_mode_of(*target);
  tmp.flush_and_close();
  if (const auto ec = tmp.rename_to(*target)) {  // (the temporary file goes with tmp)
    if (!detail::may_write_in_place(ec.value()))
      throw FileError("kiln: cannot replace " + target->string() + ": " + ec.message());
    detail::write_in_place(*target, bytes);
  }
}

}  // namespace kiln
