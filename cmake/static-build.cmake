# bin/static/toolsrv and bin/static/ollie-9p: the OLLIE_STATIC configuration of this same source
# tree, built in its own tree (no sanitizers, no -Werror: GCC 12 warns falsely at -O3), packed by
# olliesrv into a remote session's tarball (spec §6.11); built with olliesrv. Optimised in the
# trees people install from; a Debug tree only runs them in the remote tests, and unoptimised they
# build in three quarters of the time.
include(ExternalProject)
if(CMAKE_BUILD_TYPE STREQUAL "Debug")
  set(OLLIE_STATIC_BUILD_TYPE None)
else()
  set(OLLIE_STATIC_BUILD_TYPE Release)
endif()
ExternalProject_Add(ollie_static
  SOURCE_DIR ${PROJECT_SOURCE_DIR}
  BINARY_DIR ${PROJECT_BINARY_DIR}/static
  CMAKE_GENERATOR Ninja
  CMAKE_ARGS -DOLLIE_STATIC=ON -DCMAKE_BUILD_TYPE=${OLLIE_STATIC_BUILD_TYPE} -DCMAKE_UNITY_BUILD=${CMAKE_UNITY_BUILD}
    "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Wno-missing-field-initializers"
  BUILD_COMMAND ${CMAKE_COMMAND} --build <BINARY_DIR> --target toolsrv ollie-9p
  INSTALL_COMMAND ${CMAKE_COMMAND} -E make_directory ${OLLIE_BIN_DIR}/static
    COMMAND ${CMAKE_COMMAND} -E copy_if_different <BINARY_DIR>/bin/toolsrv <BINARY_DIR>/bin/ollie-9p ${OLLIE_BIN_DIR}/static/
  BUILD_ALWAYS ON
  USES_TERMINAL_BUILD ON)
add_dependencies(olliesrv ollie_static)
