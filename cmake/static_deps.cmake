# OpenSSL and Boost.Program_options for code that both traintld and the CLI link:
# traintl_dep_ssl, traintl_dep_crypto and traintl_dep_program_options link the shared
# libraries, except into an executable whose TRAINTL_STATIC_DEPS property is ON, which gets
# the static archives instead.
#
# Why: `traintl` is a short-lived process run in shell loops (issue 20), and loading and
# relocating libssl, libcrypto, libstdc++ and Boost was most of its start (~3.4 ms of a
# ~7 ms `traintl submit` on the 2-CPU VM, bench/cli/RESULTS.md). The daemon keeps the
# shared libraries. The cost of a static OpenSSL: a security update of OpenSSL reaches the
# CLI only when it is rebuilt; TRAINTL_CLI_STATIC_DEPS=OFF links it like the daemon.
option(TRAINTL_CLI_STATIC_DEPS
       "Link OpenSSL, Boost and libstdc++ statically into the traintl CLI (faster start)" ON)

set(_traintl_static_ok OFF)
if(TRAINTL_CLI_STATIC_DEPS)
  find_library(TRAINTL_LIBSSL_A NAMES libssl.a)
  find_library(TRAINTL_LIBCRYPTO_A NAMES libcrypto.a)
  find_library(TRAINTL_LIBBOOST_PO_A NAMES libboost_program_options.a)
  if(TRAINTL_LIBSSL_A AND TRAINTL_LIBCRYPTO_A AND TRAINTL_LIBBOOST_PO_A)
    set(_traintl_static_ok ON)
  else()
    message(WARNING "TRAINTL_CLI_STATIC_DEPS: static OpenSSL or Boost.Program_options not found "
                    "(libssl-dev, libboost-program-options-dev); the CLI links them shared")
  endif()
endif()

set(_traintl_static "$<AND:$<BOOL:${_traintl_static_ok}>,$<BOOL:$<TARGET_PROPERTY:TRAINTL_STATIC_DEPS>>>")
add_library(traintl_dep_ssl INTERFACE)
# libcrypto.a again after libssl.a: an archive only serves what is undefined before it.
target_link_libraries(traintl_dep_ssl INTERFACE
  "$<IF:${_traintl_static},${TRAINTL_LIBSSL_A};${TRAINTL_LIBCRYPTO_A},OpenSSL::SSL>"
  traintl_dep_crypto)
target_include_directories(traintl_dep_ssl INTERFACE ${OPENSSL_INCLUDE_DIR})
add_library(traintl_dep_crypto INTERFACE)
target_link_libraries(traintl_dep_crypto INTERFACE
  "$<IF:${_traintl_static},${TRAINTL_LIBCRYPTO_A},OpenSSL::Crypto>" Threads::Threads
  ${CMAKE_DL_LIBS})
target_include_directories(traintl_dep_crypto INTERFACE ${OPENSSL_INCLUDE_DIR})
add_library(traintl_dep_program_options INTERFACE)
target_link_libraries(traintl_dep_program_options INTERFACE
  "$<IF:${_traintl_static},${TRAINTL_LIBBOOST_PO_A},Boost::program_options>")
target_include_directories(traintl_dep_program_options INTERFACE ${Boost_INCLUDE_DIRS})

# Marks `target` (an executable) to link the static archives above, and libstdc++ and
# libgcc statically. The relative relocations of a PIE are packed (DT_RELR, glibc 2.36)
# when the linker can: fewer bytes for the loader to read and apply.
function(traintl_link_static_deps target)
  if(NOT _traintl_static_ok)
    return()
  endif()
  set_target_properties(${target} PROPERTIES TRAINTL_STATIC_DEPS ON)
  target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
  include(CheckLinkerFlag)
  check_linker_flag(CXX "-Wl,-z,pack-relative-relocs" TRAINTL_HAVE_PACK_RELATIVE_RELOCS)
  if(TRAINTL_HAVE_PACK_RELATIVE_RELOCS)
    target_link_options(${target} PRIVATE -Wl,-z,pack-relative-relocs)
  endif()
endfunction()
