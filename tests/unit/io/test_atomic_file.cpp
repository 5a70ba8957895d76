// write_file_atomically: a regular file is replaced through a temporary file and a rename (links
// followed, no temporary file left), anything else is written in place, and a file that cannot be
// written is a FileError naming it.
#include <sys/stat.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <kiln/io/atomic_file.hpp>
#include <string>
#include <thread>

namespace {
namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const auto d = fs::temp_directory_path() / ("kiln_test_atomic_file_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
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
}  // namespace

BOOST_AUTO_TEST_SUITE(atomic_file)

BOOST_AUTO_TEST_CASE(creates_and_replaces_a_regular_file_leaving_no_temporary_file) {
  const auto dir = scratch("replace");
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
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_link_stays_a_link_and_the_file_it_names_is_replaced) {
  const auto dir = scratch("link");
  fs::create_directories(dir / "real");
  const auto real = dir / "real" / "metrics.jsonl";
  kiln::write_file_atomically(real, "old\n");
  fs::create_symlink(real, dir / "link.jsonl");
  kiln::write_file_atomically(dir / "link.jsonl", "new\n");
  BOOST_TEST(fs::is_symlink(fs::symlink_status(dir / "link.jsonl")));
  BOOST_TEST(contents(real) == "new\n");
  BOOST_TEST(entries(dir / "real") == 1);  // the temporary file went next to the real file, and is gone
  BOOST_TEST(entries(dir) == 2);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_fifo_is_written_in_place) {
  const auto dir = scratch("fifo");
  const auto fifo = dir / "pipe";
  BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string got;
  std::thread reader([&] { got = contents(fifo); });
  kiln::write_file_atomically(fifo, "through the pipe\n");
  reader.join();
  BOOST_TEST(got == "through the pipe\n");
  BOOST_TEST(fs::is_fifo(fs::status(fifo)));  // not replaced by a regular file
  BOOST_TEST(entries(dir) == 1);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_file_that_cannot_be_written_is_a_file_error_naming_it) {
  const auto dir = scratch("missing");
  const auto file = dir / "no_such_folder" / "out.json";
  try {
    kiln::write_file_atomically(file, "text");
    BOOST_FAIL("wrote into a folder that does not exist");
  } catch (const kiln::FileError& e) {
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST(std::string(e.what()).find(file.string()) != std::string::npos);
  }
  BOOST_TEST(entries(dir) == 0);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
