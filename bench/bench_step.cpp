// SPDX-License-Identifier: MIT
// matopt's CPU benchmarks (Google Benchmark; names are stable, shapes in ArgNames; JSON with
// --benchmark_format=json). Each reference needed for the ratios of performance.md runs in the same binary:
//   BM_Gemm/<engine>/n             the engine's SGEMM (C = A B, n x n), naive FLOP/s
//   BM_Stream/elements             the memory roofline of a normalization step: read 3 arrays, write 2
//                                  (v = a v + g; w = w - b v), 20 B/element, bytes/s
//   BM_NS/<schedule>/m/n           Newton–Schulz alone (5 steps), naive FLOP/s (20 r^2 s + 10 r^3)
//   BM_NS/jordan_bf16/m/n          the same with ns_dtype = bfloat16 (oneDNN; builds with oneDNN only)
//   BM_Step/<preset>/m/n           one full optimizer step (momentum, preconditioner, update)
//   BM_Step/muon_bf16/m/n          Muon with ns_dtype = bfloat16 (builds with oneDNN only)
//   BM_StepBatch/<preset>/count/m/n  `count` same-shape matrices through the batched step
//   BM_StepHeads/<preset>/heads/m/n  one step orthogonalized per head (heads blocks of m / heads rows)
//   BM_Step/adamw|lion/m/n         one step of the element-wise optimizers (bytes: their reads and writes)
//   (presets: muon, moonlight_muon, orscale, rmnp, colnorm, normuon on row-major (muon and normuon also on the GPT
//    example's 128 x 128, 512 x 128, 128 x 512); rmnp_colmajor, colnorm_colmajor;
//    compositions muon_spectral_cap, rmnp_adaptive)
#include <algorithm>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <matopt/matopt.hpp>

namespace {
using Mat = matopt::RowMatrix<float>;
using matopt::Index;

/// Naive FLOPs of a K-step Newton–Schulz on m x n: K (4 r^2 s + 2 r^3), r = min(m, n), s = max(m, n).
double ns_flops(double m, double n, int steps = 5) {
  const double r = std::min(m, n), s = std::max(m, n);
  return steps * (4 * r * r * s + 2 * r * r * r);
}

void rate(benchmark::State& bs, const char* name, double per_iteration) {
  bs.counters[name] = benchmark::Counter(per_iteration * double(bs.iterations()), benchmark::Counter::kIsRate);
}

void BM_Gemm(benchmark::State& bs) {
  const Index n = bs.range(0);
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
  matopt::detail::ColMap<float> am(a.data(), n, n), bm(b.data(), n, n), cm(c.data(), n, n);
  for (auto _ : bs) {
    matopt::detail::gemm(1.0f, am, bm, 0.0f, cm);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  rate(bs, "flops", 2.0 * double(n) * double(n) * double(n));
}

void BM_Stream(benchmark::State& bs) {
  const Index n = bs.range(0);
  Eigen::ArrayXf w = Eigen::ArrayXf::Random(n), v = Eigen::ArrayXf::Random(n), g = Eigen::ArrayXf::Random(n);
  constexpr Index block = 16 * 4096;  // the same fixed blocking as the fused kernels
  for (auto _ : bs) {
    matopt::detail::parallel_for((n + block - 1) / block, [&](Index b) {
      const Index i = b * block, len = std::min(block, n - i);
      v.segment(i, len) = 0.95f * v.segment(i, len) + g.segment(i, len);
      w.segment(i, len) -= 1e-3f * v.segment(i, len);
    });
    benchmark::ClobberMemory();
  }
  rate(bs, "bytes", 20.0 * double(n));
}

template <class Schedule, matopt::NsDtype Dtype = matopt::NsDtype::Float32>
void BM_NS(benchmark::State& bs) {
  const Index m = bs.range(0), n = bs.range(1);
  using P = matopt::Orthogonalize<matopt::NewtonSchulz<Schedule>>;
  typename P::Options o;
  o.dtype = Dtype;
  matopt::detail::HostWorkspace<float> ws;  // Orthogonalize's engine form on the host engine, as Optimizer runs it
  P::reserve_on(ws, o, m, n);
  const Mat u = Mat::Random(m, n);
  const auto form_u = [&](matopt::detail::Strided<float> x) {  // U copied into X
    matopt::detail::HostEngine::as_map(x, [&](auto&& target) { target = u; });
  };
  matopt::detail::HostEngine e;
  float sink = 0;
  for (auto _ : bs) {
    sink += P::apply_on(e, ws, o, m, n, matopt::detail::layout_of_v<Mat>, form_u)(0, 0);
    benchmark::DoNotOptimize(sink);
  }
  rate(bs, "flops", ns_flops(double(m), double(n), o.schedule.steps));
}

template <class Opt, class M = Mat, matopt::NsDtype Dtype = matopt::NsDtype::Float32>
void BM_Step(benchmark::State& bs) {
  const Index m = bs.range(0), n = bs.range(1);
  Opt opt;
  if constexpr (Dtype != matopt::NsDtype::Float32) opt.options().precondition.dtype = Dtype;
  M w = M::Random(m, n), g = M::Random(m, n);
  auto state = opt.make_state(w);
  for (auto _ : bs) {
    opt.step(w, g, state);
    benchmark::ClobberMemory();
  }
  rate(bs, "bytes", 20.0 * double(m) * double(n));
  rate(bs, "flops", ns_flops(double(m), double(n)));
}

/// One step of an element-wise optimizer (AdamW, Lion) on m x n; `bytes` per element read and written (AdamW: W, G, m,
/// v read, W, m, v written: 28 in float; Lion: 20).
template <class Opt, int Bytes>
void BM_Elementwise(benchmark::State& bs) {
  const Index m = bs.range(0), n = bs.range(1);
  Opt opt;
  opt.options().weight_decay = 0.01f;
  Mat w = Mat::Random(m, n), g = Mat::Random(m, n);
  auto state = opt.make_state(w);
  for (auto _ : bs) {
    opt.step(w, g, state);
    benchmark::ClobberMemory();
  }
  rate(bs, "bytes", double(Bytes) * double(m) * double(n));
}

/// One step of an m x n block of a larger matrix (lines further apart than their length, G a plain matrix).
template <class Opt>
void BM_StepBlock(benchmark::State& bs) {
  const Index m = bs.range(0), n = bs.range(1);
  Opt opt;
  Mat big = Mat::Random(m + 8, n + 8), g = Mat::Random(m, n);
  auto state = opt.make_state(big.block(4, 4, m, n));
  for (auto _ : bs) {
    opt.step(big.block(4, 4, m, n), g, state);
    benchmark::ClobberMemory();
  }
  rate(bs, "bytes", 20.0 * double(m) * double(n));
}

/// One step of an m x n W orthogonalized per head: `heads` blocks of m / heads rows (row_blocks.hpp).
template <class Opt>
void BM_StepHeads(benchmark::State& bs) {
  const Index heads = bs.range(0), m = bs.range(1), n = bs.range(2);
  Opt opt;
  opt.options().precondition.heads = int(heads);
  Mat w = Mat::Random(m, n), g = Mat::Random(m, n);
  auto state = opt.make_state(w);
  for (auto _ : bs) {
    opt.step(w, g, state);
    benchmark::ClobberMemory();
  }
  rate(bs, "flops", double(heads) * ns_flops(double(m / heads), double(n)));
}

template <class Opt>
void BM_StepBatch(benchmark::State& bs) {
  const Index count = bs.range(0), m = bs.range(1), n = bs.range(2);
  Opt opt;
  std::vector<Mat> w(count, Mat::Random(m, n)), g(count, Mat::Random(m, n));
  std::vector<typename Opt::State> states;
  std::vector<matopt::MatrixView<float>> wv;
  std::vector<matopt::MatrixView<const float>> gv;
  for (Index i = 0; i < count; ++i) {
    states.push_back(opt.make_state(w[i]));
    wv.push_back(matopt::view(w[i]));
    gv.push_back(matopt::view(std::as_const(g[i])));
  }
  for (auto _ : bs) {
    opt.step(wv, gv, states);
    benchmark::ClobberMemory();
  }
  rate(bs, "bytes", 20.0 * double(count) * double(m) * double(n));
  rate(bs, "flops", double(count) * ns_flops(double(m), double(n)));
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "n"});
  for (auto [m, n] : {std::pair{1024, 1024}, std::pair{1024, 4096}, std::pair{4096, 1024}, std::pair{2048, 2048}})
    b->Args({m, n});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

/// The GPT example's hidden matrices (docs/gpt.md: d_model 128; q, k, v, o 128 x 128, fc 512 x 128, proj 128 x 512).
void gpt_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "n"});
  for (auto [m, n] : {std::pair{128, 128}, std::pair{512, 128}, std::pair{128, 512}}) b->Args({m, n});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
}  // namespace

int main(int argc, char** argv) {
  namespace mo = matopt;
  const std::string engine = mo::detail::gemm_engine_name();
  benchmark::RegisterBenchmark(("BM_Gemm/" + engine).c_str(), BM_Gemm)
      ->ArgName("n")->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_Stream", BM_Stream)
      ->ArgName("elements")->Arg(1 << 22)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_NS/jordan", BM_NS<mo::schedules::Jordan>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_NS/polar_express", BM_NS<mo::schedules::PolarExpress>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/muon", BM_Step<mo::Muon<float>>)->Apply(shapes);
  // bfloat16 products where oneDNN has a bf16 matmul for this CPU (not on AVX2-only CPUs)
  if (mo::detail::onednn_bf16_available()) {  // bfloat16 products (docs/performance.md#bfloat16-newton-schulz)
    constexpr auto bf16 = mo::NsDtype::BFloat16;
    benchmark::RegisterBenchmark("BM_NS/jordan_bf16", BM_NS<mo::schedules::Jordan, bf16>)->Apply(shapes);
    benchmark::RegisterBenchmark("BM_Step/muon_bf16", BM_Step<mo::Muon<float>, Mat, bf16>)->Apply(shapes);
    benchmark::RegisterBenchmark("BM_Step/muon_bf16", BM_Step<mo::Muon<float>, Mat, bf16>)->Apply(gpt_shapes);
  }
  benchmark::RegisterBenchmark("BM_Step/moonlight_muon", BM_Step<mo::MoonlightMuon<float>>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/orscale", BM_Step<mo::OrScale<float>>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/rmnp", BM_Step<mo::RMNP<float>>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/colnorm", BM_Step<mo::ColNorm<float>>)->Apply(shapes);
  // NorMuon: Muon plus the per-row second moment of the orthogonalized direction (an O(mn) pass), side by side with
  // Muon on the large shapes and on the GPT example's.
  benchmark::RegisterBenchmark("BM_Step/normuon", BM_Step<mo::NorMuon<float>>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/muon", BM_Step<mo::Muon<float>>)->Apply(gpt_shapes);
  benchmark::RegisterBenchmark("BM_Step/normuon", BM_Step<mo::NorMuon<float>>)->Apply(gpt_shapes);
  // Storage order: the other fused kernel shape (ColNormalize along columns, RowNormalize across lines).
  using ColMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  benchmark::RegisterBenchmark("BM_Step/rmnp_colmajor", BM_Step<mo::RMNP<float>, ColMat>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/colnorm_colmajor", BM_Step<mo::ColNorm<float>, ColMat>)->Apply(shapes);
  // Compositions: Muon with the spectral cap (docs/math.md#spectral-cap), RMNP/Muon adaptive (checks every 100 steps).
  using CappedMuon = mo::Optimizer<float, mo::Orthogonalize<>, mo::Momentum<mo::Ema, mo::Nesterov>,
                                   mo::SpectralCap<mo::Static<>>>;
  using AdaptiveRmnp = mo::Optimizer<float, mo::Adaptive<>, mo::Momentum<mo::Sum, mo::Nesterov>, mo::Static<>>;
  benchmark::RegisterBenchmark("BM_Step/muon_spectral_cap", BM_Step<CappedMuon>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/rmnp_adaptive", BM_Step<AdaptiveRmnp>)->Apply(shapes);
  // Element-wise and normalizing compositions: SGD with momentum and signum (one pass under Static), RMNP's
  // normalization under TrustRatio and without momentum (SRON-like), and RMNP on a block of a larger matrix.
  using SgdMomentum = mo::Optimizer<float, mo::Identity, mo::Momentum<mo::Ema, mo::Nesterov>, mo::Static<>>;
  using Signum = mo::Optimizer<float, mo::Sign, mo::Momentum<mo::Ema, mo::Plain>, mo::Static<>>;
  using RmnpTrust = mo::Optimizer<float, mo::RowNormalize, mo::Momentum<mo::Sum, mo::Nesterov>, mo::TrustRatio<>>;
  using Sron = mo::Optimizer<float, mo::RowNormalize, mo::NoMomentum, mo::Static<>>;
  benchmark::RegisterBenchmark("BM_Step/sgd_momentum", BM_Step<SgdMomentum>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/signum", BM_Step<Signum>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/rmnp_trust_ratio", BM_Step<RmnpTrust>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/sron", BM_Step<Sron>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_StepBlock/rmnp", BM_StepBlock<mo::RMNP<float>>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/adamw", BM_Elementwise<mo::AdamW<float>, 28>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/lion", BM_Elementwise<mo::Lion<float>, 20>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_StepBlock/colnorm", BM_StepBlock<mo::ColNorm<float>>)->Apply(shapes);
  // Per-head orthogonalization: the GPT example's q/k/v (4 heads of 32 x 128), GPT-2 small's (12 of 64 x 768), and
  // 16 heads of 128 x 2048.
  for (const char* name : {"BM_StepHeads/muon", "BM_StepHeads/normuon"}) {
    auto* b = std::string(name) == "BM_StepHeads/muon"
                  ? benchmark::RegisterBenchmark(name, BM_StepHeads<mo::Muon<float>>)
                  : benchmark::RegisterBenchmark(name, BM_StepHeads<mo::NorMuon<float>>);
    b->ArgNames({"heads", "m", "n"})->Args({4, 128, 128})->Args({12, 768, 768})->Args({16, 2048, 2048})->Args({1, 64, 768});
    b->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  // 64 of 256 x 256; 16 of 64 x 768 and the GPT example's 12 of 128 x 512 (small products, not <= 256 x 256).
  benchmark::RegisterBenchmark("BM_StepBatch/muon", BM_StepBatch<mo::Muon<float>>)
      ->ArgNames({"count", "m", "n"})->Args({64, 256, 256})->Args({16, 64, 768})->Args({12, 128, 512})
      ->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_StepBatch/rmnp", BM_StepBatch<mo::RMNP<float>>)
      ->ArgNames({"count", "m", "n"})->Args({64, 256, 256})->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
