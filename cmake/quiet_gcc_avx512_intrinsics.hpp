// SPDX-License-Identifier: MIT
// Force-included (g++ -include) into matopt's own tests, examples and benchmarks; never installed, never on the
// exported target.
//
// GCC 12's AVX-512 intrinsics pass a deliberately undefined merge operand (`__m512 __Y = __Y;` in
// _mm512_undefined_ps and friends) to builtins whose mask is all ones. Once Eigen's AVX-512 kernels inline them,
// -Wmaybe-uninitialized fires inside GCC's own avx512fintrin.h (GCC bug 105593): 155 errors under -Werror in a
// -march=native build on an AVX-512 CPU (issue 17); where the value flows straight in (Eigen's AVX-512 psqrt via
// _mm512_rsqrt14_ps, e.g. AdaMuon's sqrt(S)) it is -Wuninitialized instead. GCC matches a diagnostic pragma against the location the
// warning points at, so including <immintrin.h> first, with that one warning off, silences exactly the warnings
// located in GCC's intrinsics headers. Eigen's and matopt's own code keep both warnings.
#pragma once
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
