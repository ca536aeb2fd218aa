// exit_status.cpp: ddprun's exit status by class (exit_status.h).
#include "launcher/exit_status.h"

#include <csignal>
#include <string>

namespace ddprun::launcher {

ExitClass class_of_exit(int signal) {
  return signal == SIGKILL ? ExitClass::kInfrastructure : ExitClass::kWorkerError;
}

int exit_status(ExitClass cls, int signo, bool by_class) {
  if (cls == ExitClass::kSuccess) return 0;
  if (!by_class) return 1;
  switch (cls) {
    case ExitClass::kWorkerError:
      return 1;
    case ExitClass::kInfrastructure:
      return 3;
    case ExitClass::kStall:
      return 4;
    case ExitClass::kSignal:
      return 128 + signo;
    case ExitClass::kSuccess:
      break;
  }
  return 1;
}

std::string exit_class_name(ExitClass cls) {
  switch (cls) {
    case ExitClass::kSuccess:
      return "success";
    case ExitClass::kWorkerError:
      return "worker error";
    case ExitClass::kInfrastructure:
      return "infrastructure";
    case ExitClass::kStall:
      return "stall";
    case ExitClass::kSignal:
      return "signal";
  }
  return "unknown";
}

}  // namespace ddprun::launcher
