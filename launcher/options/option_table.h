// option_table.h: torchrun's options as ddprun knows them, as data: each option's names
// (both spellings), torchrun's dest name (PET_<DEST> is its env fallback), whether it is a
// flag, its --help group and text, and its metavar. cli.cpp binds them to CLI11; nothing
// here interprets a value (build_config in config.cpp does).
// Thread-safety: constant data.
#pragma once

#include <span>
#include <string>

namespace ddprun::launcher {

// Groups compared by address: ddprun's own multi-host launch (ssh_launch.h; no PET_*
// fallback, not passed on to the remote agents), and kHidden, the launcher's internal
// options (not in --help).
inline constexpr const char* kSsh = "Multi-host launch over ssh (ddprun only)";
inline constexpr const char* kHidden = "";

struct OptionDef {
  const char* names;  // CLI11 name list; both spellings of long names
  const char* dest;   // torchrun's dest name; PET_<DEST upper> is its env fallback
  bool is_flag;
  const char* group;
  const char* help;
};

// Every option, in torchrun's --help order and grouping, then ddprun's own.
std::span<const OptionDef> option_table();

// The --help metavar of option `dest` ("TEXT" when it has none of its own).
const char* metavar(const std::string& dest);

}  // namespace ddprun::launcher
