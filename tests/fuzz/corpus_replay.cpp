// corpus_replay.cpp: replays every file of the checked-in fuzz corpus through a fuzz
// entry with the normal compiler, so that the corpus is a regression suite in every build.
// Built twice: test_fuzz_corpus (store_core's run_stream) and test_fuzz_server_corpus
// (DDPRUN_FUZZ_SERVER: the in-process server's run_server).
// Usage: test_fuzz_corpus <corpus dir>. Exit 0 when all inputs pass; aborts on a failure.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#ifdef DDPRUN_FUZZ_SERVER
#include "tests/fuzz/server_fuzz.h"
#define DDPRUN_FUZZ_ENTRY ddprun::store::fuzz::run_server
#else
#include "tests/fuzz/stream_fuzz.h"
#define DDPRUN_FUZZ_ENTRY ddprun::store::fuzz::run_stream
#endif

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(argv[1], ec)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  if (ec || files.empty()) {
    std::fprintf(stderr, "no corpus files in %s%s%s\n", argv[1], ec ? ": " : "",
                 ec ? ec.message().c_str() : "");
    return 1;
  }
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return 1;
    }
    std::fprintf(stderr, "replaying %s (%zu bytes)\n", path.filename().c_str(), bytes.size());
    DDPRUN_FUZZ_ENTRY(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu corpus inputs, all invariants held\n", files.size());
  return 0;
}
