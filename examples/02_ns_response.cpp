// SPDX-License-Identifier: MIT
// How each Newton–Schulz schedule maps a normalized singular value sigma after k = 1..K steps, and the
// failure thresholds: the smallest sigma whose k-step output reaches tau = 0.5 and 0.9 (docs/math.md#diagnostics).
// Prints the tables, writes the curves and a gnuplot script into --out DIR (default ./ns_response), and
// renders ns_response.png and ns_thresholds.png when gnuplot is on PATH.
//
//   02_ns_response [--out DIR] [--steps K] [--pe-l L] [--pe-steps N]
//
// sigma is the singular value NS iterates on, after X / (safety ||X||_F + eps): for PolarExpress (safety
// 1.02) a singular value s of U / ||U||_F enters as s / 1.02.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <matopt/matopt.hpp>

namespace {

struct Named {
  std::string name;
  matopt::NsSchedule schedule;
};

[[noreturn]] void usage(const char* argv0, const std::string& why) {
  std::fprintf(stderr, "%s\nusage: %s [--out DIR] [--steps K] [--pe-l L] [--pe-steps N]\n", why.c_str(), argv0);
  std::exit(2);
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "ns_response";
  int max_steps = 8;
  double pe_l = 1e-4;
  int pe_steps = 6;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(argv[0], "missing value after " + a);
    const std::string v = argv[++i];
    try {
      if (a == "--out") out = v;
      else if (a == "--steps") max_steps = std::stoi(v);
      else if (a == "--pe-l") pe_l = std::stod(v);
      else if (a == "--pe-steps") pe_steps = std::stoi(v);
      else usage(argv[0], "unknown flag " + a);
    } catch (const std::logic_error&) {
      usage(argv[0], "bad value '" + v + "' for " + a);
    }
  }
  if (max_steps < 1 || max_steps > 30) usage(argv[0], "--steps must be in [1, 30]");

  namespace s = matopt::schedules;
  std::vector<Named> all = {{s::Jordan::name, s::Jordan::schedule()},
                            {s::You::name, s::You::schedule()},
                            {s::PolarExpress::name, s::PolarExpress::schedule()},
                            {s::Cubic::name, s::Cubic::schedule()},
                            {s::QuinticFixedPoint::name, s::QuinticFixedPoint::schedule()}};
  try {
    all.push_back({"pe_generated(l=" + fmt("%g", pe_l) + ",K=" + std::to_string(pe_steps) + ")",
                   matopt::polar_express::optimal_composition(pe_l, pe_steps)});
  } catch (const std::invalid_argument& e) {
    usage(argv[0], e.what());
  }

  // Console tables: the k-step map at a few sigmas, and the thresholds.
  const std::vector<double> probe{1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 0.5, 1.0};
  for (const Named& n : all) {
    std::printf("\n== %s: %zu coefficient triple(s), safety %.4g (steps past the list repeat the last)\n",
                n.name.c_str(), n.schedule.coefficients.size(), n.schedule.safety);
    std::printf("%3s", "k");
    for (double x : probe) std::printf(" %9s", ("s=" + fmt("%g", x)).c_str());
    std::printf("  %11s %11s\n", "t(tau=0.5)", "t(tau=0.9)");
    const Eigen::MatrixXd tab = matopt::ns_response_table(n.schedule, probe, max_steps);
    for (int k = 1; k <= max_steps; ++k) {
      std::printf("%3d", k);
      for (Eigen::Index i = 0; i < tab.rows(); ++i) std::printf(" %9.4f", tab(i, k - 1));
      std::printf("  %11.4e %11.4e\n", matopt::ns_failure_threshold(n.schedule, 0.5, k),
                  matopt::ns_failure_threshold(n.schedule, 0.9, k));
    }
  }

  // Data files: one gnuplot block (index) per schedule.
  std::filesystem::create_directories(out);
  const std::filesystem::path dir(out);
  {
    std::ofstream f(dir / "ns_response.dat");
    std::vector<double> grid;
    for (int i = 0; i <= 600; ++i) grid.push_back(std::pow(10.0, -6.0 + 6.0 * i / 600));
    for (const Named& n : all) {
      f << "# " << n.name << ": sigma, response after k = 1.." << max_steps << " steps\n";
      const Eigen::MatrixXd tab = matopt::ns_response_table(n.schedule, grid, max_steps);
      for (Eigen::Index i = 0; i < tab.rows(); ++i) {
        f << grid[std::size_t(i)];
        for (int k = 0; k < max_steps; ++k) f << ' ' << tab(i, k);
        f << '\n';
      }
      f << "\n\n";
    }
  }
  {
    std::ofstream f(dir / "ns_thresholds.dat");
    for (const Named& n : all) {
      f << "# " << n.name << ": k, threshold(tau=0.5), threshold(tau=0.9)\n";
      for (int k = 1; k <= max_steps; ++k)
        f << k << ' ' << matopt::ns_failure_threshold(n.schedule, 0.5, k) << ' '
          << matopt::ns_failure_threshold(n.schedule, 0.9, k) << '\n';
      f << "\n\n";
    }
  }
  {
    std::ofstream f(dir / "ns_response.gp");
    f << "# gnuplot script written by 02_ns_response; run it inside this directory: gnuplot ns_response.gp\n"
      << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
      << "  set terminal pngcairo size 1500,950 font ',10'\n"
      << "} else {\n"
      << "  set terminal png size 1500,950\n"
      << "}\n"
      << "K = " << max_steps << "\n"
      << "set output 'ns_response.png'\n"
      << "set multiplot layout 2,3 title 'Newton-Schulz scalar map after k steps (sigma after normalization)'\n"
      << "set logscale x\nset format x '10^{%L}'\nset xrange [1e-6:1]\nset yrange [0:1.3]\n"
      << "set key top left font ',8'\nset grid\nset xlabel 'sigma'\nset ylabel 'p_k(...p_1(sigma))'\n";
    for (std::size_t i = 0; i < all.size(); ++i)
      f << "set title '" << all[i].name << "' noenhanced\n"
        << "plot for [k=1:K] 'ns_response.dat' index " << i
        << " using 1:(column(k+1)) with lines title sprintf('k=%d', k), 0.5 with lines dt 2 lc 'black' notitle, "
           "0.9 with lines dt 3 lc 'black' notitle\n";
    f << "unset multiplot\n"
      << "set output 'ns_thresholds.png'\n"
      << "set multiplot layout 1,2 title 'Failure threshold: smallest sigma whose k-step output reaches tau'\n"
      << "unset logscale x\nset format x '%g'\nset xrange [0.5:K+0.5]\nset yrange [*:*]\n"
      << "set logscale y\nset format y '10^{%L}'\nset key bottom left\nset xlabel 'steps k'\nset ylabel 'threshold'\n";
    for (int col : {2, 3}) {
      f << "set title 'tau = " << (col == 2 ? "0.5" : "0.9") << "'\nplot ";
      for (std::size_t i = 0; i < all.size(); ++i)
        f << (i ? ", " : "") << "'ns_thresholds.dat' index " << i << " using 1:" << col
          << " with linespoints title '" << all[i].name << "' noenhanced";
      f << "\n";
    }
    f << "unset multiplot\n";
  }
  std::printf("\nwrote %s/{ns_response.dat, ns_thresholds.dat, ns_response.gp}\n", out.c_str());
  if (std::system("command -v gnuplot > /dev/null 2>&1") == 0) {
    const std::string cmd = "cd '" + out + "' && gnuplot ns_response.gp";
    if (std::system(cmd.c_str()) == 0)
      std::printf("rendered %s/ns_response.png and %s/ns_thresholds.png\n", out.c_str(), out.c_str());
    else
      std::printf("gnuplot failed; the data and script are in %s\n", out.c_str());
  } else {
    std::printf("gnuplot not on PATH: skipped the PNGs (run 'gnuplot ns_response.gp' in %s later)\n", out.c_str());
  }
  return 0;
}
