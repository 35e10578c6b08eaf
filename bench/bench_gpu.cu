// SPDX-License-Identifier: MIT
// matopt's GPU benchmarks (Google Benchmark; names are stable; JSON with --benchmark_out=<file>
// --benchmark_out_format=json; scripts/gpu-check.sh runs them with --benchmark_repetitions=5). Times are
// CUDA-event times of the work on the engine's stream (UseManualTime; names end in /manual_time); counters are
// rates over those times. Every benchmark warms up (two untimed runs per call) and rotates its inputs over
// buffers totalling >= 128 MB, more than the H200's 50 MB L2.
//   BM_GpuNs/<precision>/4096x4096    Jordan NS5 (plain, symmetric products: ns_algorithm.hpp) on a 4096^2 fp32
//                                     matrix, the engine's precision fp32 | tf32 | bf16; `flops` = naive-equivalent
//                                     FLOP/s (20 r^2 s + 10 r^3 per run, performance.md)
//   BM_GpuGemmFloor/<precision>/4096  15 cuBLAS GEMMs of 4096^3, the naive FLOPs of NS5 on 4096^2, with the NS
//                                     products' types (bf16: bf16 operands, fp32 output, fp32 compute); the ratio
//                                     NS / floor is performance.md's target 6 (<= 1.3; symmetry can take it below 1)
//   BM_GpuSyrk/<precision>/4096       one Engine::syrk_lower, X X^T of a 4096^2 fp32 X (BF16: lower blocks in one
//                                     batched GEMM; TF32: one full GEMM; FP32: SSYRK); `flops` counts 2 n^3
//   BM_GpuGemmNT/<precision>/4096     one cuBLAS GEMM X X^T (N, T) of 4096^3 on random data: syrk_lower as a full
//                                     product, beside the floor's zero-filled N x N GEMMs
//   BM_GpuRmnpStep/4096x4096          one cuda::Optimizer<RMNP<float>> step, row-major (the finiteness check of G,
//                                     then the fused kernel); `bytes_per_second` counts 20 B/element (G, V, W read;
//                                     V, W written), not the check's extra read of G
//   BM_GpuRmnpFused/4096x4096         the fused kernel alone (Engine::fused_normalize_rows), 20 B/element
//   BM_GpuCopyD2D/4096x4096           cudaMemcpyAsync device-to-device of 4096^2 floats, 8 B/element (read, write)
//   BM_GpuNsBatched/64x256x256        orthogonalize_batched of 64 fp32 matrices 256^2, bf16 products
//   BM_GpuNsLoop/64x256x256           the same 64 matrices through 64 orthogonalize calls
// After the run the ratios are printed (and written to $MATOPT_GPU_SUMMARY when set): NS / floor per precision,
// fused RMNP GB/s / copy GB/s, batched / loop speedup. The ratio is the result (performance.md).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>

#include <matopt/backend/cuda.cuh>
#include <matopt/matopt.hpp>

namespace {

using matopt::Index;
namespace mc = matopt::cuda;
using Strided = matopt::detail::Strided<float>;

constexpr Index kN = 4096;                        // the square benchmarks' edge
constexpr std::size_t kRotateBytes = 128u << 20;  // rotation set: > the H200's 50 MB L2

/// Buffers to rotate over so that `bytes_each` of them together exceed kRotateBytes (at least 2).
std::size_t rotation(std::size_t bytes_each) {
  const std::size_t k = (kRotateBytes + bytes_each - 1) / bytes_each;
  return k < 2 ? 2 : k;
}

thrust::device_vector<float> random_device(Index size, unsigned seed) {
  std::vector<float> h(static_cast<std::size_t>(size));
  unsigned x = seed * 2654435761u + 1;
  for (auto& v : h) {  // uniform in [-1, 1): the inputs' values do not change the work
    x = x * 1664525u + 1013904223u;
    v = float(x >> 8) / float(1 << 23) - 1.0f;
  }
  return thrust::device_vector<float>(h.begin(), h.end());
}
float* raw(thrust::device_vector<float>& v) { return thrust::raw_pointer_cast(v.data()); }

/// Times `body` with CUDA events on `stream` for every benchmark iteration (after `prepare`, untimed) and sets
/// the rate counters from the total event time.
class Timer {
 public:
  Timer() {
    MATOPT_CUDA_CHECK(cudaEventCreate(&start_));
    MATOPT_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  template <class Prepare, class Body>
  void run(benchmark::State& state, cudaStream_t stream, Prepare prepare, Body body) {
    for (int k = 0; k < 2; ++k) {  // warm-up: kernels loaded, clocks up, cuBLAS heuristics cached
      prepare(k);
      body(k);
    }
    MATOPT_CUDA_CHECK(cudaStreamSynchronize(stream));
    int k = 0;
    for (auto _ : state) {
      prepare(k);
      MATOPT_CUDA_CHECK(cudaEventRecord(start_, stream));
      body(k);
      MATOPT_CUDA_CHECK(cudaEventRecord(stop_, stream));
      MATOPT_CUDA_CHECK(cudaEventSynchronize(stop_));
      float ms = 0;
      MATOPT_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      state.SetIterationTime(double(ms) * 1e-3);
      seconds_ += double(ms) * 1e-3;
      ++k;
    }
  }
  /// counter = per_iteration * iterations / event seconds.
  void rate(benchmark::State& state, const char* name, double per_iteration) const {
    if (seconds_ > 0) state.counters[name] = benchmark::Counter(per_iteration * double(state.iterations()) / seconds_);
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  double seconds_ = 0;
};

/// Naive FLOPs of NS5 on r x s (r <= s): 5 (4 r^2 s + 2 r^3).
double ns5_flops(double r, double s) { return 5 * (4 * r * r * s + 2 * r * r * r); }

void BM_GpuNs(benchmark::State& state, mc::Precision p) {
  mc::Engine e(p);
  e.reserve(kN, kN);
  const std::size_t k_in = rotation(std::size_t(kN * kN) * sizeof(float));
  std::vector<thrust::device_vector<float>> inputs;
  for (std::size_t k = 0; k < k_in; ++k) inputs.push_back(random_device(kN * kN, unsigned(k)));
  thrust::device_vector<float> xb(kN * kN), yb(kN * kN), ab(kN * kN), bb(kN * kN);
  Strided x = matopt::detail::col_major(raw(xb), kN, kN), y = matopt::detail::col_major(raw(yb), kN, kN);
  Strided a = matopt::detail::col_major(raw(ab), kN, kN), b = matopt::detail::col_major(raw(bb), kN, kN);
  Strided q = matopt::detail::col_major<float>(nullptr, 0, 0), t = q;
  const matopt::NewtonSchulz<>::Options o{};  // Jordan NS5; square: the plain algorithm
  float sink = 0;
  Timer timer;
  timer.run(
      state, e.stream(),
      [&](int k) {  // X = the next input (untimed)
        e.copy(
            matopt::detail::Strided<const float>(matopt::detail::col_major(raw(inputs[std::size_t(k) % k_in]), kN, kN)),
            x);
      },
      [&](int) { sink += matopt::detail::NsMatrices<Strided>{&x, &y, &a, &b, &q, &t}.run(e, o, false).rows; });
  benchmark::DoNotOptimize(sink);
  timer.rate(state, "flops", ns5_flops(double(kN), double(kN)));
}

/// One kN^3 cuBLAS product C = A op_b(B) in the precision's operand type: bf16 operands with fp32 output and
/// compute, else fp32 under the engine handle's math mode (TF32 tensor-op math for tf32).
void gemm_kn(mc::Engine& e, bool bf16, cublasOperation_t op_b, const void* a, const void* b, float* c) {
  const int n = int(kN);
  const float one = 1.0f, zero = 0.0f;
  if (bf16)
    MATOPT_CUDA_CHECK(cublasGemmEx(e.cublas(), CUBLAS_OP_N, op_b, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                                   &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  else
    MATOPT_CUDA_CHECK(cublasSgemm(e.cublas(), CUBLAS_OP_N, op_b, n, n, n, &one, static_cast<const float*>(a), n,
                                  static_cast<const float*>(b), n, &zero, c, n));
}

void BM_GpuGemmFloor(benchmark::State& state, mc::Precision p) {
  mc::Engine e(p);  // its handle: the math mode of the precision (TF32 tensor-op math for tf32)
  const bool bf16 = p == mc::Precision::BF16;
  const std::size_t elem = bf16 ? 2 : 4, bytes = std::size_t(kN * kN) * elem;
  const std::size_t k_in = rotation(2 * bytes);
  std::vector<mc::detail::DeviceBuffer> a(k_in), b(k_in);
  for (std::size_t k = 0; k < k_in; ++k) {  // contents do not change the time; zero them to never time NaN paths
    a[k].reserve(bytes);
    b[k].reserve(bytes);
    MATOPT_CUDA_CHECK(cudaMemsetAsync(a[k].as<void>(), 0, bytes, e.stream()));
    MATOPT_CUDA_CHECK(cudaMemsetAsync(b[k].as<void>(), 0, bytes, e.stream()));
  }
  thrust::device_vector<float> c(kN * kN);
  Timer timer;
  timer.run(
      state, e.stream(), [](int) {},
      [&](int k) {
        const std::size_t s = std::size_t(k) % k_in;
        for (int r = 0; r < 15; ++r)  // 15 x 2 n^3 = NS5's naive 30 n^3
          gemm_kn(e, bf16, CUBLAS_OP_N, a[s].as<void>(), b[s].as<void>(), raw(c));
      });
  timer.rate(state, "flops", ns5_flops(double(kN), double(kN)));
}

void BM_GpuSyrk(benchmark::State& state, mc::Precision p) {
  mc::Engine e(p);
  e.reserve(kN, kN);
  const std::size_t k_in = rotation(std::size_t(kN * kN) * sizeof(float));
  std::vector<thrust::device_vector<float>> inputs;
  for (std::size_t k = 0; k < k_in; ++k) inputs.push_back(random_device(kN * kN, unsigned(k)));
  thrust::device_vector<float> cb(kN * kN);
  Strided c = matopt::detail::col_major(raw(cb), kN, kN);
  Timer timer;
  timer.run(
      state, e.stream(), [](int) {},
      [&](int k) {
        const Strided x = matopt::detail::col_major(raw(inputs[std::size_t(k) % k_in]), kN, kN);
        e.syrk_lower(1.0f, x, 0.0f, c);
      });
  timer.rate(state, "flops", 2 * double(kN) * double(kN) * double(kN));  // naive: the full product's
}

/// One GEMM X X^T (CUBLAS_OP_N, CUBLAS_OP_T) on random data in the precision's operand type: what syrk_lower
/// would cost as one full product, beside the floor's zero-filled N x N GEMMs.
void BM_GpuGemmNT(benchmark::State& state, mc::Precision p) {
  mc::Engine e(p);
  const bool bf16 = p == mc::Precision::BF16;
  const std::size_t elem = bf16 ? 2 : 4, bytes = std::size_t(kN * kN) * elem;
  const std::size_t k_in = rotation(bytes);
  std::vector<thrust::device_vector<float>> inputs;
  std::vector<thrust::device_vector<std::uint16_t>> inputs16;
  for (std::size_t k = 0; k < k_in; ++k) {
    thrust::device_vector<float> f = random_device(kN * kN, unsigned(k));
    if (!bf16) {
      inputs.push_back(std::move(f));
      continue;
    }
    const thrust::host_vector<float> h = f;  // bf16 by truncation: the values do not change the work
    std::vector<std::uint16_t> h16(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) {
      std::uint32_t u;
      std::memcpy(&u, &h[i], sizeof u);
      h16[i] = std::uint16_t(u >> 16);
    }
    inputs16.emplace_back(h16.begin(), h16.end());
  }
  thrust::device_vector<float> c(kN * kN);
  Timer timer;
  timer.run(
      state, e.stream(), [](int) {},
      [&](int k) {
        const std::size_t s = std::size_t(k) % k_in;
        const void* x = bf16 ? static_cast<const void*>(thrust::raw_pointer_cast(inputs16[s].data()))
                             : static_cast<const void*>(raw(inputs[s]));
        gemm_kn(e, bf16, CUBLAS_OP_T, x, x, raw(c));
      });
  timer.rate(state, "flops", 2 * double(kN) * double(kN) * double(kN));
}

/// Row-major 4096^2 RMNP inputs, rotated: W, G and the momentum V per set.
struct RmnpSets {
  std::vector<thrust::device_vector<float>> w, g, v;
  std::size_t count = 0;
  RmnpSets() {
    count = rotation(3 * std::size_t(kN * kN) * sizeof(float));
    for (std::size_t k = 0; k < count; ++k) {
      w.push_back(random_device(kN * kN, unsigned(3 * k)));
      g.push_back(random_device(kN * kN, unsigned(3 * k + 1)));
      v.push_back(random_device(kN * kN, unsigned(3 * k + 2)));
    }
  }
};

void BM_GpuRmnpStep(benchmark::State& state) {
  using Opt = matopt::RMNP<float>;
  mc::Optimizer<Opt> opt;
  RmnpSets sets;
  std::vector<mc::Optimizer<Opt>::State> states;
  for (std::size_t k = 0; k < sets.count; ++k)
    states.push_back(
        opt.make_state(matopt::DeviceMatrixView<const float>{raw(sets.w[k]), kN, kN, matopt::Layout::RowMajor}));
  MATOPT_CUDA_CHECK(cudaDeviceSynchronize());
  Timer timer;
  timer.run(
      state, opt.engine().stream(), [](int) {},
      [&](int k) {
        const std::size_t s = std::size_t(k) % sets.count;
        opt.step(matopt::DeviceMatrixView<float>{raw(sets.w[s]), kN, kN, matopt::Layout::RowMajor},
                 matopt::DeviceMatrixView<const float>{raw(sets.g[s]), kN, kN, matopt::Layout::RowMajor}, states[s]);
      });
  timer.rate(state, "bytes_per_second", 20.0 * double(kN * kN));
}

void BM_GpuRmnpFused(benchmark::State& state) {
  using Opt = matopt::RMNP<float>;
  const Opt::Options o{};
  mc::Engine e;
  e.reserve(kN, kN);
  RmnpSets sets;
  const auto c = Opt::MomentumType::coefficients(o.momentum, o.nesterov);
  const auto k = Opt::ScalingType::coefficients(o.scaling, o.lr, o.weight_decay, kN, kN);
  const matopt::detail::FusedStep<float> f{c, float(o.precondition.eps), k.keep, k.step, k.cautious};
  int no_workspace = 0;  // the CUDA engine's fused step keeps its sums in its own scratch
  MATOPT_CUDA_CHECK(cudaDeviceSynchronize());
  Timer timer;
  timer.run(
      state, e.stream(), [](int) {},
      [&](int it) {
        const std::size_t s = std::size_t(it) % sets.count;
        e.fused_normalize_rows(
            matopt::detail::strided(raw(sets.w[s]), kN, kN, matopt::Layout::RowMajor),
            matopt::detail::strided(static_cast<const float*>(raw(sets.g[s])), kN, kN, matopt::Layout::RowMajor),
            matopt::detail::strided(raw(sets.v[s]), kN, kN, matopt::Layout::RowMajor), f, no_workspace);
      });
  timer.rate(state, "bytes_per_second", 20.0 * double(kN * kN));
}

void BM_GpuCopyD2D(benchmark::State& state) {
  mc::Engine e;  // for its stream
  const std::size_t bytes = std::size_t(kN * kN) * sizeof(float), count = rotation(2 * bytes);
  std::vector<thrust::device_vector<float>> src, dst;
  for (std::size_t k = 0; k < count; ++k) {
    src.push_back(random_device(kN * kN, unsigned(k)));
    dst.emplace_back(kN * kN);
  }
  MATOPT_CUDA_CHECK(cudaDeviceSynchronize());
  Timer timer;
  timer.run(
      state, e.stream(), [](int) {},
      [&](int k) {
        const std::size_t s = std::size_t(k) % count;
        MATOPT_CUDA_CHECK(cudaMemcpyAsync(raw(dst[s]), raw(src[s]), bytes, cudaMemcpyDeviceToDevice, e.stream()));
      });
  timer.rate(state, "bytes_per_second", 8.0 * double(kN * kN));
}

constexpr Index kBatch = 64, kSmall = 256;

void BM_GpuNsBatchedOrLoop(benchmark::State& state, bool batched) {
  mc::Engine e(mc::Precision::BF16);
  const Index size = kSmall * kSmall;
  const std::size_t count = rotation(std::size_t(kBatch * size) * sizeof(float));
  std::vector<thrust::device_vector<float>> inputs;
  for (std::size_t k = 0; k < count; ++k) inputs.push_back(random_device(kBatch * size, unsigned(k)));
  thrust::device_vector<float> out(kBatch * size);
  e.reserve_batched<float>(kBatch, kSmall, kSmall);  // the workspace: no allocation while timing
  MATOPT_CUDA_CHECK(cudaDeviceSynchronize());
  Timer timer;
  timer.run(
      state, e.stream(), [](int) {},
      [&](int k) {
        float* u = raw(inputs[std::size_t(k) % count]);
        if (batched) {
          mc::orthogonalize_batched(e, u, raw(out), kBatch, kSmall, kSmall);
        } else {
          for (Index b = 0; b < kBatch; ++b) mc::orthogonalize(e, u + b * size, raw(out) + b * size, kSmall, kSmall);
        }
      });
  timer.rate(state, "flops", double(kBatch) * ns5_flops(double(kSmall), double(kSmall)));
}

/// A console reporter that also keeps each benchmark's median time (or its only run without repetitions).
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      const std::string& name = r.run_name.function_name;
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median")
        median_[name] = r.GetAdjustedRealTime();
      else if (r.run_type == Run::RT_Iteration && !has_median_[name])
        median_[name] = r.GetAdjustedRealTime();
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median") has_median_[name] = true;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  /// Median time in microseconds (every benchmark uses kMicrosecond), or 0 when it did not run.
  double us(const std::string& name) const {
    const auto it = median_.find(name);
    return it == median_.end() ? 0.0 : it->second;
  }

 private:
  std::map<std::string, double> median_;
  std::map<std::string, bool> has_median_;
};

std::string summary(const SummaryReporter& rep) {
  std::string out = "matopt GPU summary (median CUDA-event times)\n";
  char line[256];
  auto ratio = [](double a, double b) { return a > 0 && b > 0 ? a / b : 0.0; };
  for (const char* p : {"bf16", "tf32", "fp32"}) {
    const double ns = rep.us(std::string("BM_GpuNs/") + p + "/4096x4096");
    const double floor = rep.us(std::string("BM_GpuGemmFloor/") + p + "/4096");
    std::snprintf(line, sizeof line, "  NS5 %s 4096^2: %9.1f us, GEMM floor %9.1f us, NS/floor %.3f (target <= 1.3)\n",
                  p, ns, floor, ratio(ns, floor));
    out += line;
    const double syrk = rep.us(std::string("BM_GpuSyrk/") + p + "/4096");
    const double nt = rep.us(std::string("BM_GpuGemmNT/") + p + "/4096");
    std::snprintf(line, sizeof line,
                  "       %s syrk_lower 4096^3: %9.1f us, %.3f of one floor GEMM; one X X^T GEMM on random data "
                  "%.1f us\n",
                  p, syrk, ratio(syrk, floor / 15), nt);
    out += line;
  }
  const double elements = double(kN * kN);
  const double step = rep.us("BM_GpuRmnpStep/4096x4096"), fused = rep.us("BM_GpuRmnpFused/4096x4096");
  const double copy = rep.us("BM_GpuCopyD2D/4096x4096");
  const double step_gbs = ratio(20 * elements / 1e3, step), fused_gbs = ratio(20 * elements / 1e3, fused);
  const double copy_gbs = ratio(8 * elements / 1e3, copy);  // bytes / us / 1e3 = GB/s
  std::snprintf(line, sizeof line,
                "  RMNP 4096^2: step %.1f us = %.0f GB/s, fused kernel %.1f us = %.0f GB/s; D2D copy %.0f GB/s;\n"
                "               step/copy %.3f, fused/copy %.3f (target >= 0.8)\n",
                step, step_gbs, fused, fused_gbs, copy_gbs, ratio(step_gbs, copy_gbs), ratio(fused_gbs, copy_gbs));
  out += line;
  const double batched = rep.us("BM_GpuNsBatched/64x256x256"), loop = rep.us("BM_GpuNsLoop/64x256x256");
  std::snprintf(line, sizeof line, "  NS5 bf16 64 x 256^2: batched %.1f us, loop %.1f us, speedup %.2fx\n", batched,
                loop, ratio(loop, batched));
  out += line;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const auto reg = [](const char* name, auto fn) {
    benchmark::RegisterBenchmark(name, fn)->UseManualTime()->Unit(benchmark::kMicrosecond);
  };
  for (const auto& [name, p] : {std::pair{"bf16", mc::Precision::BF16}, std::pair{"tf32", mc::Precision::TF32},
                                std::pair{"fp32", mc::Precision::FP32}}) {
    const mc::Precision precision = p;
    reg((std::string("BM_GpuNs/") + name + "/4096x4096").c_str(),
        [precision](benchmark::State& s) { BM_GpuNs(s, precision); });
    reg((std::string("BM_GpuGemmFloor/") + name + "/4096").c_str(),
        [precision](benchmark::State& s) { BM_GpuGemmFloor(s, precision); });
    reg((std::string("BM_GpuSyrk/") + name + "/4096").c_str(),
        [precision](benchmark::State& s) { BM_GpuSyrk(s, precision); });
    reg((std::string("BM_GpuGemmNT/") + name + "/4096").c_str(),
        [precision](benchmark::State& s) { BM_GpuGemmNT(s, precision); });
  }
  reg("BM_GpuRmnpStep/4096x4096", BM_GpuRmnpStep);
  reg("BM_GpuRmnpFused/4096x4096", BM_GpuRmnpFused);
  reg("BM_GpuCopyD2D/4096x4096", BM_GpuCopyD2D);
  reg("BM_GpuNsBatched/64x256x256", [](benchmark::State& s) { BM_GpuNsBatchedOrLoop(s, true); });
  reg("BM_GpuNsLoop/64x256x256", [](benchmark::State& s) { BM_GpuNsBatchedOrLoop(s, false); });

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  const std::string text = summary(reporter);
  std::fputs(text.c_str(), stdout);
  if (const char* path = std::getenv("MATOPT_GPU_SUMMARY")) {
    if (std::FILE* f = std::fopen(path, "w")) {
      std::fputs(text.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}
