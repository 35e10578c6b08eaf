// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// DeviceAdamW: AdamW on matrices in device memory, with Thrust alone (any Thrust device system).
// DeviceAdamW<T>: AdamW (adamw.hpp; Loshchilov & Hutter, arXiv 1711.05101) on parameters in device memory,
// for the parameters that are not hidden matrices (biases, norms, embeddings, heads: docs/math.md#presets) when the
// weights live on the device. The host AdamW's Options, defaults, validation, messages, non-finite policy and
// State fields (checkpoints move between the two); the update is torch.optim.AdamW's, as on the host:
//   W <- W (1 - lr lambda);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
//   W <- W - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// with the host's scalars (bias corrections in double, as AdamW::update), run as one Thrust pass over W, G, m and v (all in W's storage
// order) on Thrust's device system: CPP or OMP on the CPU, CUDA on the GPU (from a .cu file; there it runs on
// the stream given at construction, by default the legacy default stream, which the CUDA engine's own blocking
// stream is ordered with; give a caller's non-blocking stream to order the step with the work on it).
// NonFinite::Zero zeroes G's non-finite entries inside that pass, so step allocates nothing (the finiteness
// check is a Thrust reduction, which may use Thrust's temporary storage).
//
//   matopt::DeviceAdamW<float> adamw;                 // AdamW<float>::Options; or (options, stream) on CUDA
//   auto state = adamw.make_state(bias);               // DeviceMatrix<float> or DeviceMatrixView
//   adamw.step(bias, grad, state);

#include <cmath>
#include <cstdint>
#include <string>

#include <Eigen/Core>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "matopt/adamw.hpp"
#include "matopt/backend/device_matrix.hpp"
#include "matopt/backend/thrust.hpp"
#include "matopt/core/errors.hpp"

namespace matopt {
namespace detail {

/// One AdamW element update (the host's expression, element by element); `zero` maps a non-finite g to 0.
template <class T>
struct AdamWOp {
  T* w;
  const T* g;
  T* m;
  T* v;
  AdamWCoefficients<T> k;
  bool decay, zero;
  MATOPT_HOST_DEVICE void operator()(Index i) const {
    T gi = g[i];
    if (zero && !finite_value(gi)) gi = T(0);
    const T mi = k.beta1 * m[i] + (T(1) - k.beta1) * gi;
    const T vi = k.beta2 * v[i] + (T(1) - k.beta2) * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    T wi = w[i];
    if (decay) wi *= k.keep;
    w[i] = wi - k.step_size * mi / (sqrt(vi) * k.inv_sqrt_bc2 + k.eps);
  }
};

}  // namespace detail

/// AdamW (adamw.hpp) stepping matrices in device memory with Thrust alone: the host AdamW's options, validation
/// and update, element-wise on the device. Checkpoints are interchangeable with the host AdamW's.
/// @tparam T float or double.
template <class T>
class DeviceAdamW {
 public:
  /// The host optimizer, AdamW<T>.
  using Host = AdamW<T>;
  /// The scalar type.
  using Scalar = T;
  /// AdamW's options.
  using Options = typename Host::Options;

  /// The host State's fields, with the moments in device memory (W's storage order).
  struct State {
    /// Rows of the parameter this state was made for.
    Index rows = 0;
    /// Columns of the parameter this state was made for.
    Index cols = 0;
    /// Storage order of that parameter.
    Layout layout = Layout::RowMajor;
    /// Steps taken (the bias corrections' t).
    std::int64_t steps = 0;
    /// Steps skipped for a non-finite gradient (NonFinite::Skip).
    std::int64_t skipped = 0;
    /// Steps taken with non-finite entries of G zeroed (NonFinite::Zero).
    std::int64_t zeroed = 0;
    /// First and second moments in device memory, in W's storage order.
    /// @{
    thrust::device_vector<T> m, v;
    /// @}
    /// Device bytes (the moments).
    std::size_t bytes() const { return (m.size() + v.size()) * sizeof(T); }

    /// Checkpoints: written and read as the host AdamW State (its own fields(), so the same file format), with
    /// the moments copied through host memory: files move between AdamW and DeviceAdamW for parameters of the
    /// same shape and layout.
    template <class Writer>
    void write(Writer& w) const {
      typename Host::State h = to_host_state();
      detail::device_synchronize();  // after the steps queued on any stream
      detail::copy_n(m.begin(), m.size(), h.m.data());
      detail::copy_n(v.begin(), v.size(), h.v.data());
      w.state(h);
    }
    /// Restores the fields written by write() (the checkpoint loader reads into a copy).
    template <class Reader>
    void read(Reader& r) {
      typename Host::State h = to_host_state();  // shapes for the reader's checks
      r.state(h);
      steps = h.steps;
      skipped = h.skipped;
      zeroed = h.zeroed;
      detail::device_synchronize();  // no queued step still reads the old moments
      detail::copy_n(h.m.data(), h.m.size(), m.begin());
      detail::copy_n(h.v.data(), h.v.size(), v.begin());
    }

   private:
    typename Host::State to_host_state() const {
      typename Host::State h;
      h.rows = rows;
      h.cols = cols;
      h.layout = layout;
      h.steps = steps;
      h.skipped = skipped;
      h.zeroed = zeroed;
      h.m.resize(Index(m.size()));
      h.v.resize(Index(v.size()));
      return h;
    }
  };

  /// An optimizer with the default options, on the default stream.
  DeviceAdamW() : DeviceAdamW(Options{}) {}
  /// `stream` (Thrust's CUDA system only: a cudaStream_t) is where step queues its work.
  explicit DeviceAdamW(const Options& options, detail::DeviceStream stream = {}) : options_(options), stream_(stream) {
    Host::validate(options_, name());
  }

  /// The options; mutable between steps, checked at each step.
  Options& options() { return options_; }
  /// The options (read-only).
  const Options& options() const { return options_; }
  /// "matopt::AdamW".
  static constexpr const char* name() { return Host::name(); }
  /// The host AdamW's identity: checkpoints move between the host and device optimizers.
  static std::string identity() { return Host::identity(); }

  /// Zero moments for parameter W.
  State make_state(DeviceMatrixView<const T> w) const {
    detail::check_device_view<T>(Host::name(), w, "W");
    detail::device_synchronize();  // the zero fill runs on Thrust's stream (device_matrix.hpp)
    State s;
    s.rows = w.rows;
    s.cols = w.cols;
    s.layout = w.layout;
    s.m.assign(std::size_t(w.size()), T(0));
    s.v.assign(std::size_t(w.size()), T(0));
    return s;
  }
  /// Zero moments for a DeviceMatrix W.
  State make_state(const DeviceMatrix<T>& w) const { return make_state(w.view()); }

  /// One step in place. Throws std::invalid_argument (W and state unchanged) on bad hyperparameters, a shape
  /// or layout mismatch, or (NonFinite::Throw) a non-finite gradient.
  void step(DeviceMatrixView<T> w, DeviceMatrixView<const T> g, State& state) const {
    constexpr const char* where = Host::name();
    Host::validate(options_, where);
    detail::check_device_step<T>(where, w, g, state);
    const auto policy = detail::on_stream(stream_);
    const detail::GradAction action = detail::device_gradient_action(policy, where, w, g, options_.non_finite, state);
    if (action == detail::GradAction::Skip) return;
    const std::int64_t t = ++state.steps;
    const detail::AdamWOp<T> op{w.data, g.data, detail::raw(state.m), detail::raw(state.v),
                                detail::AdamWCoefficients<T>::at(options_, t), options_.weight_decay != T(0),
                                action == detail::GradAction::Zero};
    thrust::for_each(policy, thrust::counting_iterator<Index>(0), thrust::counting_iterator<Index>(w.size()), op);
  }
  /// One step of DeviceMatrix W with gradient G.
  void step(DeviceMatrix<T>& w, const DeviceMatrix<T>& g, State& state) const { step(w.view(), g.view(), state); }

  /// AdamW's per-parameter lr is `lr` (its per-element adaptivity aside).
  T effective_lr(const State&) const { return options_.lr; }
  /// No workspace: 0.
  std::size_t workspace_bytes() const { return 0; }

 private:
  Options options_;
  detail::DeviceStream stream_{};
};

}  // namespace matopt
