// spdlog_and_fmt.cpp: the implementations of spdlog and fmt, compiled once for the packaged
// build (DDPRUN_PORTABLE), which cannot link Debian's shared libspdlog and libfmt. Header-only,
// every file that includes <spdlog/spdlog.h> would compile both again: about 10 CPU-seconds
// per unity batch at -O3, some 130 for the Release build with tests (804 against 671
// CPU-seconds, measured at 910cde2). The target ddprun_spdlog (CMakeLists.txt) sets
// SPDLOG_COMPILED_LIB and leaves FMT_HEADER_ONLY unset, so the headers elsewhere only declare
// what is defined here: each -inl.h implementation file is included once, and the templates
// that ddprun, its tests and its benches use are instantiated here. Something new to the tree
// and missing here (another sink, another spdlog factory) is an undefined reference at link
// time, not a silent change. Thread-safety: the libraries' own, unchanged.
#include <fmt/format-inl.h>
#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/sinks/stdout_color_sinks-inl.h>
#include <spdlog/spdlog-inl.h>

#include <locale>
#include <memory>
#include <mutex>
#include <string>

// fmt: the templates that format.h declares and format-inl.h defines, for char.
namespace fmt_impl = fmt::detail;
template char fmt_impl::decimal_point_impl<char>(fmt_impl::locale_ref);
template fmt_impl::thousands_sep_result<char> fmt_impl::thousands_sep_impl<char>(
    fmt_impl::locale_ref);
template fmt_impl::locale_ref::locale_ref(const std::locale& loc);
template std::locale fmt_impl::locale_ref::get<std::locale>() const;
template void fmt_impl::buffer<char>::append(const char* begin, const char* end);
template fmt_impl::dragonbox::decimal_fp<float> fmt_impl::dragonbox::to_decimal(float x) noexcept;
template fmt_impl::dragonbox::decimal_fp<double> fmt_impl::dragonbox::to_decimal(double x) noexcept;

// spdlog: base_sink under both mutexes (tests/support/log_capture.h, ostream_sink), and the
// colour console sinks behind stderr_color_mt (launcher/logging.cpp) and stdout_color_mt.
template class spdlog::sinks::base_sink<std::mutex>;
template class spdlog::sinks::base_sink<spdlog::details::null_mutex>;
template class spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stdout_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stderr_sink<spdlog::details::console_mutex>;
template std::shared_ptr<spdlog::logger> spdlog::stderr_color_mt<spdlog::synchronous_factory>(
    const std::string& logger_name, spdlog::color_mode mode);
template std::shared_ptr<spdlog::logger> spdlog::stdout_color_mt<spdlog::synchronous_factory>(
    const std::string& logger_name, spdlog::color_mode mode);
