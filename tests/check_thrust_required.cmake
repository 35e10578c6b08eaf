# SPDX-License-Identifier: MIT
# A Thrust device system asked for by name requires Thrust's headers: configuring matopt with
# MATOPT_THRUST_DEVICE_SYSTEM=OMP where no thrust/version.h can be found (every directory that holds one ignored)
# must fail with a message naming libthrust-dev, and so must MATOPT_ENABLE_THRUST=OFF with a system named; left
# empty, the same configure succeeds and skips the backend.
set(ignore /usr/include /usr/local/include /usr/local/cuda/include /usr/local/cuda/include/cccl)
foreach(dir ${CUDA_INCLUDE_DIRS})
  list(APPEND ignore ${dir} ${dir}/cccl)
endforeach()
list(JOIN ignore "\\;" ignore)  # one argument
set(common -G ${GENERATOR} -DMATOPT_BUILD_TESTS=OFF -DMATOPT_BUILD_EXAMPLES=OFF -DMATOPT_BUILD_BENCHMARKS=OFF
           -DMATOPT_BUILD_RUNTIME=OFF -DMATOPT_ENABLE_CUDA=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON
           -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON "-DCMAKE_IGNORE_PATH=${ignore}")
function(configure name expect_ok expect_text)
  file(REMOVE_RECURSE ${WORK_DIR}/${name})
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/${name} ${common} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REPLACE "\n" " " text "${out} ${err}")
  string(REGEX REPLACE " +" " " text "${text}")
  if(expect_ok AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: configure failed (${rc}):\n${out}\n${err}")
  elseif(NOT expect_ok AND rc EQUAL 0)
    message(FATAL_ERROR "${name}: configure succeeded but must fail:\n${out}")
  endif()
  if(NOT text MATCHES "${expect_text}")
    message(FATAL_ERROR "${name}: output lacks '${expect_text}':\n${out}\n${err}")
  endif()
endfunction()
configure(required_missing FALSE "asks for the Thrust backend, but Thrust's headers .thrust/version.h. were not found: apt-get install libthrust-dev" -DMATOPT_THRUST_DEVICE_SYSTEM=OMP)
configure(required_disabled FALSE "MATOPT_THRUST_DEVICE_SYSTEM=CPP needs MATOPT_ENABLE_THRUST=ON" -DMATOPT_THRUST_DEVICE_SYSTEM=CPP -DMATOPT_ENABLE_THRUST=OFF)
configure(optional_missing TRUE "Thrust headers not found .* Thrust backend skipped")
