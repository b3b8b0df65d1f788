# The Debian package: traintl_<version>_amd64.deb, built by `cpack -G DEB` in the build
# directory (after building everything). It holds traintld, traintl, traintl-worker, the
# SDK headers, libtraintl_torch.so, libtraintl_xgboost.so (when built with XGBoost), the
# CMake package config (find_package(traintl) gives traintl::sdk, traintl::torch and
# traintl::xgboost), the systemd unit, commented default configs, and
# maintainer scripts that create the traintl user and directories and start nothing.
# tests/packaging/ builds it, checks it with lintian, and trains an out-of-tree library
# built against its unpacked contents.

include(CMakePackageConfigHelpers)

# --- the CMake package config -------------------------------------------------------
set(TRAINTL_CMAKE_DIR lib/cmake/traintl)
set_target_properties(traintl_sdk PROPERTIES EXPORT_NAME sdk)
install(TARGETS traintl_sdk EXPORT traintlTargets)
install(EXPORT traintlTargets NAMESPACE traintl:: DESTINATION ${TRAINTL_CMAKE_DIR})
if(TARGET traintl_torch)
  # A separate export set: its targets file may only be read once LibTorch was found.
  set_target_properties(traintl_torch PROPERTIES EXPORT_NAME torch)
  install(TARGETS traintl_torch EXPORT traintlTorchTargets LIBRARY DESTINATION lib)
  install(EXPORT traintlTorchTargets NAMESPACE traintl:: DESTINATION ${TRAINTL_CMAKE_DIR})
endif()
if(TARGET traintl_xgboost)
  # Its own export set too, present only in packages built with XGBoost. It links libxgboost
  # privately, so using it needs no find_package(xgboost).
  set_target_properties(traintl_xgboost PROPERTIES EXPORT_NAME xgboost)
  install(TARGETS traintl_xgboost EXPORT traintlXgboostTargets LIBRARY DESTINATION lib)
  install(EXPORT traintlXgboostTargets NAMESPACE traintl:: DESTINATION ${TRAINTL_CMAKE_DIR})
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/traintlConfig.cmake.in
  ${CMAKE_BINARY_DIR}/packaging/traintlConfig.cmake
  INSTALL_DESTINATION ${TRAINTL_CMAKE_DIR})
# The SDK's ABI is versioned in traintl/abi.h; releases of one major version are
# source-compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/packaging/traintlConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/packaging/traintlConfig.cmake
              ${CMAKE_BINARY_DIR}/packaging/traintlConfigVersion.cmake
        DESTINATION ${TRAINTL_CMAKE_DIR})

# --- service, configuration, documentation ------------------------------------------
# Absolute destinations: Debian's systemd reads units from /lib/systemd/system, and
# configuration lives in /etc, not under the /usr prefix.
install(FILES ${PROJECT_SOURCE_DIR}/systemd/traintld.service DESTINATION /lib/systemd/system)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/traintld.conf ${CMAKE_CURRENT_LIST_DIR}/traintl.conf
        DESTINATION /etc/traintl)
set(TRAINTL_DOC_DIR share/doc/traintl)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${CMAKE_CURRENT_LIST_DIR}/debian/copyright
        DESTINATION ${TRAINTL_DOC_DIR})
configure_file(${CMAKE_CURRENT_LIST_DIR}/debian/changelog.in
               ${CMAKE_BINARY_DIR}/packaging/changelog @ONLY)
# Debian wants the changelog compressed, without a timestamp (gzip -n) for reproducibility.
find_program(TRAINTL_GZIP gzip)
if(TRAINTL_GZIP)
  add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/packaging/changelog.gz
    COMMAND ${TRAINTL_GZIP} -9nc ${CMAKE_BINARY_DIR}/packaging/changelog
            > ${CMAKE_BINARY_DIR}/packaging/changelog.gz
    DEPENDS ${CMAKE_BINARY_DIR}/packaging/changelog)
  add_custom_target(traintl_changelog ALL DEPENDS ${CMAKE_BINARY_DIR}/packaging/changelog.gz)
  install(FILES ${CMAKE_BINARY_DIR}/packaging/changelog.gz DESTINATION ${TRAINTL_DOC_DIR})
endif()
# --- man pages and shell completion, generated from the --help texts ------------------
# traintl(1), traintld(8), traintl-worker(8), traintl-job(5) (README's job spec section), bash and zsh
# completion: packaging/docs/gen_docs.py runs the built binaries, so the pages and the
# completions say what --help says (tests/packaging/docs_test.py checks it).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TRAINTL_GZIP)
  set(TRAINTL_DOCS_OUT ${CMAKE_BINARY_DIR}/packaging/docs)
  set(_pages traintl.1 traintld.8 traintl-worker.8 traintl-job.5)
  set(_generated ${TRAINTL_DOCS_OUT}/traintl.bash-completion ${TRAINTL_DOCS_OUT}/_traintl)
  foreach(_p ${_pages})
    list(APPEND _generated ${TRAINTL_DOCS_OUT}/${_p})
  endforeach()
  add_custom_command(OUTPUT ${_generated}
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/docs/gen_docs.py
            --traintl $<TARGET_FILE:traintl> --traintld $<TARGET_FILE:traintld>
            --worker $<TARGET_FILE:traintl-worker>
            --readme ${PROJECT_SOURCE_DIR}/README.md --version ${PROJECT_VERSION}
            --out ${TRAINTL_DOCS_OUT}
    DEPENDS traintl traintld traintl-worker ${CMAKE_CURRENT_LIST_DIR}/docs/gen_docs.py
            ${PROJECT_SOURCE_DIR}/README.md
    COMMENT "man pages and shell completion from the --help texts")
  set(_gz)
  foreach(_p ${_pages})
    add_custom_command(OUTPUT ${TRAINTL_DOCS_OUT}/${_p}.gz
      COMMAND ${TRAINTL_GZIP} -9nc ${TRAINTL_DOCS_OUT}/${_p} > ${TRAINTL_DOCS_OUT}/${_p}.gz
      DEPENDS ${TRAINTL_DOCS_OUT}/${_p})
    list(APPEND _gz ${TRAINTL_DOCS_OUT}/${_p}.gz)
    string(REGEX REPLACE ".*\\.([0-9])$" "\\1" _section ${_p})
    install(FILES ${TRAINTL_DOCS_OUT}/${_p}.gz DESTINATION share/man/man${_section})
  endforeach()
  add_custom_target(traintl_docs ALL DEPENDS ${_generated} ${_gz})
  install(FILES ${TRAINTL_DOCS_OUT}/traintl.bash-completion
          DESTINATION share/bash-completion/completions RENAME traintl)
  install(FILES ${TRAINTL_DOCS_OUT}/_traintl DESTINATION share/zsh/vendor-completions)
endif()

install(FILES ${CMAKE_CURRENT_LIST_DIR}/example/CMakeLists.txt
              ${CMAKE_CURRENT_LIST_DIR}/example/fit_line.cc
              ${CMAKE_CURRENT_LIST_DIR}/example/job.json
        DESTINATION ${TRAINTL_DOC_DIR}/examples/sdk-example)

# --- the package -----------------------------------------------------------------------
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "traintl")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "traintl developers <dev@traintl.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed training as a cluster service")
# The extended description (CPack puts the summary above it; lines under 80 columns).
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
"traintl runs data-parallel training jobs (LibTorch, Gloo on CPU, NCCL on GPU)
on a cluster of nodes, in the spirit of Ray Train. The traintld daemon runs on
every node; the daemons keep the cluster's records in SQLite replicated by Raft
and restart failed jobs from their latest checkpoint.

This package holds the daemon and its systemd unit, the traintl command-line
client, the traintl-worker process, and the SDK (headers, libtraintl_torch and
a CMake package config) to build training libraries against.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # traintl_<version>_amd64.deb
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_STRIP_FILES ON)
# Libraries the binaries link, from dpkg-shlibdeps (on Debian 12: libc6, libstdc++6,
# libgcc-s1, libboost-program-options1.74.0, libsqlite3-0, libraft0, libuv1, libssl3,
# libtorch1.13 and libc10 through libtraintl_torch.so), plus what the package itself uses:
# adduser (postinst), the headers the SDK's headers include, and what Python entry points
# import (libpython3.11 comes from the shim's shlibdeps; numpy from the traintl package).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, nlohmann-json3-dev (>= 3.10), python3-numpy")
# Building a training library: a C++17 compiler and CMake; LibTorch for traintl::torch.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
  "systemd, g++ (>= 4:12), cmake (>= 3.18), libtorch-dev, libopenblas0-pthread, python3-torch")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${CMAKE_CURRENT_LIST_DIR}/debian/conffiles
  ${CMAKE_CURRENT_LIST_DIR}/debian/triggers
  ${CMAKE_CURRENT_LIST_DIR}/debian/postinst
  ${CMAKE_CURRENT_LIST_DIR}/debian/prerm
  ${CMAKE_CURRENT_LIST_DIR}/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
include(CPack)

if(TRAINTL_BUILD_TESTS AND EXISTS ${PROJECT_SOURCE_DIR}/tests/packaging/CMakeLists.txt)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/packaging ${CMAKE_BINARY_DIR}/tests/packaging)
endif()
