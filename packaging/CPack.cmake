# The Debian packages, built by `cpack -G DEB` in the build directory (after building
# everything), one per CPack component, so that a machine installs only what it uses:
#
#   traintl_<v>_amd64.deb                 component traintl: traintld, traintl,
#                                         traintl-worker, the systemd unit, the configs, man
#                                         pages, completion, and the maintainer scripts that
#                                         create the traintl user and start nothing. No
#                                         LibTorch, no Python: a node that runs C++ jobs or a
#                                         machine that only submits jobs needs nothing else.
#   libtraintl-torch<N>_<v>_amd64.deb     component torch: libtraintl_torch.so.<N> (links
#                                         LibTorch; loaded only by torch jobs' libraries)
#   libtraintl-xgboost<N>_<v>_amd64.deb   component xgboost: libtraintl_xgboost.so.<N>, when
#                                         built with XGBoost
#   python3-traintl_<v>_amd64.deb         component python: Python training functions (the
#                                         entry shim and the traintl package, traintl._c10d)
#   traintl-dev_<v>_amd64.deb             component dev: the SDK headers, the CMake package
#                                         config (find_package(traintl) gives traintl::sdk,
#                                         traintl::torch and traintl::xgboost), the
#                                         unversioned .so links, the SDK example
#
# <N> is the sonames' version, TRAINTL_SOVERSION (the top-level CMakeLists.txt). An install
# rule without one of these components fails the configuration (see the end of this file).
# tests/packaging/ builds them, checks them with lintian, installs them in a systemd-nspawn
# container and trains an out-of-tree library built against their unpacked contents.

include(CMakePackageConfigHelpers)

# The packages: component -> Debian package name. traintl_python_package is the Python
# room's target (python/CMakeLists.txt), absent when Python or pybind11 is.
set(TRAINTL_PKG_traintl traintl)
set(TRAINTL_PKG_dev traintl-dev)
set(TRAINTL_PKG_torch libtraintl-torch${TRAINTL_SOVERSION})
set(TRAINTL_PKG_xgboost libtraintl-xgboost${TRAINTL_SOVERSION})
set(TRAINTL_PKG_python python3-traintl)
set(TRAINTL_COMPONENTS traintl)
foreach(_c torch xgboost)
  if(TARGET traintl_${_c})
    list(APPEND TRAINTL_COMPONENTS ${_c})
  endif()
endforeach()
if(TARGET traintl_python_package)
  list(APPEND TRAINTL_COMPONENTS python)
endif()
list(APPEND TRAINTL_COMPONENTS dev)

# --- the shared libraries and the CMake package config --------------------------------
# libfoo.so.<N> in its library package, the libfoo.so link for the linker in traintl-dev.
set(TRAINTL_CMAKE_DIR lib/cmake/traintl)
set_target_properties(traintl_sdk PROPERTIES EXPORT_NAME sdk)
install(TARGETS traintl_sdk EXPORT traintlTargets COMPONENT dev)
install(EXPORT traintlTargets NAMESPACE traintl:: DESTINATION ${TRAINTL_CMAKE_DIR}
        COMPONENT dev)
if(TARGET traintl_torch)
  # A separate export set: its targets file may only be read once LibTorch was found.
  set_target_properties(traintl_torch PROPERTIES EXPORT_NAME torch)
  install(TARGETS traintl_torch EXPORT traintlTorchTargets
          LIBRARY DESTINATION lib COMPONENT torch NAMELINK_COMPONENT dev)
  install(EXPORT traintlTorchTargets NAMESPACE traintl:: DESTINATION ${TRAINTL_CMAKE_DIR}
          COMPONENT dev)
endif()
if(TARGET traintl_xgboost)
  # Its own export set too, present only in packages built with XGBoost. It links libxgboost
  # privately, so using it needs no find_package(xgboost).
  set_target_properties(traintl_xgboost PROPERTIES EXPORT_NAME xgboost)
  install(TARGETS traintl_xgboost EXPORT traintlXgboostTargets
          LIBRARY DESTINATION lib COMPONENT xgboost NAMELINK_COMPONENT dev)
  install(EXPORT traintlXgboostTargets NAMESPACE traintl:: DESTINATION ${TRAINTL_CMAKE_DIR}
          COMPONENT dev)
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
        DESTINATION ${TRAINTL_CMAKE_DIR} COMPONENT dev)

# --- service, configuration, documentation ------------------------------------------
# Absolute destinations: Debian's systemd reads units from /lib/systemd/system, and
# configuration lives in /etc, not under the /usr prefix.
install(FILES ${PROJECT_SOURCE_DIR}/systemd/traintld.service DESTINATION /lib/systemd/system
        COMPONENT traintl)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/traintld.conf ${CMAKE_CURRENT_LIST_DIR}/traintl.conf
        DESTINATION /etc/traintl COMPONENT traintl)
# Every package has its /usr/share/doc/<package> with copyright and changelog.gz.
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION share/doc/traintl COMPONENT traintl)
foreach(_c ${TRAINTL_COMPONENTS})
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/debian/copyright
          DESTINATION share/doc/${TRAINTL_PKG_${_c}} COMPONENT ${_c})
endforeach()
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
  foreach(_c ${TRAINTL_COMPONENTS})
    install(FILES ${CMAKE_BINARY_DIR}/packaging/changelog.gz
            DESTINATION share/doc/${TRAINTL_PKG_${_c}} COMPONENT ${_c})
  endforeach()
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
    install(FILES ${TRAINTL_DOCS_OUT}/${_p}.gz DESTINATION share/man/man${_section}
            COMPONENT traintl)
  endforeach()
  add_custom_target(traintl_docs ALL DEPENDS ${_generated} ${_gz})
  install(FILES ${TRAINTL_DOCS_OUT}/traintl.bash-completion
          DESTINATION share/bash-completion/completions RENAME traintl COMPONENT traintl)
  install(FILES ${TRAINTL_DOCS_OUT}/_traintl DESTINATION share/zsh/vendor-completions
          COMPONENT traintl)
endif()

install(FILES ${CMAKE_CURRENT_LIST_DIR}/example/CMakeLists.txt
              ${CMAKE_CURRENT_LIST_DIR}/example/fit_line.cc
              ${CMAKE_CURRENT_LIST_DIR}/example/job.json
        DESTINATION share/doc/traintl-dev/examples/sdk-example COMPONENT dev)

# --- the packages ----------------------------------------------------------------------
set(CPACK_GENERATOR "DEB")
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ${TRAINTL_COMPONENTS})
set(CPACK_PACKAGE_NAME "traintl")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "traintl developers <dev@traintl.invalid>")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <package>_<version>_amd64.deb
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_STRIP_FILES ON)
# Depends: what dpkg-shlibdeps finds the ELF files need, plus each package's own list below.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
set(_v "${PROJECT_VERSION}")
set(_torch_pkg ${TRAINTL_PKG_torch})
set(_xgboost_pkg ${TRAINTL_PKG_xgboost})
# The descriptions: the first line is the synopsis; lines under 80 columns.
set(_about
"traintl runs data-parallel training jobs (LibTorch, Gloo on CPU, NCCL on GPU,
XGBoost, Python functions) on a cluster of nodes, in the spirit of Ray Train.")

# traintl: the service and the CLI. Its libraries (dpkg-shlibdeps on Debian 12: libc6,
# libstdc++6, libgcc-s1, libboost-program-options1.74.0, libsqlite3-0, libraft0, libuv1,
# libssl3; the worker's Parquet reader adds libsnappy1v5, libzstd1, zlib1g) are small; LibTorch, Python and the SDK are other packages, only suggested.
set(CPACK_DEBIAN_TRAINTL_PACKAGE_NAME traintl)
set(CPACK_DEBIAN_TRAINTL_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_TRAINTL_PACKAGE_RECOMMENDS "systemd")
set(_suggests)
foreach(_c python torch xgboost dev)
  if(_c IN_LIST TRAINTL_COMPONENTS)
    list(APPEND _suggests ${TRAINTL_PKG_${_c}})
  endif()
endforeach()
list(JOIN _suggests ", " CPACK_DEBIAN_TRAINTL_PACKAGE_SUGGESTS)
set(CPACK_DEBIAN_TRAINTL_DESCRIPTION
"distributed training as a cluster service
${_about}
The traintld daemon runs on every node; the daemons keep the cluster's records
in SQLite replicated by Raft and restart failed jobs from their latest
checkpoint.

This package holds the daemon and its systemd unit, the traintl command-line
client and the traintl-worker process. Training libraries that use LibTorch
need ${_torch_pkg} on the nodes that run them; Python training functions
need python3-traintl; building training libraries needs traintl-dev.")
# The maintainer scripts (user, directories, unit state) and the conffiles are this
# package's only.
set(CPACK_DEBIAN_TRAINTL_PACKAGE_CONTROL_EXTRA
  ${CMAKE_CURRENT_LIST_DIR}/debian/conffiles
  ${CMAKE_CURRENT_LIST_DIR}/debian/postinst
  ${CMAKE_CURRENT_LIST_DIR}/debian/prerm
  ${CMAKE_CURRENT_LIST_DIR}/debian/postrm)

# The library packages: a shlibs file (what a package linking the library depends on) and
# the ldconfig trigger. Their maintainer scripts would only run ldconfig, which the
# trigger does: packaging/deb_post_build.cmake drops the ones CPack writes.
foreach(_c torch xgboost)
  if(NOT _c IN_LIST TRAINTL_COMPONENTS)
    continue()
  endif()
  string(TOUPPER ${_c} _C)
  set(_dir ${CMAKE_BINARY_DIR}/packaging/deb/${_c})
  file(WRITE ${_dir}/shlibs
       "libtraintl_${_c} ${TRAINTL_SOVERSION} ${TRAINTL_PKG_${_c}} (>= ${_v})\n")
  set(CPACK_DEBIAN_${_C}_PACKAGE_NAME ${TRAINTL_PKG_${_c}})
  set(CPACK_DEBIAN_${_C}_PACKAGE_SECTION libs)
  set(CPACK_DEBIAN_${_C}_PACKAGE_SOURCE traintl)
  set(CPACK_DEBIAN_${_C}_PACKAGE_CONTROL_EXTRA
    ${_dir}/shlibs ${CMAKE_CURRENT_LIST_DIR}/debian/triggers)
endforeach()
set(CPACK_DEBIAN_TORCH_DESCRIPTION
"traintl SDK: data-parallel LibTorch training
${_about}

This package holds libtraintl_torch, which training libraries built against
traintl::torch link (prepare_model, prepare_data_loader, the process group over
Gloo, NCCL and shared memory). It is loaded only by the workers of jobs whose
libraries use it.")
set(CPACK_DEBIAN_XGBOOST_DESCRIPTION
"traintl SDK: distributed XGBoost training
${_about}

This package holds libtraintl_xgboost, which training libraries built against
traintl::xgboost link. It loads libxgboost; building against it needs no
XGBoost headers.")

# python3-traintl: Python training functions. traintl-worker loads the entry shim
# (/usr/lib/traintl/libtraintl_python.so, which links libpython); traintl._c10d, the
# torch.distributed backend "traintl", links libtraintl_torch and python3-torch's
# libtorch_python.
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-traintl)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SOURCE traintl)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "traintl (= ${_v}), python3-numpy")
if(TARGET traintl_c10d)
  string(APPEND CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS ", ${_torch_pkg} (= ${_v}), python3-torch")
  # dpkg-shlibdeps must find libtraintl_torch.so.<N>, which _c10d links, though it is in
  # another package: the built one (the dependency is the line above).
  get_target_property(_torch_dir traintl_torch BINARY_DIR)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${_torch_dir})
endif()
# Descriptions are written into CPackConfig.cmake unescaped: no double quotes in them.
set(CPACK_DEBIAN_PYTHON_DESCRIPTION
"traintl: Python training functions
${_about}

This package lets jobs run Python training functions (an entry point
module:function) and commands with the traintl Python package: the session API
in Ray Train's names (traintl.train, traintl.train.torch) and the traintl
backend of torch.distributed.")

# traintl-dev: building training libraries. It needs the libraries its CMake targets name
# (the targets files check that they exist), the headers the SDK's headers include, a
# C++17 compiler and CMake; LibTorch for traintl::torch.
set(CPACK_DEBIAN_DEV_PACKAGE_NAME traintl-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_SOURCE traintl)
set(_deps)
foreach(_c torch xgboost)
  if(_c IN_LIST TRAINTL_COMPONENTS)
    list(APPEND _deps "${TRAINTL_PKG_${_c}} (= ${_v})")
  endif()
endforeach()
list(APPEND _deps "nlohmann-json3-dev (>= 3.10)")
list(JOIN _deps ", " CPACK_DEBIAN_DEV_PACKAGE_DEPENDS)
set(CPACK_DEBIAN_DEV_PACKAGE_RECOMMENDS "g++ (>= 4:12), cmake (>= 3.18), libtorch-dev")
set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "traintl")
set(CPACK_DEBIAN_DEV_DESCRIPTION
"traintl SDK: headers and CMake package
${_about}

This package holds what training libraries are built with: the SDK headers
(traintl/train.h over the C ABI of traintl/abi.h, traintl/torch.h,
traintl/xgboost.h), the CMake package (find_package(traintl) gives
traintl::sdk, traintl::torch and traintl::xgboost) and an example.")

set(CPACK_POST_BUILD_SCRIPTS ${CMAKE_CURRENT_LIST_DIR}/deb_post_build.cmake)
if(CMAKE_VERSION VERSION_LESS 3.20)
  # CPACK_POST_BUILD_SCRIPTS is 3.19's, CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS 3.20's.
  message(WARNING "cpack of CMake ${CMAKE_VERSION} makes packages lintian warns about, or "
                  "fails on python3-traintl; build the packages with CMake 3.20 or later")
endif()
include(CPack)

# Every install rule belongs to a package.
get_cmake_property(_installed COMPONENTS)
foreach(_c ${_installed})
  if(NOT _c IN_LIST TRAINTL_COMPONENTS)
    message(FATAL_ERROR "an install() rule has component '${_c}', which is in no package "
                        "(packaging/CPack.cmake: ${TRAINTL_COMPONENTS})")
  endif()
endforeach()

if(TRAINTL_BUILD_TESTS AND EXISTS ${PROJECT_SOURCE_DIR}/tests/packaging/CMakeLists.txt)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/packaging ${CMAKE_BINARY_DIR}/tests/packaging)
endif()
