// signals.cpp: blocking, signalfd, and signal names and numbers (see signals.h). Used by
// main, the supervisor, the Agent and the option readers.
#include "launcher/process/signals.h"

#include <pthread.h>
#include <sys/signalfd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <csignal>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "base/text.h"

namespace ddprun::launcher {
namespace {

// Standard Linux signal names (without "SIG"); SIGIOT/SIGPOLL/SIGCLD are aliases whose
// numbers map back to their canonical names.
constexpr std::array<std::pair<std::string_view, int>, 34> kNames = {{
    {"HUP", SIGHUP},   {"INT", SIGINT},       {"QUIT", SIGQUIT}, {"ILL", SIGILL},
    {"TRAP", SIGTRAP}, {"ABRT", SIGABRT},     {"BUS", SIGBUS},   {"FPE", SIGFPE},
    {"KILL", SIGKILL}, {"USR1", SIGUSR1},     {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
    {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},     {"TERM", SIGTERM}, {"STKFLT", SIGSTKFLT},
    {"CHLD", SIGCHLD}, {"CONT", SIGCONT},     {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},
    {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU},     {"URG", SIGURG},   {"XCPU", SIGXCPU},
    {"XFSZ", SIGXFSZ}, {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
    {"IO", SIGIO},     {"PWR", SIGPWR},       {"SYS", SIGSYS},   {"IOT", SIGIOT},
    {"POLL", SIGPOLL}, {"CLD", SIGCHLD},
}};

sigset_t make_set(const std::vector<int>& signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) {
    if (sigaddset(&set, s) != 0) throw_errno("sigaddset(" + std::to_string(s) + ")");
  }
  return set;
}

std::string upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

void block_signals(const std::vector<int>& signals) {
  sigset_t set = make_set(signals);
  int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr);
  if (rc != 0) throw_errno("pthread_sigmask", rc);
}

void prepare_agent_signals(const std::vector<int>& handled) {
  std::vector<int> all = handled;
  all.push_back(SIGCHLD);
  block_signals(all);
  if (std::signal(SIGPIPE, SIG_IGN) == SIG_ERR) throw_errno("signal(SIGPIPE)");
}

UniqueFd make_signalfd(const std::vector<int>& signals) {
  sigset_t set = make_set(signals);
  UniqueFd fd(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd) throw_errno("signalfd");
  return fd;
}

int signal_from_name(std::string_view name) {
  std::string_view text = trim(name);
  auto unknown = [&] {
    return std::invalid_argument("unknown signal '" + std::string(name) + "'");
  };
  if (text.empty()) throw unknown();
  if (std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const auto n = text.size() <= 3 ? parse_int<int>(text) : std::nullopt;
    if (!n || *n < 1 || *n >= NSIG) throw unknown();
    return *n;
  }
  std::string up = upper(text);
  std::string_view bare = up;
  if (bare.starts_with("SIG")) bare.remove_prefix(3);
  for (const auto& [n, num] : kNames) {
    if (n == bare) return num;
  }
  throw unknown();
}

std::vector<int> parse_signal_list(std::string_view list, std::vector<std::string>* unknown) {
  std::vector<int> out;
  for (const auto& name : split(list, ',')) {
    int s = 0;
    try {
      s = signal_from_name(name);
    } catch (const std::invalid_argument& e) {
      if (unknown == nullptr) throw;
      unknown->push_back(e.what());
      continue;
    }
    if (s == SIGKILL || s == SIGSTOP) {
      throw std::invalid_argument(signal_name(s) + " cannot be handled");
    }
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

std::string signal_name(int signo) {
  for (const auto& [n, num] : kNames) {
    if (num == signo) return "SIG" + std::string(n);
  }
  if (signo >= SIGRTMIN && signo <= SIGRTMAX) {
    return signo == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(signo - SIGRTMIN);
  }
  return "SIG" + std::to_string(signo);
}

}  // namespace ddprun::launcher
