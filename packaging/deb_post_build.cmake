# Run by cpack after it built the .debs (CPACK_POST_BUILD_SCRIPTS, CPACK_PACKAGE_FILES).
#
# CPack's DEB generator gives every package with a shared object under /usr/lib a postinst
# and a postrm that run ldconfig (unless the package brings its own), and has no switch to
# leave them out. Debian replaced those calls by the ldconfig trigger (lintian:
# maintscript-calls-ldconfig), which the library packages declare
# (packaging/debian/triggers); python3-traintl's objects are in /usr/lib/traintl, which
# ldconfig does not read. This rebuilds each package whose postinst or postrm is that
# generated script and nothing else without them; every other byte stays.
find_program(_dpkg_deb dpkg-deb)
if(NOT _dpkg_deb)
  message(FATAL_ERROR "deb_post_build.cmake: dpkg-deb not found")
endif()
foreach(_deb IN LISTS CPACK_PACKAGE_FILES)
  set(_tree "${_deb}.tree")
  file(REMOVE_RECURSE "${_tree}")
  execute_process(COMMAND ${_dpkg_deb} -R "${_deb}" "${_tree}" RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "dpkg-deb -R ${_deb} failed")
  endif()
  set(_changed FALSE)
  foreach(_script postinst postrm)
    set(_path "${_tree}/DEBIAN/${_script}")
    if(NOT EXISTS "${_path}")
      continue()
    endif()
    file(STRINGS "${_path}" _lines)
    set(_other FALSE)
    set(_ldconfig FALSE)
    foreach(_line IN LISTS _lines)
      string(STRIP "${_line}" _line)
      if(_line STREQUAL "ldconfig")
        set(_ldconfig TRUE)
      elseif(NOT _line MATCHES "^(#!/bin/sh|set -e|if \\[ \"\\$1\" = \"[a-z]+\" \\]; then|fi|)$")
        set(_other TRUE)
      endif()
    endforeach()
    if(_ldconfig AND NOT _other)
      file(REMOVE "${_path}")
      set(_changed TRUE)
    endif()
  endforeach()
  if(NOT _changed)
    file(REMOVE_RECURSE "${_tree}")
    continue()
  endif()
  execute_process(
    COMMAND ${_dpkg_deb} --root-owner-group -Zgzip --build "${_tree}" "${_deb}"
    RESULT_VARIABLE _rc OUTPUT_QUIET)
  file(REMOVE_RECURSE "${_tree}")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "dpkg-deb --build ${_deb} failed")
  endif()
endforeach()
