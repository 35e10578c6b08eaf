# SPDX-License-Identifier: MIT
# Every source file carries the license's SPDX identifier in its first two lines (after a shebang at most), and
# LICENSE at the root is the MIT text.
file(READ ${SOURCE_DIR}/LICENSE license)
if(NOT license MATCHES "^MIT License\n" OR NOT license MATCHES "Permission is hereby granted, free of charge")
  message(FATAL_ERROR "LICENSE at the root is not the MIT license text")
endif()
set(missing "")
foreach(dir include src tests examples bench scripts cmake)
  file(GLOB_RECURSE files ${SOURCE_DIR}/${dir}/*.hpp ${SOURCE_DIR}/${dir}/*.cpp ${SOURCE_DIR}/${dir}/*.cuh
       ${SOURCE_DIR}/${dir}/*.cu ${SOURCE_DIR}/${dir}/*.py ${SOURCE_DIR}/${dir}/*.sh ${SOURCE_DIR}/${dir}/*.cmake
       ${SOURCE_DIR}/${dir}/*.in ${SOURCE_DIR}/${dir}/CMakeLists.txt)
  foreach(f ${files})
    file(STRINGS ${f} head LIMIT_COUNT 2)
    if(NOT head MATCHES "SPDX-License-Identifier: MIT")
      list(APPEND missing ${f})
    endif()
  endforeach()
endforeach()
if(missing)
  list(JOIN missing "\n  " text)
  message(FATAL_ERROR "files without 'SPDX-License-Identifier: MIT' in their first two lines:\n  ${text}")
endif()
