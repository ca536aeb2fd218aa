// option_values.h: one option's text to a checked value, or a UsageError naming the
// flag, as argparse reads it (blanks around a value dropped, int() takes a leading '+').
// The readers build_config is made of (config.cpp). Thread-safety: pure functions, except
// random_uuid (std::random_device) and temp_dir (the file system).
#pragma once

#include <initializer_list>
#include <map>
#include <optional>
#include <string>

#include "launcher/options/usage_error.h"

namespace ddprun::launcher {

// `s` without blanks around it.
std::string trimmed(const std::string& s);
// int() as argparse reads it; nullopt when `text` is not one.
std::optional<long long> to_int(const std::string& text);
// float() as argparse reads it (no NaN); nullopt when `text` is not one.
std::optional<double> to_double(const std::string& text);
// An int in [lo, hi]; throws UsageError naming `flag`.
int int_in_range(const std::string& flag, const std::string& text, long long lo, long long hi);
// A non-negative number of seconds; throws UsageError naming `flag`.
double seconds_value(const std::string& flag, const std::string& text);
// argparse's choices=: the trimmed `text` if it is one of `choices`, else UsageError.
std::string choice(const std::string& flag, const std::string& text,
                   std::initializer_list<const char*> choices);
// A random version-4 UUID, as torchrun uses for --standalone run ids.
std::string random_uuid();
// Python's tempfile.gettempdir() (where torchrun puts its torchelastic_* log dir and the
// file timer's pipe): the first of TMPDIR, TEMP, TMP, /tmp, /var/tmp, /usr/tmp that is a
// writable directory, so a stale TMPDIR falls back to /tmp. Reads the file system.
std::string temp_dir(const std::map<std::string, std::string>& env);
// m[k], or nullptr.
const std::string* find(const std::map<std::string, std::string>& m, const std::string& k);

}  // namespace ddprun::launcher
