// open_files.h: the open-files limit (RLIMIT_NOFILE) of ddprun's long-lived processes. A
// store host holds one descriptor per connection (2 per agent of a c10d rendezvous, so
// ~2 000 for 1 000 agents) where a login shell's soft limit is often 1 024, so main()
// raises the soft limit to the hard one; the processes ddprun starts get the soft limit
// it inherited back (workers see the user's limit, as under torchrun). Used by
// launcher/main.cpp, store/ddprun_store_main.cpp and launcher/process/spawn.cpp.
// Thread-safety: raise() from main() before other threads start; the rest from any thread.
#pragma once

#include <sys/resource.h>

namespace ddprun {

class OpenFilesLimit {
 public:
  // Raises the soft limit to the hard limit, remembering the one inherited. False when
  // the limit could not be read or set (it stays as it was).
  static bool raise() {
    rlimit now{};
    if (::getrlimit(RLIMIT_NOFILE, &now) != 0) return false;
    if (now.rlim_cur >= now.rlim_max) return true;
    rlimit raised = now;
    raised.rlim_cur = now.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) return false;
    inherited_ = now;
    raised_ = true;
    return true;
  }
  // Whether raise() changed the limit, and so children must get `inherited()` back.
  static bool raised() { return raised_; }
  // The limit this process started with (valid when raised()).
  static const rlimit& inherited() { return inherited_; }

 private:
  static inline rlimit inherited_{};
  static inline bool raised_ = false;
};

}  // namespace ddprun
