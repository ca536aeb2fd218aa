// cli_dump.h: describes a CLI11 command line as JSON (program, version, description,
// footer, options by group, positionals, subcommands), so that the man pages and the
// bash/zsh completion are generated from the programs' own option definitions
// (packaging/clidoc.py) and never drift from --help. Used by the hidden --dump-cli-json
// option of ddprun (launcher/options/cli.cpp) and ddprun-store. Thread-safety: pure (reads `app`).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::packaging {

// The hidden option that prints cli_json(): not shown in --help (empty group).
inline constexpr const char* kDumpCliOption = "--dump-cli-json";

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          constexpr std::string_view kHex = "0123456789abcdef";
          out += "\\u00";
          out += kHex[static_cast<unsigned char>(c) >> 4];
          out += kHex[static_cast<unsigned char>(c) & 0xf];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

inline std::string json_strings(const std::vector<std::string>& items, const char* prefix) {
  std::string out = "[";
  for (const auto& s : items) out += (out.size() > 1 ? "," : "") + json_string(prefix + s);
  return out + "]";
}

// One option as --dump-cli-json lists it, whether CLI11 parses it or a verb's table
// (VerbJson) describes it.
struct OptionJson {
  std::vector<std::string> names;  // "-n", "--nnodes"
  std::string positional;          // the positional's name, "" for an option
  bool takes_value = false;        // false for flags
  std::string type_name;
  std::string description;
  std::string group = "Options";
  std::string default_value;
  std::string envname;
  bool required = false;
};

inline std::string option_json(const OptionJson& o) {
  std::string out = "{\"names\":" + json_strings(o.names, "");
  out += ",\"positional\":" + json_string(o.positional);
  out += ",\"takes_value\":" + std::string(o.takes_value ? "true" : "false");
  out += ",\"type_name\":" + json_string(o.type_name);
  out += ",\"description\":" + json_string(o.description);
  out += ",\"group\":" + json_string(o.group);
  out += ",\"default\":" + json_string(o.default_value);
  out += ",\"envname\":" + json_string(o.envname);
  out += ",\"required\":" + std::string(o.required ? "true" : "false");
  return out + "}";
}

// One CLI11 option. Hidden options (empty group) are left out by the caller.
inline std::string option_json(const CLI::Option& opt) {
  OptionJson o;
  for (const auto& s : opt.get_snames()) o.names.push_back("-" + s);
  for (const auto& l : opt.get_lnames()) o.names.push_back("--" + l);
  o.positional = opt.get_positional() ? opt.get_name(true) : "";
  o.takes_value = opt.get_items_expected_max() > 0;
  o.type_name = opt.get_type_name();
  o.description = opt.get_description();
  o.group = opt.get_group();
  o.default_value = opt.get_default_str();
  o.envname = opt.get_envname();
  o.required = opt.get_required();
  return option_json(o);
}

// A verb the program takes as its first word outside CLI11 (ddprun's `status`), for the
// "verbs" list of app_json: its options in option_json's shape.
struct VerbJson {
  struct Option {
    std::string name;       // "--json"
    std::string type_name;  // the metavar; "" for a flag
    std::string description;
  };
  std::string name;
  std::string description;
  std::vector<Option> options;
};

inline std::string verb_json(const VerbJson& verb) {
  std::string out = "{\"name\":" + json_string(verb.name);
  out += ",\"description\":" + json_string(verb.description) + ",\"options\":[";
  bool first = true;
  for (const auto& v : verb.options) {
    OptionJson o;
    o.names = {v.name};
    o.takes_value = !v.type_name.empty();
    o.type_name = v.type_name;
    o.description = v.description;
    out += (first ? "" : ",") + option_json(o);
    first = false;
  }
  return out + "]}";
}

// The app and, recursively, its subcommands; `verbs`: the top level's (none for
// subcommands). `usage` and `version` may be empty (subcommands).
inline std::string app_json(const CLI::App& app, const std::string& usage,
                            const std::string& version, const std::vector<VerbJson>& verbs = {}) {
  std::string out = "{\"name\":" + json_string(app.get_name());
  out += ",\"version\":" + json_string(version);
  out += ",\"usage\":" + json_string(usage);
  out += ",\"description\":" + json_string(app.get_description());
  out += ",\"footer\":" + json_string(app.get_footer());
  out += ",\"options\":[";
  bool first = true;
  for (const CLI::Option* opt : app.get_options()) {
    const bool unnamed =
        opt->get_lnames().empty() && opt->get_snames().empty() && !opt->get_positional();
    if (opt->get_group().empty() || unnamed) continue;  // hidden
    out += (first ? "" : ",") + option_json(*opt);
    first = false;
  }
  out += "],\"subcommands\":[";
  first = true;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    out += (first ? "" : ",") + app_json(*sub, "", "");
    first = false;
  }
  out += "],\"verbs\":[";
  first = true;
  for (const VerbJson& verb : verbs) {
    out += (first ? "" : ",") + verb_json(verb);
    first = false;
  }
  return out + "]}\n";
}

}  // namespace ddprun::packaging
