// worker_env.cpp: the worker environment, command line and WorkerSpecs (see
// worker_env.h). Used by the Agent.
#include "launcher/worker_env.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "base/text.h"
#include "launcher/process/fr_dump.h"
#include "launcher/torch_version.h"

namespace ddprun::launcher {
namespace {

// --run-path: the script runs through runpy.run_path as __main__, as torchrun's
// run_script_path does, and an uncaught exception lands in TORCHELASTIC_ERROR_FILE as
// torchrun's @record-wrapped entry point writes it (unless the script's own @record
// already did). Then it propagates unchanged: same traceback on stderr, same exit code.
// sys.argv and sys.path[0] are what `python script args` gives.
constexpr const char* kRunPathBootstrap = R"py(import os, runpy, sys
s = sys.argv[1]
del sys.argv[0]
sys.path[0] = os.path.dirname(os.path.abspath(s))
try:
    runpy.run_path(s, run_name="__main__")
except Exception as e:
    p = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if p and not os.path.exists(p):
        import json, time, traceback
        tb, names = e.__traceback__, (s, os.path.abspath(s))
        while tb is not None and tb.tb_frame.f_code.co_filename not in names:
            tb = tb.tb_next
        stack = "".join(traceback.format_exception(type(e), e, tb or e.__traceback__))
        try:
            with open(p, "w") as f:
                json.dump({"message": {"message": "%s: %s" % (type(e).__name__, e),
                           "extraInfo": {"py_callstack": stack,
                                         "timestamp": str(int(time.time()))}}}, f)
        except OSError:
            pass
    raise
)py";

}  // namespace

bool defaults_omp_num_threads(const LaunchConfig& config, const EnvMap& agent_env) {
  return agent_env.count("OMP_NUM_THREADS") == 0 && config.nproc_per_node > 1;
}

EnvMap worker_env(const LaunchConfig& config, const AttemptFacts& attempt, const EnvMap& agent_env,
                  int local_rank, const std::string& error_file) {
  EnvMap env = agent_env;
  const auto& info = attempt.info;
  const int rank = info.rank_base + local_rank;
  env["LOCAL_RANK"] = std::to_string(config.virtual_local_rank ? 0 : local_rank);
  env["RANK"] = std::to_string(rank);
  env["GROUP_RANK"] = std::to_string(info.group_rank);
  // One role per job, so role ranks are the global ranks.
  env["ROLE_RANK"] = std::to_string(rank);
  env["ROLE_NAME"] = config.role;
  env["LOCAL_WORLD_SIZE"] = std::to_string(config.nproc_per_node);
  env["WORLD_SIZE"] = std::to_string(info.world_size);
  env["GROUP_WORLD_SIZE"] = std::to_string(info.group_world_size);
  env["ROLE_WORLD_SIZE"] = std::to_string(info.world_size);
  env["MASTER_ADDR"] = info.master_addr;
  env["MASTER_PORT"] = std::to_string(info.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(attempt.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(config.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = attempt.run_id;
  env["TORCHELASTIC_USE_AGENT_STORE"] = info.use_agent_store ? "True" : "False";
  env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = config.signals_to_handle_text;  // torchrun 2.9+
  env["TORCHELASTIC_ERROR_FILE"] = error_file;
  // The name that version reads (2.2+ warns about the old one); both when unknown. A
  // user's value is kept.
  // --no-python: no python of ours to ask; the name torchrun 2.x sets.
  const auto names = config.entry == EntryKind::kExecutable && !config.worker_torch_version
                         ? std::vector<std::string>{"TORCH_NCCL_ASYNC_ERROR_HANDLING"}
                         : nccl_async_error_handling_names(config.worker_torch_version);
  for (const auto& name : names) {
    env.emplace(name, "1");
  }
  // Gloo would bind to loopback here (the host name does not resolve to this machine).
  if (!info.gloo_socket_ifname.empty()) env.emplace("GLOO_SOCKET_IFNAME", info.gloo_socket_ifname);
  if (defaults_omp_num_threads(config, agent_env)) env["OMP_NUM_THREADS"] = "1";
  // The stall watchdog's SIGABRT makes faulthandler print every thread's stack; a user's
  // value (even "", which turns it off) is kept.
  if (config.stall_timeout_s > 0) env.emplace("PYTHONFAULTHANDLER", "1");
  if (!config.file_timer_path.empty()) env["TORCHELASTIC_TIMER_FILE"] = config.file_timer_path;
  if (config.virtual_local_rank) {
    const auto cvd = agent_env.find("CUDA_VISIBLE_DEVICES");
    if (cvd == agent_env.end()) {
      env["CUDA_VISIBLE_DEVICES"] = std::to_string(local_rank);
    } else {
      const auto devices = split(cvd->second, ',');
      if (local_rank < static_cast<int>(devices.size())) {
        env["CUDA_VISIBLE_DEVICES"] = std::string(trim(devices[local_rank]));  // as torchrun
      }
    }
  }
  return env;
}

std::vector<std::string> worker_argv(const LaunchConfig& config, int local_rank) {
  std::vector<std::string> argv;
  if (config.entry != EntryKind::kExecutable) {
    argv = {config.python_exec, "-u"};
    if (config.entry == EntryKind::kPythonModule) argv.push_back("-m");
    if (config.entry == EntryKind::kPythonScript && config.run_path) {
      argv.insert(argv.end(), {"-c", kRunPathBootstrap});
    }
  }
  argv.push_back(config.training_script);
  // torch.distributed.launch puts it right after the script, before the script's args.
  if (config.passes_local_rank_arg()) {
    argv.push_back("--local_rank=" + std::to_string(local_rank));
  }
  for (const auto& arg : config.script_args) {
    argv.push_back(substitute_local_rank(arg, local_rank));
  }
  return argv;
}

std::vector<std::string> to_env_strings(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

namespace {

// The short host name (torchrun's socket.gethostname()), for ${hostname}.
std::string short_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace

std::vector<WorkerSpec> make_worker_specs(const LaunchConfig& config, const AttemptFacts& attempt,
                                          const EnvMap& agent_env, const RunDirs& dirs,
                                          const std::vector<RankPlacement>& numa_plan) {
  const int n = attempt.restart_count;
  const std::string& prefix_template = config.log_line_prefix_template;
  const std::string hostname = prefix_template.empty() ? "" : short_hostname();
  std::vector<WorkerSpec> specs;
  // --log-dir /dev/null: as torchrun, no file, and so -r/-t and --local-ranks-filter do
  // nothing: every rank writes to the console.
  const bool files = !dirs.files_disabled();
  const auto shown_rank = [&](int lr) {
    return !files || !config.local_ranks_filter || config.local_ranks_filter->count(lr) > 0;
  };
  // The one rank --local-ranks-filter shows reads the agent's stdin alone (a breakpoint()
  // there must get what is typed); the hidden ranks get /dev/null. Otherwise every rank
  // inherits it, as with torchrun.
  int shown_ranks = 0;
  for (int lr = 0; lr < config.nproc_per_node; ++lr) {
    shown_ranks += shown_rank(lr);
  }
  for (int lr = 0; lr < config.nproc_per_node; ++lr) {
    WorkerSpec w;
    w.local_rank = lr;
    // Workers see a terminal where the agent's console is one (output_router.h).
    w.terminal = true;
    w.global_rank = attempt.info.rank_base + lr;
    w.argv = worker_argv(config, lr);
    w.env = to_env_strings(worker_env(config, attempt, agent_env, lr, dirs.error_file(n, lr)));
    // With the stall watchdog, the file PyTorch's flight recorder is dumped to at a stall,
    // named as its analyzer expects; none with --log-dir /dev/null (no files).
    if (config.stall_timeout_s > 0 && files) {
      w.flight_recorder_file = (std::filesystem::path(dirs.flight_recorder_dir(n)) /
                                (fr_dump_prefix(w.env) + std::to_string(w.global_rank)))
                                   .string();
    }
    if (lr < static_cast<int>(numa_plan.size())) {
      w.cpus.assign(numa_plan[lr].cpus.begin(), numa_plan[lr].cpus.end());
    }

    const bool shown = shown_rank(lr);
    w.stdin_null = shown_ranks == 1 && config.nproc_per_node > 1 && !shown;
    const int tee = files ? config.tee.for_rank(lr) : 0;
    const int redirect = files ? config.redirects.for_rank(lr) : 0;
    const auto stream = [&](int bit, const char* name) {
      StreamSpec s;
      if (tee & bit) {
        s.mode = StreamMode::kTee;
      } else if ((redirect & bit) || !shown) {
        s.mode = StreamMode::kRedirect;
      }
      if (s.mode != StreamMode::kConsole) {
        // A rank filtered off the console keeps its output only where it was redirected
        // or tee'd to its log file; else it goes nowhere, as with torchrun.
        const bool to_file = ((tee | redirect) & bit) && !dirs.files_disabled();
        s.file = to_file
                     ? (std::filesystem::path(dirs.rank_dir(n, lr)) / (std::string(name) + ".log"))
                           .string()
                     : "/dev/null";
      }
      s.show_on_console = shown;
      // torchrun: the tee'd lines matching a filter, from every rank, in one file.
      const auto& filters = bit == StdStreams::kOut ? config.duplicate_stdout_filters
                                                    : config.duplicate_stderr_filters;
      if ((tee & bit) && !filters.empty()) {
        s.duplicate_filters = filters;
        s.duplicate_file = (std::filesystem::path(dirs.attempt_dir(n)) /
                            (std::string("filtered_") + name + ".log"))
                               .string();
      }
      return s;
    };
    w.out = stream(StdStreams::kOut, "stdout");
    w.err = stream(StdStreams::kErr, "stderr");
    if (!prefix_template.empty()) {
      // torchrun: string.Template(template).safe_substitute of these four.
      w.line_prefix = safe_substitute(prefix_template, {{"role_name", config.role},
                                                        {"rank", std::to_string(w.global_rank)},
                                                        {"local_rank", std::to_string(lr)},
                                                        {"hostname", hostname}});
    } else if (tee != 0) {
      w.line_prefix = fmt::format("[{}{}]:", config.role, lr);
    }
    specs.push_back(std::move(w));
  }
  return specs;
}

}  // namespace ddprun::launcher
