// The start-up timeline's report and codec (launcher/jobwide/startup_timeline.h).
#include "launcher/jobwide/startup_timeline.h"

#include <catch2/catch.hpp>

using namespace ddprun::launcher;

namespace {

constexpr std::int64_t kStartNs = 1'800'000'000'000'000'000;

// Rank `rank` on `host`: interpreter 0.1 s, import torch `import_s`, group 2 s, first
// collective 0.5 s.
RankStartup started(int rank, std::string host, double import_s) {
  RankStartup r{rank, std::move(host), {}};
  const auto at = [](double s) { return kStartNs + static_cast<std::int64_t>(s * 1e9); };
  r.times = {at(0), at(0.1), at(0.1 + import_s), at(2.1 + import_s), at(2.6 + import_s)};
  return r;
}

}  // namespace

TEST_CASE("start-up: the rank that took long to import torch, against the median", "[startup]") {
  const auto report = startup_report(
      {started(0, "a", 2), started(1, "a", 2.2), started(2, "b", 1.9), started(3, "b", 9)});
  REQUIRE(report.ranks.size() == 4);
  CHECK(*report.ranks[3].phase[1] == Approx(9));
  REQUIRE(report.summary.size() == 4);
  CHECK(report.summary[1] ==
        "start-up: import torch: median 2.1 s over 4 ranks, slowest rank 3 on b 9 s");
  REQUIRE(report.warnings.size() == 1);
  CHECK(report.warnings[0].line ==
        "start-up: rank 3 on b took 9 s to import torch (median of 4 ranks 2.1 s)");
  CHECK(report.warnings[0].ranks == std::vector<int>{3});
  CHECK(report.warnings[0].names_any_of(2, 2));  // node 1's ranks 2..3
  CHECK_FALSE(report.warnings[0].names_any_of(0, 2));
  // Twice the median but not 3 s more: not said.
  CHECK(startup_report({started(0, "a", 1), started(1, "a", 1), started(2, "b", 2.5)})
            .warnings.empty());
}

TEST_CASE("start-up: a host all of whose ranks took long is named once", "[startup]") {
  const auto report = startup_report({started(0, "a", 2), started(1, "a", 2), started(2, "b", 2),
                                      started(3, "b", 2), started(4, "c", 9), started(5, "c", 10)});
  REQUIRE(report.warnings.size() == 1);
  CHECK(report.warnings[0].line ==
        "start-up: host c (ranks 4,5) took 9-10 s to import torch (median of 6 ranks 2 s)");
  CHECK(report.warnings[0].ranks == std::vector<int>{4, 5});
}

TEST_CASE("start-up: unknown phases are left out, never negative", "[startup]") {
  RankStartup early = started(0, "a", 2);
  early.times.first_collective = early.times.group - 5'000'000;  // sampled before the group
  RankStartup no_torch = started(1, "a", 2);
  no_torch.times.torch = no_torch.times.group = no_torch.times.first_collective = 0;
  const auto report = startup_report({early, no_torch});
  CHECK(*report.ranks[0].phase[3] == 0);
  CHECK_FALSE(report.ranks[1].phase[1]);
  CHECK(report.summary.size() == 1);  // only the interpreter's phase has two ranks
}

TEST_CASE("start-up: codec round trip, and bad input named", "[startup]") {
  const std::vector<RankStartup> ranks = {started(0, "a", 2), started(7, "gpu-07", 3)};
  std::string error;
  const auto back = decode_startup(encode_startup(ranks), error);
  REQUIRE(back);
  REQUIRE(back->size() == 2);
  CHECK((*back)[1].rank == 7);
  CHECK((*back)[1].host == "gpu-07");
  CHECK((*back)[1].times == ranks[1].times);
  for (const std::string& bad :
       {std::string("["), std::string(R"({"version":3,"ranks":[]})"),
        std::string(R"({"version":1,"ranks":[{"rank":0,"host":"a","t":[1]}]})"),
        std::string(kMaxStartupBytes + 1, ' ')}) {
    error.clear();
    CHECK_FALSE(decode_startup(bad, error));
    CHECK_FALSE(error.empty());
    CHECK(error.find('\n') == std::string::npos);
  }
}

TEST_CASE("named lines: codec round trip, and bad input named", "[startup][straggler]") {
  const std::vector<NamedLine> lines = {{"start-up: rank 3 on b took 9 s", {3}},
                                        {"host c (ranks 4,5) \xff late", {4, 5}},
                                        {"and 2 more", {}}};
  std::string error;
  const auto back = decode_named_lines(encode_named_lines(lines), error);
  REQUIRE(back);
  REQUIRE(back->size() == 3);
  CHECK((*back)[0] == lines[0]);
  CHECK((*back)[1].ranks == lines[1].ranks);  // the invalid byte replaced, the ranks kept
  CHECK_FALSE((*back)[2].names_any_of(0, 1000));
  CHECK((*back)[1].names_any_of(5, 1));
  CHECK_FALSE((*back)[1].names_any_of(6, 2));
  CHECK_FALSE((*back)[1].names_any_of(2, 2));
  for (const std::string& bad : {std::string(""), std::string(R"({"version":2,"lines":[]})"),
                                 std::string(R"({"version":1,"lines":[{"line":"x","ranks":"3"}]})"),
                                 std::string(kMaxNamedLinesBytes + 1, ' ')}) {
    error.clear();
    CHECK_FALSE(decode_named_lines(bad, error));
    CHECK_FALSE(error.empty());
    CHECK(error.find('\n') == std::string::npos);
  }
}
