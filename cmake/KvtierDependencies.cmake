# Every dependency comes from a Debian package (scripts/install-deps installs them all).
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)
find_package(CapnProto REQUIRED)
find_package(spdlog REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(nlohmann_json 3 REQUIRED)       # kvtierctl --json
find_package(Boost 1.74 REQUIRED)           # header-only Boost.Interprocess
find_package(PkgConfig REQUIRED)
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)
# kvtierd's Prometheus endpoint (daemon/src/metrics_server.cpp); the tests' HTTP client.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)  # standalone Asio (libasio-dev)
add_library(kvtier_asio INTERFACE)
target_include_directories(kvtier_asio SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
target_compile_definitions(kvtier_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
target_link_libraries(kvtier_asio INTERFACE Threads::Threads)

find_path(TL_EXPECTED_INCLUDE_DIR tl/expected.hpp REQUIRED)  # libexpected-dev
add_library(kvtier_expected INTERFACE)
target_include_directories(kvtier_expected SYSTEM INTERFACE ${TL_EXPECTED_INCLUDE_DIR})

if(KVTIER_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(benchmark REQUIRED)
endif()
