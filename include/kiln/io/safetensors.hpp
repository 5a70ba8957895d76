/// Checkpoints as safetensors with PyTorch's state_dict names ("0.weight"), written atomically.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"

namespace kiln {

/// A checkpoint that cannot be written or read back: the message names the file and what is wrong.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// One tensor of a safetensors file: name, dtype ("F32", "F64", "F16", "BF16", "I64"), shape, bytes.
struct SafetensorsEntry {
  std::string dtype;
  std::vector<index_t> shape;
  std::vector<std::uint8_t> bytes;
};

/// safetensors' dtype string for an element type.
template <class T>
constexpr const char* safetensors_dtype() {
  if constexpr (std::is_same_v<T, float>) return "F32";
  else if constexpr (std::is_same_v<T, double>) return "F64";
  else if constexpr (std::is_same_v<T, half>) return "F16";
  else if constexpr (std::is_same_v<T, bfloat16>) return "BF16";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "I64";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "I32";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "U8";
  else return "?";
}

namespace detail {
/// Bytes per element of a safetensors dtype; 0 for one kiln does not know. Every whole-byte dtype of the
/// format reads (a PyTorch checkpoint may carry int8 or bool buffers next to the parameters); kiln's
/// parameters themselves are F32, F64, F16 or BF16.
inline std::size_t dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "U8" || d == "I8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}
inline std::string shape_text(const std::vector<index_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}
/// A JSON value as an error message shows it: its text, cut after 40 characters.
inline std::string json_shown(const nlohmann::json& v) {
  std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}
/// Makes sure `path` reaches the disk (fsync), so that a rename over the old file never leaves an empty
/// one after a power loss.
inline void sync_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const bool ok = fd >= 0 && ::fsync(fd) == 0;
  const int error = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) throw CheckpointError("kiln: cannot flush " + path.string() + " to disk: " + std::strerror(error));
}
}  // namespace detail

/// Writes tensors (sorted by name, as the format asks) and string metadata to `path` atomically: a
/// temporary file in the same folder, flushed to disk, then renamed over `path`. A crash leaves the old
/// file.
inline void write_safetensors(const std::filesystem::path& path, const std::map<std::string, SafetensorsEntry>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  auto header = nlohmann::ordered_json::object();  // "{}" for no tensors, as the reference writer
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, e] : tensors) {
    if (name == "__metadata__") throw CheckpointError("kiln: " + path.string() + ": '__metadata__' cannot name a tensor");
    if (detail::dtype_size(e.dtype) == 0)
      throw CheckpointError("kiln: " + path.string() + ": tensor '" + name + "' has an unsupported dtype \"" + e.dtype + "\"");
    std::size_t n = 1;
    for (index_t d : e.shape) n *= static_cast<std::size_t>(d);
    if (n * detail::dtype_size(e.dtype) != e.bytes.size())
      throw CheckpointError("kiln: " + path.string() + ": tensor '" + name + "' has " +
                            std::to_string(e.bytes.size()) + " bytes but shape " + detail::shape_text(e.shape) +
                            " of " + e.dtype + " needs " + std::to_string(n * detail::dtype_size(e.dtype)));
    header[name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data to 8 bytes, as the reference writer does
  const auto tmp = std::filesystem::path(path.string() + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw CheckpointError("kiln: cannot write " + tmp.string() + ": " + std::strerror(errno));
    const std::uint64_t size = text.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(size >> (8 * i));
    out.write(reinterpret_cast<const char*>(le), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [name, e] : tensors) out.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
    out.close();
    if (!out) {
      std::filesystem::remove(tmp);
      throw CheckpointError("kiln: writing " + tmp.string() + " failed (disk full?)");
    }
  }
  std::error_code ec;
  try {
    detail::sync_file(tmp);
  } catch (...) {
    std::filesystem::remove(tmp, ec);
    throw;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw CheckpointError("kiln: cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message());
  }
}

/// Reads every tensor of a safetensors file, checking the header: its size, JSON, the type of every
/// field, dtypes, that each shape fits its bytes, and that the tensors' bytes are contiguous, in order
/// and inside the file. Errors name the file, the byte offset or tensor, and what was expected.
/// `metadata`, when given, receives the header's "__metadata__" (a map of strings, as the format says).
inline std::map<std::string, SafetensorsEntry> read_safetensors(const std::filesystem::path& path,
                                                                std::map<std::string, std::string>* metadata = nullptr) {
  using nlohmann::json;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("kiln: cannot open " + path.string() + ": " + std::strerror(errno));
  const std::string where = "kiln: " + path.string();
  std::error_code ec;
  const std::uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) throw CheckpointError(where + ": not a readable file: " + ec.message());
  if (file_size < 8) throw CheckpointError(where + ": " + std::to_string(file_size) + " bytes; a safetensors file starts with an 8-byte header size");
  unsigned char le[8];
  in.read(reinterpret_cast<char*>(le), 8);
  std::uint64_t hsize = 0;
  for (int i = 0; i < 8; ++i) hsize |= static_cast<std::uint64_t>(le[i]) << (8 * i);
  if (hsize > file_size - 8 || hsize > (100u << 20))
    throw CheckpointError(where + ": at offset 0: header size " + std::to_string(hsize) + " does not fit the file (" +
                          std::to_string(file_size) + " bytes)");
  std::string text(hsize, '\0');
  in.read(text.data(), static_cast<std::streamsize>(hsize));
  if (!in) throw CheckpointError(where + ": could not read the " + std::to_string(hsize) + "-byte header at offset 8");
  json header;
  try {
    header = json::parse(text);
  } catch (const json::parse_error& e) {
    throw CheckpointError(where + ": header JSON at byte " + std::to_string(8 + e.byte) + ": " + e.what());
  } catch (const json::exception& e) {  // a number too large for any JSON type, say
    throw CheckpointError(where + ": header JSON (bytes 8 to " + std::to_string(8 + hsize) + "): " + e.what());
  }
  if (!header.is_object())
    throw CheckpointError(where + ": the header at offset 8 must be a JSON object, got " + detail::json_shown(header));
  const std::uint64_t data_size = file_size - 8 - hsize;
  std::map<std::string, SafetensorsEntry> out;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const json& v = item.value();  // a reference, not a structured binding: lambdas below capture it
    if (name == "__metadata__") {
      const std::string m = where + ": \"__metadata__\" must map names to strings";
      if (!v.is_object()) throw CheckpointError(m + ", got " + detail::json_shown(v));
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) throw CheckpointError(m + ", got \"" + k + "\": " + detail::json_shown(s));
        if (metadata) (*metadata)[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string t = where + ": tensor '" + name + "'";
    if (!v.is_object())
      throw CheckpointError(t + ": expected an object with dtype, shape and data_offsets, got " + detail::json_shown(v));
    const auto field = [&](const char* key) -> const json& {
      const auto it = v.find(key);
      if (it == v.end()) throw CheckpointError(t + ": no \"" + key + "\" (expected dtype, shape and data_offsets)");
      return *it;
    };
    const json& dtype = field("dtype");
    const json& shape = field("shape");
    const json& offsets = field("data_offsets");
    SafetensorsEntry e;
    if (!dtype.is_string()) throw CheckpointError(t + ": dtype must be a string such as \"F32\", got " + detail::json_shown(dtype));
    e.dtype = dtype.get<std::string>();
    const std::size_t element = detail::dtype_size(e.dtype);
    if (element == 0) throw CheckpointError(t + ": unsupported dtype \"" + e.dtype + "\"");
    // Shape: integers >= 0 whose product times the element size fits the data (no overflow on the way).
    if (!shape.is_array()) throw CheckpointError(t + ": shape must be an array of integers >= 0, got " + detail::json_shown(shape));
    bool empty = false;
    for (const json& d : shape) {
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        throw CheckpointError(t + ": shape entries must be integers >= 0, got " + detail::json_shown(d));
      e.shape.push_back(static_cast<index_t>(d.get<std::uint64_t>()));
      empty = empty || e.shape.back() == 0;
    }
    std::uint64_t n = empty ? 0 : 1;
    for (const index_t d : e.shape) {
      if (empty) break;
      if (n > data_size / element / static_cast<std::uint64_t>(d))
        throw CheckpointError(t + ": shape " + detail::shape_text(e.shape) + " of " + e.dtype + " needs more than the " +
                              std::to_string(data_size) + " data bytes in the file (truncated file?)");
      n *= static_cast<std::uint64_t>(d);
    }
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      throw CheckpointError(t + ": data_offsets must be [begin, end], two integers >= 0, got " + detail::json_shown(offsets));
    const std::uint64_t b = offsets[0].get<std::uint64_t>(), end = offsets[1].get<std::uint64_t>();
    if (b > end || end > data_size)
      throw CheckpointError(t + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(end) +
                            ") outside the " + std::to_string(data_size) + " data bytes (truncated file?)");
    if (end - b != n * element)
      throw CheckpointError(t + ": " + std::to_string(end - b) + " bytes but shape " + detail::shape_text(e.shape) +
                            " of " + e.dtype + " needs " + std::to_string(n * element));
    e.bytes.resize(end - b);
    in.seekg(static_cast<std::streamoff>(8 + hsize + b));
    in.read(reinterpret_cast<char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
    if (!in) throw CheckpointError(t + ": could not read bytes at offset " + std::to_string(8 + hsize + b));
    spans.emplace_back(b, end);
    out.emplace(name, std::move(e));
  }
  std::sort(spans.begin(), spans.end());
  std::uint64_t expect = 0;
  for (const auto& [b, end] : spans) {
    if (b != expect)
      throw CheckpointError(where + ": tensor data must be contiguous: a tensor starts at data byte " +
                            std::to_string(b) + ", expected " + std::to_string(expect));
    expect = end;
  }
  if (expect != data_size)
    throw CheckpointError(where + ": " + std::to_string(data_size - expect) + " bytes after the last tensor");
  return out;
}

/// A count (a step, an epoch) from a checkpoint's string metadata (read_safetensors' `metadata`): a whole
/// number >= 0, or a CheckpointError naming the file, the key and what it held (or that it is missing).
inline std::int64_t metadata_count(const std::map<std::string, std::string>& meta, const std::string& key,
                                   const std::string& path) {
  const auto it = meta.find(key);
  std::int64_t v = -1;
  if (it != meta.end()) {
    const auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
    if (ec != std::errc() || end != it->second.data() + it->second.size()) v = -1;
  }
  if (v < 0)
    throw CheckpointError("kiln: " + path + ": metadata '" + key + "' is " +
                          (it == meta.end() ? std::string("missing") : "'" + it->second + "'") +
                          "; expected a whole number >= 0");
  return v;
}

/// A host vector as an entry.
template <class T>
SafetensorsEntry make_entry(std::span<const T> values, std::vector<index_t> shape) {
  SafetensorsEntry e{safetensors_dtype<T>(), std::move(shape), {}};
  e.bytes.resize(values.size_bytes());
  std::memcpy(e.bytes.data(), values.data(), values.size_bytes());
  return e;
}

/// Saves a model's parameters under PyTorch's state_dict names (plus optional extra entries such as
/// optimizer state, and metadata). Loadable by `safetensors.torch.load_file` + `load_state_dict`.
template <class Model>
void save_checkpoint(const std::filesystem::path& path, const Model& model,
                     std::map<std::string, SafetensorsEntry> extra = {},
                     const std::map<std::string, std::string>& metadata = {}) {
  using M = typename Model::M;
  const std::vector<M> host = model.parameters().to_vector();
  for (const auto& p : model.named_parameters())
    extra[p.name] = make_entry<M>(std::span<const M>(host.data() + p.offset, static_cast<std::size_t>(p.count)), p.shape);
  write_safetensors(path, extra, metadata);
}

/// Loads parameters saved by save_checkpoint or by PyTorch (safetensors.torch.save_file(model.state_dict())).
/// Every parameter must be present with the right dtype and shape; the first difference is reported with
/// the file, the name, and both shapes or dtypes. As torch's load_state_dict(strict=True), an entry named
/// like a parameter (`*.weight`, `*.bias`) that the model does not have is an error too: the checkpoint
/// is of another (deeper, wider) model. Returns the other entries (optimizer state, the caller's own
/// extras).
template <class Model>
std::map<std::string, SafetensorsEntry> load_checkpoint(const std::filesystem::path& path, Model& model,
                                                        std::map<std::string, std::string>* metadata = nullptr) {
  using M = typename Model::M;
  auto entries = read_safetensors(path, metadata);
  std::vector<M> host(static_cast<std::size_t>(model.parameters().numel()));
  for (const auto& p : model.named_parameters()) {
    const auto it = entries.find(p.name);
    if (it == entries.end())
      throw CheckpointError("kiln: " + path.string() + ": missing parameter '" + p.name + "' (shape " +
                            detail::shape_text(p.shape) + ")");
    const auto& e = it->second;
    if (e.dtype != safetensors_dtype<M>())
      throw CheckpointError("kiln: " + path.string() + ": parameter '" + p.name + "' is " + e.dtype + ", expected " +
                            safetensors_dtype<M>());
    if (e.shape != p.shape)
      throw CheckpointError("kiln: " + path.string() + ": parameter '" + p.name + "' has shape " +
                            detail::shape_text(e.shape) + ", the model expects " + detail::shape_text(p.shape));
    std::memcpy(host.data() + p.offset, e.bytes.data(), e.bytes.size());
    entries.erase(it);
  }
  std::string unexpected;
  for (const auto& [name, e] : entries) {
    const auto ends_with = [&](std::string_view s) { return name.size() > s.size() && name.ends_with(s); };
    if (name.starts_with("optimizer.") || !(ends_with(".weight") || ends_with(".bias"))) continue;
    unexpected += (unexpected.empty() ? "'" : ", '") + name + "' " + detail::shape_text(e.shape);
  }
  if (!unexpected.empty())
    throw CheckpointError("kiln: " + path.string() + ": unexpected parameters " + unexpected +
                          ": the model has none of that name; the checkpoint is of another model");
  model.parameters().copy_from(std::span<const M>(host.data(), host.size()));
  return entries;
}

}  // namespace kiln
