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
#include <string_view>
#include <type_traits>

#include <Eigen/Core>

#include "matopt/core/detail/engine.hpp"
#include "matopt/core/detail/errors.hpp"
#include "matopt/core/detail/workspace.hpp"

#if defined(MATOPT_HAS_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
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
/// oneDNN's CPU engine, one per process, and a stream per thread (a stream is not shared between threads).
inline dnnl::engine& onednn_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
inline dnnl::stream& onednn_stream() {
  thread_local dnnl::stream s(onednn_engine());
  return s;
}

/// A matmul primitive C <- alpha A B + beta C for one shape, set of strides and (alpha, beta) (an output scale and a
/// sum post-op where they are not 1 and 0), made once per thread and kept (a Newton–Schulz run repeats the same few
/// products; oneDNN's own cache would still rebuild the descriptors on every call). key: m, n, k, the strides of A,
/// B and C, and the bits of alpha and beta.
inline dnnl::matmul& onednn_matmul(const std::array<dnnl::memory::dim, 11>& key) {
  thread_local std::map<std::array<dnnl::memory::dim, 11>, dnnl::matmul> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 256) cache.clear();  // a bounded set of shapes: a model's matrices
  using dt = dnnl::memory::data_type;
  const dnnl::memory::dims m_k{key[0], key[2]}, k_n{key[2], key[1]}, m_n{key[0], key[1]};
  const dnnl::memory::desc src(m_k, dt::bf16, dnnl::memory::dims{key[3], key[4]});
  const dnnl::memory::desc wei(k_n, dt::bf16, dnnl::memory::dims{key[5], key[6]});
  const dnnl::memory::desc dst(m_n, dt::f32, dnnl::memory::dims{key[7], key[8]});
  float alpha, beta;
  const std::uint32_t alpha_bits = std::uint32_t(key[9]), beta_bits = std::uint32_t(key[10]);
  std::memcpy(&alpha, &alpha_bits, sizeof alpha);
  std::memcpy(&beta, &beta_bits, sizeof beta);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops sum;
    sum.append_sum(beta);
    attr.set_post_ops(sum);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), attr, onednn_engine());
  return cache.emplace(key, dnnl::matmul(pd)).first->second;
}

/// Whether oneDNN has a bfloat16 matmul for this CPU (oneDNN 2.x needs AVX-512; without AVX512_BF16 or AMX it
/// emulates, `docs/performance.md#bfloat16-newton-schulz`). Asked once per process: a small primitive descriptor,
/// which oneDNN refuses where it has no kernel (ONEDNN_MAX_CPU_ISA lowers the CPU it sees).
inline bool onednn_bf16_available() {
  static const bool available = [] {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    try {
      const dnnl::memory::desc a({8, 8}, dt::bf16, tag::ab), c({8, 8}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), onednn_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

/// A reorder primitive from float to bfloat16 (round to nearest even; oneDNN's JIT kernels, threaded) for one
/// shape and strides, made once per thread and kept.
inline dnnl::reorder& onednn_to_bf16(const std::array<dnnl::memory::dim, 4>& key) {
  thread_local std::map<std::array<dnnl::memory::dim, 4>, dnnl::reorder> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 256) cache.clear();
  using dt = dnnl::memory::data_type;
  const dnnl::memory::dims dims{key[0], key[1]}, st{key[2], key[3]};
  const dnnl::memory::desc from(dims, dt::f32, st), to(dims, dt::bf16, st);
  dnnl::reorder::primitive_desc pd(onednn_engine(), from, onednn_engine(), to);
  return cache.emplace(key, dnnl::reorder(pd)).first->second;
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
      using dt = dnnl::memory::data_type;
      dnnl::engine& e = onednn_engine();
      const dnnl::memory::dims dims{x.rows(), x.cols()}, sd{st[0], st[1]};
      dnnl::memory from({dims, dt::f32, sd}, e, const_cast<float*>(in)), into({dims, dt::bf16, sd}, e, out);
      onednn_to_bf16({x.rows(), x.cols(), st[0], st[1]}).execute(onednn_stream(), from, into);
      onednn_stream().wait();
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
    dnnl::matmul& mm =
        onednn_matmul({m, n, k, sa[0], sa[1], sb[0], sb[1], so[0], so[1], dnnl::memory::dim(alpha_bits),
                       dnnl::memory::dim(beta_bits)});
    using dt = dnnl::memory::data_type;
    dnnl::engine& e = onednn_engine();
    dnnl::memory src({{m, k}, dt::bf16, dnnl::memory::dims{sa[0], sa[1]}}, e, const_cast<std::uint16_t*>(a));
    dnnl::memory wei({{k, n}, dt::bf16, dnnl::memory::dims{sb[0], sb[1]}}, e, const_cast<std::uint16_t*>(b));
    dnnl::memory dst({{m, n}, dt::f32, dnnl::memory::dims{so[0], so[1]}}, e, out);
    mm.execute(onednn_stream(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    onednn_stream().wait();
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
