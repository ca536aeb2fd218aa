# launcher/process.cmake: the launcher's process layer (spawning, supervision, signals,
# worker-output fan-out, orphan guard) as its own static library. Included by
# launcher/CMakeLists.txt; linked into ddprun_launcher and tests/launcher/process.
add_library(ddprun_process STATIC)
target_sources(ddprun_process PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/line_splitter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/log_fanout.cpp
  ${CMAKE_CURRENT_LIST_DIR}/orphan_guard.cpp
  ${CMAKE_CURRENT_LIST_DIR}/signals.cpp
  ${CMAKE_CURRENT_LIST_DIR}/spawn.cpp
  ${CMAKE_CURRENT_LIST_DIR}/supervisor.cpp
)
target_include_directories(ddprun_process PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(ddprun_process PUBLIC spdlog::spdlog Threads::Threads)
