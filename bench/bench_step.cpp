// Full optimizer step of each preset on one fp32 matrix, with naive-FLOP/s (Newton–Schulz presets) and
// bytes/s (20 B/element: read G, V, W, write V, W) counters. Names are stable: BM_Step/<preset>/m/n.
// Run: matopt_bench --benchmark_format=json --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <matopt/matopt.hpp>

namespace {
using Mat = matopt::RowMatrix<float>;

/// Naive FLOPs of Jordan NS5 on an m x n matrix: 5 (4 r^2 s + 2 r^3), r = min(m, n), s = max(m, n).
double ns5_flops(double m, double n) {
  const double r = std::min(m, n), s = std::max(m, n);
  return 5 * (4 * r * r * s + 2 * r * r * r);
}

template <class Opt>
void BM_Step(benchmark::State& bs, bool orthogonalizes) {
  const auto m = bs.range(0), n = bs.range(1);
  Opt opt;
  Mat w = Mat::Random(m, n), g = Mat::Random(m, n);
  auto state = opt.make_state(w);
  for (auto _ : bs) {
    opt.step(w, g, state);
    benchmark::ClobberMemory();
  }
  const double elements = double(m) * double(n);
  bs.counters["bytes_per_second"] =
      benchmark::Counter(20.0 * elements * double(bs.iterations()), benchmark::Counter::kIsRate);
  if (orthogonalizes)
    bs.counters["naive_flops"] =
        benchmark::Counter(ns5_flops(double(m), double(n)) * double(bs.iterations()), benchmark::Counter::kIsRate);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "n"});
  for (auto [m, n] : {std::pair{1024, 1024}, std::pair{1024, 4096}, std::pair{4096, 1024}, std::pair{2048, 2048}})
    b->Args({m, n});
  b->Unit(benchmark::kMillisecond);
}
}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("BM_Step/muon", BM_Step<matopt::Muon<float>>, true)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/orscale", BM_Step<matopt::OrScale<float>>, true)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/rmnp", BM_Step<matopt::RMNP<float>>, false)->Apply(shapes);
  benchmark::RegisterBenchmark("BM_Step/colnorm", BM_Step<matopt::ColNorm<float>>, false)->Apply(shapes);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
