// SPDX-License-Identifier: MIT
// The Fashion-MNIST example's MLP (examples/fashion_mnist/mlp.hpp): backpropagation against central finite
// differences in double, and the forward pass against a direct evaluation.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "fashion_mnist/mlp.hpp"

namespace {

using Mat = mlp::Mat<double>;

struct Problem {
  mlp::Params<double> p;
  Mat x;
  std::vector<int> y;
};

Problem make_problem(const std::vector<int>& sizes, int batch, std::uint64_t seed) {
  Problem pr{mlp::init<double>(sizes, seed), Mat(batch, sizes.front()), std::vector<int>(std::size_t(batch))};
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<double> n01(0.0, 1.0);
  for (Eigen::Index i = 0; i < pr.x.size(); ++i) pr.x.data()[i] = n01(rng);
  for (auto& v : pr.y) v = int(rng() % std::uint64_t(sizes.back()));
  // Larger biases keep pre-activations away from the ReLU kink, where finite differences are not smooth.
  for (auto& b : pr.p.b) b *= 3.0;
  return pr;
}

double loss_at(const mlp::Params<double>& p, const Problem& pr) {
  mlp::Workspace<double> ws;
  return mlp::cross_entropy<double>(mlp::forward(p, pr.x, ws), pr.y.data(), nullptr);
}

// Smallest |pre-activation| over every hidden unit and sample: finite differences with step h are exact up to
// O(h^2) only when no pre-activation crosses zero, i.e. when this margin exceeds h times the input size.
double relu_margin(const mlp::Params<double>& p, const Mat& x) {
  mlp::Workspace<double> ws;
  mlp::forward(p, x, ws);
  double m = 1e300;
  for (std::size_t l = 0; l + 1 < p.layers(); ++l) m = std::min(m, ws.z[l].cwiseAbs().minCoeff());
  return m;
}

}  // namespace

TEST_CASE("mlp::loss_and_grad matches central finite differences (double)") {
  for (const std::vector<int>& sizes : {std::vector<int>{7, 5, 4, 3}, std::vector<int>{6, 8, 4}, std::vector<int>{5, 3}}) {
    CAPTURE(sizes.size());
    Problem pr = make_problem(sizes, 6, 42 + sizes.size());
    mlp::Params<double> g = mlp::Params<double>::zeros_like(sizes);
    mlp::Workspace<double> ws;
    const double loss = mlp::loss_and_grad(pr.p, pr.x, pr.y.data(), g, ws);
    CHECK(loss == doctest::Approx(loss_at(pr.p, pr)).epsilon(1e-14));

    const double h = 1e-6;
    REQUIRE(relu_margin(pr.p, pr.x) > 1e-4);  // no kink within h of any perturbation below
    double worst = 0;
    for (std::size_t l = 0; l < pr.p.layers(); ++l) {
      for (int which = 0; which < 2; ++which) {
        double* data = which == 0 ? pr.p.w[l].data() : pr.p.b[l].data();
        const double* grad = which == 0 ? g.w[l].data() : g.b[l].data();
        const Eigen::Index n = which == 0 ? pr.p.w[l].size() : pr.p.b[l].size();
        for (Eigen::Index i = 0; i < n; ++i) {
          const double saved = data[i];
          data[i] = saved + h;
          const double up = loss_at(pr.p, pr);
          data[i] = saved - h;
          const double down = loss_at(pr.p, pr);
          data[i] = saved;
          const double fd = (up - down) / (2 * h);
          worst = std::max(worst, std::abs(fd - grad[i]) / std::max(1e-3, std::abs(fd) + std::abs(grad[i])));
        }
      }
    }
    CHECK(worst < 1e-6);
  }
}

TEST_CASE("mlp::forward is relu(x W^T + b) layer by layer, and cross_entropy the mean -log softmax") {
  const std::vector<int> sizes{4, 3, 2};
  Problem pr = make_problem(sizes, 2, 7);
  mlp::Workspace<double> ws;
  const Mat logits = mlp::forward(pr.p, pr.x, ws);
  for (Eigen::Index b = 0; b < 2; ++b) {
    Eigen::VectorXd h = pr.p.w[0] * pr.x.row(b).transpose() + pr.p.b[0];
    h = h.cwiseMax(0.0);
    const Eigen::VectorXd z = pr.p.w[1] * h + pr.p.b[1];
    for (Eigen::Index c = 0; c < 2; ++c) CHECK(logits(b, c) == doctest::Approx(z(c)).epsilon(1e-14));
  }
  double expected = 0;
  for (Eigen::Index b = 0; b < 2; ++b)
    expected += -std::log(std::exp(logits(b, pr.y[std::size_t(b)])) / (std::exp(logits(b, 0)) + std::exp(logits(b, 1))));
  CHECK(mlp::cross_entropy<double>(logits, pr.y.data(), nullptr) == doctest::Approx(expected / 2).epsilon(1e-13));
  CHECK(mlp::count_correct(logits, pr.y.data()) <= 2);

  const std::vector<int> bad{0, 5};
  CHECK_THROWS_WITH_AS(mlp::cross_entropy<double>(logits, bad.data(), nullptr),
                       "mlp::cross_entropy: label 5 of row 1 is outside 0..1", std::invalid_argument);
}

TEST_CASE("mlp::init is PyTorch's nn.Linear default and depends only on the seed") {
  const std::vector<int> sizes{784, 64, 10};
  const auto a = mlp::init<float>(sizes, 3), b = mlp::init<float>(sizes, 3), c = mlp::init<float>(sizes, 4);
  CHECK(a.w[0] == b.w[0]);
  CHECK(a.b[1] == b.b[1]);
  CHECK(a.w[0] != c.w[0]);
  CHECK(a.w[0].cwiseAbs().maxCoeff() <= 1.0f / std::sqrt(784.0f));
  CHECK(a.w[1].cwiseAbs().maxCoeff() <= 1.0f / std::sqrt(64.0f));
  CHECK(a.w[0].rows() == 64);  // (out, in)
  CHECK(a.w[0].cols() == 784);
  // Uniform on [-k, k] has variance k^2 / 3.
  const double k = 1.0 / std::sqrt(784.0), var = double(a.w[0].squaredNorm()) / double(a.w[0].size());
  CHECK(var == doctest::Approx(k * k / 3).epsilon(0.02));
  CHECK(a.sizes() == sizes);
}
