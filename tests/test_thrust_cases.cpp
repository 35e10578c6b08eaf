// SPDX-License-Identifier: MIT
// The device cases shared with the CUDA suite (tests/device_cases.hpp: ExactPolar, checkpoints moved between
// the host and device optimizers, spectral diagnostics of device matrices) on the Thrust backend. A
// translation unit of its own: the SVD-based cases are slow to compile, and this one builds next to
// test_thrust.cpp (the Thrust-on-CUDA suite, tests/gpu, compiles test_thrust.cpp only; the CUDA engine's
// suite runs these cases).

#include "thrust_backend.hpp"

#include "device_cases.hpp"
