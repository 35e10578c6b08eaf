# SPDX-License-Identifier: MIT
# docs/options.md's key columns come from every optimizer's option_keys(): the option_keys program (KEYS) prints
# them, scripts/options_table.py renders the page anew, and it must equal the committed page.
execute_process(COMMAND ${KEYS} OUTPUT_FILE ${WORK_DIR}/option_keys.txt RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${KEYS} failed (${rc})")
endif()
execute_process(COMMAND ${PYTHON} ${SOURCE_DIR}/scripts/options_table.py ${WORK_DIR}/option_keys.txt
                        ${WORK_DIR}/options.md RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "scripts/options_table.py failed (${rc}): a key without a description?")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK_DIR}/options.md ${SOURCE_DIR}/docs/options.md
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "docs/options.md is out of date with the optimizers' option_keys(): regenerate it with\n"
                      "  ${KEYS} > keys.txt && python3 scripts/options_table.py keys.txt docs/options.md\n"
                      "(the rendered page is ${WORK_DIR}/options.md)")
endif()
