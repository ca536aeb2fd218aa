// error_file.h: reading the error file a worker's @record decorator writes
// (TORCHELASTIC_ERROR_FILE, JSON; both the dict and the plain-string "message" forms)
// and writing the agent's own copy of the root cause's file with "errorCode" added.
// Used by failure_report.cpp and the Agent. Thread-safety: pure functions over files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ddprun::launcher {

// The largest error file read (a worker's @record traceback is a few KiB).
constexpr std::size_t kMaxErrorFileBytes = std::size_t{4} << 20;

struct ErrorFileInfo {
  bool exists = false;  // the file is there (it may still fail to parse)
  bool parsed = false;
  // What the failure report shows as "traceback": the py_callstack (else the message)
  // with every newline followed by two spaces for dict messages; the plain string as is.
  std::string display;
  std::optional<std::int64_t> timestamp;  // seconds since the epoch, when present
  std::string parse_error;                // when exists && !parsed
};

// Reads `path`. A missing file gives exists == false; a malformed one, or one that is no
// regular file (a FIFO, a symlink to /dev/zero) or is over kMaxErrorFileBytes, gives
// parsed == false with the reason, without blocking or reading more than the cap. Never
// throws.
ErrorFileInfo read_error_file(const std::string& path);

// Copies the worker's error file `from` to `to`, adding "errorCode": exit_code inside a
// dict-style "message". Returns false (with `why`) if it cannot.
bool copy_error_file(const std::string& from, const std::string& to, int exit_code,
                     std::string* why);

// Writes an @record-style error file at `to` for a failure without a worker error file:
// "message" (e.g. "ValueError: boom"), "errorCode", and "extraInfo" with "py_callstack"
// (the traceback) and "timestamp". Bytes that are not UTF-8 become U+FFFD.
bool write_error_file(const std::string& to, const std::string& message,
                      const std::string& py_callstack, std::int64_t timestamp, int exit_code,
                      std::string* why);

}  // namespace ddprun::launcher
