// SPDX-License-Identifier: MIT
// doctest for a test file that includes libtorch first: libtorch's logging (glog) defines CHECK, CHECK_EQ etc.,
// which are doctest's names; from here on they are doctest's.
#pragma once
#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#include <doctest/doctest.h>
