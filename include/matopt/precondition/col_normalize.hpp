// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// ColNormalize: each column of U divided by its norm (Scion's column normalization, arXiv 2502.07529).
// ColNormalize (docs/math.md#column-normalization): D_{:,j} = U_{:,j} / max(||U_{:,j}||_2, eps) for each column j, i.e.
// normalization over the output dimension. Scion (arXiv 2502.07529) pairs it with the radius sqrt(m)
// (shape::ScionColumn: each column gets unit RMS). Zero columns give zero columns. RowNormalize's template over
// columns (row_normalize.hpp).

#include "matopt/precondition/row_normalize.hpp"

namespace matopt {

/// D_:j = U_:j / max(||U_:j||_2, eps) for each column j: normalization over the output dimension. Scion
/// (arXiv 2502.07529) pairs it with the radius sqrt(m) (shape::ScionColumn). Zero columns stay zero
/// (@ref policy_preconditioner).
using ColNormalize = NormalizeLines<true>;

}  // namespace matopt
