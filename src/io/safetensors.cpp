// safetensors reader/writer (see safetensors.h). The header parser is the trust boundary: it only
// reads buf[0, 8 + N) and checks every field before any offset is used, so the fuzz target can call
// it on arbitrary bytes. The JSON is parsed by nlohmann with a callback that rejects duplicate keys
// and nesting deeper than the schema (3 levels), which nlohmann alone would silently accept.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tetra {

namespace {

using json = nlohmann::json;
using ull = unsigned long long;
namespace fs = std::filesystem;

constexpr uint64_t k_max_header = 100ull * 1000 * 1000;  // 100 MB, as the HF library

// HF `Dtype` enum order (safetensors tensor.rs, checked with safetensors 0.8.0 serialize()); the
// writer sorts by it descending. Names tetra's core does not map are rejected when read.
const char* const k_hf_dtypes[] = {"BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
                                   "F8_E8M0", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64",
                                   "F64", "I64", "U64"};

int hf_rank(dtype t) {
    const char* n = dtype_safetensors_name(t);
    for (size_t i = 0; i < sizeof(k_hf_dtypes) / sizeof(k_hf_dtypes[0]); ++i) {
        if (std::strcmp(n, k_hf_dtypes[i]) == 0) return int(i);
    }
    TETRA_ASSERT(false);  // core maps a dtype the HF format does not have
}

std::string supported_dtypes() {
    std::string s;
    dtype t;
    for (const char* n : k_hf_dtypes) {
        if (!dtype_from_safetensors(n, &t)) continue;
        if (!s.empty()) s += ", ";
        s += n;
    }
    return s;
}

// A name for an error message: JSON-quoted (control characters visible), long names cut.
std::string qname(const std::string& name) {
    std::string s = name.size() > 120 ? name.substr(0, 120) + "..." : name;
    return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

const char* json_type(const json& v) {
    if (v.is_number_float()) return "non-integer number";
    if (v.is_number_integer() && !v.is_number_unsigned()) return "negative integer";
    return v.type_name();
}

bool mul_overflow(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

// Tracks the keys of every open JSON object to reject duplicates; bounds nesting depth.
struct header_checker {
    const std::string& file;
    std::vector<std::set<std::string>> keys;  // one per open object (arrays push nothing)
    int depth = 0;
    std::string top_key;  // current key of the root object (the tensor being parsed)

    bool operator()(int, json::parse_event_t ev, json& parsed) {
        switch (ev) {
            case json::parse_event_t::object_start:
            case json::parse_event_t::array_start:
                ++depth;
                TETRA_CHECK(depth <= 3, "safetensors %s: header JSON nests deeper than the schema (3 levels) in %s",
                            file.c_str(), top_key.empty() ? "the header" : qname(top_key).c_str());
                if (ev == json::parse_event_t::object_start) keys.emplace_back();
                break;
            case json::parse_event_t::object_end:
                keys.pop_back();
                --depth;
                break;
            case json::parse_event_t::array_end: --depth; break;
            case json::parse_event_t::key: on_key(parsed.get_ref<const std::string&>()); break;
            case json::parse_event_t::value: break;
        }
        return true;
    }

    void on_key(const std::string& k) {
        TETRA_ASSERT(!keys.empty());
        bool fresh = keys.back().insert(k).second;
        if (depth == 1) {
            TETRA_CHECK(fresh, "safetensors %s: duplicate tensor name %s in the header; expected unique names",
                        file.c_str(), qname(k).c_str());
            top_key = k;
        } else {
            TETRA_CHECK(fresh, "safetensors %s: %s: duplicate key %s; expected each key once", file.c_str(),
                        qname(top_key).c_str(), qname(k).c_str());
        }
    }
};

json parse_header_json(const uint8_t* p, uint64_t n, const std::string& file) {
    header_checker chk{file, {}, 0, {}};
    try {
        return json::parse(p, p + n, std::ref(chk), /*allow_exceptions=*/true, /*ignore_comments=*/false);
    } catch (const json::exception& e) {
        TETRA_FAIL("safetensors %s: header is not valid JSON: %s", file.c_str(), e.what());
    }
}

// A non-negative JSON integer, or an error naming `what`.
uint64_t get_uint(const json& v, const std::string& file, const std::string& tname, const std::string& what) {
    if (v.is_number_integer() && !v.is_number_unsigned()) {
        TETRA_FAIL("safetensors %s: tensor %s: %s = %lld is negative; expected a non-negative integer", file.c_str(),
                   qname(tname).c_str(), what.c_str(), (long long)v.get<int64_t>());
    }
    TETRA_CHECK(v.is_number_unsigned(), "safetensors %s: tensor %s: %s is a JSON %s (%s); expected a non-negative integer",
                file.c_str(), qname(tname).c_str(), what.c_str(), json_type(v), v.dump().substr(0, 40).c_str());
    return v.get<uint64_t>();
}

void parse_shape(const json& v, st_tensor_info* t, const std::string& file) {
    TETRA_CHECK(v.is_array(), "safetensors %s: tensor %s: field 'shape' is a JSON %s; expected an array of integers",
                file.c_str(), qname(t->name).c_str(), json_type(v));
    for (size_t i = 0; i < v.size(); ++i) {
        uint64_t d = get_uint(v[i], file, t->name, "shape[" + std::to_string(i) + "]");
        TETRA_CHECK(d <= uint64_t(INT64_MAX), "safetensors %s: tensor %s: shape[%zu] = %llu exceeds 2^63-1",
                    file.c_str(), qname(t->name).c_str(), i, ull(d));
        t->shape.push_back(int64_t(d));
    }
}

// Byte size of a tensor from its shape and dtype, with overflow checks.
uint64_t tensor_bytes(const st_tensor_info& t, const std::string& file) {
    uint64_t n = 1;
    for (int64_t d : t.shape) {
        TETRA_CHECK(!mul_overflow(n, uint64_t(d), &n), "safetensors %s: tensor %s: shape %s: element count overflows 64 bits",
                    file.c_str(), qname(t.name).c_str(), shape_str(t.shape).c_str());
    }
    uint64_t bytes = 0;
    TETRA_CHECK(!mul_overflow(n, dtype_size(t.type), &bytes),
                "safetensors %s: tensor %s: shape %s x %zu bytes (%s) overflows 64 bits", file.c_str(),
                qname(t.name).c_str(), shape_str(t.shape).c_str(), dtype_size(t.type), dtype_safetensors_name(t.type));
    return bytes;
}

st_tensor_info parse_entry(const std::string& name, const json& v, uint64_t data_size, const std::string& file) {
    st_tensor_info t;
    t.name = name;
    const char* who = file.c_str();
    std::string q = qname(name);
    TETRA_CHECK(v.is_object(), "safetensors %s: tensor %s: entry is a JSON %s; expected an object with dtype, shape, "
                "data_offsets", who, q.c_str(), json_type(v));
    for (const auto& kv : v.items()) {
        const std::string& k = kv.key();
        TETRA_CHECK(k == "dtype" || k == "shape" || k == "data_offsets",
                    "safetensors %s: tensor %s: unexpected field %s; expected only dtype, shape, data_offsets", who,
                    q.c_str(), qname(k).c_str());
    }
    for (const char* k : {"dtype", "shape", "data_offsets"}) {
        TETRA_CHECK(v.contains(k), "safetensors %s: tensor %s: missing field '%s'", who, q.c_str(), k);
    }
    const json& dt = v["dtype"];
    TETRA_CHECK(dt.is_string(), "safetensors %s: tensor %s: field 'dtype' is a JSON %s; expected a string", who,
                q.c_str(), json_type(dt));
    TETRA_CHECK(dtype_from_safetensors(dt.get_ref<const std::string&>(), &t.type),
                "safetensors %s: tensor %s: dtype %s is not supported; expected one of %s", who, q.c_str(),
                qname(dt.get_ref<const std::string&>()).c_str(), supported_dtypes().c_str());
    parse_shape(v["shape"], &t, file);
    uint64_t bytes = tensor_bytes(t, file);

    const json& off = v["data_offsets"];
    TETRA_CHECK(off.is_array() && off.size() == 2,
                "safetensors %s: tensor %s: field 'data_offsets' is %s; expected [begin, end]", who, q.c_str(),
                off.is_array() ? ("an array of " + std::to_string(off.size()) + " elements").c_str() : json_type(off));
    t.begin = get_uint(off[0], file, name, "data_offsets[0]");
    t.end = get_uint(off[1], file, name, "data_offsets[1]");
    TETRA_CHECK(t.begin <= t.end, "safetensors %s: tensor %s: data_offsets [%llu, %llu] has begin > end", who, q.c_str(),
                ull(t.begin), ull(t.end));
    TETRA_CHECK(t.end <= data_size, "safetensors %s: tensor %s: data_offsets end %llu exceeds the data area of %llu bytes",
                who, q.c_str(), ull(t.end), ull(data_size));
    TETRA_CHECK(t.end - t.begin == bytes,
                "safetensors %s: tensor %s: data_offsets [%llu, %llu] span %llu bytes; expected %llu (%s %s)", who,
                q.c_str(), ull(t.begin), ull(t.end), ull(t.end - t.begin), ull(bytes), dtype_safetensors_name(t.type),
                shape_str(t.shape).c_str());
    return t;
}

void parse_metadata(const json& v, st_header* h, const std::string& file) {
    if (v.is_null()) return;  // the HF library reads `"__metadata__": null` as absent
    TETRA_CHECK(v.is_object(), "safetensors %s: field '__metadata__' is a JSON %s; expected an object of strings",
                file.c_str(), json_type(v));
    for (const auto& kv : v.items()) {
        TETRA_CHECK(kv.value().is_string(), "safetensors %s: __metadata__[%s] is a JSON %s; expected a string",
                    file.c_str(), qname(kv.key()).c_str(), json_type(kv.value()));
        h->metadata[kv.key()] = kv.value().get<std::string>();
    }
}

// Tensors sorted by offsets must tile [0, data_size) exactly, as the HF library requires.
void check_layout(const std::vector<st_tensor_info>& ts, uint64_t data_size, const std::string& file) {
    uint64_t cursor = 0;
    const st_tensor_info* prev = nullptr;
    for (const auto& t : ts) {
        TETRA_CHECK(t.begin >= cursor,
                    "safetensors %s: tensor %s: data_offsets [%llu, %llu] overlap tensor %s at [%llu, %llu]",
                    file.c_str(), qname(t.name).c_str(), ull(t.begin), ull(t.end), qname(prev->name).c_str(),
                    ull(prev->begin), ull(prev->end));
        TETRA_CHECK(t.begin == cursor,
                    "safetensors %s: tensor %s: data_offsets begin %llu leaves a gap after byte %llu; expected "
                    "contiguous tensors (begin %llu)", file.c_str(), qname(t.name).c_str(), ull(t.begin),
                    ull(cursor), ull(cursor));
        cursor = t.end;
        prev = &t;
    }
    TETRA_CHECK(cursor == data_size,
                "safetensors %s: tensors cover %llu bytes of the data area but it has %llu; expected no trailing "
                "bytes", file.c_str(), ull(cursor), ull(data_size));
}

}  // namespace

st_header st_parse_header(const uint8_t* buf, size_t buf_len, uint64_t file_size, const std::string& file) {
    const char* who = file.c_str();
    TETRA_CHECK(file_size >= 8 && buf_len >= 8,
                "safetensors %s: file is %llu bytes; expected at least 8 (the header length)", who,
                ull(std::min<uint64_t>(file_size, buf_len)));
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | buf[i];
    TETRA_CHECK(n != 0, "safetensors %s: header length N is 0; expected 2..%llu", who, ull(k_max_header));
    TETRA_CHECK(n <= k_max_header, "safetensors %s: header length N = %llu; expected at most %llu (100 MB)", who,
                ull(n), ull(k_max_header));
    TETRA_CHECK(n <= file_size - 8, "safetensors %s: header length N = %llu, so 8 + N = %llu exceeds the file size %llu",
                who, ull(n), ull(n + 8), ull(file_size));
    TETRA_CHECK(n <= buf_len - 8, "safetensors %s: buffer holds %zu bytes; the header needs 8 + N = %llu", who,
                buf_len, ull(n + 8));

    json j = parse_header_json(buf + 8, n, file);
    TETRA_CHECK(j.is_object(), "safetensors %s: header is a JSON %s; expected an object", who, json_type(j));
    st_header h;
    h.data_start = 8 + n;
    uint64_t data_size = file_size - h.data_start;
    for (const auto& kv : j.items()) {
        if (kv.key() == "__metadata__") {
            parse_metadata(kv.value(), &h, file);
        } else {
            h.tensors.push_back(parse_entry(kv.key(), kv.value(), data_size, file));
        }
    }
    std::sort(h.tensors.begin(), h.tensors.end(), [](const st_tensor_info& a, const st_tensor_info& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
    });
    check_layout(h.tensors, data_size, file);
    return h;
}

// ---- reader ----

std::shared_ptr<safetensors_file> safetensors_file::open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    TETRA_CHECK(fd >= 0, "safetensors %s: cannot open: %s", path.c_str(), std::strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        TETRA_FAIL("safetensors %s: not a regular file", path.c_str());
    }
    std::shared_ptr<safetensors_file> f(new safetensors_file());
    f->path_ = path;
    size_t size = size_t(st.st_size);
    if (size > 0) {
        void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        int err = errno;
        ::close(fd);
        TETRA_CHECK(p != MAP_FAILED, "safetensors %s: mmap of %zu bytes failed: %s", path.c_str(), size,
                    std::strerror(err));
        f->map_ = p;
        f->map_len_ = size;
    } else {
        ::close(fd);
    }
    f->header_ = st_parse_header(static_cast<const uint8_t*>(f->map_), size, size, path);
    for (size_t i = 0; i < f->header_.tensors.size(); ++i) f->index_[f->header_.tensors[i].name] = i;
    f->self_ = f;
    return f;
}

safetensors_file::~safetensors_file() {
    if (map_) munmap(map_, map_len_);
}

const st_tensor_info* safetensors_file::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

tensor safetensors_file::get(const std::string& name) const {
    const st_tensor_info* info = find(name);
    TETRA_CHECK(info, "safetensors %s: no tensor %s (file has %zu tensors)", path_.c_str(), qname(name).c_str(),
                header_.tensors.size());
    return get(*info);
}

tensor safetensors_file::get(const st_tensor_info& info) const {
    uint64_t data_size = map_len_ - header_.data_start;
    TETRA_CHECK(info.begin <= info.end && info.end <= data_size,
                "safetensors %s: tensor %s: range [%llu, %llu] outside the data area of %llu bytes", path_.c_str(),
                qname(info.name).c_str(), ull(info.begin), ull(info.end), ull(data_size));
    tensor t;
    t.type = info.type;
    t.shape = info.shape;
    t.data = static_cast<uint8_t*>(map_) + header_.data_start + info.begin;
    t.owner = std::shared_ptr<void>(self_.lock(), t.data);  // aliasing: keeps the mapping alive
    TETRA_ASSERT(t.owner);
    return t;
}

// ---- model directory ----

namespace {

json read_index(const std::string& path) {
    FILE* fp = std::fopen(path.c_str(), "rb");
    TETRA_CHECK(fp, "safetensors index %s: cannot open: %s", path.c_str(), std::strerror(errno));
    std::string s;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, fp)) > 0) s.append(buf, n);
    std::fclose(fp);
    try {
        return json::parse(s);
    } catch (const json::exception& e) {
        TETRA_FAIL("safetensors index %s: not valid JSON: %s", path.c_str(), e.what());
    }
}

}  // namespace

safetensors_model safetensors_model::open_dir(const std::string& dir) {
    safetensors_model m;
    m.dir_ = dir;
    std::error_code ec;
    TETRA_CHECK(fs::is_directory(dir, ec), "safetensors: model directory %s does not exist or is not a directory",
                dir.c_str());
    fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
    if (fs::exists(index_path, ec)) {
        m.open_indexed(index_path.string());
        return m;
    }
    std::vector<std::string> files;
    if (fs::exists(fs::path(dir) / "model.safetensors", ec)) {
        files.push_back((fs::path(dir) / "model.safetensors").string());
    } else {
        for (const auto& e : fs::directory_iterator(dir, ec)) {
            if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
        }
        std::sort(files.begin(), files.end());
    }
    TETRA_CHECK(!files.empty(), "safetensors: model directory %s has no model.safetensors, "
                "model.safetensors.index.json or *.safetensors file", dir.c_str());
    for (const auto& f : files) {
        m.files_.push_back(safetensors_file::open(f));
        for (const auto& t : m.files_.back()->header().tensors) {
            auto it = m.where_.find(t.name);
            TETRA_CHECK(it == m.where_.end(), "safetensors: tensor %s is in both %s and %s",
                        qname(t.name).c_str(), m.files_[it->second]->path().c_str(), f.c_str());
            m.where_[t.name] = m.files_.size() - 1;
        }
    }
    return m;
}

void safetensors_model::open_indexed(const std::string& index_path) {
    const char* ip = index_path.c_str();
    json idx = read_index(index_path);
    TETRA_CHECK(idx.is_object() && idx.contains("weight_map") && idx["weight_map"].is_object(),
                "safetensors index %s: expected an object with a 'weight_map' object", ip);
    std::map<std::string, size_t> shard_of;  // shard file name -> index in files_
    std::map<std::string, std::string> wmap;
    for (const auto& kv : idx["weight_map"].items()) {
        TETRA_CHECK(kv.value().is_string(), "safetensors index %s: weight_map[%s] is a JSON %s; expected a file name",
                    ip, qname(kv.key()).c_str(), json_type(kv.value()));
        const std::string& shard = kv.value().get_ref<const std::string&>();
        TETRA_CHECK(!shard.empty() && shard.find('/') == std::string::npos && shard != "." && shard != "..",
                    "safetensors index %s: weight_map[%s] = %s; expected a file name in the model directory", ip,
                    qname(kv.key()).c_str(), qname(shard).c_str());
        wmap[kv.key()] = shard;
        if (shard_of.count(shard)) continue;
        fs::path p = fs::path(dir_) / shard;
        std::error_code ec;
        TETRA_CHECK(fs::exists(p, ec), "safetensors index %s: shard %s (for tensor %s) does not exist", ip,
                    shard.c_str(), qname(kv.key()).c_str());
        shard_of[shard] = files_.size();
        files_.push_back(safetensors_file::open(p.string()));
    }
    for (const auto& kv : wmap) {
        const auto& f = files_[shard_of[kv.second]];
        TETRA_CHECK(f->find(kv.first), "safetensors index %s: tensor %s is mapped to %s but that shard lacks it", ip,
                    qname(kv.first).c_str(), f->path().c_str());
        where_[kv.first] = shard_of[kv.second];
    }
    for (size_t i = 0; i < files_.size(); ++i) {
        for (const auto& t : files_[i]->header().tensors) {
            auto it = wmap.find(t.name);
            TETRA_CHECK(it != wmap.end() && where_[t.name] == i,
                        "safetensors index %s: shard %s has tensor %s, but the weight_map %s", ip,
                        files_[i]->path().c_str(), qname(t.name).c_str(),
                        it == wmap.end() ? "does not list it" : ("maps it to " + it->second).c_str());
        }
    }
}

const st_tensor_info* safetensors_model::find(const std::string& name) const {
    auto it = where_.find(name);
    return it == where_.end() ? nullptr : files_[it->second]->find(name);
}

tensor safetensors_model::get(const std::string& name) const {
    auto it = where_.find(name);
    TETRA_CHECK(it != where_.end(), "safetensors: tensor %s not found in model directory %s (%zu tensors)",
                qname(name).c_str(), dir_.c_str(), where_.size());
    return files_[it->second]->get(name);
}

std::vector<std::string> safetensors_model::names() const {
    std::vector<std::string> v;
    for (const auto& kv : where_) v.push_back(kv.first);
    return v;
}

const std::string& safetensors_model::file_of(const std::string& name) const {
    auto it = where_.find(name);
    TETRA_CHECK(it != where_.end(), "safetensors: tensor %s not found in model directory %s", qname(name).c_str(),
                dir_.c_str());
    return files_[it->second]->path();
}

// ---- writer ----

namespace {

// Write `parts` to `path` atomically: a temporary file in the same directory, fsync, rename.
void write_atomic(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts) {
    std::string tmp = path + ".tmp.XXXXXX";
    int fd = mkstemp(&tmp[0]);
    TETRA_CHECK(fd >= 0, "safetensors %s: cannot create a temporary file: %s", path.c_str(), std::strerror(errno));
    int err = 0;
    for (const auto& part : parts) {
        const uint8_t* p = static_cast<const uint8_t*>(part.first);
        size_t left = part.second;
        while (left > 0 && err == 0) {
            ssize_t w = ::write(fd, p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) { err = w < 0 ? errno : EIO; break; }
            p += w;
            left -= size_t(w);
        }
    }
    if (err == 0 && fchmod(fd, 0644) != 0) err = errno;
    if (err == 0 && fsync(fd) != 0) err = errno;
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
    if (err != 0) {
        ::unlink(tmp.c_str());
        TETRA_FAIL("safetensors %s: write failed: %s", path.c_str(), std::strerror(err));
    }
}

std::string json_str(const std::string& s) {
    try {
        return json(s).dump();  // raw UTF-8, short escapes, \u00XX for other controls: as serde_json
    } catch (const json::exception&) {
        TETRA_FAIL("safetensors: name or metadata %s is not valid UTF-8", qname(s).c_str());
    }
}

}  // namespace

void safetensors_writer::add(const std::string& name, dtype type, const std::vector<int64_t>& shape,
                             const void* data) {
    TETRA_CHECK(!name.empty() && name != "__metadata__",
                "safetensors writer: tensor name %s is reserved or empty", qname(name).c_str());
    json_str(name);  // rejects invalid UTF-8 now rather than at write()
    TETRA_CHECK(!names_.count(name), "safetensors writer: tensor %s added twice", qname(name).c_str());
    uint64_t n = 1, bytes = 0;
    for (int64_t d : shape) {
        TETRA_CHECK(d >= 0 && !mul_overflow(n, uint64_t(d), &n), "safetensors writer: tensor %s: bad shape %s",
                    qname(name).c_str(), shape_str(shape).c_str());
    }
    TETRA_CHECK(!mul_overflow(n, dtype_size(type), &bytes) && bytes <= SIZE_MAX / 2,
                "safetensors writer: tensor %s: shape %s is too large", qname(name).c_str(), shape_str(shape).c_str());
    TETRA_CHECK(data != nullptr || bytes == 0, "safetensors writer: tensor %s: null data for %llu bytes",
                qname(name).c_str(), ull(bytes));
    entry e{name, type, shape, {}};
    if (bytes) e.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
    entries_.push_back(std::move(e));
    names_.insert(name);
}

// One file holding `es`, laid out as the HF library does (see safetensors.h).
void safetensors_writer::write_shard(const std::string& path, std::vector<const entry*> es) const {
    std::stable_sort(es.begin(), es.end(), [](const entry* a, const entry* b) {
        int ra = hf_rank(a->type), rb = hf_rank(b->type);
        return ra != rb ? ra > rb : a->name < b->name;
    });
    std::string h = "{";
    if (!metadata_.empty()) {
        h += "\"__metadata__\":{";
        for (const auto& kv : metadata_) {
            if (h.back() != '{') h += ',';
            h += json_str(kv.first) + ':' + json_str(kv.second);
        }
        h += '}';
    }
    uint64_t off = 0;
    for (const entry* e : es) {
        if (h.size() > 1) h += ',';
        h += json_str(e->name) + ":{\"dtype\":\"" + dtype_safetensors_name(e->type) + "\",\"shape\":[";
        for (size_t i = 0; i < e->shape.size(); ++i) h += (i ? "," : "") + std::to_string(e->shape[i]);
        h += "],\"data_offsets\":[" + std::to_string(off) + ',' + std::to_string(off + e->bytes.size()) + "]}";
        off += e->bytes.size();
    }
    h += '}';
    h.append((8 - h.size() % 8) % 8, ' ');  // data area starts 8-aligned
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(h.size()) >> (8 * i));
    std::vector<std::pair<const void*, size_t>> parts = {{len, 8}, {h.data(), h.size()}};
    for (const entry* e : es) parts.push_back({e->bytes.data(), e->bytes.size()});
    write_atomic(path, parts);
}

void safetensors_writer::write_file(const std::string& path) const {
    std::vector<const entry*> es;
    for (const auto& e : entries_) es.push_back(&e);
    write_shard(path, es);
}

std::vector<std::string> safetensors_writer::write(const std::string& dir, uint64_t max_shard_bytes) const {
    std::error_code ec;
    fs::create_directories(dir, ec);
    TETRA_CHECK(fs::is_directory(dir, ec), "safetensors writer: cannot create directory %s: %s", dir.c_str(),
                ec.message().c_str());
    // huggingface_hub's split: fill shards in order; a tensor over the limit gets a shard of its own
    // (placed where it was met); the current shard is closed when the next tensor would overflow it.
    std::vector<std::vector<const entry*>> shards;
    std::vector<const entry*> cur;
    uint64_t cur_bytes = 0, total = 0;
    for (const auto& e : entries_) {
        uint64_t b = e.bytes.size();
        total += b;
        if (max_shard_bytes == 0) {
            cur.push_back(&e);
            continue;
        }
        if (b > max_shard_bytes) {
            shards.push_back({&e});
            continue;
        }
        if (cur_bytes + b > max_shard_bytes) {
            shards.push_back(cur);
            cur.clear();
            cur_bytes = 0;
        }
        cur.push_back(&e);
        cur_bytes += b;
    }
    if (!cur.empty() || shards.empty()) shards.push_back(cur);

    fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
    if (shards.size() == 1) {
        write_shard((fs::path(dir) / "model.safetensors").string(), shards[0]);
        fs::remove(index_path, ec);  // a stale index would shadow model.safetensors in open_dir
        TETRA_CHECK(!ec, "safetensors writer: cannot remove stale %s: %s", index_path.c_str(), ec.message().c_str());
        return {"model.safetensors"};
    }
    std::vector<std::string> names;
    json wmap = json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
        names.push_back(strfmt("model-%05zu-of-%05zu.safetensors", i + 1, shards.size()));
        write_shard((fs::path(dir) / names.back()).string(), shards[i]);
        for (const entry* e : shards[i]) wmap[e->name] = names.back();
    }
    json idx = {{"metadata", {{"total_size", total}}}, {"weight_map", wmap}};
    std::string text = idx.dump(2) + "\n";  // as transformers: indent 2, sorted keys
    write_atomic(index_path.string(), {{text.data(), text.size()}});
    names.push_back("model.safetensors.index.json");
    return names;
}

}  // namespace tetra
