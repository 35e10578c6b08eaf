// SPDX-License-Identifier: MIT
// A program whose two files include matopt with different settings (this one without OpenMP, other.cpp with it):
// it must stop before main with a message naming both (core/detail/config_check.hpp), never run with one of two
// definitions of matopt's inline functions. CTest config_check.mismatch runs it.
#include <cstdio>

#include <matopt/core/optimizer.hpp>

int main() {
  std::puts("main ran: the mismatch went unnoticed");
  return 0;
}
