// cli.cpp: the CLI11 binding of torchrun's options (see cli.h). CLI11 only collects raw
// strings here; build_config (config.cpp) interprets and checks them, so every message
// about a value comes from one place.
#include "launcher/options/cli.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <string_view>

#include "base/file.h"
#include "base/text.h"
#include "ddprun_version.h"
#include "launcher/options/accelerators.h"
#include "launcher/options/nproc.h"
#include "launcher/options/option_table.h"
#include "launcher/options/slurm_env.h"
#include "launcher/options/status_options.h"
#include "packaging/cli_dump.h"

extern char** environ;

namespace ddprun::launcher {
namespace {

const OptionDef* find_option(const std::string& name) {
  for (const auto& def : option_table()) {
    std::string names = def.names;
    for (std::size_t start = 0; start < names.size();) {
      const auto comma = names.find(',', start);
      if (names.substr(start, comma - start) == name) return &def;
      start = comma == std::string::npos ? names.size() : comma + 1;
    }
  }
  return nullptr;
}

// The launcher's own arguments (`expanded`, up to the training script) that the remote
// agents of an ssh launch are given: all but the ssh group's and --log-dir (the launcher
// keeps the hosts' logs locally), each option with its value.
std::vector<std::string> agent_options(const std::vector<std::string>& expanded) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < expanded.size(); ++i) {
    const std::string& arg = expanded[i];
    if (arg == "--" || arg.empty() || arg[0] != '-') break;  // the training script
    const auto eq = arg.find('=');
    const OptionDef* def = find_option(arg.substr(0, eq));
    std::size_t take = 1;
    if (def && !def->is_flag && eq == std::string::npos && i + 1 < expanded.size()) take = 2;
    const bool keep = !def || (def->group != kSsh && def->group != kHidden &&
                               std::string_view(def->dest) != "log_dir");
    for (std::size_t k = 0; k < take; ++k) {
      if (keep) out.push_back(expanded[i + k]);
    }
    i += take - 1;
  }
  return out;
}

std::string pet_name(const char* dest) {
  std::string out = "PET_";
  for (const char* p = dest; *p; ++p) {
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  }
  return out;
}

// CLI11's usage line does not know about the REMAINDER-style positionals.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "usage: " + name + " [OPTIONS] training_script [training_script_args...]\n";
  }
};

// Python also runs directories and zip files that hold a __main__.py, so any existing
// path is accepted; a missing one is what users mistype.
bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// argparse (torchrun's parser) accepts any unambiguous prefix of a long option
// ("--nproc 4", "--max_rest=2"). Expands those among the launcher's own arguments (up to
// the training script) to the full name; ambiguous or unknown prefixes are left for CLI11
// to reject. Throws UsageError for an ambiguous prefix.
std::vector<std::string> expand_abbreviations(const std::vector<std::string>& args) {
  std::vector<std::string> out = args;
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::string& arg = out[i];
    if (arg == "--" || arg.empty() || arg[0] != '-') break;  // the training script
    const auto eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const bool empty_value = eq != std::string::npos && eq + 1 == arg.size();
    const OptionDef* exact = nullptr;
    std::vector<std::pair<const OptionDef*, std::string>> matches;
    for (const auto& def : option_table()) {
      std::string names = def.names;
      for (std::size_t start = 0; start < names.size();) {
        const auto comma = names.find(',', start);
        const std::string n = names.substr(start, comma - start);
        if (n == name) exact = &def;
        if (n.size() > 2 && n.rfind("--", 0) == 0 && name.size() > 2 && n.rfind(name, 0) == 0 &&
            (matches.empty() || matches.back().first != &def)) {
          matches.emplace_back(&def, n);
        }
        start = comma == std::string::npos ? names.size() : comma + 1;
      }
    }
    if (!exact && name.rfind("--", 0) == 0 && name.size() > 2 && matches.size() > 1) {
      std::string all;
      for (const auto& m : matches) all += (all.empty() ? "" : ", ") + m.second;
      throw UsageError(fmt::format("ambiguous option: {} could match {}", name, all));
    }
    if (!exact && matches.size() == 1) {
      exact = matches.front().first;
      arg = matches.front().second + (eq == std::string::npos ? "" : arg.substr(eq));
    }
    // "--opt=" is an empty value (as in argparse). CLI11 would drop the empty part and
    // take the next argument (the training script) as the value; give it "" instead.
    if (exact && !exact->is_flag && empty_value && name.rfind("--", 0) == 0) {
      arg.pop_back();
      out.insert(out.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::string());
      ++i;
      continue;
    }
    // A value option given without '=' takes the next argument as its value.
    if (exact && !exact->is_flag && eq == std::string::npos && name.rfind("--", 0) == 0) ++i;
    if (exact && !exact->is_flag && name.size() == 2 && arg.size() == 2) ++i;  // -r 3, -t 3
  }
  return out;
}

// A value read from PET_<NAME> that build_config refuses: its message names the flag
// ("--nnodes: ..."); say which variable the value came from ("PET_NNODES (--nnodes): ...").
std::string name_env_source(const std::string& text,
                            const std::map<std::string, std::string>& env_dests) {
  for (const auto& [dest, env_name] : env_dests) {
    std::string flag = "--" + dest;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (text.rfind(flag, 0) == 0 &&
        (text.size() == flag.size() ||
         std::string_view(":= ").find(text[flag.size()]) != std::string_view::npos)) {
      return env_name + " (" + flag + ")" + text.substr(flag.size());
    }
  }
  return text;
}

// --print-completion SHELL (torchrun 2.14): the completion script installed with ddprun
// (generated at build time by packaging/clidoc.py), found beside this executable: the
// install prefix's share/, or the build tree's packaging/. Throws UsageError.
std::string completion_script(const std::string& shell) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  const std::vector<fs::path> candidates =
      shell == "bash" ? std::vector<fs::path>{dir / "../share/bash-completion/completions/ddprun",
                                              dir / "../packaging/bash/ddprun"}
                      : std::vector<fs::path>{dir / "../share/zsh/vendor-completions/_ddprun",
                                              dir / "../share/zsh/site-functions/_ddprun",
                                              dir / "../packaging/zsh/_ddprun"};
  for (const auto& path : shell == "tcsh" ? std::vector<fs::path>{} : candidates) {
    if (!fs::is_regular_file(path, ec)) continue;
    if (auto text = read_file(path)) return *std::move(text);
  }
  throw UsageError(fmt::format("--print-completion {}: {}", shell,
                               shell == "tcsh"
                                   ? "ddprun has bash and zsh completion only"
                                   : "no completion script installed beside " + dir.string() +
                                         " (it is part of the deb and the CMake install)"));
}

}  // namespace

std::string usage_hint() {
  return "usage: ddprun [OPTIONS] training_script [training_script_args...] "
         "(see ddprun --help)";
}

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

HostFacts current_host_facts() {
  HostFacts host;
  host.env = current_environment();
  host.cpu_count = cpu_count();
  const auto cvd = host.env.find("CUDA_VISIBLE_DEVICES");
  host.gpu_count = visible_gpu_count(
      count_physical_gpus("/"),
      cvd == host.env.end() ? std::nullopt : std::optional<std::string>(cvd->second));
  host.amd_gpu_count = visible_amd_count(count_amd_gpus(), host.env);
  host.intel_gpu_count = visible_intel_count(count_intel_gpus(), host.env);
  host.file_exists = &path_exists;
  return host;
}

CliOutcome parse_command_line(const std::vector<std::string>& args, const HostFacts& host) {
  CliOutcome out;
  CLI::App app(
      "ddprun: a native drop-in replacement for torchrun. Starts --nproc-per-node copies of\n"
      "training_script with torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,\n"
      "MASTER_ADDR, MASTER_PORT, ...) and supervises them. Every option can also be given\n"
      "as env PET_<OPTION> (e.g. PET_NPROC_PER_NODE=4); the command line wins.\n",
      "ddprun");
  app.formatter(std::make_shared<Formatter>());
  app.get_formatter()->column_width(46);
  app.prefix_command();  // everything from the training script on belongs to the script
  app.footer(
      "positional arguments:\n"
      "  training_script       the script (or module with -m, program with --no-python)\n"
      "  training_script_args  passed through; ${local_rank} or $local_rank becomes the\n"
      "                        local rank and $$ becomes $ (as torchrun)\n"
      "\nenvironment: PYTHON_EXEC (python for workers; default: the python of the venv or\n"
      "conda env ddprun is installed in, else python3 from PATH), LOGLEVEL\n"
      "(DEBUG, INFO, WARNING, ERROR), TORCHELASTIC_SIGNALS_TO_HANDLE,\n"
      "TORCH_ELASTIC_SHUTDOWN_TIMEOUT, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE.\n"
      "exit status: 0 when every worker succeeded, 1 on any failure, 2 on bad usage.\n"
      "\nddprun status --rdzv-endpoint HOST[:PORT] --rdzv-id ID: the live view of a running\n"
      "job (ddprun status --help); a training script named status is given as ./status.");
  bool version = false;
  app.add_flag("--version", version, "Print the version and exit");
  std::string completion_shell;
  app.add_option("--print-completion,--print_completion", completion_shell,
                 "Print the bash or zsh completion script and exit (e.g. "
                 "--print-completion bash > ~/.local/share/bash-completion/completions/ddprun)")
      ->check(CLI::IsMember({"bash", "zsh", "tcsh"}));
  bool dump_cli = false;  // for the man page and completion (packaging/clidoc.py)
  app.add_flag(ddprun::packaging::kDumpCliOption, dump_cli)->group(kHidden);

  std::map<std::string, std::string> storage;
  std::vector<std::pair<const OptionDef*, CLI::Option*>> bound;
  for (const auto& def : option_table()) {
    CLI::Option* opt = nullptr;
    if (def.is_flag) {
      opt = app.add_flag(def.names, def.help);
    } else {
      opt = app.add_option(def.names, storage[def.dest], def.help)
                ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                ->type_name(metavar(def.dest));
    }
    opt->group(def.group);  // kHidden ("") hides it from --help
    bound.emplace_back(&def, opt);
  }

  std::vector<std::string> expanded;
  try {
    expanded = expand_abbreviations(args);
  } catch (const UsageError& e) {
    out.kind = CliOutcome::Kind::kError;
    out.text = e.what();
    return out;
  }
  // CLI11 parses a reversed copy.
  std::vector<std::string> reversed(expanded.rbegin(), expanded.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out.kind = CliOutcome::Kind::kPrint;
    out.text = app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    out.kind = CliOutcome::Kind::kError;
    out.text = e.what();
    std::replace(out.text.begin(), out.text.end(), '\n', ' ');
    return out;
  }
  if (version) {
    out.kind = CliOutcome::Kind::kPrint;
    out.text = std::string("ddprun ") + DDPRUN_VERSION_TEXT + " (torchrun-compatible launcher)\n";
    return out;
  }
  if (!completion_shell.empty()) {
    try {
      out.text = completion_script(completion_shell);
      out.kind = CliOutcome::Kind::kPrint;
    } catch (const UsageError& e) {
      out.kind = CliOutcome::Kind::kError;
      out.text = e.what();
    }
    return out;
  }
  if (dump_cli) {
    out.kind = CliOutcome::Kind::kPrint;
    ddprun::packaging::VerbJson status{std::string(kStatusVerb), std::string(kStatusSummary), {}};
    for (const VerbOption& o : kStatusOptions) {
      status.options.push_back({std::string(o.name), std::string(o.metavar), std::string(o.help)});
    }
    out.text = ddprun::packaging::app_json(app, Formatter().make_usage(&app, "ddprun"),
                                           DDPRUN_VERSION, {status});
    return out;
  }

  RawOptions raw;
  raw.positional = app.remaining();
  std::map<std::string, std::string> env_dests;  // dest -> PET_ name, values taken from env
  try {
    for (const auto& [def, opt] : bound) {
      const std::string env_name = pet_name(def->dest);
      // No PET_* fallback: ddprun's own options, and torchrun's without action=env.
      const bool own = def->group == kSsh || def->group == kHidden ||
                       std::string_view(def->dest) == "logs_specs" ||
                       std::string_view(def->dest) == "numa_binding";
      const auto env = own ? host.env.end() : host.env.find(env_name);
      if (def->is_flag) {
        if (opt->count() > 0) {
          raw.flags.insert(def->dest);
        } else if (env != host.env.end()) {
          // torchrun reads PET_ flags as an int; non-zero means on.
          // As Python's int(): blanks around it and a leading '+' are allowed.
          std::string_view text = trim(env->second);
          if (text.size() > 1 && text.front() == '+') text.remove_prefix(1);
          const auto v = parse_int<long long>(text);
          if (!v) {
            throw UsageError(
                fmt::format("{}={}: expected an integer (0 or 1)", env_name, env->second));
          }
          if (*v != 0) raw.flags.insert(def->dest);
        }
      } else if (opt->count() > 0) {
        raw.values[def->dest] = storage[def->dest];
      } else if (env != host.env.end()) {
        raw.values[def->dest] = env->second;
        env_dests[def->dest] = env_name;
      }
    }
    out.slurm = apply_slurm_environment(raw, host.env);  // fills what was not given
    out.config = build_config(raw, host);
    if (out.config.ssh.active()) out.config.ssh.agent_options = agent_options(expanded);
  } catch (const UsageError& e) {
    out.kind = CliOutcome::Kind::kError;
    out.text = name_env_source(e.what(), env_dests);
    return out;
  }
  out.kind = CliOutcome::Kind::kRun;
  return out;
}

}  // namespace ddprun::launcher
