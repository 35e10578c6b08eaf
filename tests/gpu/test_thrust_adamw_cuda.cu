// SPDX-License-Identifier: MIT
// DeviceAdamW's suite (tests/test_thrust_adamw.cpp) compiled as CUDA: with matopt::cuda's
// THRUST_DEVICE_SYSTEM_CUDA, DeviceAdamW runs on the GPU against the host AdamW (label gpu).
#include "../test_thrust_adamw.cpp"
