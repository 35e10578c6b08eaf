// The Thrust backend's suite (tests/test_thrust.cpp) compiled as CUDA: with matopt::cuda's
// THRUST_DEVICE_SYSTEM_CUDA, every DeviceOptimizer<..., ThrustEngine> test runs on the GPU (label gpu).
//
// test_thrust.cpp names structured bindings inside doctest's CAPTURE, whose lambda then captures them: C++20
// (P1091), which g++ accepts in C++17 mode and nvcc reports as warning 3357; harmless here.
#pragma nv_diag_suppress 3357
#include "../test_thrust.cpp"
