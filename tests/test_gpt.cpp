// SPDX-License-Identifier: MIT
// The GPT example's model and data (examples/gpt): the model's gradient against central finite differences
// on a tiny float64 configuration, causality, and the fortunes loader on synthetic folders.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <torch/torch.h>

#include "gpt/corpus.hpp"
#include "gpt/model.hpp"

#include "doctest_after_torch.hpp"

namespace fs = std::filesystem;

TEST_CASE("gpt model: the gradient of every parameter matches central finite differences (float64)") {
  torch::manual_seed(3);
  gpt::GptConfig c;
  c.vocab = 11;
  c.d_model = 8;
  c.layers = 2;
  c.heads = 2;
  c.context = 5;
  gpt::Gpt model(c);
  model->to(torch::kFloat64);
  {
    torch::NoGradGuard no_grad;  // larger weights than GPT-2's init, so that every path carries gradient
    for (auto& p : model->parameters()) p.add_(torch::randn(p.sizes(), p.options()) * 0.3);
  }
  // Fixed token ids (torch::randint's inlined optional<Generator> trips g++'s -Wmaybe-uninitialized at -O1).
  const auto x = (torch::arange(2 * c.context, torch::kInt64) * 7 + 3).remainder(c.vocab).view({2, c.context});
  const auto y = (torch::arange(2 * c.context, torch::kInt64) * 5 + 1).remainder(c.vocab).view({2, c.context});
  model->zero_grad();
  model->loss(x, y).backward();
  const double h = 1e-5;
  int checked = 0;
  for (auto& item : model->named_parameters()) {
    auto& p = item.value();
    const auto g = p.grad().clone();
    auto flat = p.data().view({-1});
    for (std::int64_t i : {std::int64_t(0), flat.numel() / 2, flat.numel() - 1}) {
      CAPTURE(item.key());
      CAPTURE(i);
      const double p0 = flat[i].item<double>();
      double lp, lm;
      {
        torch::NoGradGuard no_grad;
        flat[i] = p0 + h;
        lp = model->loss(x, y).item<double>();
        flat[i] = p0 - h;
        lm = model->loss(x, y).item<double>();
        flat[i] = p0;
      }
      const double fd = (lp - lm) / (2 * h), an = g.view({-1})[i].item<double>();
      // Central differences: O(h^2) truncation plus rounding of about 1e-16 / h.
      CHECK(std::abs(fd - an) <= 1e-8 + 1e-6 * std::abs(an));
      ++checked;
    }
  }
  CHECK(checked == 3 * int(model->parameters().size()));
}

TEST_CASE("gpt model: a position's logits do not depend on later tokens") {
  torch::manual_seed(4);
  gpt::GptConfig c;
  c.vocab = 13;
  c.d_model = 16;
  c.layers = 2;
  c.heads = 4;
  c.context = 6;
  gpt::Gpt model(c);
  torch::NoGradGuard no_grad;
  auto x = (torch::arange(c.context, torch::kInt64) * 4 + 2).remainder(c.vocab).view({1, c.context});
  const auto before = model->forward(x);
  x[0][5] = (x[0][5].item<std::int64_t>() + 1) % c.vocab;
  const auto after = model->forward(x);
  CHECK(torch::equal(before.narrow(1, 0, 5), after.narrow(1, 0, 5)));
  CHECK(!torch::equal(before.narrow(1, 5, 1), after.narrow(1, 5, 1)));
  CHECK(gpt::layer_type("blocks.3.proj.weight") == "proj");
  CHECK(gpt::layer_type("blocks.0.q.weight") == "q");
  CHECK(gpt::layer_type("blocks.0.ln1.weight").empty());
  CHECK(gpt::layer_index("blocks.3.proj.weight") == 3);
}

namespace {
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / ("matopt_gpt_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
  }
};

std::string error_of(const std::string& dir) {
  try {
    (void)gpt::load_corpus(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("gpt corpus: missing and empty folders fail clearly, and only plain files without an extension are read") {
  CHECK(error_of("/nonexistent/matopt_fortunes").find("'/nonexistent/matopt_fortunes' does not exist") !=
        std::string::npos);
  TempDir empty("empty");
  CHECK(error_of(empty.path.string()).find("no fortune files") != std::string::npos);
  TempDir blank("blank");
  blank.write("zero", "");
  CHECK(error_of(blank.path.string()).find("are empty") != std::string::npos);

  TempDir one("one");
  one.write("b", "0123456789");
  one.write("a", "abcdefghij");
  one.write("a.dat", "index");  // the strfile index: skipped
  one.write("a.u8", "link");    // (a link in Debian's package; any extension is skipped)
  fs::create_symlink(one.path / "a", one.path / "c");
  fs::create_directories(one.path / "off");
  const gpt::Corpus c = gpt::load_corpus(one.path.string());
  REQUIRE(c.files == std::vector<std::string>{"a", "b"});
  CHECK(c.text == "abcdefghij0123456789");
  CHECK(c.train_bytes == 18);  // the first 90%
  CHECK(c.train() == "abcdefghij01234567");
  CHECK(c.validation() == "89");
}
