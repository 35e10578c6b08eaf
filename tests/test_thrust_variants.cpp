// SPDX-License-Identifier: MIT
// The peers' variants (tests/device_variant_cases.hpp: NorMuon, AdaMuon, NAMO, PolarGrad, Turbo-Muon, row blocks,
// the weight-decay forms and lr rules against the PyTorch golden data) on the Thrust backend. A translation unit
// of its own, built next to test_thrust.cpp and test_thrust_cases.cpp.

#include "thrust_backend.hpp"

#include "device_variant_cases.hpp"
