// safetensors reader (mmap, zero-copy views) and writer (sharding + index), strict validation.
// Format: u64 LE header length N, N bytes of JSON {name: {dtype, shape, data_offsets:[b,e]},
// "__metadata__": {str: str}}, then the data area; offsets are relative to the data area.
// Every malformed input is a tetra::error naming the file and the offending field; never a crash,
// never a read outside the mapping. Stricter than the HF library: duplicate keys and extra fields
// are errors; like it, tensors must tile the data area exactly (no gaps, no trailing bytes).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tetra {

struct st_tensor_info {
    std::string name;
    dtype type = dtype::F32;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // byte offsets relative to the data area
};

struct st_header {
    std::vector<st_tensor_info> tensors;          // in file order of data offsets (begin, end)
    std::map<std::string, std::string> metadata;  // __metadata__
    uint64_t data_start = 0;                      // 8 + N
};

// Parse and validate a header. `buf` holds the whole file (or at least 8 + N bytes; pass the real
// file size so data offsets can be checked). Limits: N <= 100 MB, N <= file_size - 8.
// `file` is used in error messages only. The fuzz target calls this.
st_header st_parse_header(const uint8_t* buf, size_t buf_len, uint64_t file_size, const std::string& file);

// One mmap'd file (PROT_READ, MAP_PRIVATE): views are read-only, writing through them faults.
class safetensors_file {
  public:
    static std::shared_ptr<safetensors_file> open(const std::string& path);
    ~safetensors_file();
    const std::string& path() const { return path_; }
    const st_header& header() const { return header_; }
    const st_tensor_info* find(const std::string& name) const;
    // Zero-copy view; the tensor's owner keeps the mapping alive.
    tensor get(const std::string& name) const;
    tensor get(const st_tensor_info& info) const;

  private:
    safetensors_file() = default;
    std::string path_;
    st_header header_;
    std::map<std::string, size_t> index_;
    void* map_ = nullptr;
    size_t map_len_ = 0;
    std::weak_ptr<safetensors_file> self_;
};

// A model directory: model.safetensors, or model.safetensors.index.json + shards, or (when neither
// exists) every *.safetensors file in the directory. Tensor names must be unique across shards and
// agree with the index's weight_map.
class safetensors_model {
  public:
    static safetensors_model open_dir(const std::string& dir);
    bool has(const std::string& name) const { return where_.count(name) != 0; }
    const st_tensor_info* find(const std::string& name) const;
    tensor get(const std::string& name) const;  // error naming the tensor and dir if missing
    std::vector<std::string> names() const;     // sorted
    const std::string& dir() const { return dir_; }
    const std::string& file_of(const std::string& name) const;

  private:
    void open_indexed(const std::string& index_path);
    std::string dir_;
    std::vector<std::shared_ptr<safetensors_file>> files_;
    std::map<std::string, size_t> where_;  // name → index in files_
};

// Writer: collects tensors (copies the bytes), then writes one file or shards of at most
// max_shard_bytes (a tensor larger than the limit gets a shard of its own) plus
// model.safetensors.index.json. Shard names as HF: model-00001-of-00003.safetensors.
// Shards are filled in insertion order (huggingface_hub's split); within a file, tensors are laid
// out as the HF library does (dtype descending in its enum order, then name), so every tensor is
// naturally aligned and the bytes equal the Python `safetensors` output when there is at most one
// metadata key (HF emits metadata in hash order). Header padded with spaces to a multiple of 8.
// Files are written to a temporary file in the same directory and renamed into place.
class safetensors_writer {
  public:
    void add(const std::string& name, dtype type, const std::vector<int64_t>& shape, const void* data);
    void add(const std::string& name, const tensor& t) { add(name, t.type, t.shape, t.data); }
    void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
    // Returns the written file names (relative to dir), the index last. Creates `dir` if needed.
    // One shard (max_shard_bytes == 0, or everything fits) is written as model.safetensors without
    // an index, as HF does; a stale model.safetensors.index.json in `dir` is then removed because
    // it would shadow the new file.
    std::vector<std::string> write(const std::string& dir, uint64_t max_shard_bytes = 0) const;
    // Single file at an explicit path, no index.
    void write_file(const std::string& path) const;

  private:
    struct entry { std::string name; dtype type; std::vector<int64_t> shape; std::vector<uint8_t> bytes; };
    void write_shard(const std::string& path, std::vector<const entry*> es) const;
    std::vector<entry> entries_;
    std::set<std::string> names_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace tetra
