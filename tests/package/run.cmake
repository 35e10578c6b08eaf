# SPDX-License-Identifier: MIT
# Builds and runs tests/package/consumer against matopt in one of three ways (MODE):
#   install       cmake --install the build tree into WORK_DIR/prefix, then find_package(matopt CONFIG)
#   install_headers  configure matopt without matopt::runtime, install it, then find_package(matopt CONFIG)
#   subdirectory  add_subdirectory(SOURCE_DIR)
#   fetchcontent  FetchContent_Declare(matopt SOURCE_DIR ...) + FetchContent_MakeAvailable
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

set(args -DMATOPT_MODE=${MODE} -DMATOPT_SOURCE_DIR=${SOURCE_DIR} -DCMAKE_BUILD_TYPE=Debug
         -DMATOPT_EXPECT_BLAS=${EXPECT_BLAS} -DMATOPT_EXPECT_TORCH=${EXPECT_TORCH} -DMATOPT_EXPECT_C10D=${EXPECT_C10D})
if(MODE STREQUAL "install_headers")
  # A header-only install (no matopt::runtime, no tests): its package config must load (it once wrote
  # `if(OFF AND )` there, and find_package failed for every consumer).
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/matopt-build -G ${GENERATOR} -DMATOPT_BUILD_RUNTIME=OFF
      -DMATOPT_BUILD_TESTS=OFF -DMATOPT_BUILD_EXAMPLES=OFF -DMATOPT_BUILD_BENCHMARKS=OFF -DMATOPT_ENABLE_CUDA=OFF)
  run(${CMAKE_COMMAND} --install ${WORK_DIR}/matopt-build --prefix ${WORK_DIR}/prefix)
  list(APPEND args -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
elseif(MODE STREQUAL "install")
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
  list(APPEND args -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
  # The license travels with the install, and the package config names it.
  if(NOT EXISTS ${WORK_DIR}/prefix/share/doc/matopt/LICENSE)
    message(FATAL_ERROR "install: share/doc/matopt/LICENSE missing")
  endif()
  file(READ ${WORK_DIR}/prefix/share/cmake/matopt/matoptConfig.cmake config)
  if(NOT config MATCHES "set\\(matopt_LICENSE \"MIT\"\\)")
    message(FATAL_ERROR "install: matoptConfig.cmake does not set matopt_LICENSE to MIT")
  endif()
endif()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package/consumer -B ${WORK_DIR}/build -G ${GENERATOR} ${args})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
if(MODE STREQUAL "install")
  run(${WORK_DIR}/build/consumer_runtime)
endif()
