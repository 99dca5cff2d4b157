# The static configuration (OLLIE_STATIC): statically linked toolsrv and ollie-9p, the programs a
# remote session runs on its tool host (spec §6.11). Debian ships the archives of yaml-cpp,
# libcrypto, libelf and zlib; spdlog and fmt have none, so they are used header-only here.
set(CMAKE_FIND_LIBRARY_SUFFIXES .a)
set(OPENSSL_USE_STATIC_LIBS TRUE)
find_package(OpenSSL REQUIRED)
find_package(nlohmann_json REQUIRED)

find_library(OLLIE_YAML_A yaml-cpp REQUIRED)
add_library(yaml-cpp STATIC IMPORTED)
set_target_properties(yaml-cpp PROPERTIES IMPORTED_LOCATION ${OLLIE_YAML_A})

add_library(ollie_spdlog_header_only INTERFACE)
target_compile_definitions(ollie_spdlog_header_only INTERFACE SPDLOG_HEADER_ONLY SPDLOG_FMT_EXTERNAL FMT_HEADER_ONLY)
target_link_libraries(ollie_spdlog_header_only INTERFACE Threads::Threads)
add_library(spdlog::spdlog ALIAS ollie_spdlog_header_only)

find_library(OLLIE_ELF_A elf REQUIRED)
find_library(OLLIE_Z_A z REQUIRED)
add_library(ollie_libelf STATIC IMPORTED)
set_target_properties(ollie_libelf PROPERTIES IMPORTED_LOCATION ${OLLIE_ELF_A} INTERFACE_LINK_LIBRARIES ${OLLIE_Z_A})
add_library(PkgConfig::LIBELF ALIAS ollie_libelf)

add_link_options(-static -s)  # stripped: the tarball crosses the network at every start
add_subdirectory(src/lib9p)
add_subdirectory(src/virtfs)
add_subdirectory(src/toolsrv)
add_executable(ollie-9p src/olliesrv/ollie-9p.cpp)
target_link_libraries(ollie-9p PRIVATE p9client)
set_target_properties(ollie-9p PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${OLLIE_BIN_DIR})
include(cmake/pch.cmake)
