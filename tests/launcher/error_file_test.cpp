// @record error files: both message forms, malformed files, the agent's copy.
#include "launcher/error_file.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/temp_dir.h"

using namespace ddprun::launcher;
namespace fs = std::filesystem;

namespace {

using ddprun::test::TempDir;

nlohmann::json load(const std::string& file) {
  return nlohmann::json::parse(ddprun::test::slurp(file));
}

}  // namespace

TEST_CASE("dict message: py_callstack indented, timestamp from extraInfo", "[error_file]") {
  TempDir d;
  const auto f = d.write("a.json", R"({"message": {"message": "RuntimeError: x", "extraInfo":
      {"py_callstack": "Traceback (most recent call last):\n  File \"a\"\nRuntimeError: x\n",
       "timestamp": "1700000000"}}})");
  const ErrorFileInfo info = read_error_file(f);
  CHECK(info.exists);
  CHECK(info.parsed);
  CHECK(info.display ==
        "Traceback (most recent call last):\n    File \"a\"\n  RuntimeError: x\n  ");
  CHECK(info.timestamp == 1700000000);
}

TEST_CASE("dict message without a callstack shows the message", "[error_file]") {
  TempDir d;
  const auto f = d.write("a.json", R"({"message": {"message": "E: y\nz"}})");
  const ErrorFileInfo info = read_error_file(f);
  CHECK(info.parsed);
  CHECK(info.display == "E: y\n  z");
  CHECK(!info.timestamp);
  const auto g = d.write("b.json", R"({"message": {}})");
  CHECK(read_error_file(g).display == "<N/A>");
}

TEST_CASE("string message: shown as is, timestamp at the top level", "[error_file]") {
  TempDir d;
  const auto f = d.write("a.json", R"({"message": "plain\ntext", "timestamp": 12})");
  const ErrorFileInfo info = read_error_file(f);
  CHECK(info.parsed);
  CHECK(info.display == "plain\ntext");
  CHECK(info.timestamp == 12);
}

TEST_CASE("missing and malformed files", "[error_file]") {
  TempDir d;
  CHECK(!read_error_file((d.path / "nope.json").string()).exists);
  for (const char* text : {"", "{", "[1,2]", R"({"msg": 1})", R"({"message": 5})"}) {
    CAPTURE(text);
    const ErrorFileInfo info = read_error_file(d.write("bad.json", text));
    CHECK(info.exists);
    CHECK(!info.parsed);
    CHECK(!info.parse_error.empty());
  }
}

TEST_CASE("a FIFO, /dev/zero or a huge file is refused without blocking or reading it all",
          "[error_file]") {
  // Issue 31 item 16: a worker's error file is untrusted; ddprun's failure report must
  // neither hang in open() on a FIFO nor read /dev/zero or 50 MB into memory.
  TempDir d;
  const std::string fifo = (d.path / "fifo.json").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string zero = (d.path / "zero.json").string();
  fs::create_symlink("/dev/zero", zero);
  const std::string big = (d.path / "big.json").string();
  {
    std::ofstream out(big);
    out << R"({"message": ")" << std::string(kMaxErrorFileBytes, 'x') << R"("})";
  }
  for (const auto& [path, why] :
       {std::pair{fifo, "not a regular file"}, std::pair{zero, "not a regular file"},
        std::pair{big, "larger than 4 MiB"}}) {
    CAPTURE(path);
    const ErrorFileInfo info = read_error_file(path);
    CHECK(info.exists);
    CHECK(!info.parsed);
    CHECK_THAT(info.parse_error, Catch::Contains(why));
    std::string reason;
    CHECK(!copy_error_file(path, (d.path / "agent.json").string(), 1, &reason));
    CHECK_THAT(reason, Catch::Contains(why));
  }
  // A symlink to a regular file is read, as torchrun's os.path.isfile follows it.
  const std::string real = d.write("real.json", R"({"message": "E: via link"})");
  fs::create_symlink(real, d.path / "link.json");
  CHECK(read_error_file((d.path / "link.json").string()).display == "E: via link");
}

TEST_CASE("the agent's copy adds errorCode to dict messages", "[error_file]") {
  TempDir d;
  const auto src = d.write("w.json", R"({"message": {"message": "E", "extraInfo":
      {"py_callstack": "tb", "timestamp": "5"}}})");
  const std::string dst = (d.path / "agent.json").string();
  std::string why;
  REQUIRE(copy_error_file(src, dst, 3, &why));
  const auto j = load(dst);
  CHECK(j["message"]["errorCode"] == 3);
  CHECK(j["message"]["extraInfo"]["py_callstack"] == "tb");

  const auto str = d.write("s.json", R"({"message": "plain", "timestamp": 5})");
  REQUIRE(copy_error_file(str, dst, 3, &why));
  CHECK(load(dst)["message"] == "plain");

  CHECK(!copy_error_file((d.path / "none").string(), dst, 1, &why));
  CHECK(!why.empty());

  // Worker output need not be UTF-8.
  REQUIRE(
      write_error_file(dst, "ValueError: b\xff", "Traceback\nValueError: b\xff\n", 42, -9, &why));
  const ErrorFileInfo info = read_error_file(dst);
  CHECK(info.parsed);
  CHECK(info.timestamp == 42);
  CHECK(info.display == "Traceback\n  ValueError: b\xef\xbf\xbd\n  ");
  CHECK(load(dst)["message"]["errorCode"] == -9);
  CHECK(load(dst)["message"]["message"] == "ValueError: b\xef\xbf\xbd");
  CHECK(!write_error_file((d.path / "no/such/dir.json").string(), "r", "r", 1, 1, &why));
}
