// SPDX-License-Identifier: MIT
// The Thrust backend's suite (tests/test_thrust.cpp) compiled as CUDA: with matopt::cuda's
// THRUST_DEVICE_SYSTEM_CUDA, every DeviceOptimizer<..., ThrustEngine> test runs on the GPU (label gpu).
#include "../test_thrust.cpp"
