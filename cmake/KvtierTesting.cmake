# kvtier_add_test(NAME n SOURCES s... LIBS l... LABELS unit|layout|integration|abi|cuda)
# One GoogleTest executable per call, discovered test by test, with a ctest label.
include(GoogleTest)
function(kvtier_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main kvtier_warnings)
  gtest_discover_tests(${T_NAME} PROPERTIES LABELS "${T_LABELS}" DISCOVERY_TIMEOUT 30)
endfunction()
