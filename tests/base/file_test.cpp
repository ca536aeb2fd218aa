// file_test.cpp: base/file.h's read_file on real files: every byte (a NUL, no newline at
// the end, CRLF kept), an empty file and a missing one.
#include "base/file.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

namespace ddprun {
namespace {

namespace fs = std::filesystem;

TEST_CASE("read_file: the whole file, byte for byte, or nothing", "[file]") {
  const fs::path dir =
      fs::temp_directory_path() / ("ddprun-file-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string bytes("a\r\nb\0c\xff", 7);
  std::ofstream(dir / "f", std::ios::binary) << bytes;
  std::ofstream(dir / "empty", std::ios::binary).flush();
  CHECK(read_file(dir / "f") == bytes);
  CHECK(read_file(dir / "empty") == "");
  CHECK_FALSE(read_file(dir / "missing"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddprun
