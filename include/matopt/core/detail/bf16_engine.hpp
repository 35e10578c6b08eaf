// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Internal: Newton–Schulz products with bfloat16 inputs and float accumulation on the host, through oneDNN
/// (namespace detail only).
// `ns_dtype = bfloat16` (docs/math.md#newton-schulz-in-bfloat16): every product of the iteration reads its operands
// rounded to bfloat16 (round to nearest even) and accumulates and writes in float, as the peers' GPU Muons do
// (KellerJordan/Muon, torch.optim.Muon); the iterate X, the polynomial's sums and the output stay in the
// optimizer's scalar type. The products run through oneDNN's matmul primitive (libdnnl, the CPU library libtorch
// itself uses), which picks AVX512_BF16 or AMX kernels where the CPU has them and emulates elsewhere
// (docs/performance.md#bfloat16-newton-schulz). A SYRK has no bfloat16 form there: A = X X^T is one full product.
//
// oneDNN is found at configure time (CMake MATOPT_ONEDNN, libdnnl-dev on Debian) and exported to every translation
// unit as the compile definition MATOPT_HAS_ONEDNN; without it `bfloat16` is refused by the option.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "matopt/core/detail/engine.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/workspace.hpp"

#if defined(MATOPT_HAS_ONEDNN)
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#if DNNL_VERSION_MAJOR != 2
#error "matopt's bfloat16 products use oneDNN 2.x's C API (Debian 12's libdnnl-dev 2.6): configure MATOPT_ONEDNN=OFF"
#endif
#endif

namespace matopt::detail {

/// Whether this build has oneDNN (the bfloat16 Newton–Schulz products).
#if defined(MATOPT_HAS_ONEDNN)
inline constexpr bool kHasOneDnn = true;
#else
inline constexpr bool kHasOneDnn = false;
#endif

/// x rounded to bfloat16, round to nearest even, as its 16 bits (NaN stays a quiet NaN of the same sign).
inline std::uint16_t to_bfloat16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

/// x rounded to bfloat16, round to nearest even, in one rounding: x goes to float rounded to odd (the float's last
/// bit records whether anything was dropped), which then rounds to nearest even exactly as x itself would.
inline std::uint16_t to_bfloat16(double x) {
  float f = static_cast<float>(x);
  if (std::isfinite(f) && static_cast<double>(f) != x) {
    if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);  // truncate toward zero
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    u |= 1u;  // sticky: inexact
    std::memcpy(&f, &u, sizeof f);
  }
  return to_bfloat16(f);
}

/// The float a bfloat16 stands for.
inline float from_bfloat16(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// Throws std::invalid_argument unless `float32`: called where a device optimizer takes Newton–Schulz options,
/// before anything changes. The Thrust engine multiplies in the optimizer's scalar type; the CUDA optimizer takes
/// its products' precision from its engine (cuda::Engine(cuda::Precision::BF16)).
template <class Dtype>
void check_ns_dtype(Dtype d, const char* where) {
  if (d != Dtype::Float32)
    fail(where, "ns_dtype = bfloat16 is the host engine's (oneDNN); a device optimizer multiplies in its engine's "
                "precision (Thrust: the scalar type; CUDA: cuda::Engine(cuda::Precision::BF16)): set ns_dtype = "
                "float32");
}

/// Scratch of the bfloat16 products: three rounded operands (r s elements each; Bf16HostEngine reuses a rounding
/// while its source is unchanged) and a float result (r s) for double products.
struct Bf16Scratch {
  std::array<Buffer<std::uint16_t>, 3> operands;
  Buffer<float> out;
  void reserve(Index operand, Index result) {
    for (auto& o : operands) o.reserve(operand);
    out.reserve(result);
  }
  std::size_t bytes() const { return operands[0].bytes() * operands.size() + out.bytes(); }
};

#if defined(MATOPT_HAS_ONEDNN)
// oneDNN through its C API (dnnl.h): its C++ header (0.8 s to parse alone) cost every translation unit that includes
// Newton–Schulz about 0.4 s (docs/performance.md#compile-time); these few owned handles are all matopt needs of it.

/// A oneDNN handle, owned: Destroy(h) when it goes.
template <class H, dnnl_status_t (*Destroy)(H)>
class OneDnnHandle {
 public:
  OneDnnHandle() = default;
  explicit OneDnnHandle(H h) : h_(h) {}
  OneDnnHandle(OneDnnHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  OneDnnHandle& operator=(OneDnnHandle&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~OneDnnHandle() {
    if (h_ != nullptr) Destroy(h_);
  }
  H get() const { return h_; }

 private:
  H h_ = nullptr;
};

/// Throws std::runtime_error naming the call unless oneDNN reported success.
inline void onednn_check(dnnl_status_t status, const char* call) {
  if (status != dnnl_success)
    throw std::runtime_error(std::string("matopt: oneDNN's ") + call + " failed: " + dnnl_status2str(status));
}

/// oneDNN's CPU engine, one per process, and a stream per thread (a stream is not shared between threads).
inline dnnl_engine_t onednn_engine() {
  static const OneDnnHandle<dnnl_engine_t, dnnl_engine_destroy> e = [] {
    dnnl_engine_t h = nullptr;
    onednn_check(dnnl_engine_create(&h, dnnl_cpu, 0), "dnnl_engine_create");
    return OneDnnHandle<dnnl_engine_t, dnnl_engine_destroy>(h);
  }();
  return e.get();
}
inline dnnl_stream_t onednn_stream() {
  thread_local const OneDnnHandle<dnnl_stream_t, dnnl_stream_destroy> s = [] {
    dnnl_stream_t h = nullptr;
    onednn_check(dnnl_stream_create(&h, onednn_engine(), dnnl_stream_default_flags), "dnnl_stream_create");
    return OneDnnHandle<dnnl_stream_t, dnnl_stream_destroy>(h);
  }();
  return s.get();
}

/// A rows x cols memory descriptor with element (i, j) at i rs + j cs.
inline dnnl_memory_desc_t onednn_desc(Index rows, Index cols, dnnl_data_type_t type, Index rs, Index cs) {
  dnnl_memory_desc_t d;
  const dnnl_dims_t dims{rows, cols}, strides{rs, cs};
  onednn_check(dnnl_memory_desc_init_by_strides(&d, 2, dims, type, strides), "dnnl_memory_desc_init_by_strides");
  return d;
}

/// A primitive with memory objects for its arguments (matmul: source, weights, destination; reorder: from, to),
/// made once for one shape and set of strides and kept: run() points them at the caller's data and executes.
class OneDnnPrimitive {
 public:
  /// The primitive of `pd` (null: none, oneDNN has no kernel; `available()` is false) over memories of `descs`.
  OneDnnPrimitive(dnnl_primitive_desc_t pd, const std::array<dnnl_memory_desc_t, 3>& descs, int count) : count_(count) {
    const OneDnnHandle<dnnl_primitive_desc_t, dnnl_primitive_desc_destroy> owned(pd);
    if (pd == nullptr) return;
    dnnl_primitive_t p = nullptr;
    onednn_check(dnnl_primitive_create(&p, pd), "dnnl_primitive_create");
    primitive_ = OneDnnHandle<dnnl_primitive_t, dnnl_primitive_destroy>(p);
    for (int i = 0; i < count; ++i) {
      dnnl_memory_t m = nullptr;
      onednn_check(dnnl_memory_create(&m, &descs[std::size_t(i)], onednn_engine(), DNNL_MEMORY_NONE),
                   "dnnl_memory_create");
      memory_[std::size_t(i)] = OneDnnHandle<dnnl_memory_t, dnnl_memory_destroy>(m);
    }
  }
  bool available() const { return primitive_.get() != nullptr; }
  /// Executes on this thread's stream with the arguments at `data` (in the constructor's order) and waits.
  void run(const std::array<const void*, 3>& data) const {
    static constexpr int kArgs[2][3] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}, {DNNL_ARG_FROM, DNNL_ARG_TO}};
    std::array<dnnl_exec_arg_t, 3> args{};
    for (int i = 0; i < count_; ++i) {
      dnnl_memory_t m = memory_[std::size_t(i)].get();
      onednn_check(dnnl_memory_set_data_handle(m, const_cast<void*>(data[std::size_t(i)])),
                   "dnnl_memory_set_data_handle");
      args[std::size_t(i)] = {kArgs[count_ == 2][i], m};
    }
    onednn_check(dnnl_primitive_execute(primitive_.get(), onednn_stream(), count_, args.data()),
                 "dnnl_primitive_execute");
    onednn_check(dnnl_stream_wait(onednn_stream()), "dnnl_stream_wait");
  }

 private:
  OneDnnHandle<dnnl_primitive_t, dnnl_primitive_destroy> primitive_;
  std::array<OneDnnHandle<dnnl_memory_t, dnnl_memory_destroy>, 3> memory_;
  int count_;
};

/// The primitive descriptor of C <- alpha A B + beta C for bf16 A (m x k), bf16 B (k x n) and float C with these
/// strides (an output scale and a sum post-op where alpha and beta are not 1 and 0); null where oneDNN has no kernel
/// for this CPU.
inline OneDnnPrimitive onednn_matmul_primitive(const std::array<dnnl_memory_desc_t, 3>& d, float alpha, float beta) {
  dnnl_matmul_desc_t op;
  onednn_check(dnnl_matmul_desc_init(&op, &d[0], &d[1], nullptr, &d[2]), "dnnl_matmul_desc_init");
  dnnl_primitive_attr_t a = nullptr;
  onednn_check(dnnl_primitive_attr_create(&a), "dnnl_primitive_attr_create");
  const OneDnnHandle<dnnl_primitive_attr_t, dnnl_primitive_attr_destroy> attr(a);
  if (alpha != 1.0f)
    onednn_check(dnnl_primitive_attr_set_output_scales(a, 1, 0, &alpha), "dnnl_primitive_attr_set_output_scales");
  if (beta != 0.0f) {
    dnnl_post_ops_t p = nullptr;
    onednn_check(dnnl_post_ops_create(&p), "dnnl_post_ops_create");
    const OneDnnHandle<dnnl_post_ops_t, dnnl_post_ops_destroy> sum(p);
    onednn_check(dnnl_post_ops_append_sum(p, beta), "dnnl_post_ops_append_sum");
    onednn_check(dnnl_primitive_attr_set_post_ops(a, p), "dnnl_primitive_attr_set_post_ops");
  }
  dnnl_primitive_desc_t pd = nullptr;
  const dnnl_status_t status = dnnl_primitive_desc_create(&pd, &op, a, onednn_engine(), nullptr);
  if (status != dnnl_unimplemented) onednn_check(status, "dnnl_primitive_desc_create (matmul)");
  return OneDnnPrimitive(status == dnnl_success ? pd : nullptr, d, 3);
}

/// The primitive for `key`, made by make(key) on this thread's first call with it and kept (a Newton–Schulz run
/// repeats the same few products; oneDNN's own cache would still rebuild the descriptors on every call). One cache
/// per key length: matmuls and reorders.
template <std::size_t N, class Make>
const OneDnnPrimitive& onednn_cached(const std::array<dnnl_dim_t, N>& key, Make&& make) {
  thread_local std::map<std::array<dnnl_dim_t, N>, OneDnnPrimitive> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 256) cache.clear();  // a bounded set of shapes: a model's matrices
  return cache.emplace(key, make(key)).first->second;
}

/// A matmul primitive C <- alpha A B + beta C for one shape, set of strides and (alpha, beta), made once per
/// thread. key: m, n, k, the strides of A, B and C, and the bits of alpha and beta.
inline OneDnnPrimitive onednn_make_matmul(const std::array<dnnl_dim_t, 11>& key) {
  float alpha, beta;
  const std::uint32_t alpha_bits = std::uint32_t(key[9]), beta_bits = std::uint32_t(key[10]);
  std::memcpy(&alpha, &alpha_bits, sizeof alpha);
  std::memcpy(&beta, &beta_bits, sizeof beta);
  OneDnnPrimitive p = onednn_matmul_primitive({onednn_desc(key[0], key[2], dnnl_bf16, key[3], key[4]),
                                               onednn_desc(key[2], key[1], dnnl_bf16, key[5], key[6]),
                                               onednn_desc(key[0], key[1], dnnl_f32, key[7], key[8])},
                                              alpha, beta);
  if (!p.available()) onednn_check(dnnl_unimplemented, "matmul (bf16)");
  return p;
}

/// Whether oneDNN has a bfloat16 matmul for this CPU (oneDNN 2.x needs AVX-512; without AVX512_BF16 or AMX it
/// emulates, `docs/performance.md#bfloat16-newton-schulz`). Asked once per process: a small primitive descriptor,
/// which oneDNN refuses where it has no kernel (ONEDNN_MAX_CPU_ISA lowers the CPU it sees).
inline bool onednn_bf16_available() {
  static const bool available = [] {
    try {
      const dnnl_memory_desc_t a = onednn_desc(8, 8, dnnl_bf16, 8, 1), c = onednn_desc(8, 8, dnnl_f32, 8, 1);
      return onednn_matmul_primitive({a, a, c}, 1.0f, 0.0f).available();
    } catch (const std::runtime_error&) {  // no engine, no memory: no bfloat16 products either
      return false;
    }
  }();
  return available;
}

/// A reorder primitive from float to bfloat16 (round to nearest even; oneDNN's JIT kernels, threaded) for one
/// shape and strides (key: rows, cols, row and column strides).
inline OneDnnPrimitive onednn_make_to_bf16(const std::array<dnnl_dim_t, 4>& key) {
  const std::array<dnnl_memory_desc_t, 3> d{onednn_desc(key[0], key[1], dnnl_f32, key[2], key[3]),
                                            onednn_desc(key[0], key[1], dnnl_bf16, key[2], key[3])};
  dnnl_primitive_desc_t pd = nullptr;
  onednn_check(dnnl_reorder_primitive_desc_create(&pd, &d[0], onednn_engine(), &d[1], onednn_engine(), nullptr),
               "dnnl_reorder_primitive_desc_create");
  return OneDnnPrimitive(pd, d, 2);
}
#else
/// Whether oneDNN has a bfloat16 matmul for this CPU: this build has no oneDNN.
inline bool onednn_bf16_available() { return false; }
#endif

/// Throws std::invalid_argument unless this build and CPU can run the bfloat16 products (oneDNN, and a bfloat16
/// matmul in it for this CPU).
inline void check_bf16_products(std::string_view where) {
#if defined(MATOPT_HAS_ONEDNN)
  if (!onednn_bf16_available())
    fail(where, "ns_dtype = bfloat16: oneDNN has no bfloat16 matmul for this CPU (it needs AVX-512, and pays with "
                "AVX512_BF16 or AMX); set ns_dtype = float32");
#else
  fail(where, "ns_dtype = bfloat16 needs oneDNN, and matopt was configured without it (Debian: apt-get install "
              "libdnnl-dev, then configure again)");
#endif
}

/// The host engine of the Newton–Schulz algorithm (precondition/detail/ns_algorithm.hpp) with bfloat16 products: the
/// element-wise operations are HostEngine's; syrk_lower and gemm round their operands to bfloat16 and multiply
/// through oneDNN with float accumulation (alpha and beta applied by oneDNN for float C). M = DenseMap<T, Order>, T
/// float or double.
/// - Round once: an operand's rounding is kept in one of three slots and reused while its source is unchanged (X is
///   read by A = X X^T and by B X of the same step); every write through this engine forgets the roundings of what it
///   writes. An engine lives for one run, whose matrices only it writes.
class Bf16HostEngine : public HostEngine {
 public:
  explicit Bf16HostEngine(Bf16Scratch& scratch) : s_(&scratch) {}

  /// lower(C) <- alpha A A^T + beta lower(C); computed as a full product (C's upper triangle is written too).
  template <class M>
  void syrk_lower(typename M::Scalar alpha, const M& a, typename M::Scalar beta, M& c) {
    forget(c);
    const std::uint16_t* ar = rounded(a, nullptr);
    const Strides sa = strides(a);
    product(alpha, a.rows(), a.cols(), a.rows(), ar, sa, ar, transposed(sa), beta, c.data(), strides(c));
  }
  /// C <- alpha A B + beta C.
  template <class M>
  void gemm(typename M::Scalar alpha, const M& a, const M& b, typename M::Scalar beta, M& c) {
    forget(c);
    const std::uint16_t* ar = rounded(a, nullptr);
    const std::uint16_t* br = rounded(b, ar);
    product(alpha, a.rows(), a.cols(), b.cols(), ar, strides(a), br, strides(b), beta, c.data(), strides(c));
  }
  // HostEngine's writes, forgetting the roundings of what they write.
  template <class M>
  void scale(M& x, typename M::Scalar v) {
    forget(x);
    HostEngine::scale(x, v);
  }
  template <class M>
  void mirror_lower(M& c) {
    forget(c);
    HostEngine::mirror_lower(c);
  }
  template <class M>
  void copy_lower(const M& src, M& dst) {
    forget(dst);
    HostEngine::copy_lower(src, dst);
  }
  template <class M>
  void add_diagonal(M& c, typename M::Scalar v) {
    forget(c);
    HostEngine::add_diagonal(c, v);
  }
  template <class M>
  void copy(const M& src, M& dst) {
    forget(dst);
    HostEngine::copy(src, dst);
  }
  template <class M>
  void aol_scale(M& x, M& a, M& scratch, typename M::Scalar eps) {
    forget(x);
    forget(a);
    forget(scratch);
    HostEngine::aol_scale(x, a, scratch, eps);
  }

 private:
  using Strides = std::array<Index, 2>;  // (row stride, column stride) in elements
  /// What a slot holds: the rounding of rows x cols elements at `source` with these strides (source null: nothing).
  struct Slot {
    const void* source = nullptr;
    Index rows = 0, cols = 0;
    Strides st{};
    unsigned long used = 0;
  };

  template <class M>
  static Strides strides(const M& x) {
    return M::IsRowMajor ? Strides{x.outerStride(), 1} : Strides{1, x.outerStride()};
  }
  static Strides transposed(Strides s) { return {s[1], s[0]}; }

  /// Forgets the roundings of x's elements (x is about to be written).
  template <class M>
  void forget(const M& x) {
    const char* begin = reinterpret_cast<const char*>(x.data());
    const char* end = begin + x.size() * Index(sizeof(typename M::Scalar));
    for (Slot& slot : slots_) {
      const char* s = static_cast<const char*>(slot.source);
      if (s != nullptr && s < end && begin < s + slot.rows * slot.cols * Index(sizeof(typename M::Scalar)))
        slot.source = nullptr;
    }
  }
  /// x rounded to bfloat16, element for element in x's storage: a slot's rounding if it holds x, else x rounded into
  /// the least recently used slot other than `keep` (the other operand of the same product).
  template <class M>
  const std::uint16_t* rounded(const M& x, const std::uint16_t* keep) {
    const Strides st = strides(x);
    Index pick = -1;
    for (Index i = 0; i < Index(slots_.size()); ++i) {
      const Slot& slot = slots_[std::size_t(i)];
      if (slot.source == x.data() && slot.rows == x.rows() && slot.cols == x.cols() && slot.st == st) {
        slots_[std::size_t(i)].used = ++clock_;
        return s_->operands[std::size_t(i)].data();
      }
      if (s_->operands[std::size_t(i)].data() != keep &&
          (pick < 0 || slot.used < slots_[std::size_t(pick)].used))
        pick = i;
    }
    Buffer<std::uint16_t>& to = s_->operands[std::size_t(pick)];
    round_into(x, to);
    slots_[std::size_t(pick)] = Slot{x.data(), x.rows(), x.cols(), st, ++clock_};
    return to.data();
  }
  /// The contiguous matrix x rounded to bfloat16 into `to`, element for element in the same storage: float through
  /// oneDNN's reorder (vectorized for the CPU it runs on, threaded), double here (one rounding, to_bfloat16).
  template <class M>
  static void round_into(const M& x, Buffer<std::uint16_t>& to) {
    std::uint16_t* out = to.data();
    const typename M::Scalar* in = x.data();
    const Index n = x.size();
#if defined(MATOPT_HAS_ONEDNN)
    if constexpr (std::is_same_v<typename M::Scalar, float>) {
      if (n == 0) return;  // oneDNN refuses empty memory
      const Strides st = strides(x);
      onednn_cached<4>({x.rows(), x.cols(), st[0], st[1]}, onednn_make_to_bf16).run({in, out, nullptr});
    } else
#endif
    {
      for (Index i = 0; i < n; ++i) out[i] = to_bfloat16(in[i]);
    }
  }
  /// C (m x n at c, strides sc) <- alpha A B + beta C (beta = 0: C not read), A m x k and B k x n as bfloat16 with
  /// the given strides: a float C directly, a double C through the float scratch.
  template <class T>
  void product(T alpha, Index m, Index k, Index n, const std::uint16_t* a, Strides sa, const std::uint16_t* b,
               Strides sb, T beta, T* c, Strides sc) {
    if (m == 0 || n == 0) return;
    if (k == 0) {  // C <- beta C
      for (Index i = 0; i < m; ++i)
        for (Index j = 0; j < n; ++j) c[i * sc[0] + j * sc[1]] = beta == T(0) ? T(0) : beta * c[i * sc[0] + j * sc[1]];
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
      multiply(m, k, n, a, sa, b, sb, c, sc, alpha, beta);
    } else {
      float* out = s_->out.data();  // dense m x n, row-major, then C <- alpha R + beta C in T
      multiply(m, k, n, a, sa, b, sb, out, Strides{n, 1}, 1.0f, 0.0f);
      for (Index i = 0; i < m; ++i)
        for (Index j = 0; j < n; ++j) {
          T& cij = c[i * sc[0] + j * sc[1]];
          cij = beta == T(0) ? alpha * T(out[i * n + j]) : alpha * T(out[i * n + j]) + beta * cij;
        }
    }
  }
  /// out (m x n, strides so) <- alpha A B + beta out in float, A m x k and B k x n as bfloat16 with the given
  /// strides.
  static void multiply(Index m, Index k, Index n, const std::uint16_t* a, Strides sa, const std::uint16_t* b,
                       Strides sb, float* out, Strides so, float alpha, float beta) {
#if defined(MATOPT_HAS_ONEDNN)
    if (so[0] == 1 && so[1] != 1) {
      // oneDNN's fast kernels write a row-major result only (a column-major one takes its reference kernel,
      // thousands of times slower): C^T = B^T A^T, with C^T row-major in the same storage.
      multiply(n, k, m, b, transposed(sb), a, transposed(sa), out, transposed(so), alpha, beta);
      return;
    }
    std::uint32_t alpha_bits, beta_bits;
    std::memcpy(&alpha_bits, &alpha, sizeof alpha);
    std::memcpy(&beta_bits, &beta, sizeof beta);
    const std::array<dnnl_dim_t, 11> key{m, n, k, sa[0], sa[1], sb[0], sb[1], so[0], so[1], dnnl_dim_t(alpha_bits),
                                         dnnl_dim_t(beta_bits)};
    onednn_cached(key, onednn_make_matmul).run({a, b, out});
#else
    (void)m, (void)k, (void)n, (void)a, (void)sa, (void)b, (void)sb, (void)out, (void)so, (void)alpha, (void)beta;
    fail("matopt::NewtonSchulz", "ns_dtype = bfloat16 needs oneDNN (libdnnl-dev), and this build has none");
#endif
  }

  Bf16Scratch* s_;
  std::array<Slot, 3> slots_{};
  unsigned long clock_ = 0;
};

}  // namespace matopt::detail
