// SPDX-License-Identifier: MIT
// Cost of each diagnostic (math.md#diagnostics) beside one optimizer step on the same fp32 matrix, so the price of a
// measurement reads as a fraction of a step: BM_Diagnostic/<name>/m/n against BM_Diagnostic/rmnp_step/m/n and
// BM_Diagnostic/muon_step/m/n. Names are stable. Counters: gram_flops (m^2 n: the FLOPs of a SYRK forming
// one triangle of the m x m Gram, half a GEMM's 2 m^2 n) for the Gram-based diagnostics, bytes_per_second
// for the steps (20 B/element).
// Run: matopt_bench_diagnostics --benchmark_format=json --benchmark_repetitions=5
#include <algorithm>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include <matopt/matopt.hpp>

namespace {
using Mat = matopt::RowMatrix<float>;

Mat input(benchmark::State& bs) {
  Mat u = Mat::Random(bs.range(0), bs.range(1));
  return u;
}

void gram_counter(benchmark::State& bs, double rows, double cols) {
  bs.counters["gram_flops"] =
      benchmark::Counter(rows * rows * cols * double(bs.iterations()), benchmark::Counter::kIsRate);
}

/// diagonal_dominance with P = U U^T accumulated in double (the default) or in float.
template <class Acc>
void BM_DiagonalDominance(benchmark::State& bs) {
  const Mat u = input(bs);
  matopt::DiagonalDominanceWorkspace<Acc> ws;
  ws.reserve(u.rows(), u.cols());
  for (auto _ : bs) {
    const matopt::DiagonalDominance d = matopt::diagonal_dominance(u, ws);
    benchmark::DoNotOptimize(d.r_avg);
  }
  gram_counter(bs, double(u.rows()), double(u.cols()));
}

void BM_Quantiles(benchmark::State& bs) {
  const Mat u = input(bs);
  const std::vector<double> ps{0.01, 0.1, 0.5, 0.9};
  for (auto _ : bs) {
    const std::vector<double> q = matopt::singular_value_quantiles(u, ps);
    benchmark::DoNotOptimize(q.data());
  }
}

void BM_OrthogonalityResidual(benchmark::State& bs) {
  const Mat u = input(bs);
  for (auto _ : bs) {
    const matopt::OrthogonalityResidual r = matopt::orthogonality_residual(u);
    benchmark::DoNotOptimize(r.gram);
  }
  const double r = double(std::min(u.rows(), u.cols())), s = double(std::max(u.rows(), u.cols()));
  gram_counter(bs, r, s);
}

void BM_SpectralFlatness(benchmark::State& bs) {
  const Mat u = input(bs);
  for (auto _ : bs) {
    const matopt::SpectralFlatness f = matopt::spectral_flatness(u);
    benchmark::DoNotOptimize(f.flatness);
  }
}

/// Scalar diagnostics: no matrix, one figure per schedule.
void BM_FailureThreshold(benchmark::State& bs) {
  const matopt::NsSchedule s = matopt::schedules::Jordan::schedule();
  for (auto _ : bs) {
    double t = matopt::ns_failure_threshold(s, 0.5);
    benchmark::DoNotOptimize(t);
  }
}

void BM_Plan(benchmark::State& bs) {
  const matopt::NsSchedule s = matopt::schedules::Jordan::schedule();
  matopt::NsPlanOptions o;
  o.generate = bs.range(0) != 0;
  for (auto _ : bs) {
    const matopt::NsPlan p = matopt::plan_ns_steps(s, 1e-4, o);
    benchmark::DoNotOptimize(p.steps);
  }
}

template <class Opt>
void BM_StepBaseline(benchmark::State& bs) {
  Opt opt;
  Mat w = input(bs), g = Mat::Random(w.rows(), w.cols());
  auto state = opt.make_state(w);
  for (auto _ : bs) {
    opt.step(w, g, state);
    benchmark::ClobberMemory();
  }
  bs.counters["bytes_per_second"] = benchmark::Counter(20.0 * double(w.rows()) * double(w.cols()) *
                                                           double(bs.iterations()),
                                                       benchmark::Counter::kIsRate);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "n"});
  for (auto [m, n] : {std::pair{512, 512}, std::pair{1024, 1024}}) b->Args({m, n});
  b->Unit(benchmark::kMillisecond);
}
}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("BM_Diagnostic/rmnp_step", BM_StepBaseline<matopt::RMNP<float>>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Diagnostic/muon_step", BM_StepBaseline<matopt::Muon<float>>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Diagnostic/diagonal_dominance", BM_DiagonalDominance<double>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Diagnostic/diagonal_dominance_fp32", BM_DiagonalDominance<float>)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Diagnostic/singular_value_quantiles", BM_Quantiles)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Diagnostic/orthogonality_residual", BM_OrthogonalityResidual)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Diagnostic/spectral_flatness", BM_SpectralFlatness)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Diagnostic/ns_failure_threshold", BM_FailureThreshold)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_Diagnostic/plan_ns_steps", BM_Plan)
      ->ArgName("generate")
      ->Arg(0)
      ->Arg(1)
      ->Unit(benchmark::kMicrosecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
