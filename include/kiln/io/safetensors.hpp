/// Checkpoints as safetensors with PyTorch's state_dict names ("0.weight"), written atomically.
#pragma once

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/errors.hpp"
#include "kiln/core/half.hpp"
#include "kiln/core/index.hpp"
#include "kiln/core/nan.hpp"
#include "kiln/core/number_text.hpp"
#include "kiln/io/atomic_file.hpp"

namespace kiln {

/// A checkpoint that cannot be written or read back: the message names the file and what is wrong.
class CheckpointError : public FileError {
 public:
  using FileError::FileError;
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
  else if constexpr (std::is_same_v<T, bool>) return "BOOL";
  else return "?";
}

namespace detail {
/// A byte for a message: 'c' when printable ASCII, else its value (0xEF).
inline std::string byte_shown(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
  const char* hex = "0123456789ABCDEF";
  return std::string("0x") + hex[u >> 4] + hex[u & 15];
}
/// The largest header the reader takes (bytes; the reference reader's limit), how deep its JSON may
/// nest (a header needs 3) and how many items an array in it may hold (a header's arrays are shapes and
/// data_offsets: 64 dimensions, numpy's limit, are more than any tensor has).
inline constexpr std::uint64_t max_header_size = 100'000'000;
inline constexpr int max_header_depth = 16;
inline constexpr std::size_t max_header_array = 64;

/// What json_scan found: the byte offset in the text of the first '[' or '{' that opens the (depth + 1)-th
/// nested container, or of the first ',' past an array's `items`-th item (npos: neither), and which.
struct JsonScan {
  std::size_t at = std::string_view::npos;
  bool too_deep = false;
};
/// One linear scan of `text` (JSON) outside strings, so that a header is refused with the byte where it
/// goes past what a header is, before it is parsed: nesting deeper than `depth`, or an array of more
/// than `items` items (a shape of ten million zeros is 20 MB of text and half a gigabyte parsed).
inline JsonScan json_scan(std::string_view text, int depth, std::size_t items) {
  constexpr int deepest = 64;  // the containers tracked (depth is at most this)
  bool is_array[deepest + 1] = {};
  std::size_t count[deepest + 1] = {};
  int level = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++level > depth || level > deepest) return {i, true};
      is_array[level] = c == '[';
      count[level] = 1;  // items so far: the first (an empty array never reaches a ',')
    } else if (c == ']' || c == '}') {
      if (level > 0) --level;
    } else if (c == ',' && level > 0 && is_array[level]) {
      if (++count[level] > items) return {i, false};
    }
  }
  return {};
}
/// The safetensors dtypes kiln reads, with their bytes per element, in the reference writer's order of
/// rank (safetensors' Dtype enum): every whole-byte dtype of the format (a PyTorch checkpoint may carry
/// int8 or bool buffers next to the parameters); kiln's parameters themselves are F32, F64, F16 or BF16.
struct DtypeSize {
  const char* name;
  std::size_t bytes;
};
inline constexpr DtypeSize dtype_sizes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                                            {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                                            {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
/// The reference writer's rank of a dtype: its data goes highest rank first, so each tensor starts at a
/// multiple of its element size. -1 for a dtype kiln does not know.
inline int dtype_rank(const std::string& d) {
  for (int k = 0; k < static_cast<int>(std::size(dtype_sizes)); ++k)
    if (d == dtype_sizes[k].name) return k;
  return -1;
}
/// Bytes per element of a safetensors dtype; 0 for one kiln does not know.
inline std::size_t dtype_size(const std::string& d) {
  const int k = dtype_rank(d);
  return k < 0 ? 0 : dtype_sizes[k].bytes;
}
/// The dtypes dtype_size knows, for error messages, widest first: "U64, I64, F64, F32, ...".
inline std::string known_dtypes() {
  std::string text;
  for (auto t = std::rbegin(dtype_sizes); t != std::rend(dtype_sizes); ++t)
    text += (text.empty() ? "" : ", ") + std::string(t->name);
  return text;
}
/// x as an int64, the range's end where x is past it (a float count of 2^63 from a loaded checkpoint:
/// the plain conversion is undefined there).
template <class M>
std::int64_t saturating_int64(M x) {
  constexpr auto lo = std::numeric_limits<std::int64_t>::min(), hi = std::numeric_limits<std::int64_t>::max();
  if (!(x < static_cast<M>(hi))) return kiln::detail::is_nan(x) ? 0 : hi;  // (2^63 as M; NaN: none counted)
  if (x < static_cast<M>(lo)) return lo;
  return static_cast<std::int64_t>(x);
}
inline std::string shape_text(const std::vector<index_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}
/// Appends v's JSON text to `text` until it holds more than 40 characters: each array or object level
/// adds at least one, so a header nested a million deep recurses about 40 levels (json::dump would
/// recurse through all of them and overflow the stack).
inline void json_shown_into(const nlohmann::json& v, std::string& text) {
  if (text.size() > 40) return;
  if (!v.is_structured()) {
    text += v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  text += v.is_array() ? '[' : '{';
  bool first = true;
  for (auto it = v.begin(); it != v.end() && text.size() <= 40; ++it, first = false) {
    if (!first) text += ',';
    if (v.is_object()) text += nlohmann::json(it.key()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + ':';
    json_shown_into(*it, text);
  }
  text += v.is_array() ? ']' : '}';
}
/// A name from a file as an error message shows it: control characters (a NUL would end the message
/// where C strings read it) as JSON writes them, \u0000; the rest, UTF-8 included, as it is.
inline std::string name_shown(std::string_view name) {
  std::string text;
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      text += c;
      continue;
    }
    const char* hex = "0123456789abcdef";
    text += std::string("\\u00") + hex[u >> 4] + hex[u & 15];
  }
  return text;
}

/// The header's JSON, built by a SAX pass only as far as a safetensors header goes, so that what it
/// costs in memory follows what it holds (nlohmann's parser builds any JSON, at up to 27 times its
/// text: 100 MB of `{},` would take 2.7 GB):
/// - the object of entries; each entry's "dtype", "shape" and "data_offsets" (its other fields are
///   skipped unbuilt, as the reference reader ignores them); "__metadata__"'s strings;
/// - of the first container where a header has none (a shape's entry, a metadata value, an entry that
///   is an array: "junk"), what an error message shows of it (json_shown's 40 characters: at most 48
///   values), with `junk_entry`, its top-level key, so that the reader reports it first; later junk is
///   skipped (the header is refused at the first);
/// - of a key an object gives twice, the first value, and `twice` says which key and where (nlohmann's
///   parser keeps the last, and so would take the second of two entries for one tensor).
/// A JSON error leaves `error_byte` (from 0) and `error`.
class HeaderBuilder {
 public:
  using json = nlohmann::json;
  json root;
  std::string twice;                      ///< the first key repeated, and where ("": none)
  std::optional<std::string> junk_entry;  ///< the top-level key of the first junk ("" for the root)
  std::size_t error_byte = 0;
  std::string error;

  bool null() { return value(json(nullptr)); }
  bool boolean(bool b) { return value(json(b)); }
  bool number_integer(json::number_integer_t v) { return value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return value(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return value(json(v)); }
  bool string(json::string_t& s) { return value(json(std::move(s))); }
  bool binary(json::binary_t&) { return true; }  // (not in JSON text)
  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    if (skipping_ > 0) return true;
    Frame& f = open_.back();
    if (f.value == nullptr) return true;  // (junk not built)
    const bool unknown = f.kind == Kind::entry && k != "dtype" && k != "shape" && k != "data_offsets";
    const bool repeated = !unknown && f.value->contains(k);
    if (repeated && twice.empty()) twice = twice_text(k);
    if (unknown || repeated) {
      skip_next_ = true;  // a field the format does not have, or a repeated key (the first stays)
      return true;
    }
    f.key = std::move(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    const auto* p = dynamic_cast<const json::parse_error*>(&e);
    error_byte = p != nullptr && p->byte > 0 ? p->byte - 1 : position;
    error = e.what();
    return false;
  }

 private:
  enum class Kind { root, entry, metadata, field, junk };
  struct Frame {
    json* value;  // null: not built (junk past what is shown)
    Kind kind;
    std::string key;  // an object's last key: the one whose value is open
  };
  static constexpr int junk_shown = 48;

  /// What a container opened here is: the part of a header this place holds, or junk.
  Kind kind_here(bool object) const {
    if (open_.empty()) return object ? Kind::root : Kind::junk;
    const Frame& f = open_.back();
    if (f.kind == Kind::root) return !object ? Kind::junk : f.key == "__metadata__" ? Kind::metadata : Kind::entry;
    if (f.kind == Kind::entry) return !object && f.key != "dtype" ? Kind::field : Kind::junk;
    return Kind::junk;
  }
  bool in_junk() const { return !open_.empty() && open_.back().kind == Kind::junk; }
  /// Whether a value inside junk is built: its container is, and values are left to show.
  bool built_in_junk() { return open_.back().value != nullptr && junk_left_-- > 0; }
  /// The value's place in the open container (its last key's, or the array's next), or the root.
  json* slot(json v) {
    if (open_.empty()) return &(root = std::move(v));
    json& c = *open_.back().value;
    if (c.is_object()) return &(c[open_.back().key] = std::move(v));
    c.push_back(std::move(v));
    return &c.back();
  }
  bool value(json v) {
    if (skipping_ > 0) return true;
    if (skip_next_) {
      skip_next_ = false;
      return true;
    }
    if (!in_junk() || built_in_junk()) (void)slot(std::move(v));
    return true;
  }
  bool open(bool object) {
    if (skipping_ > 0 || skip_next_) {
      skip_next_ = false;
      ++skipping_;
      return true;
    }
    const Kind kind = kind_here(object);
    json* v = nullptr;
    if (kind != Kind::junk || (in_junk() && built_in_junk())) {
      v = slot(object ? json::object() : json::array());
    } else if (!in_junk()) {  // junk starts here
      if (junk_entry) {       // not the first: skipped
        ++skipping_;
        return true;
      }
      junk_entry = open_.empty() ? std::string() : open_.front().key;
      junk_left_ = junk_shown - 1;
      v = slot(object ? json::object() : json::array());
    }
    open_.push_back({v, kind, {}});
    return true;
  }
  bool close() {
    if (skipping_ > 0)
      --skipping_;
    else
      open_.pop_back();
    return true;
  }
  std::string twice_text(const std::string& k) const {
    const std::string shown = "\"" + name_shown(k) + "\"";
    if (open_.size() == 1 && open_[0].kind == Kind::root)
      return k == "__metadata__" ? "two \"__metadata__\" entries"
                                 : "two entries for tensor '" + name_shown(k) + "'; a name must be unique";
    if (open_.size() == 2 && open_[0].kind == Kind::root)
      return (open_[0].key == "__metadata__" ? std::string("\"__metadata__\"")
                                             : "tensor '" + name_shown(open_[0].key) + "'") +
             " has " + shown + " twice";
    return "the key " + shown + " twice in one object";
  }

  std::vector<Frame> open_;
  int skipping_ = 0;        // the depth inside a skipped container
  bool skip_next_ = false;  // the next value is skipped (its key was)
  int junk_left_ = 0;
};

/// A JSON value as an error message shows it: its text, cut after 40 characters.
inline std::string json_shown(const nlohmann::json& v) {
  std::string text;
  json_shown_into(v, text);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

}  // namespace detail

/// Writes tensors and string metadata to `path` atomically: a temporary file of this writer's own in the
/// same folder (`path`.tmp.<pid>.<k>), flushed to disk, then renamed over `path`. A crash leaves the old
/// file (and may leave the temporary one); two processes saving to one path each publish a complete
/// file (the last rename wins); an error removes the temporary file. Tensors are laid out as the
/// reference writer lays them out: by dtype (safetensors' order, largest elements first), then by name,
/// the header in the same order.
inline void write_safetensors(const std::filesystem::path& path, const std::map<std::string, SafetensorsEntry>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  if (path.empty()) throw CheckpointError("kiln: cannot write a checkpoint to \"\": the path is empty");
  auto header = nlohmann::ordered_json::object();  // "{}" for no tensors, as the reference writer
  if (!metadata.empty()) header["__metadata__"] = metadata;
  // By dtype rank, highest first, then by name (stable: the map is sorted by name).
  std::vector<const std::pair<const std::string, SafetensorsEntry>*> order;
  for (const auto& item : tensors) order.push_back(&item);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return detail::dtype_rank(a->second.dtype) > detail::dtype_rank(b->second.dtype);
  });
  std::uint64_t offset = 0;
  for (const auto* item : order) {
    const auto& [name, e] = *item;
    if (name == "__metadata__") throw CheckpointError("kiln: " + path.string() + ": '__metadata__' cannot name a tensor");
    if (detail::dtype_size(e.dtype) == 0)
      throw CheckpointError("kiln: " + path.string() + ": tensor '" + name + "' has an unsupported dtype \"" + e.dtype + "\"");
    // Every extent >= 0 and their product (in bytes) representable, or the reader would refuse the file.
    bool invalid = false, empty = false;
    for (index_t d : e.shape) {
      invalid |= d < 0;
      empty |= d == 0;
    }
    std::size_t n = empty ? 0 : 1;
    const std::size_t limit = std::numeric_limits<std::size_t>::max() / detail::dtype_size(e.dtype);
    for (std::size_t k = 0; !invalid && !empty && k < e.shape.size(); ++k) {
      invalid = n > limit / static_cast<std::size_t>(e.shape[k]);
      n *= static_cast<std::size_t>(e.shape[k]);
    }
    if (invalid)
      throw CheckpointError("kiln: " + path.string() + ": tensor '" + name + "' has shape " +
                            detail::shape_text(e.shape) +
                            "; expected extents >= 0 whose product memory can address");
    if (n * detail::dtype_size(e.dtype) != e.bytes.size())
      throw CheckpointError("kiln: " + path.string() + ": tensor '" + name + "' has " +
                            std::to_string(e.bytes.size()) + " bytes but shape " + detail::shape_text(e.shape) +
                            " of " + e.dtype + " needs " + std::to_string(n * detail::dtype_size(e.dtype)));
    header[name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or metadata value that is not UTF-8 (JSON is)
    throw CheckpointError("kiln: " + path.string() + ": cannot write the header: " + e.what() +
                          "; tensor names and metadata must be UTF-8 text");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data to 8 bytes, as the reference writer does
  const std::uint64_t size = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(size >> (8 * i));
  // The file a link names is replaced (the link stays), as write_file_atomically does; no in-place
  // fallback here: a checkpoint is replaced whole or not at all.
  const auto target = detail::atomic_target(path);
  if (!target) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);  // through links
    const char* what = ec.value() == ELOOP                      ? "a loop of symbolic links"
                       : std::filesystem::is_directory(status) ? "a directory"
                                                               : "not a regular file (a pipe or a device?)";
    throw CheckpointError("kiln: " + path.string() + ": " + what +
                          "; a checkpoint is written to a temporary file next to it and renamed over it");
  }
  try {
    detail::TempFile tmp(*target);
    tmp.write(le, 8);
    tmp.write(text.data(), text.size());
    for (const auto* item : order) tmp.write(item->second.bytes.data(), item->second.bytes.size());
    tmp.commit(*target);
  } catch (const FileError& e) {
    throw CheckpointError(e.what());
  }
}

/// Reads every tensor of a safetensors file, checking the header: its size, JSON, the type of every
/// field, dtypes, that each shape fits its bytes, and that the tensors' bytes are contiguous, in order
/// and inside the file. Errors name the file, the byte offset or tensor, and what was expected.
/// `metadata`, when given, receives the header's "__metadata__" (a map of strings, as the format says),
/// replacing what it held, once the whole file has been read (a file that fails leaves it as it was).
inline std::map<std::string, SafetensorsEntry> read_safetensors(const std::filesystem::path& path,
                                                                std::map<std::string, std::string>* metadata = nullptr) {
  using nlohmann::json;
  const std::string where = "kiln: " + path.string();
  if (path.empty()) throw CheckpointError("kiln: cannot open \"\": the path is empty; expected the path of a safetensors file");
  // Checked before opening: opening a pipe would wait for a writer.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status))
    throw CheckpointError("kiln: cannot open " + path.string() + ": " + (ec ? ec.message() : "no such file"));
  if (!std::filesystem::is_regular_file(status))
    throw CheckpointError(where + ": " +
                          (std::filesystem::is_directory(status) ? "a directory" : "not a regular file (a pipe or a device?)") +
                          "; expected a safetensors file");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    throw CheckpointError("kiln: cannot open " + path.string() + ": " + std::strerror(error));
  }
  // The size of the file opened (a checkpoint renamed over `path` since then is another file).
  in.seekg(0, std::ios::end);
  const std::streamoff end_of_file = in.tellg();
  in.seekg(0);
  if (!in || end_of_file < 0) throw CheckpointError(where + ": cannot tell the size of the file");
  const auto file_size = static_cast<std::uint64_t>(end_of_file);
  if (file_size < 8) throw CheckpointError(where + ": " + std::to_string(file_size) + " bytes; a safetensors file starts with an 8-byte header size");
  unsigned char le[8];
  in.read(reinterpret_cast<char*>(le), 8);
  std::uint64_t hsize = 0;
  for (int i = 0; i < 8; ++i) hsize |= static_cast<std::uint64_t>(le[i]) << (8 * i);
  if (hsize > file_size - 8) {
    // What the first bytes are when they are no header size: torch.save's zip (.pt, .pth) or its
    // legacy pickle (protocol 2 or more), the files a PyTorch user has most often.
    const bool zip = le[0] == 'P' && le[1] == 'K' && le[2] == 3 && le[3] == 4;
    const bool pickle = le[0] == 0x80 && le[1] >= 2 && le[1] <= 5;
    const char* save_it = "; save a state_dict as safetensors in Python: "
                          "safetensors.torch.save_file(model.state_dict(), path)";
    throw CheckpointError(where + ": at offset 0: header size " + std::to_string(hsize) + " does not fit the file (" +
                          std::to_string(file_size) + " bytes): " +
                          (zip      ? std::string("a zip archive, as torch.save writes (.pt, .pth), not safetensors") + save_it
                           : pickle ? std::string("a pickle, as torch.save's legacy format writes, not safetensors") + save_it
                                    : std::string("not a safetensors file, or a truncated one")));
  }
  if (hsize > detail::max_header_size)  // the reference reader's limit
    throw CheckpointError(where + ": at offset 0: header size " + std::to_string(hsize) + " is over the " +
                          std::to_string(detail::max_header_size) + " bytes a safetensors header may have");
  std::string text(hsize, '\0');
  in.read(text.data(), static_cast<std::streamsize>(hsize));
  if (!in) throw CheckpointError(where + ": could not read the " + std::to_string(hsize) + "-byte header at offset 8");
  // nlohmann's parser takes a NUL byte for the end of its input, so JSON, a NUL and anything after it
  // would pass; the reference reader (serde_json) refuses trailing bytes, and so does this one.
  if (const std::size_t nul = text.find('\0'); nul != std::string::npos)
    throw CheckpointError(where + ": header JSON at byte " + std::to_string(8 + nul) +
                          ": a NUL byte; the header is UTF-8 JSON padded with spaces");
  // A header nests three deep (the object, an entry, its shape); a deeper one is refused before it is
  // parsed, as it would cost memory (100 MB of '[' would build gigabytes of nested arrays).
  if (const auto scan = detail::json_scan(text, detail::max_header_depth, detail::max_header_array);
      scan.at != std::string::npos)
    throw CheckpointError(where + ": header JSON at byte " + std::to_string(8 + scan.at) +
                          (scan.too_deep
                               ? " nests deeper than " + std::to_string(detail::max_header_depth) +
                                     " levels; a safetensors header is an object of tensor entries"
                               : ": an array of more than " + std::to_string(detail::max_header_array) +
                                     " items; a header's arrays are shapes and data_offsets"));
  // Built as far as a header goes (detail::HeaderBuilder): fields the format does not have cost nothing.
  detail::HeaderBuilder built;
  try {
    if (!json::sax_parse(text, &built))
      throw CheckpointError(where + ": header JSON at byte " + std::to_string(8 + built.error_byte) + ": " + built.error);
  } catch (const std::bad_alloc&) {
    throw CheckpointError(where + ": the " + std::to_string(hsize) + "-byte header JSON does not fit in memory");
  } catch (const json::exception& e) {
    throw CheckpointError(where + ": header JSON (bytes 8 to " + std::to_string(8 + hsize) + "): " + e.what());
  }
  const json& header = built.root;
  if (!header.is_object())
    throw CheckpointError(where + ": the header at offset 8 must be a JSON object, got " + detail::json_shown(header));
  if (!built.twice.empty())
    throw CheckpointError(where + ": header JSON (bytes 8 to " + std::to_string(8 + hsize) + "): " + built.twice);
  // The reference reader (serde_json) takes JSON's whitespace before the object, and nothing else: no
  // byte-order mark (which nlohmann's parser skips).
  const std::size_t start = text.find_first_not_of(" \t\n\r");
  if (start == std::string::npos || text[start] != '{') {
    const std::size_t at = std::min(start, text.size() - 1);  // (text is not empty: the JSON parsed)
    throw CheckpointError(where + ": header JSON at byte " + std::to_string(8 + at) + ": " + detail::byte_shown(text[at]) +
                          "; expected '{', the start of the header object (only spaces, tabs and line breaks "
                          "before it; no byte-order mark)");
  }
  const std::uint64_t data_size = file_size - 8 - hsize;
  // Every entry is checked, and the spans together, before any data is read: a header that claims the
  // same bytes many times costs no memory.
  std::map<std::string, SafetensorsEntry> out;
  struct Span {
    std::uint64_t begin, end;
    const std::string* name;
    bool operator<(const Span& o) const { return begin != o.begin ? begin < o.begin : end < o.end; }
  };
  std::vector<Span> spans;
  struct Read {
    SafetensorsEntry* entry;
    std::uint64_t begin, end;  // data offsets
  };
  std::vector<Read> reads;
  std::map<std::string, std::string> read_metadata;
  // The entry that holds the first junk first (detail::HeaderBuilder: it is refused, as it shows).
  std::vector<json::const_iterator> order;
  order.reserve(header.size());
  const auto junk = built.junk_entry ? header.find(*built.junk_entry) : header.end();
  if (junk != header.end()) order.push_back(junk);
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it != junk) order.push_back(it);
  for (const auto& item : order) {
    const std::string& name = item.key();
    const json& v = item.value();  // a reference, not a structured binding: lambdas below capture it
    if (name == "__metadata__") {
      const std::string m = where + ": \"__metadata__\" must map names to strings";
      if (v.is_null()) continue;  // as the reference reader (an optional map)
      if (!v.is_object()) throw CheckpointError(m + ", got " + detail::json_shown(v));
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) throw CheckpointError(m + ", got \"" + detail::name_shown(k) + "\": " + detail::json_shown(s));
        read_metadata[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string t = where + ": tensor '" + detail::name_shown(name) + "'";
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
    if (element == 0)
      throw CheckpointError(t + ": unsupported dtype \"" + detail::name_shown(e.dtype.substr(0, 40)) + "\" (kiln reads " +
                            detail::known_dtypes() + ")");
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
    if (b > end)
      throw CheckpointError(t + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(end) +
                            "] end before they begin; expected [begin, end] with begin <= end");
    if (end > data_size)
      throw CheckpointError(t + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(end) +
                            ") outside the " + std::to_string(data_size) + " data bytes (truncated file?)");
    if (end - b != n * element)
      throw CheckpointError(t + ": " + std::to_string(end - b) + " bytes but shape " + detail::shape_text(e.shape) +
                            " of " + e.dtype + " needs " + std::to_string(n * element));
    const auto placed = out.emplace(name, std::move(e)).first;
    spans.push_back({b, end, &placed->first});
    reads.push_back({&placed->second, b, end});
  }
  std::sort(spans.begin(), spans.end());
  std::uint64_t expect = 0;
  const std::string* previous = nullptr;
  for (const Span& span : spans) {
    if (span.begin != expect)
      throw CheckpointError(where + ": tensor data must be contiguous: tensor '" + detail::name_shown(*span.name) +
                            "' starts at data byte " + std::to_string(span.begin) + ", expected " +
                            std::to_string(expect) +
                            (!previous ? std::string(" (the start of the data)")
                             : span.begin < expect
                                 ? ", inside '" + detail::name_shown(*previous) + "' (the two overlap)"
                                 : ", where '" + detail::name_shown(*previous) + "' ends (a gap)"));
    expect = span.end;
    previous = span.name;
  }
  if (expect != data_size)
    throw CheckpointError(where + ": " + std::to_string(data_size - expect) +
                          " bytes after the last tensor, at offset " + std::to_string(8 + hsize + expect) +
                          "; expected the end of the file");
  for (const Read& r : reads) {  // the spans tile the data: the file's size in all
    r.entry->bytes.resize(r.end - r.begin);
    in.seekg(static_cast<std::streamoff>(8 + hsize + r.begin));
    in.read(reinterpret_cast<char*>(r.entry->bytes.data()), static_cast<std::streamsize>(r.end - r.begin));
    if (!in) throw CheckpointError(where + ": could not read the bytes at offset " + std::to_string(8 + hsize + r.begin));
  }
  if (metadata) *metadata = std::move(read_metadata);  // only from a file read whole
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
  if (v < 0 || v > (std::int64_t{1} << 53))  // a step past 2^53 would overflow (and is no real count)
    throw CheckpointError("kiln: " + path + ": metadata '" + key + "' is " +
                          (it == meta.end() ? std::string("missing") : "'" + detail::name_shown(it->second) + "'") +
                          "; expected a whole number in [0, 2^53]");
  return v;
}

/// A host vector as an entry.
template <class T>
SafetensorsEntry make_entry(std::span<const T> values, std::vector<index_t> shape) {
  SafetensorsEntry e{safetensors_dtype<T>(), std::move(shape), {}};
  e.bytes.resize(values.size_bytes());
  if (!values.empty()) std::memcpy(e.bytes.data(), values.data(), values.size_bytes());  // (null for none)
  return e;
}

namespace detail {
/// The metadata key under which save_checkpoint lists the caller's extra entries (a JSON array of their
/// names), so that load_checkpoint returns them instead of taking `ema.0.weight` for another model's.
inline constexpr const char* extra_entries_key = "kiln.extra_entries";
/// The metadata key under which save_checkpoint keeps the model's training_forwards() (the counter of its
/// dropout masks), which load_checkpoint restores.
inline constexpr const char* training_forwards_key = "kiln.training_forwards";
}  // namespace detail

/// Saves a model's parameters and buffers under PyTorch's state_dict names (plus optional extra entries
/// such as optimizer state or an EMA copy of the weights, and metadata; the extras' names are listed in
/// the metadata under "kiln.extra_entries", the model's training_forwards() under
/// "kiln.training_forwards"). Loadable by `safetensors.torch.load_file` + `load_state_dict` (strict=False
/// where there are extras).
template <class Model>
void save_checkpoint(const std::filesystem::path& path, const Model& model,
                     std::map<std::string, SafetensorsEntry> extra = {},
                     std::map<std::string, std::string> metadata = {}) {
  using M = typename Model::M;
  if (metadata.contains(detail::extra_entries_key))
    throw CheckpointError("kiln: " + path.string() + ": the metadata key \"" + detail::extra_entries_key +
                          "\" is save_checkpoint's own (the list of the extra entries); use another name");
  if (!extra.empty()) {
    nlohmann::json names = nlohmann::json::array();
    for (const auto& item : extra) names.push_back(item.first);
    try {
      metadata[detail::extra_entries_key] = names.dump();
    } catch (const nlohmann::json::exception& e) {  // a name that is not UTF-8 (JSON is)
      throw CheckpointError("kiln: " + path.string() + ": cannot list the extra entries: " + e.what() +
                            "; tensor names must be UTF-8 text");
    }
  }
  const auto taken = [&](const std::string& name) {  // an extra entry never stands in for the model's
    if (extra.contains(name))
      throw CheckpointError("kiln: " + path.string() + ": the extra entry '" + name +
                            "' has the name of one of the "
                            "model's parameters or buffers; give it another name");
    return name;
  };
  const std::vector<M> host = model.parameters().to_vector();
  for (const auto& p : model.named_parameters())
    extra[taken(p.name)] =
        make_entry<M>(std::span<const M>(host.data() + p.offset, static_cast<std::size_t>(p.count)), p.shape);
  if constexpr (requires { model.named_buffers(); }) {  // BatchNorm's running statistics
    const std::vector<M> buffers = model.buffers().to_vector();
    for (const auto& b : model.named_buffers()) {
      const auto first = buffers.begin() + b.offset;
      if (b.integer) {  // num_batches_tracked: int64, as torch's (held in M: exact to 2^24 in float)
        std::vector<std::int64_t> v(static_cast<std::size_t>(b.count));
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = detail::saturating_int64(first[static_cast<std::ptrdiff_t>(i)]);
        extra[taken(b.name)] = make_entry<std::int64_t>(std::span<const std::int64_t>(v), b.shape);
      } else {
        extra[taken(b.name)] =
            make_entry<M>(std::span<const M>(&*first, static_cast<std::size_t>(b.count)), b.shape);
      }
    }
  }
  if constexpr (requires { model.training_forwards(); })
    metadata[detail::training_forwards_key] = std::to_string(model.training_forwards());
  write_safetensors(path, extra, metadata);
}

namespace detail {
/// The element count of a shape (1 for a scalar's []).
inline index_t shape_count(const std::vector<index_t>& shape) {
  index_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}
/// load_checkpoint's default check: nothing.
struct CheckNothing {
  void operator()(const std::map<std::string, SafetensorsEntry>&, const std::map<std::string, std::string>&) const {}
};

/// Converts the floating-point entry e (F16, BF16, F32 or F64: take_entry has checked) to M into out,
/// rounding to nearest as torch's copy_ does.
template <class M>
void convert_floating(const SafetensorsEntry& e, M* out) {
  const auto each = [&]<class E>(auto to_m) {
    for (std::size_t i = 0, n = e.bytes.size() / sizeof(E); i < n; ++i) {
      E v;
      std::memcpy(&v, e.bytes.data() + i * sizeof(E), sizeof(E));
      out[i] = static_cast<M>(to_m(v));
    }
  };
  const auto same = [](auto v) { return v; };
  if (e.dtype == safetensors_dtype<M>()) {
    if (!e.bytes.empty()) std::memcpy(out, e.bytes.data(), e.bytes.size());
  } else if (e.dtype == "F32") {
    each.template operator()<float>(same);
  } else if (e.dtype == "F64") {
    each.template operator()<double>(same);
  } else if (e.dtype == "F16") {
    each.template operator()<std::uint16_t>(half_bits_to_float);
  } else {  // BF16
    each.template operator()<std::uint16_t>(bfloat16_bits_to_float);
  }
}

/// Copies the entry `name` (shape `shape`) of `entries` into `out`: a floating-point entry (F16, BF16,
/// F32, F64) converted to M, as torch's load_state_dict copies a half or double checkpoint into a float
/// model; an integer one (`integer`: num_batches_tracked) from I64. Returns "" or what is wrong with it
/// (missing, of another kind of dtype, of another shape), naming it. `what`: "parameter" or "buffer". A
/// missing integer buffer (num_batches_tracked, which older torch checkpoints lack) reads as 0, as
/// torch loads it.
template <class M>
std::string take_entry(const std::map<std::string, SafetensorsEntry>& entries, const std::string& name,
                       const std::vector<index_t>& shape, bool integer, const char* what, M* out) {
  const auto it = entries.find(name);
  if (it == entries.end() && integer) {  // num_batches_tracked: torch's BatchNorm loads without it as 0
    for (std::size_t i = 0, n = static_cast<std::size_t>(shape_count(shape)); i < n; ++i) out[i] = M(0);
    return {};
  }
  if (it == entries.end()) return std::string("missing ") + what + " '" + name + "' (shape " + shape_text(shape) + ")";
  const auto& e = it->second;
  const bool floating = e.dtype == "F16" || e.dtype == "BF16" || e.dtype == "F32" || e.dtype == "F64";
  std::string problem;
  if (integer ? e.dtype != safetensors_dtype<std::int64_t>() : !floating)
    problem = std::string(what) + " '" + name + "' is " + e.dtype + ", expected " +
              (integer ? std::string("I64")
                       : std::string("a floating-point dtype (F16, BF16, F32 or F64; converted to ") +
                             safetensors_dtype<M>() + ")");
  else if (e.shape != shape)
    problem = std::string(what) + " '" + name + "' has shape " + shape_text(e.shape) + ", the model expects " +
              shape_text(shape);
  if (!problem.empty()) return problem;
  if (integer) {
    std::vector<std::int64_t> v(e.bytes.size() / sizeof(std::int64_t));
    if (!e.bytes.empty()) std::memcpy(v.data(), e.bytes.data(), e.bytes.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<M>(v[i]);
  } else {
    convert_floating(e, out);
  }
  return {};
}

/// The first ten of `items` joined by `sep`, and how many more there are (a load's list of problems or
/// keys: torch's load_state_dict lists them all).
inline std::string first_ten(const std::vector<std::string>& items, const char* sep) {
  constexpr std::size_t shown = 10;
  std::string text;
  for (std::size_t i = 0; i < std::min(items.size(), shown); ++i) text += (i ? sep : "") + items[i];
  if (items.size() > shown) text += sep + ("and " + std::to_string(items.size() - shown) + " more");
  return text;
}

/// Writes what a load read and checked into the model: its parameters, then its buffers (where it has
/// any), in the arenas' order.
template <class Model, class M>
void write_loaded(Model& model, const std::vector<M>& parameters, const std::vector<M>& buffers) {
  model.parameters().copy_from(std::span<const M>(parameters.data(), parameters.size()));
  if constexpr (requires { model.named_buffers(); })
    if (!buffers.empty()) model.buffers().copy_from(std::span<const M>(buffers.data(), buffers.size()));
}
}  // namespace detail

/// Loads parameters (and buffers: BatchNorm's running statistics) saved by save_checkpoint or by PyTorch
/// (safetensors.torch.save_file(model.state_dict())). Every parameter and buffer must be present with
/// the right dtype and shape (but num_batches_tracked, which reads as 0 when absent, as torch's
/// BatchNorm loads an old checkpoint); every difference is reported (the first ten), as torch's
/// load_state_dict lists them, in one CheckpointError naming the file, each name and both shapes or
/// dtypes. As torch's load_state_dict(strict=True), an entry named like a parameter or a
/// buffer (`*.weight`, `*.bias`, `*.running_mean`, `*.running_var`, `*.num_batches_tracked`) that the
/// model does not have is an error too: the checkpoint is of another (deeper, wider) model, unless
/// save_checkpoint listed it among the caller's extras. Returns the other entries (optimizer state, the
/// caller's own extras).
///
/// Nothing is written before everything is checked: an error leaves the model as it was. `check`, where
/// given, is called as check(other_entries, metadata) after the model's entries are checked and before
/// they are written, so that a resume checks the rest of the checkpoint (check_optimizer_state,
/// GradScaler::check_state, its own metadata) before it changes anything; a ValueError it throws (a
/// bad value of the file's) comes back as a CheckpointError naming the file, anything else as it is.
template <class Model, class Check = detail::CheckNothing>
std::map<std::string, SafetensorsEntry> load_checkpoint(const std::filesystem::path& path, Model& model,
                                                        std::map<std::string, std::string>* metadata = nullptr,
                                                        Check&& check = {}) {
  using M = typename Model::M;
  std::map<std::string, std::string> meta;
  auto entries = read_safetensors(path, &meta);
  std::set<std::string> extras;  // save_checkpoint's list of the caller's entries
  if (const auto it = meta.find(detail::extra_entries_key); it != meta.end()) {
    const bool flat =  // an array of strings (of any length)
        detail::json_scan(it->second, 1, std::numeric_limits<std::size_t>::max()).at == std::string::npos;
    const auto names = flat ? nlohmann::json::parse(it->second, nullptr, false) : nlohmann::json();
    const bool listed = names.is_array() && std::all_of(names.begin(), names.end(), [](const nlohmann::json& n) {
      return n.is_string();
    });
    if (!listed)
      throw CheckpointError("kiln: " + path.string() + ": metadata \"" + detail::extra_entries_key +
                            "\" must be a JSON array of entry names, got " + detail::name_shown(it->second.substr(0, 80)));
    for (const auto& n : names) extras.insert(n.get<std::string>());
  }
  // Every difference, as torch's load_state_dict lists them all (the first ten here).
  std::vector<std::string> problems;
  const auto note = [&](std::string problem) {
    if (!problem.empty()) problems.push_back(std::move(problem));
  };
  std::vector<M> host(static_cast<std::size_t>(model.parameters().numel()));
  for (const auto& p : model.named_parameters()) {
    note(detail::take_entry(entries, p.name, p.shape, false, "parameter", host.data() + p.offset));
    entries.erase(p.name);  // (the model's, read or wrong: not among the others)
  }
  std::vector<M> buffers;
  if constexpr (requires { model.named_buffers(); }) {
    buffers.resize(static_cast<std::size_t>(model.buffers().numel()));
    for (const auto& b : model.named_buffers()) {
      note(detail::take_entry(entries, b.name, b.shape, b.integer, "buffer", buffers.data() + b.offset));
      entries.erase(b.name);
    }
  }
  std::string unexpected;
  std::vector<std::string> unexpected_names;
  for (const auto& item : entries) {
    const std::string& name = item.first;  // (not a structured binding: clang before 16 cannot capture one)
    const SafetensorsEntry& e = item.second;
    const auto ends_with = [&](std::string_view s) { return name.size() > s.size() && name.ends_with(s); };
    const bool extra = extras.contains(name);
    if (extra || name.starts_with("optimizer.") || !(ends_with(".weight") || ends_with(".bias") || ends_with(".running_mean") ||
                                            ends_with(".running_var") || ends_with(".num_batches_tracked")))
      continue;
    unexpected += (unexpected.empty() ? "'" : ", '") + detail::name_shown(name) + "' " + detail::shape_text(e.shape);
    unexpected_names.push_back(name);
  }
  if (!unexpected.empty()) {
    std::string hint = "the checkpoint is of another model";
    // The same tensors, perhaps, under other names: a DataParallel/DDP wrapper's (module.0.weight), or a
    // torch module's attributes (self.fc1: fc1.weight) where kiln numbers a Sequential's layers.
    const bool missing = std::any_of(problems.begin(), problems.end(), [](const std::string& p) {
      return p.starts_with("missing ");
    });
    const auto all_unexpected = [&](auto pred) {
      return std::all_of(unexpected_names.begin(), unexpected_names.end(), pred);
    };
    const auto positional = [](const std::string& n) { return n[0] >= '0' && n[0] <= '9'; };
    const auto params = model.named_parameters();
    if (missing && all_unexpected([](const std::string& n) { return n.starts_with("module."); })) {
      hint += ", or of this one saved through a DataParallel or DistributedDataParallel wrapper (its names start "
              "with 'module.'): save the wrapped module's state_dict, or strip the prefix";
    } else if (missing && !params.empty() && all_unexpected([&](const std::string& n) { return !positional(n); })) {
      hint += ", or of one whose layers are named attributes (self.fc1: fc1.weight, fc1.bias), where this "
              "model's names are '" + detail::name_shown(params.front().name) + "'" +
              (params.size() > 1 ? ", '" + detail::name_shown(params[1].name) + "', ..." : std::string()) +
              " (model.named_parameters(), in order; a Sequential numbers its layers as nn.Sequential does); "
              "rename the keys";
    }
    note("unexpected parameters " + unexpected + ": the model has none of that name; " + hint);
  }
  if (!problems.empty())
    throw CheckpointError("kiln: " + path.string() + ": " + detail::first_ten(problems, "; "));
  try {
    check(std::as_const(entries), std::as_const(meta));
  } catch (const CheckpointError&) {
    throw;
  } catch (const ValueError& e) {  // a value of the file's (GradScaler::check_state's, a scheduler's)
    throw CheckpointError("kiln: " + path.string() + ": " + e.what());
  }
  std::optional<std::uint64_t> forwards;  // the dropout masks' counter, where the file keeps it
  if constexpr (requires { model.set_training_forwards(std::uint64_t{}); }) {
    if (const auto it = meta.find(detail::training_forwards_key); it != meta.end()) {
      std::uint64_t n = 0;
      if (!kiln::detail::parse_whole(it->second, n))
        throw CheckpointError("kiln: " + path.string() + ": metadata \"" + detail::training_forwards_key +
                              "\" must be a count of forwards (an integer >= 0), got " +
                              detail::name_shown(it->second.substr(0, 40)));
      forwards = n;
    }
  }
  if (metadata) *metadata = meta;
  if constexpr (requires { model.set_training_forwards(std::uint64_t{}); })
    if (forwards) model.set_training_forwards(*forwards);
  detail::write_loaded(model, host, buffers);
  return entries;
}

/// What torch's load_state_dict returns (`_IncompatibleKeys`): the model's parameters and buffers the
/// state dict lacked, and the state dict's names the model lacks, each in order.
struct IncompatibleKeys {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

/// torch's `model.load_state_dict(state_dict, strict)` over entries by state_dict name (read_safetensors's,
/// a torch file's, or built and renamed by you): parameters and buffers (BatchNorm's running statistics;
/// num_batches_tracked reads as 0 when absent, as torch's). strict: every one present and no other name,
/// else a ValueError listing the missing and unexpected keys (as torch's RuntimeError). strict = false:
/// those present are loaded, the others keep their values, and the names come back, as torch's (a
/// pretrained backbone under a new head: erase the head's entries, then load). Either way an entry of
/// another shape or of no floating-point dtype is an error (torch's "size mismatch"), and an error writes
/// nothing. Half, bfloat16 and double entries are converted as load_checkpoint converts them.
template <class Model>
IncompatibleKeys load_state_dict(Model& model, const std::map<std::string, SafetensorsEntry>& state_dict,
                                 bool strict = true) {
  using M = typename Model::M;
  IncompatibleKeys keys;
  std::vector<std::string> problems;
  std::set<std::string> names;
  // The model's values where a key is missing (strict = false keeps them).
  std::vector<M> host = model.parameters().to_vector();
  const auto take = [&](const auto& info, bool integer, const char* what, M* out) {
    names.insert(info.name);
    if (!integer && !state_dict.contains(info.name)) {
      keys.missing_keys.push_back(info.name);
      return;
    }
    if (std::string problem = detail::take_entry(state_dict, info.name, info.shape, integer, what, out);
        !problem.empty())
      problems.push_back(std::move(problem));
  };
  for (const auto& p : model.named_parameters()) take(p, false, "parameter", host.data() + p.offset);
  std::vector<M> buffers;
  if constexpr (requires { model.named_buffers(); }) {
    buffers = model.buffers().to_vector();
    for (const auto& b : model.named_buffers()) take(b, b.integer, "buffer", buffers.data() + b.offset);
  }
  for (const auto& item : state_dict)
    if (!names.contains(item.first)) keys.unexpected_keys.push_back(item.first);
  const auto listed = [](const std::vector<std::string>& names_of) {
    std::vector<std::string> quoted;
    for (const auto& n : names_of) quoted.push_back("'" + detail::name_shown(n) + "'");
    return detail::first_ten(quoted, ", ");
  };
  const bool incompatible = strict && (!keys.missing_keys.empty() || !keys.unexpected_keys.empty());
  if (strict && !keys.missing_keys.empty()) problems.push_back("missing keys " + listed(keys.missing_keys));
  if (strict && !keys.unexpected_keys.empty())
    problems.push_back("unexpected keys " + listed(keys.unexpected_keys));
  if (!problems.empty())
    throw ValueError("kiln::load_state_dict: error(s) in loading the state dict: " +
                     detail::first_ten(problems, "; ") +
                     (incompatible ? " (strict = false loads the keys the model has and returns the others)"
                                   : ""));
  detail::write_loaded(model, host, buffers);
  return keys;
}

}  // namespace kiln
