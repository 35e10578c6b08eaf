// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Checkpoints of optimizer state: versioned, checksummed, all-or-nothing save_checkpoint() and load_checkpoint().
// Checkpoints of optimizer state (docs/checkpoints.md). Any optimizer with per-parameter states (every preset and
// composition, AdamW), and the hybrid container (optionally with the parameters' values):
//
//   std::vector<matopt::Muon<float>::State> states = ...;      // made by make_state for the current model
//   matopt::save_checkpoint("opt.ckpt", muon, states);           // atomic: temporary file, fsync, rename
//   matopt::load_checkpoint("opt.ckpt", muon, states);           // all or nothing
//   matopt::save_checkpoint("model.ckpt", hybrid, /*parameters=*/true);  // hybrid_optimizer.hpp
//
// File: a 40-byte header, then the payload (archive.hpp):
//   magic "MATOPTCK" | version u32 | byte-order mark u32 0x01020304 | scalar bytes u32 | reserved u32 |
//   payload bytes u64 | FNV-1a 64 checksum of the payload u64
//   payload: identity string (optimizer and policies) | state count u64 | each state's fields
// Loading reads the whole file, checks the header, size and checksum, then restores into copies of the live
// states (whose shapes must match the file's) and moves them in only when everything has been read.
// Options (lr, schedules, ...) are configuration, not state: construct the optimizer as before.

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <unistd.h>
#define MATOPT_POSIX_FILES 1
#endif

#include "matopt/serialization/archive.hpp"

namespace matopt {

/// Version of the checkpoint format this build writes; a file of another version is refused.
inline constexpr std::uint32_t checkpoint_version = 1;

namespace detail {

inline constexpr char checkpoint_magic[8] = {'M', 'A', 'T', 'O', 'P', 'T', 'C', 'K'};
inline constexpr std::size_t checkpoint_header_bytes = 40;

/// FNV-1a, 64 bits, of n bytes; `h` continues an earlier hash (default: the offset basis, a new hash).
inline std::uint64_t fnv1a64(const char* p, std::size_t n, std::uint64_t h = 14695981039346656037ull) {
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 1099511628211ull;
  }
  return h;
}

/// Header + payload.
inline std::string seal(const std::string& payload, std::uint32_t scalar_bytes) {
  Writer h;
  h.bytes(checkpoint_magic, sizeof checkpoint_magic);
  h.pod(checkpoint_version);
  h.pod(std::uint32_t(0x01020304));
  h.pod(scalar_bytes);
  h.pod(std::uint32_t(0));
  h.pod(std::uint64_t(payload.size()));
  h.pod(fnv1a64(payload.data(), payload.size()));
  return h.data() + payload;
}

/// Checks a whole file's header, size and checksum; returns a reader over its payload.
inline Reader unseal(const std::string& file, std::uint32_t scalar_bytes) {
  Reader r(file.data(), file.size());
  if (file.size() < checkpoint_header_bytes)
    Reader::fail("truncated: ", file.size(), " bytes, shorter than the ", checkpoint_header_bytes, "-byte header");
  if (std::memcmp(file.data(), checkpoint_magic, sizeof checkpoint_magic) != 0)
    Reader::fail("not a matopt checkpoint (bad magic)");
  r.pod<std::uint64_t>("the magic");
  const auto version = r.pod<std::uint32_t>("the version");
  if (version != checkpoint_version)
    Reader::fail("version ", version, " is not supported (this build reads version ", checkpoint_version, ")");
  if (r.pod<std::uint32_t>("the byte-order mark") != 0x01020304u)
    Reader::fail("written on a machine of another byte order");
  const auto scalar = r.pod<std::uint32_t>("the scalar size");
  if (scalar != scalar_bytes)
    Reader::fail("scalar type mismatch: the file holds ", scalar == 4 ? "float" : scalar == 8 ? "double" : "unknown",
                 " state (", scalar, " bytes) but the optimizer is ", scalar_bytes == 4 ? "float" : "double");
  if (const auto reserved = r.pod<std::uint32_t>("the reserved word"); reserved != 0)
    Reader::fail("the reserved header word is ", reserved, ", not 0: not a file this version wrote");
  const auto size = r.pod<std::uint64_t>("the payload size");
  const auto sum = r.pod<std::uint64_t>("the checksum");
  if (size != r.left())
    Reader::fail(size > r.left() ? "truncated: " : "trailing bytes: ", "the header announces ", size,
                 " payload bytes but the file has ", r.left());
  const char* payload = file.data() + checkpoint_header_bytes;
  if (fnv1a64(payload, std::size_t(size)) != sum) Reader::fail("checksum mismatch: the file is corrupted");
  return Reader(payload, std::size_t(size));
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, flushed to disk, renamed over `path`.
/// A crash leaves either the old file or the new one (and perhaps a stray temporary), never a mix.
inline void write_file_atomically(const std::string& path, const std::string& bytes) {
#ifdef MATOPT_POSIX_FILES
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  auto fail = [&](const char* what) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw std::runtime_error("matopt checkpoint: cannot " + std::string(what) + " '" + tmp + "': " + err);
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ::ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      fail("write");
    }
    done += std::size_t(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("flush");
  }
  if (::close(fd) != 0) fail("close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename into place");
  // Make the rename itself durable.
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
#else
  const std::string tmp = path + ".tmp";
  {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    os.write(bytes.data(), std::streamsize(bytes.size()));
    os.flush();
    if (!os) throw std::runtime_error("matopt checkpoint: cannot write '" + tmp + "'");
  }
  std::remove(path.c_str());
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("matopt checkpoint: cannot rename '" + tmp + "' to '" + path + "'");
#endif
}

inline std::string read_stream(std::istream& is) {
  return std::string(std::istreambuf_iterator<char>(is), std::istreambuf_iterator<char>());
}
inline std::string read_file(const std::string& path) {
  std::ifstream is(path, std::ios::binary);
  if (!is) throw CheckpointError("matopt checkpoint: cannot open '" + path + "'");
  return read_stream(is);
}

template <class Opt, class State>
std::string checkpoint_bytes(const Opt& opt, const State* states, std::size_t count) {
  Writer w;
  w.string(opt.identity());
  w.pod(std::uint64_t(count));
  for (std::size_t i = 0; i < count; ++i) w.state(states[i]);
  return seal(w.data(), sizeof(typename Opt::Scalar));
}

template <class Opt, class State>
void restore_checkpoint(const std::string& file, const Opt& opt, State* states, std::size_t count) {
  Reader r = unseal(file, sizeof(typename Opt::Scalar));
  const std::string id = r.string("the optimizer identity");
  if (id != opt.identity())
    Reader::fail("written by optimizer '", id, "' but loaded into '", opt.identity(), "'");
  const auto n = r.pod<std::uint64_t>("the state count");
  if (n != count) Reader::fail("the file holds ", n, " parameter states but ", count, " were given");
  std::vector<State> loaded(states, states + count);  // the live states stay untouched until the end
  for (auto& s : loaded) r.state(s);
  if (r.left() != 0) Reader::fail(r.left(), " unread bytes after the last state");
  for (std::size_t i = 0; i < count; ++i) states[i] = std::move(loaded[i]);
}

}  // namespace detail

/// Writes the states of `opt`'s parameters, in order, to a stream or (atomically) to a file.
template <class Opt>
void save_checkpoint(std::ostream& os, const Opt& opt, const std::vector<typename Opt::State>& states) {
  const std::string bytes = detail::checkpoint_bytes(opt, states.data(), states.size());
  os.write(bytes.data(), std::streamsize(bytes.size()));
  if (!os) throw std::runtime_error("matopt checkpoint: the stream failed while writing");
}
/// Writes the states to the file `path` atomically (a temporary file, fsync, rename).
template <class Opt>
void save_checkpoint(const std::string& path, const Opt& opt, const std::vector<typename Opt::State>& states) {
  detail::write_file_atomically(path, detail::checkpoint_bytes(opt, states.data(), states.size()));
}
/// Writes one parameter's state to the file `path` atomically.
template <class Opt>
void save_checkpoint(const std::string& path, const Opt& opt, const typename Opt::State& state) {
  detail::write_file_atomically(path, detail::checkpoint_bytes(opt, &state, 1));
}

/// Restores states saved by save_checkpoint into `states`, which must have been made (make_state) for
/// parameters of the same shapes and layouts. Throws CheckpointError and leaves `states` unchanged if the
/// file is truncated, corrupted, of another version, scalar type or optimizer, or for other shapes.
template <class Opt>
void load_checkpoint(std::istream& is, const Opt& opt, std::vector<typename Opt::State>& states) {
  detail::restore_checkpoint(detail::read_stream(is), opt, states.data(), states.size());
}
/// Restores the states from the file `path` (see the stream overload).
template <class Opt>
void load_checkpoint(const std::string& path, const Opt& opt, std::vector<typename Opt::State>& states) {
  detail::restore_checkpoint(detail::read_file(path), opt, states.data(), states.size());
}
/// Restores one parameter's state from the file `path` (see the stream overload).
template <class Opt>
void load_checkpoint(const std::string& path, const Opt& opt, typename Opt::State& state) {
  detail::restore_checkpoint(detail::read_file(path), opt, &state, 1);
}

}  // namespace matopt
