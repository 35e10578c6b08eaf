// SPDX-License-Identifier: MIT
// The Fashion-MNIST loader (examples/common/fashion_mnist.hpp) on synthetic IDX .gz files, and on the real
// data when it is installed.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>
#include <zlib.h>

#include "common/fashion_mnist.hpp"

namespace {

namespace fs = std::filesystem;

void put_u32(std::vector<unsigned char>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<unsigned char>((v >> shift) & 0xffu));
}

void write_gz(const fs::path& path, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(path.string().c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

std::vector<unsigned char> images_idx(std::uint32_t n, std::uint32_t magic = 0x803, std::uint32_t rows = 28,
                                      std::uint32_t cols = 28) {
  std::vector<unsigned char> b;
  put_u32(b, magic);
  put_u32(b, n);
  put_u32(b, rows);
  put_u32(b, cols);
  for (std::uint32_t i = 0; i < n * rows * cols; ++i) b.push_back(static_cast<unsigned char>((i * 7 + i / 784) % 256));
  return b;
}

std::vector<unsigned char> labels_idx(std::uint32_t n, std::uint32_t magic = 0x801, unsigned char bad_at_end = 0) {
  std::vector<unsigned char> b;
  put_u32(b, magic);
  put_u32(b, n);
  for (std::uint32_t i = 0; i < n; ++i) b.push_back(static_cast<unsigned char>(i % 10));
  if (bad_at_end != 0 && n > 0) b.back() = bad_at_end;
  return b;
}

/// A fresh temporary directory, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    const std::string name = "matopt_fmnist_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
    path = fs::temp_directory_path() / name;
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  fs::path images(bool train = true) const { return path / (train ? "train-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte.gz"); }
  fs::path labels(bool train = true) const { return path / (train ? "train-labels-idx1-ubyte.gz" : "t10k-labels-idx1-ubyte.gz"); }
};

/// The message of the runtime_error `f` throws ("" if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("fmnist::load reads a synthetic IDX pair back exactly") {
  TempDir d;
  const auto img = images_idx(5);
  write_gz(d.images(false), img);
  write_gz(d.labels(false), labels_idx(5));
  const fmnist::Dataset ds = fmnist::load(d.str(), false);
  REQUIRE(ds.images.rows() == 5);
  REQUIRE(ds.images.cols() == 784);
  REQUIRE(ds.labels.size() == 5);
  for (std::size_t i = 0; i < 5 * 784; ++i) CHECK(ds.images.data()[i] == doctest::Approx(img[16 + i] / 255.0f));
  for (int i = 0; i < 5; ++i) CHECK(ds.labels[std::size_t(i)] == i);
  // Row i is sample i (row-major N x 784).
  CHECK(ds.images(2, 3) == doctest::Approx(img[16 + 2 * 784 + 3] / 255.0f));

  SUBCASE("limit keeps the first samples") {
    const fmnist::Dataset first = fmnist::load(d.str() + "/", false, 3);  // trailing slash accepted
    REQUIRE(first.images.rows() == 3);
    REQUIRE(first.labels.size() == 3);
    CHECK(first.images == ds.images.topRows(3));
    CHECK(fmnist::load(d.str(), false, 100).labels.size() == 5);  // a limit above N keeps all
  }
}

TEST_CASE("fmnist::load names a missing file and the package that provides it") {
  TempDir d;
  const std::string msg = error_of([&] { fmnist::load(d.str(), true); });
  CHECK(contains(msg, d.images(true).string()));
  CHECK(contains(msg, "not found"));
  CHECK(contains(msg, "dataset-fashion-mnist"));

  write_gz(d.images(true), images_idx(2));
  const std::string lab = error_of([&] { fmnist::load(d.str(), true); });
  CHECK(contains(lab, d.labels(true).string()));
  CHECK(contains(lab, "not found"));
}

TEST_CASE("fmnist::load rejects a file that is not gzip") {
  TempDir d;
  const auto raw = images_idx(2);
  std::ofstream(d.images(false), std::ios::binary).write(reinterpret_cast<const char*>(raw.data()), std::streamsize(raw.size()));
  write_gz(d.labels(false), labels_idx(2));
  const std::string msg = error_of([&] { fmnist::load(d.str(), false); });
  CHECK(contains(msg, d.images(false).string()));
  CHECK(contains(msg, "not a gzip file"));
}

TEST_CASE("fmnist::load reports truncated data") {
  TempDir d;
  write_gz(d.labels(false), labels_idx(4));

  SUBCASE("valid gzip, fewer pixels than the header promises") {
    auto img = images_idx(4);
    img.erase(img.end() - 100, img.end());  // (not resize: GCC -O1 misreads its memset bound)
    write_gz(d.images(false), img);
    const std::string msg = error_of([&] { fmnist::load(d.str(), false); });
    CHECK(contains(msg, d.images(false).string()));
    CHECK(contains(msg, "truncated"));
    CHECK(contains(msg, "pixel data"));
  }
  SUBCASE("gzip stream cut short") {
    write_gz(d.images(false), images_idx(4));
    const auto size = fs::file_size(d.images(false));
    fs::resize_file(d.images(false), size / 2);
    const std::string msg = error_of([&] { fmnist::load(d.str(), false); });
    CHECK(contains(msg, d.images(false).string()));
    CHECK(contains(msg, "truncated"));
  }
  SUBCASE("header cut short") {
    write_gz(d.images(false), {0, 0, 8, 3, 0, 0});
    const std::string msg = error_of([&] { fmnist::load(d.str(), false); });
    CHECK(contains(msg, "truncated"));
    CHECK(contains(msg, "image count"));
  }
}

TEST_CASE("fmnist::load rejects a bad magic number and wrong dimensions") {
  TempDir d;
  SUBCASE("images") {
    write_gz(d.images(true), images_idx(2, 0x801));
    write_gz(d.labels(true), labels_idx(2));
    const std::string msg = error_of([&] { fmnist::load(d.str(), true); });
    CHECK(contains(msg, d.images(true).string()));
    CHECK(contains(msg, "bad magic number 0x801"));
  }
  SUBCASE("labels") {
    write_gz(d.images(true), images_idx(2));
    write_gz(d.labels(true), labels_idx(2, 0x803));
    const std::string msg = error_of([&] { fmnist::load(d.str(), true); });
    CHECK(contains(msg, d.labels(true).string()));
    CHECK(contains(msg, "bad magic number 0x803"));
  }
  SUBCASE("image size") {
    write_gz(d.images(true), images_idx(2, 0x803, 32, 32));
    write_gz(d.labels(true), labels_idx(2));
    const std::string msg = error_of([&] { fmnist::load(d.str(), true); });
    CHECK(contains(msg, d.images(true).string()));
    CHECK(contains(msg, "images are 32x32, expected 28x28"));
  }
}

TEST_CASE("fmnist::load rejects a count mismatch between images and labels") {
  TempDir d;
  write_gz(d.images(true), images_idx(3));
  write_gz(d.labels(true), labels_idx(4));
  const std::string msg = error_of([&] { fmnist::load(d.str(), true); });
  CHECK(contains(msg, d.labels(true).string()));
  CHECK(contains(msg, "holds 4 labels"));
  CHECK(contains(msg, "3 images"));
}

TEST_CASE("fmnist::load rejects a label out of range") {
  TempDir d;
  write_gz(d.images(true), images_idx(3));
  write_gz(d.labels(true), labels_idx(3, 0x801, 12));
  const std::string msg = error_of([&] { fmnist::load(d.str(), true); });
  CHECK(contains(msg, d.labels(true).string()));
  CHECK(contains(msg, "label 12 of sample 2 is out of range 0..9"));
  // Within a limit that excludes the bad sample, the prefix loads.
  CHECK(fmnist::load(d.str(), true, 2).labels.size() == 2);
}

TEST_CASE("fmnist::default_dir follows MATOPT_FASHION_MNIST_DIR") {
  const char* old = std::getenv("MATOPT_FASHION_MNIST_DIR");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("MATOPT_FASHION_MNIST_DIR", "/some/where", 1);
  CHECK(fmnist::default_dir() == "/some/where");
  ::unsetenv("MATOPT_FASHION_MNIST_DIR");
  CHECK(fmnist::default_dir() == "/usr/share/datasets/fashion-mnist");
  if (old != nullptr) ::setenv("MATOPT_FASHION_MNIST_DIR", saved.c_str(), 1);
}

TEST_CASE("fmnist::load reads the installed Fashion-MNIST (skipped when absent)") {
  const std::string dir = fmnist::default_dir();
  if (!fs::exists(fs::path(dir) / "train-images-idx3-ubyte.gz")) {
    MESSAGE("Fashion-MNIST not found in " << dir << " (install dataset-fashion-mnist): skipped");
    return;
  }
  const fmnist::Dataset train = fmnist::load(dir, true), test = fmnist::load(dir, false);
  CHECK(train.images.rows() == 60000);
  CHECK(train.labels.size() == 60000);
  CHECK(test.images.rows() == 10000);
  CHECK(test.labels.size() == 10000);
  for (const auto* d : {&train, &test}) {
    CHECK(d->images.minCoeff() >= 0.0f);
    CHECK(d->images.maxCoeff() <= 1.0f);
    std::vector<int> count(10, 0);
    for (int y : d->labels) {
      REQUIRE(y >= 0);
      REQUIRE(y < 10);
      ++count[std::size_t(y)];
    }
    // Fashion-MNIST is balanced: 6000 / 1000 per class.
    for (int c : count) CHECK(c == int(d->labels.size() / 10));
  }
}
