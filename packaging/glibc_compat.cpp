// glibc_compat.cpp: lets the packaged (DDPRUN_PORTABLE) ddprun and ddprun-store, built on
// Debian 12 (glibc 2.36), run on glibc 2.34 (Ubuntu 22.04 has 2.35, RHEL 9 2.34). The
// static libgcc_eh of GCC 12 calls _dl_find_object (glibc 2.35) to find unwind tables, and
// the static libstdc++'s std::random_device calls arc4random (glibc 2.36); the link
// redirects both (-Wl,--wrap, packaging/CMakeLists.txt) to these versions built on
// dl_iterate_phdr and getrandom (glibc 2.2.5 and 2.25). packaging/check-binaries checks
// the result. Thread-safety: both are safe to call from any thread, as the originals.
#include <dlfcn.h>
#include <link.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

namespace {

struct Search {
  std::uintptr_t pc;
  dl_find_object* out;
  bool found;
};

// dl_iterate_phdr callback: fills the search's result from the object whose loaded
// segments hold pc (its whole mapping and its PT_GNU_EH_FRAME, the table libgcc reads).
int find_object(dl_phdr_info* info, std::size_t /*size*/, void* data) {
  auto* search = static_cast<Search*>(data);
  std::uintptr_t low = UINTPTR_MAX;
  std::uintptr_t high = 0;
  bool holds_pc = false;
  void* eh_frame = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD) {
      const std::uintptr_t end = start + ph.p_memsz;
      low = start < low ? start : low;
      high = end > high ? end : high;
      holds_pc = holds_pc || (search->pc >= start && search->pc < end);
    } else if (ph.p_type == PT_GNU_EH_FRAME) {
      eh_frame = reinterpret_cast<void*>(start);  // NOLINT(performance-no-int-to-ptr)
    }
  }
  if (!holds_pc) return 0;
  *search->out = dl_find_object{};
  search->out->dlfo_map_start = reinterpret_cast<void*>(low);  // NOLINT(performance-no-int-to-ptr)
  search->out->dlfo_map_end = reinterpret_cast<void*>(high);   // NOLINT(performance-no-int-to-ptr)
  search->out->dlfo_eh_frame = eh_frame;
  search->found = true;
  return 1;
}

}  // namespace

extern "C" {

// The names --wrap gives the replacements (reserved identifiers by necessity).
// NOLINTNEXTLINE(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp)
int __wrap__dl_find_object(void* pc, dl_find_object* result) {
  Search search{reinterpret_cast<std::uintptr_t>(pc), result, false};
  dl_iterate_phdr(&find_object, &search);
  return search.found ? 0 : -1;
}

// NOLINTNEXTLINE(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp)
std::uint32_t __wrap_arc4random() {
  std::uint32_t value = 0;
  for (;;) {
    const ssize_t n = getrandom(&value, sizeof value, 0);
    if (n == static_cast<ssize_t>(sizeof value)) return value;
    if (n < 0 && errno != EINTR) std::abort();  // as arc4random: never returns weak bytes
  }
}

}  // extern "C"
