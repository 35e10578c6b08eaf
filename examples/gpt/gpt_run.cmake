# SPDX-License-Identifier: MIT
# gpt_run(name expect_rc args...), shared by the gpt CTest scripts (lr_grid_test.cmake, ranks_test.cmake): runs
# ${GPT} with args and fails unless it exits with expect_rc; its output (stdout, then stderr) in ${name}_out and
# ${name}_ran TRUE in the caller. Exit 77 (no fortunes text) prints "${GPT_TEST} skipped: no fortunes text", which
# the test's SKIP_REGULAR_EXPRESSION matches. The including script sets GPT_TEST (e.g. gpt_ranks).
function(gpt_run name expect_rc)
  execute_process(COMMAND ${GPT} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 77)
    message("${GPT_TEST} skipped: no fortunes text")
    return()
  endif()
  if(NOT rc EQUAL expect_rc)
    message(FATAL_ERROR "run ${name}: exit ${rc}, expected ${expect_rc}\n${out}\n${err}")
  endif()
  set(${name}_out "${out}\n${err}" PARENT_SCOPE)
  set(${name}_ran TRUE PARENT_SCOPE)
endfunction()
