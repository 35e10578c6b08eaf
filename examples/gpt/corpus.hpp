// SPDX-License-Identifier: MIT
#pragma once
// The GPT example's text: the plain-text files of Debian's `fortunes` package (/usr/share/games/fortunes),
// concatenated in sorted name order, as bytes (a 256-symbol vocabulary); the first 90% for training, the
// last 10% for validation. No libtorch here, so that the loader is tested without it.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace gpt {

/// $MATOPT_FORTUNES_DIR, else Debian's folder.
inline std::string default_fortunes_dir() {
  const char* env = std::getenv("MATOPT_FORTUNES_DIR");
  return env != nullptr && *env != '\0' ? env : "/usr/share/games/fortunes";
}

struct Corpus {
  std::string text;                  ///< every file's bytes, in sorted name order
  std::vector<std::string> files;    ///< the names read, in that order
  std::size_t train_bytes = 0;       ///< text[0, train_bytes) trains, the rest validates
  std::string train() const { return text.substr(0, train_bytes); }
  std::string validation() const { return text.substr(train_bytes); }
};

/// Whether `entry` is one of the fortune files: a regular file (not a link) whose name has no extension
/// (the package's .dat index files and .u8 links are skipped).
inline bool is_fortune_file(const std::filesystem::directory_entry& entry) {
  std::error_code ec;
  if (entry.is_symlink(ec) || !entry.is_regular_file(ec)) return false;
  return entry.path().filename().string().find('.') == std::string::npos;
}

/// Reads the corpus from `dir`. Throws std::runtime_error naming the folder when it is missing, holds no
/// fortune file, or when those files are empty.
inline Corpus load_corpus(const std::string& dir, double train_fraction = 0.9) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error("gpt: the fortunes folder '" + dir +
                             "' does not exist (apt-get install fortunes, or set MATOPT_FORTUNES_DIR)");
  Corpus c;
  for (const auto& entry : fs::directory_iterator(dir))
    if (is_fortune_file(entry)) c.files.push_back(entry.path().filename().string());
  std::sort(c.files.begin(), c.files.end());
  if (c.files.empty())
    throw std::runtime_error("gpt: no fortune files in '" + dir + "' (plain files without an extension)");
  for (const auto& name : c.files) {
    std::ifstream in(fs::path(dir) / name, std::ios::binary);
    if (!in) throw std::runtime_error("gpt: cannot read '" + (fs::path(dir) / name).string() + "'");
    c.text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (c.text.empty()) throw std::runtime_error("gpt: the fortune files in '" + dir + "' are empty");
  c.train_bytes = std::size_t(double(c.text.size()) * train_fraction);
  return c;
}

}  // namespace gpt
