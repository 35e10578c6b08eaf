// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// DeviceElementwise<T, Rule>: an element-wise optimizer (AdamW, Lion) on matrices in device memory, Thrust alone.
// The device twin of ElementwiseOptimizer (core/elementwise_optimizer.hpp): the host rule's Options, defaults,
// validation, messages, non-finite policy and State fields (checkpoints move between the two), the buffers in device
// memory (W's storage order), and the update as one Thrust pass over W, G and the buffers, element by element
// (detail::ElementOp: the rule's `coefficients` and `element`, as on the host; a rule declares nothing for the
// device). On Thrust's device system: CPP or OMP on the CPU, CUDA on the GPU (from a .cu file; there it runs on the
// stream given at construction, by default the legacy default stream, which the CUDA engine's own blocking stream is
// ordered with; give a caller's non-blocking stream to order the step with the work on it). NonFinite::Zero zeroes
// G's non-finite entries inside that pass, so step allocates nothing (the finiteness check is a Thrust reduction,
// which may use Thrust's temporary storage).

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "matopt/backend/device_matrix.hpp"
#include "matopt/backend/thrust.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/elementwise_optimizer.hpp"

namespace matopt {
namespace detail {
/// One Thrust pass of an element-wise rule: element i of W, G (a non-finite g mapped to 0 where `zero`) and the
/// buffers through the rule's element update, with the step's coefficients k.
template <class T, class Rule, class K>
struct ElementOp {
  T* w;
  const T* g;
  typename Rule::template Buffers<T*> buffers;
  K k;
  bool zero;
  MATOPT_HOST_DEVICE void operator()(Index i) const {
    T gi = g[i];
    if (zero && !finite_value(gi)) gi = T(0);
    auto b = buffers;
    b.with([&](auto... p) { Rule::element(w[i], gi, k, p[i]...); });
  }
};
}  // namespace detail

/// An element-wise optimizer (the rule `Rule`: rules::AdamW, rules::Lion) stepping matrices in device memory with
/// Thrust alone. Checkpoints are interchangeable with the host optimizer's.
/// @tparam T float or double.
/// @tparam Rule the update rule (rules::AdamW: DeviceAdamW; rules::Lion: DeviceLion; a user's rule as it is).
template <class T, class Rule>
class DeviceElementwise {
 public:
  /// The host optimizer, ElementwiseOptimizer<T, Rule> (AdamW<T>, Lion<T>).
  using Host = ElementwiseOptimizer<T, Rule>;
  /// The scalar type.
  using Scalar = T;
  /// The host optimizer's options.
  using Options = typename Host::Options;

  /// The host State's fields, with the buffers in device memory (W's storage order).
  struct State : StateCounters, Rule::template Buffers<thrust::device_vector<T>> {
    /// Device bytes (the buffers).
    std::size_t bytes() const {
      std::size_t n = 0;
      const_cast<State*>(this)->each(
          [&](const char*, const thrust::device_vector<T>& b) { n += b.size() * sizeof(T); });
      return n;
    }

    /// Checkpoints: written and read as the host State (its own fields(), so the same file format), with the
    /// buffers copied through host memory: files move between the host and device optimizers for parameters of
    /// the same shape and layout.
    template <class Writer>
    void write(Writer& w) const {
      typename Host::State h = to_host_state();
      detail::device_synchronize();  // after the steps queued on any stream
      const auto device = buffers();
      std::size_t k = 0;
      h.each([&](const char*, auto& b) {
        detail::copy_n(device[k]->begin(), device[k]->size(), b.data());
        ++k;
      });
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
      detail::device_synchronize();  // no queued step still reads the old buffers
      const auto device = buffers();
      std::size_t k = 0;
      h.each([&](const char*, auto& b) {
        detail::copy_n(b.data(), b.size(), device[k]->begin());
        ++k;
      });
    }

   private:
    std::vector<thrust::device_vector<T>*> buffers() const {
      std::vector<thrust::device_vector<T>*> out;
      const_cast<State*>(this)->each([&](const char*, thrust::device_vector<T>& b) { out.push_back(&b); });
      return out;
    }
    typename Host::State to_host_state() const {
      typename Host::State h;
      static_cast<StateCounters&>(h) = *this;
      const auto device = buffers();
      std::size_t k = 0;
      h.each([&](const char*, auto& b) { b.resize(Index(device[k++]->size())); });
      return h;
    }
  };

  /// An optimizer with the default options, on the default stream.
  DeviceElementwise() : DeviceElementwise(Options{}) {}
  /// `stream` (Thrust's CUDA system only: a cudaStream_t) is where step queues its work.
  explicit DeviceElementwise(const Options& options, detail::DeviceStream stream = {})
      : options_(options), stream_(stream) {
    Host::validate(options_, name());
  }

  /// The options; mutable between steps, checked at each step.
  Options& options() { return options_; }
  /// The options (read-only).
  const Options& options() const { return options_; }
  /// The host optimizer's name, such as "matopt::AdamW".
  static constexpr const char* name() { return Host::name(); }
  /// The host optimizer's identity: checkpoints move between the host and device optimizers.
  static std::string identity() { return Host::identity(); }

  /// Zero buffers for parameter W.
  State make_state(DeviceMatrixView<const T> w) const {
    detail::check_device_view<T>(Host::name(), w, "W");
    detail::device_synchronize();  // the zero fill runs on Thrust's stream (device_matrix.hpp)
    State s;
    s.rows = w.rows;
    s.cols = w.cols;
    s.layout = w.layout;
    s.each([&](const char*, thrust::device_vector<T>& b) { b.assign(std::size_t(w.size()), T(0)); });
    return s;
  }
  /// Zero buffers for a DeviceMatrix W.
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
    const auto k = Rule::coefficients(options_, ++state.steps);
    detail::ElementOp<T, Rule, detail::remove_cvref_t<decltype(k)>> op{w.data, g.data, {}, k,
                                                                        action == detail::GradAction::Zero};
    state.with([&](auto&... src) {
      op.buffers.with([&](auto&... dst) { ((dst = thrust::raw_pointer_cast(src.data())), ...); });
    });
    thrust::for_each(policy, thrust::counting_iterator<Index>(0), thrust::counting_iterator<Index>(w.size()), op);
  }
  /// One step of DeviceMatrix W with gradient G.
  void step(DeviceMatrix<T>& w, const DeviceMatrix<T>& g, State& state) const { step(w.view(), g.view(), state); }

  /// The per-parameter lr is `lr` (the rule's per-element adaptivity aside).
  T effective_lr(const State&) const { return options_.lr; }
  /// No workspace: 0.
  std::size_t workspace_bytes() const { return 0; }

 private:
  Options options_;
  detail::DeviceStream stream_{};
};

}  // namespace matopt
