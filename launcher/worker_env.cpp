// worker_env.cpp: the worker environment and command line (see worker_env.h).
#include "launcher/worker_env.h"

#include "launcher/torch_version.h"

namespace ddprun::launcher {
namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::string::size_type start = 0;
  while (start <= s.size()) {
    auto end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

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
  env["TORCHELASTIC_ERROR_FILE"] = error_file;
  // The name that version reads (2.2+ warns about the old one); both when unknown. A
  // user's value is kept.
  for (const auto& name : nccl_async_error_handling_names(config.worker_torch_version)) {
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
      const auto devices = split_commas(cvd->second);
      if (local_rank < static_cast<int>(devices.size())) {
        env["CUDA_VISIBLE_DEVICES"] = devices[local_rank];
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

}  // namespace ddprun::launcher
