// SPDX-License-Identifier: MIT
#pragma once
// Header-only loader for Fashion-MNIST (Xiao, Rasul, Vollgraf 2017, arXiv 1708.07747), which uses the
// MNIST IDX format (LeCun et al.): big-endian u32 magic 0x00000803 (images) / 0x00000801 (labels), then
// the u32 dimensions, then unsigned bytes. The four files are read gzip-compressed through zlib.
//
//   const fmnist::Dataset train = fmnist::load(fmnist::default_dir(), /*train=*/true);
//   // train.images: N x 784 row-major floats in [0, 1]; train.labels: N ints in 0..9
//
// Errors are std::runtime_error naming the file and what is wrong with it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <zlib.h>

namespace fmnist {

constexpr int kRows = 28, kCols = 28, kPixels = kRows * kCols, kClasses = 10;

struct Dataset {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> images;  // N x 784, pixels/255
  std::vector<int> labels;                                                        // N, in 0..9
};

/// $MATOPT_FASHION_MNIST_DIR if set (and non-empty), else where Debian's dataset-fashion-mnist installs it.
inline std::string default_dir() {
  const char* env = std::getenv("MATOPT_FASHION_MNIST_DIR");
  return (env != nullptr && *env != '\0') ? std::string(env) : std::string("/usr/share/datasets/fashion-mnist");
}

namespace detail {

template <class... Args>
[[noreturn]] void fail(const std::string& path, const Args&... args) {
  std::ostringstream os;
  os << "fmnist::load: " << path << ": ";
  (os << ... << args);
  throw std::runtime_error(os.str());
}

/// A gzip file opened for reading; reads exactly n bytes or throws (truncated / not gzip).
class GzFile {
 public:
  explicit GzFile(std::string path) : path_(std::move(path)) {
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0)
      fail(path_, "file not found (the Debian package dataset-fashion-mnist provides it; "
                  "or set MATOPT_FASHION_MNIST_DIR)");
    file_ = gzopen(path_.c_str(), "rb");
    if (file_ == nullptr) fail(path_, "cannot open for reading");
    // gzread passes non-gzip input through unchanged; the IDX data must be compressed, so check the header.
    if (gzdirect(file_) != 0 && st.st_size > 0) {
      gzclose(file_);
      file_ = nullptr;
      fail(path_, "not a gzip file");
    }
  }
  ~GzFile() {
    if (file_ != nullptr) gzclose(file_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  void read(void* dst, std::size_t n, const char* what) {
    auto* out = static_cast<unsigned char*>(dst);
    std::size_t done = 0;
    while (done < n) {
      const std::size_t chunk = std::min<std::size_t>(n - done, 1u << 30);
      const int got = gzread(file_, out + done, static_cast<unsigned>(chunk));
      if (got < 0) {
        int code = 0;
        const char* msg = gzerror(file_, &code);
        fail(path_, "corrupt or truncated gzip data while reading ", what, " (zlib: ", msg, ")");
      }
      if (got == 0)
        fail(path_, "truncated: ", what, " needs ", n, " bytes but only ", done, " could be read");
      done += static_cast<std::size_t>(got);
    }
  }
  std::uint32_t read_u32(const char* what) {
    unsigned char b[4];
    read(b, 4, what);
    return (std::uint32_t(b[0]) << 24) | (std::uint32_t(b[1]) << 16) | (std::uint32_t(b[2]) << 8) |
           std::uint32_t(b[3]);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

inline std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace detail

/// Loads the training (60000) or test (10000) split from `dir`; limit > 0 keeps the first `limit` samples.
inline Dataset load(const std::string& dir, bool train, std::size_t limit = 0) {
  const std::string prefix = train ? "train" : "t10k";
  detail::GzFile img(detail::join(dir, prefix + "-images-idx3-ubyte.gz"));
  detail::GzFile lab(detail::join(dir, prefix + "-labels-idx1-ubyte.gz"));

  const std::uint32_t img_magic = img.read_u32("the magic number");
  if (img_magic != 0x00000803u)
    detail::fail(img.path(), "bad magic number 0x", std::hex, img_magic, " (expected 0x803, IDX unsigned-byte 3-D)");
  const std::uint32_t n_img = img.read_u32("the image count");
  const std::uint32_t rows = img.read_u32("the row count"), cols = img.read_u32("the column count");
  if (rows != std::uint32_t(kRows) || cols != std::uint32_t(kCols))
    detail::fail(img.path(), "images are ", rows, "x", cols, ", expected ", kRows, "x", kCols);

  const std::uint32_t lab_magic = lab.read_u32("the magic number");
  if (lab_magic != 0x00000801u)
    detail::fail(lab.path(), "bad magic number 0x", std::hex, lab_magic, " (expected 0x801, IDX unsigned-byte 1-D)");
  const std::uint32_t n_lab = lab.read_u32("the label count");
  if (n_img != n_lab)
    detail::fail(lab.path(), "holds ", n_lab, " labels but ", img.path(), " holds ", n_img, " images");

  const std::size_t n = (limit > 0 && limit < n_img) ? limit : std::size_t(n_img);
  Dataset d;
  std::vector<unsigned char> bytes(n * std::size_t(kPixels));
  img.read(bytes.data(), bytes.size(), "the pixel data");
  d.images.resize(Eigen::Index(n), kPixels);
  const float inv = 1.0f / 255.0f;
  for (std::size_t i = 0; i < bytes.size(); ++i) d.images.data()[i] = float(bytes[i]) * inv;

  std::vector<unsigned char> lb(n);
  lab.read(lb.data(), n, "the label data");
  d.labels.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (lb[i] >= kClasses)
      detail::fail(lab.path(), "label ", int(lb[i]), " of sample ", i, " is out of range 0..", kClasses - 1);
    d.labels[i] = lb[i];
  }
  return d;
}

}  // namespace fmnist
