// SPDX-License-Identifier: MIT
// Checkpoints (issue: reliability): round trips that resume bitwise for every preset and composition,
// rejection of truncated, corrupted, wrong-version, wrong-type, wrong-optimizer and wrong-shape files with
// the live state unchanged, and kill-and-resume with real processes (fork + SIGKILL).

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <cstdlib>
#include <random>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <doctest/doctest.h>

#include <matopt/matopt.hpp>

#include "test_support.hpp"

using namespace matopt;
using matopt::test::randn;
using matopt::test::RowMat;

namespace {

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/matopt-test-" + std::to_string(::getpid()) + "-" + name;
}

std::string slurp(const std::string& path) {
  std::ifstream is(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(is), std::istreambuf_iterator<char>());
}
void spit(const std::string& path, const std::string& bytes) {
  std::ofstream os(path, std::ios::binary | std::ios::trunc);
  os.write(bytes.data(), std::streamsize(bytes.size()));
}

/// A deterministic gradient of step k for parameter i: the gradient of 1/2 ||W - target||^2 plus noise.
template <class M>
M gradient(const M& w, int k, int i) {
  return w - randn<M>(w.rows(), w.cols(), unsigned(1000 + i)) +
         typename M::Scalar(0.1) * randn<M>(w.rows(), w.cols(), unsigned(k * 31 + i));
}

/// Steps `opt` k times from step `from`, for parameters ws with states.
template <class Opt, class M>
void train(Opt& opt, std::vector<M>& ws, std::vector<typename Opt::State>& states, int from, int to) {
  for (int k = from; k < to; ++k)
    for (std::size_t i = 0; i < ws.size(); ++i) opt.step(ws[i], gradient(ws[i], k, int(i)), states[i]);
}

/// Every field of `states`, as the checkpoint writes them (to compare states field by field).
template <class Opt>
std::string serialized(const Opt& opt, const std::vector<typename Opt::State>& states) {
  std::stringstream ss;
  save_checkpoint(ss, opt, states);
  return ss.str();
}

/// Save after 3 steps, go on 4 more; load into fresh states with the saved W, go on 4 more: bitwise equal.
template <class Opt>
void round_trip(Opt opt) {
  using T = typename Opt::Scalar;
  using M = RowMat<T>;
  CAPTURE(Opt::identity());
  std::vector<M> ws{randn<M>(9, 6, 1), randn<M>(5, 12, 2), randn<M>(1, 7, 3)};
  std::vector<typename Opt::State> states;
  for (auto& w : ws) states.push_back(opt.make_state(w));
  train(opt, ws, states, 0, 3);
  std::stringstream file;
  save_checkpoint(file, opt, states);
  const std::vector<M> ws_saved = ws;
  train(opt, ws, states, 3, 7);

  Opt fresh(opt.options());
  std::vector<M> ws2 = ws_saved;
  std::vector<typename Opt::State> states2;
  for (auto& w : ws2) states2.push_back(fresh.make_state(w));
  load_checkpoint(file, fresh, states2);
  train(fresh, ws2, states2, 3, 7);
  for (std::size_t i = 0; i < ws.size(); ++i) CHECK(ws2[i] == ws[i]);
  CHECK(serialized(fresh, states2) == serialized(opt, states));  // every field of every state
}

using CappedMuon = Optimizer<float, Orthogonalize<>, Momentum<Ema, Nesterov>, SpectralCap<Static<>>>;
using AdaptiveRmnp = Optimizer<double, Adaptive<>, Momentum<Sum, Nesterov>, Static<>>;

}  // namespace

TEST_CASE_TEMPLATE("checkpoint round trips resume bitwise", T, float, double) {
  round_trip(Muon<T>{});
  round_trip(MoonlightMuon<T>{});
  round_trip(RMNP<T>{});
  round_trip(ColNorm<T>{});
  round_trip(OrScale<T>{});  // calibration and last trust ratio
  round_trip(AdamW<T>{});    // step counts (bias corrections)
}

TEST_CASE("checkpoint round trips for compositions: spectral cap vectors, adaptive choice") {
  round_trip(CappedMuon{});
  typename AdaptiveRmnp::Options o;
  o.precondition.every = 2;
  round_trip(AdaptiveRmnp(o));
  typename MuonAutoSteps<float>::Options planned;
  planned.precondition.plan_every = 2;  // plans at steps 1, 3, 5, 7: the resumed run must keep the saved one
  round_trip(MuonAutoSteps<float>(planned));
}

TEST_CASE("bad checkpoints are rejected with a clear error and change nothing") {
  using M = RowMat<float>;
  Muon<float> opt;
  std::vector<M> ws{randn<M>(6, 4, 1), randn<M>(3, 5, 2)};
  std::vector<Muon<float>::State> states;
  for (auto& w : ws) states.push_back(opt.make_state(w));
  train(opt, ws, states, 0, 2);
  std::stringstream ss;
  save_checkpoint(ss, opt, states);
  const std::string good = ss.str();
  train(opt, ws, states, 2, 3);  // the live state moves on
  const auto live = states;

  auto rejects = [&](const std::string& bytes, const std::string& message) {
    CAPTURE(message);
    std::istringstream is(bytes);
    CHECK_THROWS_WITH_AS(load_checkpoint(is, opt, states), doctest::Contains(message.c_str()), CheckpointError);
    for (std::size_t i = 0; i < states.size(); ++i) {
      CHECK(states[i].momentum == live[i].momentum);
      CHECK(states[i].steps == live[i].steps);
    }
  };
  for (std::size_t cut : {std::size_t(0), std::size_t(10), std::size_t(40), good.size() / 2, good.size() - 1})
    rejects(good.substr(0, cut), "truncated");
  std::string bad = good;
  bad[good.size() - 5] ^= 0x10;
  rejects(bad, "checksum mismatch");
  bad = good;
  bad[0] = 'X';
  rejects(bad, "bad magic");
  bad = good;
  bad[8] = 9;  // version 9
  rejects(bad, "version 9 is not supported");
  rejects(good + "extra", "trailing bytes");

  {  // another scalar type
    Muon<double> dopt;
    std::vector<Muon<double>::State> ds;
    for (auto& w : ws) ds.push_back(dopt.make_state(RowMat<double>(w.cast<double>())));
    std::stringstream d;
    save_checkpoint(d, dopt, ds);
    rejects(d.str(), "scalar type mismatch: the file holds double state");
  }
  {  // another optimizer
    RMNP<float> r;
    std::vector<RMNP<float>::State> rs;
    for (auto& w : ws) rs.push_back(r.make_state(w));
    std::stringstream d;
    save_checkpoint(d, r, rs);
    rejects(d.str(), "written by optimizer 'matopt::RMNP<RowNormalize, Sum, Static>'");
  }
  {  // other shapes, and another number of parameters
    std::vector<M> other{randn<M>(4, 6, 1), randn<M>(3, 5, 2)};
    std::vector<Muon<float>::State> os;
    for (auto& w : other) os.push_back(opt.make_state(w));
    std::stringstream d;
    save_checkpoint(d, opt, os);
    rejects(d.str(), "field 'rows' is 4 in the file but 6 in the live state");
    std::stringstream one;
    save_checkpoint(one, opt, std::vector<Muon<float>::State>{os[1]});
    rejects(one.str(), "the file holds 1 parameter states but 2 were given");
  }
  CHECK_THROWS_WITH_AS(load_checkpoint(temp_path("missing"), opt, states), doctest::Contains("cannot open"),
                       CheckpointError);
}

namespace {
/// A state after two real steps, changed by `forge` into something no step produces, saved with a valid header
/// and checksum: loading it is refused with `message`, and the live state is unchanged in every field.
template <class Opt, class Forge>
void rejects_impossible(Opt opt, Index m, Index n, Forge&& forge, const char* message) {
  CAPTURE(message);
  using M = RowMat<typename Opt::Scalar>;
  std::vector<M> ws{randn<M>(m, n, 1)};
  std::vector<typename Opt::State> states{opt.make_state(ws[0])};
  train(opt, ws, states, 0, 2);
  auto forged = states;
  forge(forged[0]);
  std::istringstream is(serialized(opt, forged));
  const std::string before = serialized(opt, states);
  CHECK_THROWS_WITH_AS(load_checkpoint(is, opt, states), doctest::Contains(message), CheckpointError);
  CHECK(serialized(opt, states) == before);
}
}  // namespace

TEST_CASE("checkpoints with a valid checksum but impossible content are rejected and change nothing") {
  using F = float;
  rejects_impossible(AdamW<F>{}, 5, 3, [](auto& s) { s.steps = -1; }, "field 'steps' is -1: a count cannot be negative");
  rejects_impossible(Muon<F>{}, 6, 4, [](auto& s) { s.skipped = -3; }, "field 'skipped' is -3");
  rejects_impossible(Muon<F>{}, 6, 4, [](auto& s) { s.momentum(3) = std::numeric_limits<F>::quiet_NaN(); },
                     "field 'momentum' has a non-finite entry (nan) at index 3");
  rejects_impossible(AdamW<double>{}, 5, 3, [](auto& s) { s.m(0) = HUGE_VAL; }, "field 'm' has a non-finite entry");
  rejects_impossible(AdamW<F>{}, 5, 3, [](auto& s) { s.v(2) = -1e-6f; },
                     "field 'v' (AdamW's second moment) has a negative entry");
  rejects_impossible(NorMuon<F>{}, 6, 4, [](auto& s) { s.precondition.second_moment(1) = -1; },
                     "field 'second_moment' has a negative entry");
  rejects_impossible(OrScale<double>{}, 6, 4, [](auto& s) { s.scaling.calibration = 0; },
                     "field 'calibration' is 0.000000: it must be > 0");
  rejects_impossible(OrScale<double>{}, 6, 4, [](auto& s) { s.scaling.last_ratio = -0.5; }, "field 'last_ratio'");
  rejects_impossible(OrScale<F>{}, 6, 4, [](auto& s) { s.scaling.last_ratio = INFINITY; },
                     "field 'last_ratio' is not finite (inf)");
  rejects_impossible(CappedMuon{}, 6, 4, [](auto& s) { s.scaling.v *= 5; },
                     "fields 'u' and 'v' must be unit vectors when 'warm' is set");
  rejects_impossible(CappedMuon{}, 6, 4, [](auto& s) { s.scaling.sigma = -1; }, "field 'sigma'");
  rejects_impossible(AdaptiveRmnp{}, 6, 4, [](auto& s) { s.precondition.r_min = -2; }, "field 'r_min' is -2");
  rejects_impossible(Lion<F>{}, 5, 3, [](auto& s) { s.zeroed = -1; }, "field 'zeroed' is -1");
  rejects_impossible(MuonAutoSteps<F>{}, 6, 4, [](auto& s) { s.precondition.quantile = 2; },
                     "field 'quantile' is 2.000000: it must be in [0, 1]");
  rejects_impossible(MuonAutoSteps<F>{}, 6, 4, [](auto& s) { s.precondition.ns_steps = 0; },
                     "field 'ns_steps' is 0 after 2 steps: it must be >= 1");
  rejects_impossible(MuonAutoSteps<double>{}, 6, 4, [](auto& s) { s.precondition.ns_steps = 5000; },
                     "field 'ns_steps' is 5000: it must be <= 1000");

  // The reserved header word (bytes 20-23) is 0 in every file this version writes.
  Muon<F> opt;
  std::vector<RowMat<F>> ws{randn<RowMat<F>>(6, 4, 1)};
  std::vector<Muon<F>::State> states{opt.make_state(ws[0])};
  std::string bad = serialized(opt, states);
  bad[20] = 1;
  std::istringstream is(bad);
  CHECK_THROWS_WITH_AS(load_checkpoint(is, opt, states), doctest::Contains("the reserved header word is 1, not 0"),
                       CheckpointError);
}

TEST_CASE("hybrid checkpoints: states, skipped-step count and parameter values, mismatches rejected") {
  using M = RowMat<float>;
  M w1 = randn<M>(8, 6, 1), b1 = randn<M>(1, 6, 2), head = randn<M>(3, 6, 3);
  auto make = [](M& w1_, M& b1_, M& head_) {
    HybridOptimizer<float> h(make_optimizer<float>("orscale"));
    h.add("fc.weight", view(w1_));
    h.add("fc.bias", view(b1_));
    h.add("head.weight", view(head_), Role::Head);
    return h;
  };
  auto h = make(w1, b1, head);
  auto step = [&](HybridOptimizer<float>& opt, M& a, M& b, M& c, int k) {
    const M ga = gradient(a, k, 0), gb = gradient(b, k, 1), gc = gradient(c, k, 2);
    opt.step({view(ga), view(gb), view(gc)});
  };
  for (int k = 0; k < 3; ++k) step(h, w1, b1, head, k);
  const std::string path = temp_path("hybrid.ckpt");
  save_checkpoint(path, h, /*parameters=*/true);
  for (int k = 3; k < 6; ++k) step(h, w1, b1, head, k);

  M w1b = M::Zero(8, 6), b1b = M::Zero(1, 6), headb = M::Zero(3, 6);  // values come from the file
  auto h2 = make(w1b, b1b, headb);
  load_checkpoint(path, h2);
  for (int k = 3; k < 6; ++k) step(h2, w1b, b1b, headb, k);
  CHECK(w1b == w1);
  CHECK(b1b == b1);
  CHECK(headb == head);

  // A model whose parameter was renamed, or stepped by another optimizer: rejected, nothing changed.
  M x1 = w1, x2 = b1, x3 = head;
  HybridOptimizer<float> renamed(make_optimizer<float>("orscale"));
  renamed.add("fc.w", view(x1));
  renamed.add("fc.bias", view(x2));
  renamed.add("head.weight", view(x3), Role::Head);
  CHECK_THROWS_WITH_AS(load_checkpoint(path, renamed), doctest::Contains("is 'fc.weight' in the file but 'fc.w' here"),
                       CheckpointError);
  CHECK(x1 == w1);
  HybridOptimizer<float> muon(make_optimizer<float>("muon"));
  muon.add("fc.weight", view(x1));
  muon.add("fc.bias", view(x2));
  muon.add("head.weight", view(x3), Role::Head);
  CHECK_THROWS_WITH_AS(load_checkpoint(path, muon), doctest::Contains("but is now stepped by"), CheckpointError);
  CHECK(x1 == w1);
  std::remove(path.c_str());
}

namespace {
// The training job of the kill-and-resume tests: hidden matrices stepped by a preset (Muon by default) and an
// AdamW vector in a hybrid, a checkpoint (with parameters) after every step.
struct Job {
  RowMat<float> w1 = randn<RowMat<float>>(24, 16, 1), w2 = randn<RowMat<float>>(16, 24, 2);
  RowMat<float> b = randn<RowMat<float>>(1, 16, 3);
  HybridOptimizer<float> opt;
  explicit Job(const char* preset = "muon") : opt(make_optimizer<float>(preset)) {
    opt.add("w1", view(w1));
    opt.add("w2", view(w2));
    opt.add("b", view(b));
  }
  void step(int k) {
    const RowMat<float> g1 = gradient(w1, k, 0), g2 = gradient(w2, k, 1), gb = gradient(b, k, 2);
    opt.step({view(g1), view(g2), view(gb)});
  }
};
constexpr int kSteps = 12;

/// A forked child must not use the parent's OpenMP thread pool (it does not exist there).
void single_threaded_child() {
#if defined(_OPENMP)
  omp_set_num_threads(1);
#endif
  Eigen::setNbThreads(1);
}

/// Runs `child` in a forked process and returns its wait status.
template <class F>
int in_child(F&& child) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    single_threaded_child();
    child();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}
}  // namespace

TEST_CASE("kill and resume: a job killed between steps resumes to the uninterrupted run's weights") {
  Job reference;
  for (int k = 0; k < kSteps; ++k) reference.step(k);

  const std::string path = temp_path("job.ckpt");
  std::remove(path.c_str());
  const int kill_after = 7;
  const int status = in_child([&] {
    Job job;
    for (int k = 0; k < kSteps; ++k) {
      job.step(k);
      save_checkpoint(path, job.opt, true);
      if (k + 1 == kill_after) ::raise(SIGKILL);  // killed between steps
    }
  });
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);

  Job resumed;  // fresh process state: initial weights, zero momentum
  load_checkpoint(path, resumed.opt);
  for (int k = kill_after; k < kSteps; ++k) resumed.step(k);
  CHECK(resumed.w1 == reference.w1);
  CHECK(resumed.w2 == reference.w2);
  CHECK(resumed.b == reference.b);

  SUBCASE("a checkpoint truncated mid-write is rejected; the job resumes from the previous one") {
    // A non-atomic writer killed mid-write leaves a prefix: write one at a second path.
    const std::string torn = temp_path("torn.ckpt");
    const std::string full = slurp(path);
    spit(torn, full.substr(0, full.size() * 2 / 3));
    Job job;
    const RowMat<float> w1_before = job.w1;
    CHECK_THROWS_WITH_AS(load_checkpoint(torn, job.opt), doctest::Contains("truncated"), CheckpointError);
    CHECK(job.w1 == w1_before);  // nothing was changed
    load_checkpoint(path, job.opt);
    for (int k = kill_after; k < kSteps; ++k) job.step(k);
    CHECK(job.w1 == reference.w1);
    std::remove(torn.c_str());
  }
  SUBCASE("killed while writing: the file on disk is always a complete checkpoint") {
    // A 512 x 512 state stepped and saved in a loop by a child, which reports each completed save through a pipe.
    // The parent waits for one (so the file on disk is the child's, not the parent's 0-step file), then watches
    // for a save in progress (the writer's temporary file `path.tmp.<pid>`, or a destination that is not of the
    // complete size, as a non-atomic writer's would be) and kills the child by SIGKILL at once. The file on disk
    // must then be exactly the last reported save (or the next one, if the kill fell between its rename and its
    // report), byte for byte; a kill that left the temporary file fell before the rename, i.e. mid-save. Up to 10
    // children until one is killed mid-save; no sleeps, each wait bounded.
    using Big = RowMat<float>;
    using Clock = std::chrono::steady_clock;
    const std::string big_path = temp_path("big.ckpt");
    const Big w0 = randn<Big>(512, 512, 7);
    RMNP<float> rmnp;
    // Saves n = 0, 1, ... of the trajectory, as bytes: the parent's own steps, extended as the children get ahead.
    std::vector<std::string> saves;
    Big w_ref = w0;
    std::vector<RMNP<float>::State> st_ref{rmnp.make_state(w_ref)};
    auto expected_save = [&](std::int64_t n) -> const std::string& {
      while (std::int64_t(saves.size()) <= n) {
        if (!saves.empty()) rmnp.step(w_ref, gradient(w_ref, int(saves.size()) - 1, 0), st_ref[0]);
        saves.push_back(serialized(rmnp, st_ref));
      }
      return saves[std::size_t(n)];
    };
    const std::size_t full_size = expected_save(0).size();  // every save of this state has the same size

    bool mid_save = false;
    for (int child = 0; child < 10 && !mid_save; ++child) {
      CAPTURE(child);
      {
        Big w = w0;
        std::vector<RMNP<float>::State> st{rmnp.make_state(w)};
        save_checkpoint(big_path, rmnp, st);  // the parent's 0-step file
      }
      int fds[2];
      REQUIRE(::pipe(fds) == 0);
      const pid_t pid = ::fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        ::close(fds[0]);
        single_threaded_child();
        try {  // nothing may unwind into doctest in the child
          Big w = w0;
          std::vector<RMNP<float>::State> st{rmnp.make_state(w)};
          for (int k = 0; k < 100000; ++k) {
            rmnp.step(w, gradient(w, k, 0), st[0]);
            save_checkpoint(big_path, rmnp, st);
            const char done = 1;
            if (::write(fds[1], &done, 1) != 1) ::_exit(2);
          }
        } catch (...) {
          ::_exit(3);
        }
        ::_exit(0);
      }
      ::close(fds[1]);
      const std::string tmp = big_path + ".tmp." + std::to_string(pid);
      struct Reap {  // the child never outlives this try, whatever fails below
        pid_t pid;
        int fd;
        int status = 0;
        void operator()() {
          if (pid > 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            pid = 0;
          }
        }
        ~Reap() {
          (*this)();
          ::close(fd);
        }
      } reap{pid, fds[0]};

      // 1. The first completed save (a child that never finishes one fails here, after 120 s at most).
      pollfd pfd{fds[0], POLLIN, 0};
      REQUIRE_MESSAGE(::poll(&pfd, 1, 120 * 1000) == 1, "the child reported no completed save");
      // 2. The next save in progress: kill then.
      bool seen = false;
      for (const auto deadline = Clock::now() + std::chrono::seconds(60); !seen && Clock::now() < deadline;) {
        struct stat sb;
        seen = ::stat(tmp.c_str(), &sb) == 0 ||
               (::stat(big_path.c_str(), &sb) == 0 ? std::size_t(sb.st_size) != full_size : true);
        if (!seen) ::sched_yield();
      }
      reap();
      REQUIRE_MESSAGE(seen, "no save in progress seen within 60 s");
      CHECK(WIFSIGNALED(reap.status));
      CHECK(WTERMSIG(reap.status) == SIGKILL);
      std::int64_t reported = 0;  // completed saves: every byte the child wrote (read to end of file)
      char buf[256];
      for (::ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;)
        if (n > 0) reported += n;
        else if (errno != EINTR) break;
      CAPTURE(reported);
      REQUIRE(reported >= 1);

      struct stat sb;
      const bool tmp_left = ::stat(tmp.c_str(), &sb) == 0;
      std::remove(tmp.c_str());
      const std::string on_disk = slurp(big_path);
      std::vector<RMNP<float>::State> loaded{rmnp.make_state(w0)};
      CHECK_NOTHROW(load_checkpoint(big_path, rmnp, loaded));  // never torn
      const std::int64_t steps = loaded[0].steps;
      CAPTURE(steps);
      CAPTURE(tmp_left);
      // Killed before the rename: the last reported save. Otherwise perhaps one more, renamed but not reported.
      const bool last_save = steps == reported || (!tmp_left && steps == reported + 1);
      CHECK(last_save);
      if (last_save) CHECK((on_disk == expected_save(steps)));  // that complete save, byte for byte
      mid_save = tmp_left || on_disk.size() != full_size;
    }
    CHECK_MESSAGE(mid_save, "no child was killed mid-save in 10 tries");
    std::remove(big_path.c_str());
  }
  std::remove(path.c_str());
}

TEST_CASE("kill at a random moment, mid-step or mid-save: Muon, RMNP and OrScale jobs resume from the file on disk "
          "to the uninterrupted run's weights") {
  // Three jobs in one process, each saving its checkpoint after every step, killed a random 0-120 ms after the
  // first round of saves: the kill lands inside a step or a save (mostly a save: each one syncs a file). Each job
  // resumes from whatever its file holds, takes 4 more steps, and must equal an uninterrupted run of the same
  // number of steps, bitwise.
  const char* presets[] = {"muon", "rmnp", "orscale"};
  std::mt19937 rng(20261201);
  for (int trial = 0; trial < 3; ++trial) {
    std::string paths[3];
    for (int j = 0; j < 3; ++j) {
      paths[j] = temp_path(std::string("random-kill-") + presets[j] + ".ckpt");
      std::remove(paths[j].c_str());
    }
    const int delay_ms = std::uniform_int_distribution<int>(0, 120)(rng);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      single_threaded_child();
      Job jobs[3] = {Job(presets[0]), Job(presets[1]), Job(presets[2])};
      for (int k = 0; k < 1000000; ++k)
        for (int j = 0; j < 3; ++j) {
          jobs[j].step(k);
          save_checkpoint(paths[j], jobs[j].opt, true);
        }
      ::_exit(0);
    }
    // The delay counts from the first complete round of saves, so that every job has a file to resume from.
    for (int wait = 0; wait < 20000 && !std::ifstream(paths[2]).good(); ++wait) ::usleep(500);
    ::usleep(useconds_t(delay_ms) * 1000);
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    for (int j = 0; j < 3; ++j) {
      CAPTURE(presets[j]);
      CAPTURE(delay_ms);
      Job resumed(presets[j]);
      REQUIRE(std::ifstream(paths[j]).good());
      load_checkpoint(paths[j], resumed.opt);
      const std::int64_t from = resumed.opt.state(0).steps();
      CAPTURE(from);
      CHECK(from >= 1);
      for (int k = int(from); k < int(from) + 4; ++k) resumed.step(k);
      Job reference(presets[j]);
      for (int k = 0; k < int(from) + 4; ++k) reference.step(k);
      CHECK(resumed.w1 == reference.w1);
      CHECK(resumed.w2 == reference.w2);
      CHECK(resumed.b == reference.b);
      std::remove(paths[j].c_str());
      std::remove((paths[j] + ".tmp." + std::to_string(pid)).c_str());
    }
  }
}
