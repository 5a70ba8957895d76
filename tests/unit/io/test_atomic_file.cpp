// write_file_atomically: a regular file is replaced through a temporary file and a rename (links
// followed, no temporary file left), anything else is written in place, and a file that cannot be
// written is a FileError naming it; why_unwritable says beforehand why a path could not be written.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <kiln/io/atomic_file.hpp>
#include <optional>
#include <string>
#include <thread>

#include "support/temp_dir.hpp"

namespace {
namespace fs = std::filesystem;
std::string contents(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
/// The entries of `dir` (a temporary file left behind would be one more).
int entries(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& f : fs::directory_iterator(dir)) ++n;
  return n;
}
/// The FileError of writing 64 KiB to `file` under a file-size limit of 4096 bytes (it stands in for a
/// full disk: write() fails with EFBIG, SIGXFSZ ignored meanwhile); "" if nothing was thrown.
std::string message_of_a_write_past_4096_bytes(const fs::path& file) {
  ::rlimit before{};
  BOOST_REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);
  ::rlimit small = before;
  small.rlim_cur = 4096;
  BOOST_REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string message;
  try {
    kiln::write_file_atomically(file, std::string(1 << 16, 'x'));
  } catch (const kiln::FileError& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, previous);
  return message;
}

/// Precondition of the cases that make another user's file (chown): Boost.Test reports them skipped,
/// with this reason, for anyone but root.
boost::test_tools::assertion_result running_as_root(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result root(::geteuid() == 0);
  root.message() << "not root (euid " << ::geteuid() << "): another user's file cannot be made here";
  return root;
}

/// running_as_root, and `nobody` (65534) can reach the temporary folder (a case checks a file there as
/// nobody; a TMPDIR under a private folder, such as root's home, keeps nobody out): asked of a child
/// process that becomes nobody. A child that cannot become nobody lets the case run, which then fails
/// saying so.
boost::test_tools::assertion_result root_and_nobody_reaches_the_temporary_folder(
    boost::unit_test::test_unit_id id) {
  boost::test_tools::assertion_result root = running_as_root(id);
  if (!root) return root;
  const fs::path tmp = fs::temp_directory_path();
  const ::pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(0);
    ::_exit(::access(tmp.c_str(), X_OK) == 0 ? 0 : 4);
  }
  int status = 0;
  const bool kept_out =
      child > 0 && ::waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 4;
  boost::test_tools::assertion_result reaches(!kept_out);
  reaches.message() << "nobody (65534) cannot reach " << tmp << " (TMPDIR under a private folder)";
  return reaches;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(atomic_file)

BOOST_AUTO_TEST_CASE(creates_and_replaces_a_regular_file_leaving_no_temporary_file) {
  const kiln::test::TempDir scratch;
  const auto& dir = scratch.path();
  const auto file = dir / "out.json";
  kiln::write_file_atomically(file, "a longer first text\n");
  BOOST_TEST(contents(file) == "a longer first text\n");
  const auto inode = [&] {
    struct ::stat st{};
    BOOST_REQUIRE(::stat(file.c_str(), &st) == 0);
    return st.st_ino;
  };
  const auto before = inode();
  kiln::write_file_atomically(file, std::string("short\0with a zero", 17));
  BOOST_TEST(contents(file) == std::string("short\0with a zero", 17));  // truncated, bytes kept
  BOOST_TEST(inode() != before);  // a new file renamed over the old one, not a rewrite in place
  BOOST_TEST(entries(dir) == 1);
}

BOOST_AUTO_TEST_CASE(a_new_file_goes_through_a_temporary_file_too) {
  // Which file is replaced by a rename: a new one itself, a link's target, none for a FIFO or a device.
  const kiln::test::TempDir scratch;
  const auto& dir = scratch.path();
  BOOST_TEST((kiln::detail::atomic_target(dir / "new.json") == std::optional<fs::path>(dir / "new.json")));
  kiln::write_file_atomically(dir / "real.json", "x");
  fs::create_symlink(dir / "real.json", dir / "link.json");
  BOOST_TEST((kiln::detail::atomic_target(dir / "link.json") == std::optional<fs::path>(fs::canonical(dir / "real.json"))));
  BOOST_REQUIRE(::mkfifo((dir / "pipe").c_str(), 0600) == 0);
  BOOST_TEST(!kiln::detail::atomic_target(dir / "pipe").has_value());
  BOOST_TEST(!kiln::detail::atomic_target("/dev/null").has_value());
}

BOOST_AUTO_TEST_CASE(a_link_stays_a_link_and_the_file_it_names_is_replaced) {
  const kiln::test::TempDir scratch;
  const auto& dir = scratch.path();
  fs::create_directories(dir / "real");
  const auto real = dir / "real" / "metrics.jsonl";
  kiln::write_file_atomically(real, "old\n");
  fs::create_symlink(real, dir / "link.jsonl");
  kiln::write_file_atomically(dir / "link.jsonl", "new\n");
  BOOST_TEST(fs::is_symlink(fs::symlink_status(dir / "link.jsonl")));
  BOOST_TEST(contents(real) == "new\n");
  BOOST_TEST(entries(dir / "real") == 1);  // the temporary file went next to the real file, and is gone
  BOOST_TEST(entries(dir) == 2);
}

BOOST_AUTO_TEST_CASE(a_replaced_file_keeps_its_permission_bits) {
  const kiln::test::TempDir scratch;
  const auto file = scratch.path() / "private.json";
  kiln::write_file_atomically(file, "old");
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);  // 0600
  kiln::write_file_atomically(file, "new");
  BOOST_TEST(contents(file) == "new");
  BOOST_TEST(((fs::status(file).permissions() & fs::perms::all) ==
              (fs::perms::owner_read | fs::perms::owner_write)));
  fs::permissions(file, fs::perms::owner_all | fs::perms::group_read);  // 0740
  kiln::write_file_atomically(file, "newer");
  BOOST_TEST(
      ((fs::status(file).permissions() & fs::perms::all) == (fs::perms::owner_all | fs::perms::group_read)));
}

// Only the permission bits (a setuid file rewritten is not setuid: an in-place write would clear the
// bit too), and only from this user's file: another user's mode would apply to this user's new file
// (that user could lose access to the path); the new file then has a new file's mode (the next case).
BOOST_AUTO_TEST_CASE(a_replaced_file_keeps_its_permission_bits_but_not_setuid) {
  const kiln::test::TempDir scratch;
  const auto file = scratch.path() / "tool.bin";
  kiln::write_file_atomically(file, "old");
  BOOST_REQUIRE(::chmod(file.c_str(), 04750) == 0);
  kiln::write_file_atomically(file, "new");
  struct ::stat st;
  BOOST_REQUIRE(::stat(file.c_str(), &st) == 0);
  BOOST_TEST((st.st_mode & 07777) == 0750u);
}

// As root (reported skipped otherwise): root's new file replacing another user's 0600 file is root's,
// with a new file's mode, not 0600.
BOOST_AUTO_TEST_CASE(a_replaced_file_of_another_user_gets_a_new_files_mode,
                     *boost::unit_test::precondition(running_as_root)) {
  const kiln::test::TempDir scratch;
  const auto file = scratch.path() / "tool.bin";
  kiln::write_file_atomically(file, "old");
  struct ::stat st;
  const ::mode_t mask = ::umask(0);
  ::umask(mask);
  BOOST_REQUIRE(::chown(file.c_str(), 1000, 1000) == 0);
  BOOST_REQUIRE(::chmod(file.c_str(), 0600) == 0);
  kiln::write_file_atomically(file, "newer");
  BOOST_REQUIRE(::stat(file.c_str(), &st) == 0);
  BOOST_TEST(st.st_uid == 0u);
  BOOST_TEST((st.st_mode & 07777) == (0666u & ~mask));
}

// A dangling link: its target is created (as open() creates it) and the link stays; a link loop cannot
// be followed and is written in place, which fails naming it.
BOOST_AUTO_TEST_CASE(a_dangling_link_gets_its_target_created) {
  const kiln::test::TempDir scratch;
  const auto& dir = scratch.path();
  fs::create_directories(dir / "b");
  fs::create_symlink("b/target.json", dir / "link.json");     // relative to the link's folder
  fs::create_symlink(dir / "link.json", dir / "link2.json");  // a link to the dangling link
  BOOST_TEST((kiln::detail::atomic_target(dir / "link2.json") ==
              std::optional<fs::path>(dir / "b" / "target.json")));
  kiln::write_file_atomically(dir / "link2.json", "made");
  BOOST_TEST(fs::is_symlink(fs::symlink_status(dir / "link.json")));
  BOOST_TEST(fs::is_symlink(fs::symlink_status(dir / "link2.json")));
  BOOST_TEST(contents(dir / "b" / "target.json") == "made");
  fs::create_symlink(dir / "loop_b", dir / "loop_a");
  fs::create_symlink(dir / "loop_a", dir / "loop_b");
  BOOST_TEST(!kiln::detail::atomic_target(dir / "loop_a").has_value());
  BOOST_CHECK_THROW(kiln::write_file_atomically(dir / "loop_a", "x"), kiln::FileError);
}

BOOST_AUTO_TEST_CASE(a_fifo_is_written_in_place) {
  const kiln::test::TempDir scratch;
  const auto& dir = scratch.path();
  const auto fifo = dir / "pipe";
  BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string got;
  std::thread reader([&] { got = contents(fifo); });
  try {
    kiln::write_file_atomically(fifo, "through the pipe\n");
  } catch (...) {
    std::ofstream unblock(fifo);  // the reader waits in open for a writer
    unblock.close();
    reader.join();
    throw;
  }
  reader.join();
  BOOST_TEST(got == "through the pipe\n");
  BOOST_TEST(fs::is_fifo(fs::status(fifo)));  // not replaced by a regular file
  BOOST_TEST(entries(dir) == 1);
}

BOOST_AUTO_TEST_CASE(a_file_that_cannot_be_written_is_a_file_error_naming_it) {
  const kiln::test::TempDir scratch;
  const auto& dir = scratch.path();
  const auto file = dir / "no_such_folder" / "out.json";
  try {
    kiln::write_file_atomically(file, "text");
    BOOST_FAIL("wrote into a folder that does not exist");
  } catch (const kiln::FileError& e) {
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST(std::string(e.what()).find(file.string()) != std::string::npos);
  }
  BOOST_TEST(entries(dir) == 0);
  // Through a temporary file that cannot be made: the message names the file meant, the temporary
  // one and that the file meant was not made (there was none to leave alone).
  try {
    kiln::detail::TempFile tmp(file);
    BOOST_FAIL("made a temporary file in a folder that does not exist");
  } catch (const kiln::FileError& e) {
    const std::string m = e.what();
    BOOST_TEST(
        m.rfind("kiln: cannot write " + file.string() + ": creating " + file.string() + ".tmp.", 0) == 0, m);
    BOOST_TEST(
        m.find("No such file or directory; " + file.string() + " was not created") != std::string::npos, m);
  }
}

BOOST_AUTO_TEST_CASE(a_write_that_fails_halfway_leaves_the_old_file_and_says_so) {
  // A file-size limit stands in for a full disk: the write of the temporary file fails (EFBIG), the old
  // file keeps its bytes, no temporary file is left, and the error names the file meant and says so.
  const kiln::test::TempDir scratch;
  const auto file = scratch.path() / "ckpt.bin";
  kiln::write_file_atomically(file, "old");
  const std::string message = message_of_a_write_past_4096_bytes(file);
  BOOST_TEST(
      message.rfind("kiln: cannot write " + file.string() + ": writing " + file.string() + ".tmp.", 0) == 0,
      message);
  BOOST_TEST(message.find("File too large; " + file.string() + " is left as it was") != std::string::npos,
             message);
  BOOST_TEST(contents(file) == "old");
  BOOST_TEST(entries(scratch.path()) == 1);
}

BOOST_AUTO_TEST_CASE(only_a_folder_that_takes_no_new_file_falls_back_to_writing_in_place) {
  // Writing in place is for a temporary file the folder will not take (permissions, a read-only file
  // system, a name too long for the suffix) or a file that cannot be replaced; after a full disk, a
  // quota or an I/O error it would truncate the old file and could stop halfway, so those throw.
  for (const int e : {EACCES, EPERM, EROFS, EBUSY, EXDEV, ENAMETOOLONG})
    BOOST_TEST(kiln::detail::may_write_in_place(e), std::strerror(e));
  for (const int e : {ENOSPC, EDQUOT, EIO, EMFILE, ENFILE, ENOENT, ENOTDIR})
    BOOST_TEST(!kiln::detail::may_write_in_place(e), std::strerror(e));
  // A name of 250 characters has no room for the ".tmp.<pid>.<k>" suffix within NAME_MAX (255): written
  // in place, completely.
  const kiln::test::TempDir scratch;
  const auto file = scratch.path() / std::string(250, 'n');
  kiln::write_file_atomically(file, "old");
  kiln::write_file_atomically(file, "the new text");
  BOOST_TEST(contents(file) == "the new text");
  BOOST_TEST(entries(scratch.path()) == 1);
}

BOOST_AUTO_TEST_CASE(a_write_in_place_that_fails_says_why) {
  // The 250-character name is written in place; a file-size limit makes its write fail halfway (EFBIG):
  // the error names the file and errno's words, and says that the file is left incomplete.
  const kiln::test::TempDir scratch;
  const auto file = scratch.path() / std::string(250, 'n');
  const std::string message = message_of_a_write_past_4096_bytes(file);
  BOOST_TEST(message == "kiln: cannot write " + file.string() +
                            ": writing failed: File too large (written in place, as no temporary file could "
                            "replace it: it is left incomplete)",
             message);
}

// /proc takes no new file, also from root (whom access() lets through: why_unwritable then tries a file):
// the reason is known before a run, not after its first epoch.
BOOST_AUTO_TEST_CASE(why_unwritable_knows_a_folder_that_takes_no_file_also_for_root) {
  const std::string why = kiln::why_unwritable("/proc/kiln-metrics.json");
  BOOST_TEST(why.rfind("cannot write into /proc (", 0) == 0, why);
  BOOST_TEST(!kiln::why_unwritable("/proc/kiln.safetensors", true).empty());
  const kiln::test::TempDir scratch;
  BOOST_TEST(kiln::why_unwritable(scratch.path() / "new.json") == "");
  BOOST_TEST(entries(scratch.path()) == 0);  // the probe left nothing
}

// An existing file that opens for writing but takes no write (/proc/version: root opens it, and its writes
// fail with EIO; others are refused at access()): known before a run, while a writable file's probe
// leaves it as it was.
BOOST_AUTO_TEST_CASE(why_unwritable_knows_a_file_that_takes_no_write_also_for_root) {
  const std::string why = kiln::why_unwritable("/proc/version");
  BOOST_TEST(why.rfind("cannot write /proc/version (", 0) == 0, why);
  const kiln::test::TempDir scratch;
  const auto file = scratch.path() / "metrics.jsonl";
  std::ofstream(file) << "{\"epoch\": 1}\n";
  BOOST_TEST(kiln::why_unwritable(file) == "");
  std::ifstream in(file);
  const std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  BOOST_TEST(kept == "{\"epoch\": 1}\n");
}

// In a sticky folder (/tmp's 1777) only the file's owner, the folder's and root may rename over a file:
// a checkpoint there of another user's cannot be replaced, though the folder takes new files. Said
// before the run, not at the end of its first epoch. The rule here; a real folder in the next case.
BOOST_AUTO_TEST_CASE(only_the_owners_and_root_may_replace_a_file_in_a_sticky_folder) {
  struct ::stat folder {}, file {};
  folder.st_mode = S_IFDIR | 01777;
  folder.st_uid = 0;
  file.st_uid = 1000;
  BOOST_TEST(kiln::detail::sticky_keeps_out(folder, file, 1001));   // neither owner
  BOOST_TEST(!kiln::detail::sticky_keeps_out(folder, file, 1000));  // the file's owner
  BOOST_TEST(!kiln::detail::sticky_keeps_out(folder, file, 0));     // root
  folder.st_uid = 1001;
  BOOST_TEST(!kiln::detail::sticky_keeps_out(folder, file, 1001));  // the folder's owner
  folder.st_mode = S_IFDIR | 0777;
  BOOST_TEST(!kiln::detail::sticky_keeps_out(folder, file, 1002));  // not sticky
}

// As root, where nobody can reach the temporary folder (reported skipped otherwise): a sticky folder
// holding root's checkpoint, checked by `nobody` (65534) in a child process.
BOOST_AUTO_TEST_CASE(why_unwritable_knows_another_users_file_in_a_sticky_folder,
                     *boost::unit_test::precondition(root_and_nobody_reaches_the_temporary_folder)) {
  const kiln::test::TempDir scratch;
  const auto dir = scratch.path() / "shared";
  fs::create_directory(dir);
  BOOST_REQUIRE(::chmod(scratch.path().c_str(), 0755) == 0);
  BOOST_REQUIRE(::chmod(dir.c_str(), 01777) == 0);
  const auto ckpt = dir / "k.safetensors";
  kiln::write_file_atomically(ckpt, "root's");
  BOOST_REQUIRE(::chmod(ckpt.c_str(), 0666) == 0);  // writable in place, yet not replaceable
  const ::pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {  // only async-signal-safe-ish work here, then _exit: no Boost.Test in the child
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    if (::access(dir.c_str(), W_OK | X_OK) != 0) ::_exit(4);  // TMPDIR in a folder of root's only
    const std::string why = kiln::why_unwritable(ckpt, true);
    const bool says = why == "cannot write " + ckpt.string() + " (Operation not permitted: " + ckpt.string() +
                                 " is another user's file in a sticky folder, which only its owner can replace)";
    const bool new_file_fine = kiln::why_unwritable(dir / "mine.safetensors", true).empty();
    bool write_fails = false;
    try {
      kiln::detail::TempFile tmp(ckpt);
      tmp.commit(ckpt);
    } catch (const kiln::FileError&) {
      write_fails = true;
    }
    ::_exit(says && new_file_fine && write_fails ? 0 : 1 + (says ? 0 : 10) + (new_file_fine ? 0 : 20) + (write_fails ? 0 : 40));
  }
  int status = 0;
  BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0, "child's code " << WEXITSTATUS(status)
                                                       << " (3: no setuid; 4: nobody cannot reach " << dir
                                                       << "; +10: message, +20: new file, +40: wrote)");
  BOOST_TEST(contents(ckpt) == "root's");
}

BOOST_AUTO_TEST_CASE(why_unwritable_names_the_folder_or_file_and_the_reason) {
  const kiln::test::TempDir scratch;
  const auto& dir = scratch.path();
  BOOST_TEST(kiln::why_unwritable(dir / "new.json").empty());        // a new file in a folder we can write
  BOOST_TEST(kiln::why_unwritable(dir / "new.json", true).empty());
  const auto missing = dir / "no_such_folder" / "out.json";
  BOOST_TEST(kiln::why_unwritable(missing) ==
             "cannot write into " + (dir / "no_such_folder").string() + " (No such file or directory)");
  { std::ofstream(dir / "plain") << "a file, not a folder"; }
  BOOST_TEST(kiln::why_unwritable(dir / "plain" / "out.json", true) ==
             "cannot write into " + (dir / "plain").string() + " (Not a directory)");
  BOOST_TEST(kiln::why_unwritable(dir / "plain").empty());  // an existing file that is writable
  BOOST_TEST(kiln::why_unwritable("/dev/null").empty());  // written in place, whatever its folder
  // A file replaced whole goes next to the file a link names: that folder is the one checked.
  fs::create_symlink(dir / "no_such_folder" / "ckpt", dir / "ckpt_link");
  BOOST_TEST(kiln::why_unwritable(dir / "ckpt_link", true) ==
             "cannot write into " + (dir / "no_such_folder").string() + " (No such file or directory)");
  BOOST_REQUIRE(::mkfifo((dir / "pipe").c_str(), 0600) == 0);
  BOOST_TEST(kiln::why_unwritable(dir / "pipe", true) ==
             "cannot write " + (dir / "pipe").string() + " (not a regular file)");
  BOOST_TEST(kiln::why_unwritable(dir / "pipe").empty());  // written in place
  // A name that fits the folder, but not with the temporary file's suffix: a file replaced whole only
  // (a checkpoint) could not be written at the end of a run, so it is refused before.
  const long most = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  BOOST_REQUIRE(most > 20);
  const auto long_name = dir / std::string(static_cast<std::size_t>(most) - 10, 'c');
  BOOST_TEST(kiln::why_unwritable(long_name).empty());  // written in place when no temporary file fits
  const std::string why = kiln::why_unwritable(long_name, true);
  BOOST_TEST(
      why.rfind("cannot write " + long_name.string() + " (File name too long: the temporary file", 0) == 0,
      why);
  BOOST_TEST(why.find("the folder takes " + std::to_string(most) + ")") != std::string::npos, why);
  // A folder passes access(W_OK), but a writer could not fill it: refused before a run, either way.
  for (const bool new_file_only : {false, true})
    BOOST_TEST(kiln::why_unwritable(dir, new_file_only) ==
               "cannot write " + dir.string() + " (Is a directory)");
}

BOOST_AUTO_TEST_SUITE_END()
