# SPDX-License-Identifier: MIT
# CTest's doctest discovery splits a test name at ';' (a CMake list separator): the pieces match no test case,
# so such a test would "pass" without running. This check fails on any TEST_CASE name with a ';'.
file(GLOB sources ${SOURCE_DIR}/*.cpp ${SOURCE_DIR}/*.hpp ${SOURCE_DIR}/gpu/*.cu)
set(bad "")
foreach(source IN LISTS sources)
  file(READ ${source} content)
  string(REPLACE ";" "<semicolon>" content "${content}")
  string(REGEX MATCHALL "TEST_CASE(_TEMPLATE)?\\((MATOPT_BACKEND )?\"[^\"]*<semicolon>[^\"]*\"" names "${content}")
  foreach(name IN LISTS names)
    list(APPEND bad "${source}: ${name}")
  endforeach()
endforeach()
if(bad)
  list(JOIN bad "\n  " text)
  string(REPLACE "<semicolon>" ";" text "${text}")
  message(FATAL_ERROR "test names with ';' (CTest would run nothing for them):\n  ${text}")
endif()
message(STATUS "no test name contains ';' (${SOURCE_DIR})")
