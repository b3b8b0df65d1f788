# Debian package of the binaries, SDK headers and traintl::torch (cpack -G DEB in the build
# dir). Issue 7 adds maintainer scripts, the CMake package config and lintian checks.
install(FILES ${PROJECT_SOURCE_DIR}/systemd/traintld.service DESTINATION lib/systemd/system)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION share/doc/traintl)
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "traintl")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "traintl developers <dev@traintl.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed training as a cluster service")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
include(CPack)
