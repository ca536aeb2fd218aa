// slurm_hostlist.h: Slurm's compressed host list form ("n[01-04,07]", "a1,b[2-3]",
// "rack[1-2]-gpu[1-4]") expanded to host names, in Slurm's order. Used by slurm_env.cpp
// (the first host of a step hosts the rendezvous). Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun::launcher {

// A host list that is not in Slurm's form; what() is one line naming the fault.
class HostlistError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Expands `list`: names separated by commas outside brackets; each name is text with any
// number of bracket groups "[a-b,c,...]" (the product, the first group varying slowest).
// A range keeps the width of its lower bound when that is zero-padded ("01-10" gives 01
// ... 10; "8-10" gives 8, 9, 10). Throws HostlistError for an empty list or name, an
// unbalanced or empty bracket, a non-numeric or descending range, or more than
// `max_hosts` names.
std::vector<std::string> expand_hostlist(const std::string& list, std::size_t max_hosts = 1000000);

}  // namespace ddprun::launcher
