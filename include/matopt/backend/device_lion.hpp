// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// DeviceLion: Lion on matrices in device memory, with Thrust alone (any Thrust device system).
// DeviceLion<T>: Lion (lion.hpp; Chen et al., arXiv 2302.06675) on parameters in device memory, for the
// parameters that are not hidden matrices when the weights live on the device, in place of DeviceAdamW. The host
// Lion's Options, defaults, validation, messages, non-finite policy and State fields (checkpoints move between
// the two); the update is the host's, element by element, in one Thrust pass over W, G and m (W's storage order):
//   W <- W (1 - lr lambda);  W <- W - lr sign(b1 m + (1 - b1) g);  m <- b2 m + (1 - b2) g
// On Thrust's device system (CPP or OMP on the CPU; CUDA from a .cu file, on the stream given at construction),
// as DeviceAdamW. NonFinite::Zero zeroes G's non-finite entries inside that pass: step allocates nothing (the
// finiteness check is a Thrust reduction, which may use Thrust's temporary storage).
//
//   matopt::DeviceLion<float> lion;                  // Lion<float>::Options; or (options, stream) on CUDA
//   auto state = lion.make_state(bias);
//   lion.step(bias, grad, state);

#include <cstdint>
#include <string>

#include <Eigen/Core>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "matopt/backend/device_matrix.hpp"
#include "matopt/backend/thrust.hpp"
#include "matopt/core/errors.hpp"
#include "matopt/lion.hpp"

namespace matopt {
namespace detail {

/// One Lion element update (the host's expression, element by element); `zero` maps a non-finite g to 0.
template <class T>
struct LionOp {
  T* w;
  const T* g;
  T* m;
  T lr, keep, beta1, beta2;
  bool decay, zero;
  MATOPT_HOST_DEVICE void operator()(Index i) const {
    T gi = g[i];
    if (zero && !finite_value(gi)) gi = T(0);
    const T mi = m[i];
    const T c = beta1 * mi + (T(1) - beta1) * gi;
    T wi = w[i];
    if (decay) wi *= keep;
    w[i] = wi - lr * T((c > T(0)) - (c < T(0)));
    m[i] = beta2 * mi + (T(1) - beta2) * gi;
  }
};

}  // namespace detail

/// Lion (lion.hpp) stepping matrices in device memory with Thrust alone: the host Lion's options, validation and
/// update, element-wise on the device. Checkpoints are interchangeable with the host Lion's.
/// @tparam T float or double.
template <class T>
class DeviceLion {
 public:
  /// The host optimizer, Lion<T>.
  using Host = Lion<T>;
  /// The scalar type.
  using Scalar = T;
  /// Lion's options.
  using Options = typename Host::Options;

  /// The host State's fields, with the momentum in device memory (W's storage order).
  struct State {
    /// Rows of the parameter this state was made for.
    Index rows = 0;
    /// Columns of the parameter this state was made for.
    Index cols = 0;
    /// Storage order of that parameter.
    Layout layout = Layout::RowMajor;
    /// Steps taken.
    std::int64_t steps = 0;
    /// Steps skipped for a non-finite gradient (NonFinite::Skip).
    std::int64_t skipped = 0;
    /// Steps taken with non-finite entries of G zeroed (NonFinite::Zero).
    std::int64_t zeroed = 0;
    /// The momentum in device memory, in W's storage order.
    thrust::device_vector<T> m;
    /// Device bytes (the momentum).
    std::size_t bytes() const { return m.size() * sizeof(T); }

    /// Checkpoints: written and read as the host Lion State (the same file format), the momentum copied through
    /// host memory: files move between Lion and DeviceLion for parameters of the same shape and layout.
    template <class Writer>
    void write(Writer& w) const {
      typename Host::State h = to_host_state();
      detail::device_synchronize();  // after the steps queued on any stream
      detail::copy_n(m.begin(), m.size(), h.m.data());
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
      detail::device_synchronize();  // no queued step still reads the old momentum
      detail::copy_n(h.m.data(), h.m.size(), m.begin());
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
      return h;
    }
  };

  /// An optimizer with the default options, on the default stream.
  DeviceLion() : DeviceLion(Options{}) {}
  /// `stream` (Thrust's CUDA system only: a cudaStream_t) is where step queues its work.
  explicit DeviceLion(const Options& options, detail::DeviceStream stream = {}) : options_(options), stream_(stream) {
    Host::validate(options_, name());
  }

  /// The options; mutable between steps, checked at each step.
  Options& options() { return options_; }
  /// The options (read-only).
  const Options& options() const { return options_; }
  /// "matopt::Lion".
  static constexpr const char* name() { return Host::name(); }
  /// The host Lion's identity: checkpoints move between the host and device optimizers.
  static std::string identity() { return Host::identity(); }

  /// Zero momentum for parameter W.
  State make_state(DeviceMatrixView<const T> w) const {
    detail::check_device_view<T>(Host::name(), w, "W");
    detail::device_synchronize();  // the zero fill runs on Thrust's stream (device_matrix.hpp)
    State s;
    s.rows = w.rows;
    s.cols = w.cols;
    s.layout = w.layout;
    s.m.assign(std::size_t(w.size()), T(0));
    return s;
  }
  /// Zero momentum for a DeviceMatrix W.
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
    ++state.steps;
    const Options& o = options_;
    const detail::LionOp<T> op{w.data, g.data, detail::raw(state.m), o.lr, T(1) - o.lr * o.weight_decay, o.beta1,
                               o.beta2, o.weight_decay != T(0), action == detail::GradAction::Zero};
    thrust::for_each(policy, thrust::counting_iterator<Index>(0), thrust::counting_iterator<Index>(w.size()), op);
  }
  /// One step of DeviceMatrix W with gradient G.
  void step(DeviceMatrix<T>& w, const DeviceMatrix<T>& g, State& state) const { step(w.view(), g.view(), state); }

  /// Lion's per-parameter lr is `lr` (every entry moves by lr, decay aside).
  T effective_lr(const State&) const { return options_.lr; }
  /// No workspace: 0.
  std::size_t workspace_bytes() const { return 0; }

 private:
  Options options_;
  detail::DeviceStream stream_{};
};

}  // namespace matopt
