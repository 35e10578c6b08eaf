// SPDX-License-Identifier: MIT
#pragma once
// A fully connected ReLU network with a softmax cross-entropy loss, written with Eigen, templated on the
// scalar so the test can check its gradient in double against central finite differences.
//
// Layout follows PyTorch's nn.Linear: weight l is (out, in) row-major, y = x W^T + b for a batch x of
// shape (B, in), so each weight is the m x n matrix matopt expects (m = fan-out, n = fan-in).
//
//   z_l = h_{l-1} W_l^T + 1 b_l^T,  h_l = relu(z_l)  (l < L),  logits = z_L
//   loss = (1/B) sum_b [ logsumexp(logits_b) - logits_b[y_b] ]
// Backward (standard backpropagation): dz_L = (softmax(logits) - onehot(y)) / B;
//   dW_l = dz_l^T h_{l-1},  db_l = sum_b dz_l,  dz_{l-1} = (dz_l W_l) .* [z_{l-1} > 0].

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>

namespace mlp {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// Weights and biases of every layer (also used for their gradients). sizes = {in, hidden..., classes}.
template <class T>
struct Params {
  std::vector<Mat<T>> w;  // w[l]: sizes[l+1] x sizes[l]
  std::vector<Vec<T>> b;  // b[l]: sizes[l+1]

  static Params zeros_like(const std::vector<int>& sizes) {
    if (sizes.size() < 2) throw std::invalid_argument("mlp::Params: sizes needs an input and an output size");
    Params p;
    for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
      if (sizes[l] < 1 || sizes[l + 1] < 1)
        throw std::invalid_argument("mlp::Params: layer size " + std::to_string(l) + " must be >= 1");
      p.w.push_back(Mat<T>::Zero(sizes[l + 1], sizes[l]));
      p.b.push_back(Vec<T>::Zero(sizes[l + 1]));
    }
    return p;
  }
  std::size_t layers() const { return w.size(); }
  std::vector<int> sizes() const {
    std::vector<int> s{int(w.front().cols())};
    for (const auto& m : w) s.push_back(int(m.rows()));
    return s;
  }
};

/// PyTorch's default nn.Linear initialization (Kaiming-uniform with a = sqrt(5)): weights and biases
/// uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)], drawn from one seeded generator in layer order.
template <class T>
Params<T> init(const std::vector<int>& sizes, std::uint64_t seed) {
  Params<T> p = Params<T>::zeros_like(sizes);
  std::mt19937_64 rng(seed);
  for (std::size_t l = 0; l < p.layers(); ++l) {
    const double bound = 1.0 / std::sqrt(double(p.w[l].cols()));
    std::uniform_real_distribution<double> u(-bound, bound);
    for (Eigen::Index i = 0; i < p.w[l].size(); ++i) p.w[l].data()[i] = T(u(rng));
    for (Eigen::Index i = 0; i < p.b[l].size(); ++i) p.b[l](i) = T(u(rng));
  }
  return p;
}

/// Activations kept between forward and backward; sized on first use, reused afterwards.
template <class T>
struct Workspace {
  std::vector<Mat<T>> z;  // z[l]: B x sizes[l+1], pre-activations (then reused for dz in backward)
  std::vector<Mat<T>> h;  // h[l]: B x sizes[l+1], relu(z[l]) for hidden layers
  Mat<T> dh;              // B x width scratch for dz_l W_l
};

/// Forward pass; returns the logits (a reference into ws.z.back()).
template <class T>
const Mat<T>& forward(const Params<T>& p, const Mat<T>& x, Workspace<T>& ws) {
  const std::size_t L = p.layers();
  if (x.cols() != p.w[0].cols())
    throw std::invalid_argument("mlp::forward: input has " + std::to_string(x.cols()) + " features, layer 0 takes " +
                                std::to_string(p.w[0].cols()));
  ws.z.resize(L);
  ws.h.resize(L);
  for (std::size_t l = 0; l < L; ++l) {
    const Mat<T>& in = l == 0 ? x : ws.h[l - 1];
    ws.z[l].resize(x.rows(), p.w[l].rows());
    ws.z[l].noalias() = in * p.w[l].transpose();
    ws.z[l].rowwise() += p.b[l].transpose();
    if (l + 1 < L) ws.h[l] = ws.z[l].cwiseMax(T(0));
  }
  return ws.z.back();
}

/// Mean softmax cross-entropy of `logits` against labels y (one per row); with `dlogits`, also writes
/// (softmax - onehot) / B into it.
template <class T>
T cross_entropy(const Mat<T>& logits, const int* y, Mat<T>* dlogits) {
  const Eigen::Index B = logits.rows(), C = logits.cols();
  if (dlogits != nullptr) dlogits->resize(B, C);
  double loss = 0;
  for (Eigen::Index i = 0; i < B; ++i) {
    if (y[i] < 0 || y[i] >= C)
      throw std::invalid_argument("mlp::cross_entropy: label " + std::to_string(y[i]) + " of row " +
                                  std::to_string(i) + " is outside 0.." + std::to_string(C - 1));
    const T mx = logits.row(i).maxCoeff();  // log-sum-exp with the max subtracted, for stability
    const T sum = (logits.row(i).array() - mx).exp().sum();
    const T lse = mx + std::log(sum);
    loss += double(lse - logits(i, y[i]));
    if (dlogits != nullptr) {
      dlogits->row(i) = ((logits.row(i).array() - lse).exp() / T(B)).matrix();
      (*dlogits)(i, y[i]) -= T(1) / T(B);
    }
  }
  return T(loss / double(B));
}

/// Loss and gradient of the mean cross-entropy over the batch (x: B x in, y: B labels). `grad` must have
/// p's shapes (Params::zeros_like(sizes)); it is overwritten.
template <class T>
T loss_and_grad(const Params<T>& p, const Mat<T>& x, const int* y, Params<T>& grad, Workspace<T>& ws) {
  const std::size_t L = p.layers();
  forward(p, x, ws);
  Mat<T>& dz_last = ws.dh;
  const T loss = cross_entropy(ws.z.back(), y, &dz_last);
  ws.z.back().swap(dz_last);  // z[L-1] now holds dz_{L-1}; logits are no longer needed
  for (std::size_t l = L; l-- > 0;) {
    Mat<T>& dz = ws.z[l];
    const Mat<T>& in = l == 0 ? x : ws.h[l - 1];
    grad.w[l].noalias() = dz.transpose() * in;
    grad.b[l].noalias() = dz.colwise().sum().transpose();
    if (l == 0) break;
    ws.dh.resize(dz.rows(), p.w[l].cols());
    ws.dh.noalias() = dz * p.w[l];
    // relu'(z_{l-1}) = [z_{l-1} > 0] = [h_{l-1} > 0]; write dz_{l-1} over z_{l-1}.
    ws.z[l - 1] = (ws.h[l - 1].array() > T(0)).select(ws.dh, T(0));
  }
  return loss;
}

/// Number of rows whose arg-max logit equals the label.
template <class T>
std::size_t count_correct(const Mat<T>& logits, const int* y) {
  std::size_t correct = 0;
  for (Eigen::Index i = 0; i < logits.rows(); ++i) {
    Eigen::Index arg = 0;
    logits.row(i).maxCoeff(&arg);
    if (arg == y[i]) ++correct;
  }
  return correct;
}

}  // namespace mlp
