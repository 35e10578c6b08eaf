# SPDX-License-Identifier: MIT
# CTest example.gpt_ranks: `gpt --ranks 2` (data parallel over c10d/Gloo, two processes) against `gpt` on one process
# (d_model 64, one layer, 10 steps, muon and adamw):
#   - the final validation losses agree to 1e-3 (float rounding: each rank's loss is the mean over its half of the
#     batch and the gradients are averaged, where one process takes the mean over the whole batch);
#   - data_parallel.csv: per step, the all-reduce payload covers every parameter (4 bytes each, plus the loss), the
#     all-gather payload over both ranks the matrix route's elements (muon; none for adamw) plus each rank's
#     agreement record and status (under 4 KiB);
#   - --ranks that does not divide --batch, and --ranks with torch_adamw, are refused (exit 2).
# Skipped (SKIP_REGULAR_EXPRESSION) without the fortunes text.
# cmake -DGPT=path/to/gpt -DOUT=folder -P ranks_test.cmake
cmake_minimum_required(VERSION 3.21)

set(common --quick --layers 1 --steps 10 --eval-every 5 --eval-batches 1 --threads 1 --optimizers muon,adamw)
file(REMOVE_RECURSE ${OUT})

set(GPT_TEST gpt_ranks)
include(${CMAKE_CURRENT_LIST_DIR}/gpt_run.cmake)

# The column `column` of the row of `optimizer` in a CSV file with a header line.
function(csv_value file optimizer column result)
  file(STRINGS ${file} lines)
  list(GET lines 0 header)
  string(REPLACE "," ";" names "${header}")
  list(FIND names ${column} at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${file}: no column ${column}")
  endif()
  foreach(line IN LISTS lines)
    string(REPLACE "," ";" fields "${line}")
    list(GET fields 0 first)
    if(first STREQUAL optimizer)
      list(GET fields ${at} value)
      set(${result} ${value} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "${file}: no row for ${optimizer}")
endfunction()

gpt_run(two 0 ${common} --ranks 2 --out ${OUT}/two)
if(NOT DEFINED two_out)
  return()
endif()
gpt_run(one 0 ${common} --out ${OUT}/one)
foreach(opt muon adamw)
  csv_value(${OUT}/two/summary.csv ${opt} final_val_loss two_loss)
  csv_value(${OUT}/one/summary.csv ${opt} final_val_loss one_loss)
  # |two - one| <= 1e-3, on the losses truncated to 3 decimals (CMake's math is integer-only).
  string(REGEX MATCH "^([0-9]+)\\.([0-9][0-9][0-9])" a "${two_loss}")
  set(a3 "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
  string(REGEX MATCH "^([0-9]+)\\.([0-9][0-9][0-9])" b "${one_loss}")
  set(b3 "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
  math(EXPR diff "${a3} - ${b3}")
  if(diff GREATER 1 OR diff LESS -1)
    message(FATAL_ERROR "${opt}: final validation loss ${two_loss} on 2 ranks but ${one_loss} on one process")
  endif()
  message(STATUS "${opt}: final validation loss ${two_loss} on 2 ranks, ${one_loss} on one process")
  csv_value(${OUT}/two/data_parallel.csv ${opt} ranks ranks)
  csv_value(${OUT}/two/data_parallel.csv ${opt} params params)
  csv_value(${OUT}/two/data_parallel.csv ${opt} matrix_params matrix)
  csv_value(${OUT}/two/data_parallel.csv ${opt} allreduce_payload_bytes_per_rank reduced)
  csv_value(${OUT}/two/data_parallel.csv ${opt} allgather_payload_bytes_all_ranks gathered)
  math(EXPR all_bytes "4 * ${params}")
  math(EXPR matrix_bytes "4 * ${matrix}")
  math(EXPR gathered_most "${matrix_bytes} + 4096")  # and each rank's agreement record and status
  if(NOT ranks EQUAL 2 OR reduced LESS all_bytes OR gathered LESS matrix_bytes OR gathered GREATER gathered_most)
    message(FATAL_ERROR "${opt}: data_parallel.csv has ranks ${ranks}, all-reduce ${reduced} B (parameters: "
                        "${all_bytes} B), all-gather ${gathered} B (matrix route: ${matrix_bytes} B)")
  endif()
endforeach()
csv_value(${OUT}/two/data_parallel.csv adamw matrix_params adamw_matrix)
if(NOT adamw_matrix EQUAL 0)
  message(FATAL_ERROR "adamw has ${adamw_matrix} matrix-route elements")
endif()

gpt_run(odd 2 ${common} --ranks 3 --out ${OUT}/odd)
string(FIND "${odd_out}" "must be a multiple of the ranks" at)
if(at EQUAL -1)
  message(FATAL_ERROR "--ranks 3 --batch 16: no refusal in\n${odd_out}")
endif()
gpt_run(torch 2 --quick --steps 10 --optimizers torch_adamw --ranks 2 --out ${OUT}/torch)
string(FIND "${torch_out}" "no data-parallel step" at)
if(at EQUAL -1)
  message(FATAL_ERROR "--ranks with torch_adamw: no refusal in\n${torch_out}")
endif()
message(STATUS "gpt --ranks 2: passed")
