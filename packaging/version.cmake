# packaging/version.cmake: the one version. project(VERSION) is the release number; when
# configured from a git checkout of this project, the commit is added. Writes
# ${PROJECT_BINARY_DIR}/generated/ddprun_version.h (target ddprun_version) for --version
# of ddprun and ddprun-store, and sets DDPRUN_RELEASE_DATE for the man pages. Included by
# the top-level CMakeLists.txt; a commit re-runs the configure step (CMAKE_CONFIGURE_DEPENDS).
set(DDPRUN_GIT_COMMIT "")
set(DDPRUN_RELEASE_DATE "")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --show-toplevel --absolute-git-dir
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} RESULT_VARIABLE git_rc
                  OUTPUT_VARIABLE git_dirs OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  string(REPLACE "\n" ";" git_dirs "${git_dirs}")
  list(LENGTH git_dirs git_dirs_n)
  # Only this project's own checkout: a source tree unpacked inside another repository
  # has no commit of its own.
  if(git_rc EQUAL 0 AND git_dirs_n EQUAL 2)
    list(GET git_dirs 0 git_top)
    list(GET git_dirs 1 git_dir)
    file(REAL_PATH "${git_top}" git_top)
    file(REAL_PATH "${PROJECT_SOURCE_DIR}" src_top)
    if(git_top STREQUAL src_top)
      execute_process(COMMAND ${GIT_EXECUTABLE} log -1 --format=%h%n%cs --abbrev=12
                      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} RESULT_VARIABLE git_rc
                      OUTPUT_VARIABLE git_head OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(git_rc EQUAL 0 AND git_head MATCHES "^([0-9a-f]+)\n([0-9-]+)$")
        set(DDPRUN_GIT_COMMIT "${CMAKE_MATCH_1}")
        set(DDPRUN_RELEASE_DATE "${CMAKE_MATCH_2}")
      endif()
      if(EXISTS "${git_dir}/logs/HEAD")
        set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${git_dir}/logs/HEAD")
      endif()
    endif()
  endif()
endif()
if(NOT DDPRUN_RELEASE_DATE)
  string(TIMESTAMP DDPRUN_RELEASE_DATE "%Y-%m-%d" UTC)  # honours SOURCE_DATE_EPOCH
endif()
set(DDPRUN_VERSION_TEXT "${PROJECT_VERSION}")
if(DDPRUN_GIT_COMMIT)
  string(APPEND DDPRUN_VERSION_TEXT " (git ${DDPRUN_GIT_COMMIT})")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/ddprun_version.h.in
               ${PROJECT_BINARY_DIR}/generated/ddprun_version.h @ONLY)
add_library(ddprun_version INTERFACE)
target_include_directories(ddprun_version INTERFACE ${PROJECT_BINARY_DIR}/generated)
message(STATUS "ddprun version ${DDPRUN_VERSION_TEXT}")
