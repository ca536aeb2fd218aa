// preflight_verdict.h: the pre-flight check's job-wide verdict (--preflight,
// docs/preflight.md), pure: every node's findings (NodeResult, shared through the round's
// JobBoard as JSON), which nodes are bad (a failed check, no result, or slower than
// --preflight-slow-factor times the median), what the round does about them (run, leave
// them out, or stop), and the table every node prints. Used by preflight.cpp and the
// tests. Thread-safety: pure functions over values.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher::preflight {

// One check of the program (preflight_script.h): "import torch", a device ("cpu",
// "cuda:0"), "collective".
struct Check {
  std::string name;
  bool ok = false;
  double seconds = 0;
  std::string text;  // what it found (a version, a device name) or, failed, the error
};

struct NodeResult {
  int node = 0;              // group rank in the round
  std::string host;          // as messages name it (node_label)
  std::string key;           // as the block-list names it (--local-addr, else the host name)
  std::string address;       // the address it published to its peers ("" for one node)
  bool hosts_store = false;  // hosts the rendezvous store: cannot be left out of the job
  std::string python;        // the interpreter that ran the checks
  std::vector<Check> checks;
  std::map<int, double> links;  // node -> seconds its ring transfer took to arrive here
  std::string missing;          // why there are no findings ("" when there are)
};

// The program's output file read into `r` (python, checks, links); false (and
// `r.missing` says why) when it is not the program's JSON.
bool read_findings(const std::string& text, NodeResult& r);
// `r` as shared through the board, and back; a value that does not parse gives a result
// whose `missing` says so.
std::string to_json(const NodeResult& r);
NodeResult from_json(int node, const std::string& text);

struct Settings {
  double slow_factor = 3;  // slower than this times the median: bad
  int min_nodes = 1;       // --nnodes MIN
  int waiting = 0;         // spares waiting to join the next round
};

struct Bad {
  int node = 0;
  std::string why;  // one phrase: "import torch: ModuleNotFoundError: ...", "cpu 2.1 s ..."
};

struct Verdict {
  enum class Action { kRun, kExclude, kStop };
  Action action = Action::kRun;
  std::vector<Bad> bad;  // by node
  std::string why;       // kStop: why the bad nodes cannot be left out
};

// Absolute slack under which nothing is called slow, whatever the factor: timings of a
// tenth of a second differ by more than that on any busy machine.
inline constexpr double kSlowFloorSeconds = 0.1;

// The verdict on the round's findings (one per node, by node).
Verdict judge(const std::vector<NodeResult>& nodes, const Settings& s);
// The verdict as node 0 publishes it on the board: the verdict, the number of nodes and
// the bad nodes' findings (the rows the other nodes print and the block-list keeps).
std::string publish(const Verdict& v, const std::vector<NodeResult>& nodes);
// Back: the verdict, and `nodes` one per node of the round, the bad ones' findings filled
// in, the others only their node number. Unreadable: a kStop verdict saying so.
Verdict read_published(const std::string& text, std::vector<NodeResult>& nodes);

// The board exchange's answers (board_exchange.h), from every node's shared value by node
// ("" for a node silent until the step's deadline):
// who needs the check: kSkip when every node passed it before ("0"), else kRun.
inline constexpr const char* kRun = "run";
inline constexpr const char* kSkip = "skip";
std::string need_answer(const std::vector<std::string>& values);
// the findings (to_json): kGo when `last` is false and every node passed its local checks
// (the collective runs next), else the published verdict on them. `read` (if not null)
// gets every node's findings; a silent node's says it shared none within `waited`.
inline constexpr const char* kGo = "go";
std::string findings_answer(const std::vector<std::string>& values, bool last, const Settings& s,
                            std::chrono::milliseconds waited, std::vector<NodeResult>* read);
// The findings as a table, one line per node, "bad" nodes saying why, e.g.
//   node host                   torch     import  devices        collective links  verdict
//   0    gpu-01 (10.0.0.1)      2.14.0    1.21 s  cpu 0.08 s     0.05 s     0.02 s ok
// `all_rows` false: the bad nodes' rows only (the other nodes of a large job print those,
// node 0 the whole table).
std::string table(const std::vector<NodeResult>& nodes, const Verdict& v, bool all_rows = true);

}  // namespace ddprun::launcher::preflight
