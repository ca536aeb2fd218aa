// ddprun_store_main.cpp: the ddprun-store binary. `serve` runs a TcpStoreServer until
// SIGINT/SIGTERM; the other commands inspect or change a running store (any server that
// speaks the modern TCPStore dialect) through a TcpStore client.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "base/open_files.h"
#include "base/text.h"
#include "ddprun_version.h"
#include "packaging/cli_dump.h"
#include "store/core/host_port.h"
#include "store/store.h"
#include "store/tcp_store_client.h"
#include "store/tcp_store_server.h"

namespace {

using ddprun::store::escape_bytes;
using ddprun::store::Store;

constexpr int kExitFailure = 1;  // the store said no, or cannot be reached
constexpr int kExitUsage = 2;    // bad arguments

// Bad command-line input found after parsing (e.g. a malformed --addr).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ServeArgs {
  std::string host;
  std::uint16_t port = 29500;
  ddprun::store::ServerOptions options;
};

struct ClientArgs {
  std::string addr = "127.0.0.1:29500";
  double connect_timeout_s = 5.0;
  double timeout_s = 300.0;
  std::string key;                // commands on one key
  std::vector<std::string> keys;  // wait
  std::string value;
  std::int64_t delta = 0;
  bool raw = false;
};

Store::Duration seconds_arg(double s) {
  return Store::Duration(static_cast<Store::Duration::rep>(s * 1000.0));
}

// "host:port" or "[v6]:port".
std::pair<std::string, std::uint16_t> parse_addr(const std::string& addr) {
  std::string host;
  std::string_view port_text;
  if (!ddprun::store::split_host_port(addr, host, port_text).empty() || port_text.empty()) {
    throw UsageError("--addr '" + addr + "' is not HOST:PORT");
  }
  const auto port = ddprun::store::parse_port(port_text);
  if (!port || *port == 0) {
    throw UsageError("--addr '" + addr + "': port must be a number in 1..65535");
  }
  return {host, static_cast<std::uint16_t>(*port)};
}

int serve(ServeArgs& args) {
  // Blocked before the io thread starts so that it inherits the mask and the signals
  // are consumed here, synchronously, by sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // As many connections as the hard limit allows (one descriptor each).
  if (!ddprun::OpenFilesLimit::raise()) spdlog::warn("cannot raise the open-files limit");

  args.options.host = args.host;
  args.options.port = args.port;
  ddprun::store::TcpStoreServer server(args.options);
  std::uint16_t port = 0;
  try {
    port = server.start();
  } catch (const std::exception& e) {
    std::cerr << "ddprun-store: " << e.what() << "\n";
    return kExitFailure;
  }
  const std::string shown =
      ddprun::store::format_host_port(args.host.empty() ? "*" : args.host, port);
  std::printf("ddprun-store listening on %s\n", shown.c_str());
  std::fflush(stdout);
  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  spdlog::info("ddprun-store: signal {} received, stopping", sig);
  server.stop();
  return 0;
}

std::unique_ptr<ddprun::store::TcpStore> connect(const ClientArgs& args) {
  auto [host, port] = parse_addr(args.addr);
  ddprun::store::TcpStoreOptions opts;
  opts.host = host;
  opts.port = port;
  opts.connect_timeout = seconds_arg(args.connect_timeout_s);
  opts.timeout = seconds_arg(args.timeout_s);
  return std::make_unique<ddprun::store::TcpStore>(opts);
}

// Keys are typed as `keys` and the error lines print them (escape_bytes): `\xNN` for
// a byte that is not printable ASCII, `\\` for a backslash.
void unescape_keys(ClientArgs& args) {
  try {
    args.key = ddprun::store::unescape_bytes(args.key);
    for (std::string& k : args.keys) k = ddprun::store::unescape_bytes(k);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("KEY ") + e.what());
  }
}

int missing_key(const std::string& key) {
  std::cerr << "ddprun-store: key '" << escape_bytes(key) << "' does not exist\n";
  return kExitFailure;
}

int run_client(const std::string& command, const ClientArgs& args) {
  auto store = connect(args);
  if (command == "keys") {
    for (const std::string& key : store->list_keys()) std::cout << escape_bytes(key) << "\n";
  } else if (command == "get") {
    const std::string& key = args.key;
    if (!store->check({key})) return missing_key(key);
    std::string value = store->get(key);
    if (args.raw) {
      std::cout << value;
    } else {
      std::cout << escape_bytes(value) << "\n";
    }
  } else if (command == "set") {
    store->set(args.key, args.value);
    // SET has no reply; a round trip shows whether the store took it (a store refusing
    // it, e.g. over --max-value-bytes, closes the connection instead).
    store->check({args.key});
  } else if (command == "add") {
    std::cout << store->add(args.key, args.delta) << "\n";
  } else if (command == "num-keys") {
    std::cout << store->num_keys() << "\n";
  } else if (command == "wait") {
    store->wait(args.keys);
  } else if (command == "delete") {
    if (!store->delete_key(args.key)) return missing_key(args.key);
  }
  std::cout.flush();
  return 0;
}

// The first line of every usage error, and the hint after it.
int usage_failure(const std::string& what) {
  std::cerr << "ddprun-store: error: " << what
            << "\nRun 'ddprun-store --help' or 'ddprun-store COMMAND --help' for usage.\n";
  return kExitUsage;
}

// CLI11 checks (whole_number: a transform, to pass on its canonical form) that read numbers as
// ddprun does: the whole argument, decimal, in range, else one line naming the option and the
// range. (CLI11's own ranges print DBL_MAX in 309 digits, and its integer conversion saturates:
// 99999999999999999999 became INT64_MAX.)
template <typename T>
CLI::Validator whole_number(T lo, T hi, const std::string& shown_in_help) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const auto v = ddprun::parse_int<T>(text);
        if (!v || *v < lo || *v > hi) return "'" + text + "' is not a whole number in " + range;
        text = std::to_string(*v);  // CLI11 converts this: "010" stays ten, not octal eight
        return {};
      },
      shown_in_help);
}

// Seconds: a finite decimal number in [0, kMaxSeconds] (above 0 unless `zero_ok`), so that
// seconds_arg's milliseconds fit.
constexpr double kMaxSeconds = 1e9;
CLI::Validator seconds(bool zero_ok) {
  const std::string range = zero_ok ? "[0, 1000000000]" : "(0, 1000000000]";
  return CLI::Validator(
      [zero_ok, range](std::string& text) -> std::string {
        double v = 0;
        const char* last = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), last, v);
        if (text.empty() || ec != std::errc() || ptr != last || !std::isfinite(v) || v < 0 ||
            (v == 0 && !zero_ok) || v > kMaxSeconds) {
          return "'" + text + "' is not a number of seconds in " + range;
        }
        return {};
      },
      "SECONDS in " + range);
}

// A server limit: a positive count, its default shown in --help.
void add_limit(CLI::App* cmd, const char* name, std::size_t& value, const char* help = "") {
  cmd->add_option(name, value, help)
      ->capture_default_str()
      ->transform(
          whole_number<std::size_t>(1, std::numeric_limits<std::size_t>::max(), "POSITIVE"));
}

void add_serve_command(CLI::App& app, ServeArgs& args, std::string& log_level) {
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Run a store until SIGINT/SIGTERM. Prints one line, 'ddprun-store listening on "
      "HOST:PORT', to stdout once it accepts connections.");
  cmd->add_option("--host", args.host,
                  "Address to bind (default: all interfaces, IPv6 dual-stack)");
  cmd->add_option("--port", args.port, "Port to bind; 0 lets the OS choose")
      ->capture_default_str()
      ->transform(whole_number<std::uint16_t>(0, 65535, "0..65535"));
  add_limit(cmd, "--max-connections", args.options.max_connections,
            "Connections beyond this are closed at once");
  add_limit(cmd, "--max-key-bytes", args.options.limits.max_key_bytes);
  add_limit(cmd, "--max-value-bytes", args.options.limits.max_value_bytes);
  add_limit(cmd, "--max-keys-per-request", args.options.limits.max_keys_per_request);
  add_limit(cmd, "--max-request-bytes", args.options.limits.max_request_bytes);
  add_limit(cmd, "--max-reply-bytes", args.options.max_reply_bytes,
            "A request whose reply would be larger closes its connection");
  add_limit(cmd, "--max-connection-output-bytes", args.options.max_connection_output_bytes,
            "A connection with this many reply bytes unsent is not read until its client reads");
  add_limit(cmd, "--max-output-bytes", args.options.max_output_bytes,
            "Unsent reply bytes of all connections together; a reply that would pass this "
            "waits");
  cmd->add_option("--log-level", log_level)
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
}

void add_client_commands(CLI::App& app, ClientArgs& args) {
  auto client_cmd = [&](const char* name, const char* help) {
    CLI::App* cmd = app.add_subcommand(name, help);
    cmd->add_option("--addr", args.addr, "Store address HOST:PORT")
        ->capture_default_str()
        ->envname("DDPRUN_STORE_ADDR");
    cmd->add_option("--connect-timeout", args.connect_timeout_s,
                    "Seconds to keep trying to connect")
        ->capture_default_str()
        ->check(seconds(true));
    return cmd;
  };
  client_cmd("keys", "List every key");
  CLI::App* get_cmd = client_cmd("get", "Print a key's value (does not wait for it)");
  get_cmd->add_option("KEY", args.key, "Key")->required();
  get_cmd->add_flag("--raw", args.raw, "Print the value's bytes as they are");
  CLI::App* set_cmd = client_cmd("set", "Set a key");
  set_cmd->add_option("KEY", args.key, "Key")->required();
  set_cmd->add_option("VALUE", args.value, "Value")->required();
  CLI::App* add_cmd = client_cmd("add", "Add N to a decimal counter; prints the new value");
  add_cmd->add_option("KEY", args.key, "Key")->required();
  add_cmd->add_option("N", args.delta, "Amount (may be negative)")
      ->required()
      ->transform(whole_number(std::numeric_limits<std::int64_t>::min(),
                               std::numeric_limits<std::int64_t>::max(), ""));
  client_cmd("num-keys", "Print the number of keys");
  CLI::App* wait_cmd = client_cmd("wait", "Block until every KEY exists");
  wait_cmd->add_option("KEY", args.keys, "Keys")->required();
  wait_cmd->add_option("--timeout", args.timeout_s, "Seconds before giving up")
      ->capture_default_str()
      ->check(seconds(false));
  CLI::App* delete_cmd = client_cmd("delete", "Delete a key");
  delete_cmd->add_option("KEY", args.key, "Key")->required();
}

// Runs the parsed subcommand: exit status 0, kExitFailure (the store) or kExitUsage.
int run_command(const std::string& command, ServeArgs& serve_args, ClientArgs& client_args,
                const std::string& log_level) {
  try {
    if (command == "serve") {
      spdlog::set_level(spdlog::level::from_str(log_level));
      return serve(serve_args);
    }
    unescape_keys(client_args);
    return run_client(command, client_args);
  } catch (const UsageError& e) {
    return usage_failure(e.what());
  } catch (const std::exception& e) {
    std::cerr << "ddprun-store: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace

// Only building the logger and the CLI11 app, before any work, can throw (allocation);
// terminating then is right.
// NOLINTNEXTLINE(bugprone-exception-escape)
int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("ddprun-store"));

  CLI::App app{
      "ddprun-store: a PyTorch-compatible TCPStore server (serves PyTorch 1.13/2.0 and 2.2+ "
      "clients on one port) and a tool to inspect a running store.",
      "ddprun-store"};
  app.require_subcommand(0, 1);  // exactly one, checked below (--version has none)
  app.set_version_flag("--version", std::string("ddprun-store ") + DDPRUN_VERSION_TEXT,
                       "Print the version and exit");
  bool dump_cli = false;  // for the man page and completion (packaging/clidoc.py)
  app.add_flag(ddprun::packaging::kDumpCliOption, dump_cli)->group("");
  app.footer(
      "Keys are shown and typed exactly as stored; PyTorch clients prepend '/' to their keys "
      "(torch's store.set('k', ...) stores '/k').\nBytes that are not printable ASCII are shown "
      "as \\xNN and a backslash as \\\\; KEY arguments are typed the same way.\n"
      "Exit status: 0 success, 1 store error (unreachable, missing key, timeout), 2 bad "
      "arguments.");
  ServeArgs serve_args;
  std::string log_level = "info";
  add_serve_command(app, serve_args, log_level);
  ClientArgs client_args;
  add_client_commands(app, client_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return usage_failure(e.what());
  }
  if (dump_cli) {
    std::cout << ddprun::packaging::app_json(app, "ddprun-store COMMAND [OPTIONS]", DDPRUN_VERSION);
    return 0;
  }
  if (app.get_subcommands().empty()) return usage_failure("A subcommand is required");
  return run_command(app.get_subcommands().front()->get_name(), serve_args, client_args, log_level);
}
