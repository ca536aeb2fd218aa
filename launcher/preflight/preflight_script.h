// preflight_script.h: the pre-flight check's Python program (--preflight, docs/preflight.md),
// which the Agent runs once per node with the workers' interpreter before a round's
// workers start: `import torch`, a matmul and a memory touch on every visible device (the
// CPU when there is none), and with several nodes an all-reduce and a send/receive with
// each ring neighbour through the workers' store. It writes its findings as one JSON
// object to the file named by its first argument (a failed check is a finding, not an
// exit status). Used by preflight.cpp. Thread-safety: constant data and a file write.
#pragma once

#include <string>

namespace ddprun::launcher::preflight {

// The program's text.
const char* script_text();

// Writes the program to `path` (replacing it); throws std::runtime_error naming the path.
void write_script(const std::string& path);

}  // namespace ddprun::launcher::preflight
