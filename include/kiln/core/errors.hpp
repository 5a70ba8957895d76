/// kiln's exceptions: every failure a user can cause says what, where, and how to fix it.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

/// Base of every exception kiln throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Extents that do not agree at run time (the dynamic batch dimension, or a reshape).
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// A call into CUDA, cuBLAS, cuDNN, NCCL or MPI returned an error.
class BackendError : public Error {
 public:
  using Error::Error;
};

/// An allocation failed even after the allocator released its cache.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

/// Invalid argument (a value out of range, a bad option).
class ValueError : public Error {
 public:
  using Error::Error;
};

/// An element index outside its dimension (Tensor::at, and t[i] / t(i, ...) under KILN_BOUNDS_CHECK).
class IndexError : public Error {
 public:
  using Error::Error;
};

/// A file that cannot be written or read: the message names it and what went wrong (CheckpointError,
/// kiln::write_file_atomically).
class FileError : public Error {
 public:
  using Error::Error;
};

namespace detail {
/// "file:line: call failed: message" for backend failures.
inline std::string backend_message(const char* library, const char* call, const char* file, int line,
                                   int code, const std::string& what) {
  std::ostringstream os;
  os << file << ':' << line << ": " << library << " call `" << call << "` failed with " << code << " ("
     << what << ')';
  return os.str();
}
}  // namespace detail

}  // namespace kiln
