// io/safetensors: round trip of every dtype (scalars, empty tensors), sharding + index, model
// directories, one malformed-file case per validation rule (the error must name the file and the
// field), and a golden file written by the Python `safetensors` library
// (tools/gen_safetensors_golden.py): our reader sees its values, our writer reproduces its bytes.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"

using namespace tetra;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
    std::string path;
    temp_dir() {
        std::string t = (fs::temp_directory_path() / "tetra_st_XXXXXX").string();
        TETRA_ASSERT(mkdtemp(&t[0]) != nullptr);
        path = t;
    }
    ~temp_dir() { fs::remove_all(path); }
    std::string operator/(const std::string& name) const { return (fs::path(path) / name).string(); }
};

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

// [u64 LE N][header][data_len bytes of 0xAB]; n_override replaces N when >= 0.
std::string raw_file(const std::string& header, size_t data_len, int64_t n_override = -1) {
    uint64_t n = n_override >= 0 ? uint64_t(n_override) : header.size();
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
    return s + header + std::string(data_len, '\xab');
}

// Runs fn; expects a tetra::error whose message contains every string in `needles`.
template <typename F>
void expect_error(F fn, const std::vector<std::string>& needles) {
    try {
        fn();
        ADD_FAILURE() << "expected a tetra::error";
    } catch (const tetra::error& e) {
        std::string msg = e.what();
        for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    }
}

// Deterministic bytes (LCG) so round trips compare against data the test made itself.
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) {
        seed = seed * 1664525u + 1013904223u;
        b = uint8_t(seed >> 24);
    }
    return v;
}

const dtype k_all_dtypes[] = {dtype::BOOL, dtype::U8,  dtype::I8,  dtype::I16, dtype::U16,  dtype::I32, dtype::U32,
                              dtype::I64,  dtype::U64, dtype::F16, dtype::BF16, dtype::F32, dtype::F64, dtype::E4M3};

}  // namespace

// ---- round trips ----

TEST(safetensors, round_trip_every_dtype_scalars_and_empty) {
    temp_dir d;
    const std::vector<std::vector<int64_t>> shapes = {{3, 5}, {}, {0}, {2, 0, 3}, {7}};
    struct want { std::string name; dtype t; std::vector<int64_t> shape; std::vector<uint8_t> bytes; };
    std::vector<want> wants;
    safetensors_writer w;
    uint32_t seed = 1;
    for (dtype t : k_all_dtypes) {
        for (size_t s = 0; s < shapes.size(); ++s) {
            int64_t n = 1;
            for (int64_t x : shapes[s]) n *= x;
            want x{std::string(dtype_name(t)) + ".s" + std::to_string(s), t, shapes[s],
                   pattern(size_t(n) * dtype_size(t), seed++)};
            w.add(x.name, x.t, x.shape, x.bytes.data());
            wants.push_back(x);
        }
    }
    w.set_metadata("format", "pt");
    w.set_metadata("note", "ünïcode \"quoted\"\n");
    std::string path = d / "all.safetensors";
    w.write_file(path);

    std::string raw = read_bytes(path);
    uint64_t n = 0;
    std::memcpy(&n, raw.data(), 8);
    EXPECT_EQ(n % 8, 0u) << "header must be padded to a multiple of 8";

    auto f = safetensors_file::open(path);
    EXPECT_EQ(f->header().data_start, 8 + n);
    EXPECT_EQ(f->header().tensors.size(), wants.size());
    EXPECT_EQ(f->header().metadata.at("format"), "pt");
    EXPECT_EQ(f->header().metadata.at("note"), "ünïcode \"quoted\"\n");
    for (const auto& x : wants) {
        SCOPED_TRACE(x.name);
        tensor t = f->get(x.name);
        EXPECT_EQ(t.type, x.t);
        EXPECT_EQ(t.shape, x.shape);
        EXPECT_EQ(t.nbytes(), x.bytes.size());
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % dtype_size(x.t), 0u) << "not naturally aligned";
        if (!x.bytes.empty()) EXPECT_EQ(std::memcmp(t.data, x.bytes.data(), x.bytes.size()), 0);
    }
}

TEST(safetensors, views_keep_the_mapping_alive) {
    temp_dir d;
    float v[3] = {1.0f, 2.0f, 3.0f};
    safetensors_writer w;
    w.add("x", dtype::F32, {3}, v);
    w.write_file(d / "x.safetensors");
    tensor t;
    {
        auto f = safetensors_file::open(d / "x.safetensors");
        t = f->get("x");
        EXPECT_EQ(t.data, f->get("x").data) << "views must be zero-copy";
    }
    fs::remove(d / "x.safetensors");  // the mapping outlives both the file object and the name
    ASSERT_TRUE(t.owner);
    EXPECT_EQ(t.ptr<float>()[2], 3.0f);
}

TEST(safetensors, accepted_edge_cases) {
    temp_dir d;
    // Leading whitespace, a null __metadata__, zero-size tensors sharing an offset, an empty header.
    const std::pair<std::string, size_t> ok[] = {
        {"  {\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2},
        {"{\"__metadata__\":null,\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]}}", 0},
        {"{}", 0},
    };
    int i = 0;
    for (const auto& c : ok) {
        std::string p = d / ("ok" + std::to_string(i++) + ".safetensors");
        write_bytes(p, raw_file(c.first, c.second));
        EXPECT_NO_THROW(safetensors_file::open(p)) << c.first;
    }
}

// ---- malformed files: one case per rule ----

struct bad_case {
    const char* label;
    std::string file;  // whole file bytes
    std::vector<std::string> needles;  // besides the file name
};

std::string entry(const std::string& dtype_json, const std::string& shape_json, const std::string& off_json) {
    return "{\"dtype\":" + dtype_json + ",\"shape\":" + shape_json + ",\"data_offsets\":" + off_json + "}";
}
std::string one(const std::string& e) { return "{\"a\":" + e + "}"; }

std::vector<bad_case> bad_cases() {
    const std::string u8x4 = entry("\"U8\"", "[4]", "[0,4]");
    return {
        {"short_file", std::string("\x01\x00\x00", 3), {"3 bytes", "at least 8"}},
        {"n_zero", raw_file("", 4, 0), {"header length N is 0"}},
        {"n_over_100mb", raw_file("{}", 8, 200000000), {"N = 200000000", "at most 100000000"}},
        {"n_past_eof", raw_file("{}", 0, 100), {"N = 100", "exceeds the file size 10"}},
        {"invalid_json", raw_file("{\"a\":", 0), {"not valid JSON"}},
        {"invalid_utf8", raw_file("{\"\xff\":1}", 0), {"not valid JSON"}},
        {"header_not_object", raw_file("[1,2]", 0), {"header is a JSON array", "expected an object"}},
        {"entry_not_object", raw_file("{\"a\":5}", 0), {"\"a\"", "entry is a JSON number"}},
        {"missing_field", raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[4]}}", 4), {"\"a\"", "missing field 'data_offsets'"}},
        {"extra_field", raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"x\":1}}", 4),
         {"\"a\"", "unexpected field \"x\""}},
        {"dtype_not_string", raw_file(one(entry("7", "[4]", "[0,4]")), 4), {"\"a\"", "'dtype' is a JSON number"}},
        {"unknown_dtype", raw_file(one(entry("\"F8_E5M2\"", "[4]", "[0,4]")), 4),
         {"\"a\"", "dtype \"F8_E5M2\" is not supported", "BF16", "F8_E4M3"}},
        {"shape_not_array", raw_file(one(entry("\"U8\"", "4", "[0,4]")), 4), {"\"a\"", "'shape' is a JSON number"}},
        {"negative_dim", raw_file(one(entry("\"U8\"", "[-4]", "[0,4]")), 4), {"\"a\"", "shape[0] = -4 is negative"}},
        {"fractional_dim", raw_file(one(entry("\"U8\"", "[4,1.5]", "[0,4]")), 4),
         {"\"a\"", "shape[1] is a JSON non-integer number"}},
        {"dim_over_int64", raw_file(one(entry("\"U8\"", "[9223372036854775808]", "[0,4]")), 4),
         {"\"a\"", "shape[0] = 9223372036854775808 exceeds 2^63-1"}},
        {"numel_overflow", raw_file(one(entry("\"U8\"", "[4294967296,4294967296]", "[0,4]")), 4),
         {"\"a\"", "element count overflows"}},
        {"bytes_overflow", raw_file(one(entry("\"F32\"", "[4611686018427387904]", "[0,4]")), 4),
         {"\"a\"", "x 4 bytes (F32) overflows"}},
        {"offsets_not_array", raw_file(one(entry("\"U8\"", "[4]", "4")), 4), {"\"a\"", "'data_offsets' is number"}},
        {"offsets_three", raw_file(one(entry("\"U8\"", "[4]", "[0,4,4]")), 4),
         {"\"a\"", "'data_offsets' is an array of 3 elements", "expected [begin, end]"}},
        {"offsets_negative", raw_file(one(entry("\"U8\"", "[4]", "[-1,4]")), 4), {"\"a\"", "data_offsets[0] = -1 is negative"}},
        {"offsets_float", raw_file(one(entry("\"U8\"", "[4]", "[0,4.0]")), 4),
         {"\"a\"", "data_offsets[1] is a JSON non-integer number"}},
        {"begin_after_end", raw_file(one(entry("\"U8\"", "[0]", "[4,2]")), 4), {"\"a\"", "[4, 2] has begin > end"}},
        {"end_past_data", raw_file(one(entry("\"U8\"", "[8]", "[0,8]")), 4),
         {"\"a\"", "end 8 exceeds the data area of 4 bytes"}},
        {"size_mismatch", raw_file(one(entry("\"F32\"", "[3]", "[0,8]")), 8),
         {"\"a\"", "span 8 bytes; expected 12 (F32 [3])"}},
        {"overlap", raw_file("{\"a\":" + u8x4 + ",\"b\":" + entry("\"U8\"", "[4]", "[2,6]") + "}", 6),
         {"\"b\"", "[2, 6] overlap tensor \"a\" at [0, 4]"}},
        {"gap", raw_file("{\"a\":" + entry("\"U8\"", "[2]", "[0,2]") + ",\"b\":" + entry("\"U8\"", "[2]", "[4,6]") + "}", 6),
         {"\"b\"", "begin 4 leaves a gap after byte 2"}},
        {"trailing_bytes", raw_file(one(u8x4), 6), {"cover 4 bytes", "has 6", "no trailing"}},
        {"duplicate_tensor", raw_file("{\"a\":" + u8x4 + ",\"a\":" + u8x4 + "}", 4), {"duplicate tensor name \"a\""}},
        {"duplicate_field", raw_file("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4),
         {"\"a\"", "duplicate key \"dtype\""}},
        {"too_deep", raw_file(one(entry("\"U8\"", "[[4]]", "[0,4]")), 4), {"\"a\"", "nests deeper"}},
        {"metadata_not_object", raw_file("{\"__metadata__\":[1],\"a\":" + u8x4 + "}", 4),
         {"'__metadata__' is a JSON array"}},
        {"metadata_value_not_string", raw_file("{\"__metadata__\":{\"k\":1},\"a\":" + u8x4 + "}", 4),
         {"__metadata__[\"k\"] is a JSON number", "expected a string"}},
        {"metadata_duplicate", raw_file("{\"__metadata__\":{\"k\":\"x\",\"k\":\"y\"},\"a\":" + u8x4 + "}", 4),
         {"duplicate key \"k\""}},
    };
}

class safetensors_bad : public testing::TestWithParam<bad_case> {};

TEST_P(safetensors_bad, error_names_file_and_field) {
    temp_dir d;
    std::string path = d / (std::string("bad_") + GetParam().label + ".safetensors");
    write_bytes(path, GetParam().file);
    std::vector<std::string> needles = GetParam().needles;
    needles.push_back(path);
    expect_error([&] { safetensors_file::open(path); }, needles);
    // The parser alone (what the fuzzer calls) reports the same.
    const std::string& b = GetParam().file;
    expect_error([&] { st_parse_header(reinterpret_cast<const uint8_t*>(b.data()), b.size(), b.size(), "mem"); },
                 GetParam().needles);
}

INSTANTIATE_TEST_SUITE_P(rules, safetensors_bad, testing::ValuesIn(bad_cases()),
                         [](const testing::TestParamInfo<bad_case>& i) { return std::string(i.param.label); });

TEST(safetensors, parse_header_buffer_shorter_than_header) {
    std::string b = raw_file("{}", 6);
    expect_error([&] { st_parse_header(reinterpret_cast<const uint8_t*>(b.data()), 9, b.size(), "buf.st"); },
                 {"buf.st", "buffer holds 9 bytes", "8 + N = 10"});
}

// ---- sharding, index, model directories ----

TEST(safetensors, sharded_write_and_read_with_index) {
    temp_dir d;
    // Sizes in bytes: t0..t2, t4, t5 = 100, t3 = 1000; limit 250. huggingface_hub's split (checked
    // with huggingface_hub 2.4.0 split_state_dict_into_shards_factory) gives
    // [t0 t1] [t3] [t2 t4] [t5]: t3 is over the limit and gets its own shard where it is met.
    safetensors_writer w;
    std::map<std::string, std::vector<uint8_t>> data;
    const char* names[] = {"t0", "t1", "t2", "t3", "t4", "t5"};
    for (int i = 0; i < 6; ++i) {
        int64_t n = i == 3 ? 250 : 25;
        data[names[i]] = pattern(size_t(n) * 4, 100 + uint32_t(i));
        w.add(names[i], dtype::F32, {n}, data[names[i]].data());
    }
    auto files = w.write(d.path, 250);
    const std::vector<std::string> want_files = {"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                                 "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
                                                 "model.safetensors.index.json"};
    EXPECT_EQ(files, want_files);
    auto idx = nlohmann::json::parse(read_bytes(d / "model.safetensors.index.json"));
    EXPECT_EQ(idx["metadata"]["total_size"], 1500);
    const std::map<std::string, std::string> want_map = {
        {"t0", want_files[0]}, {"t1", want_files[0]}, {"t3", want_files[1]},
        {"t2", want_files[2]}, {"t4", want_files[2]}, {"t5", want_files[3]}};
    EXPECT_EQ(idx["weight_map"].get<decltype(want_map)>(), want_map);

    auto m = safetensors_model::open_dir(d.path);
    EXPECT_EQ(m.names(), (std::vector<std::string>{"t0", "t1", "t2", "t3", "t4", "t5"}));
    for (const auto& kv : want_map) {
        SCOPED_TRACE(kv.first);
        EXPECT_EQ(fs::path(m.file_of(kv.first)).filename().string(), kv.second);
        tensor t = m.get(kv.first);
        ASSERT_EQ(t.nbytes(), data[kv.first].size());
        EXPECT_EQ(std::memcmp(t.data, data[kv.first].data(), t.nbytes()), 0);
    }
    expect_error([&] { m.get("nope"); }, {"\"nope\"", d.path});

    // Everything fits: one model.safetensors, no index (as HF); the stale index is removed.
    EXPECT_EQ(w.write(d.path, 1 << 20), std::vector<std::string>{"model.safetensors"});
    EXPECT_FALSE(fs::exists(d / "model.safetensors.index.json"));
    EXPECT_EQ(safetensors_model::open_dir(d.path).file_of("t3"), d / "model.safetensors");
}

namespace {
void write_one_tensor(const std::string& path, const std::string& name) {
    uint8_t b[2] = {1, 2};
    safetensors_writer w;
    w.add(name, dtype::U8, {2}, b);
    w.write_file(path);
}
void write_index(const temp_dir& d, const std::string& weight_map_json) {
    write_bytes(d / "model.safetensors.index.json",
                "{\"metadata\":{\"total_size\":4},\"weight_map\":" + weight_map_json + "}");
}
}  // namespace

TEST(safetensors, open_dir_index_errors) {
    temp_dir d;
    std::string idx = d / "model.safetensors.index.json";
    write_one_tensor(d / "s1.safetensors", "a");
    write_one_tensor(d / "s2.safetensors", "b");

    write_index(d, "{\"a\":\"s1.safetensors\",\"b\":\"missing.safetensors\"}");
    expect_error([&] { safetensors_model::open_dir(d.path); }, {idx, "missing.safetensors", "\"b\"", "does not exist"});

    write_index(d, "{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\"}");
    expect_error([&] { safetensors_model::open_dir(d.path); }, {idx, "\"b\"", "s1.safetensors", "lacks it"});

    write_index(d, "{\"a\":\"s1.safetensors\"}");
    write_one_tensor(d / "s1.safetensors", "a");
    safetensors_writer w2;
    uint8_t b[2] = {0, 0};
    w2.add("a", dtype::U8, {2}, b);
    w2.add("extra", dtype::U8, {2}, b);
    w2.write_file(d / "s1.safetensors");
    expect_error([&] { safetensors_model::open_dir(d.path); }, {idx, "\"extra\"", "does not list it"});

    write_index(d, "{\"a\":\"../s1.safetensors\"}");
    expect_error([&] { safetensors_model::open_dir(d.path); }, {idx, "../s1.safetensors", "expected a file name"});

    write_bytes(idx, "{\"metadata\":{}}");
    expect_error([&] { safetensors_model::open_dir(d.path); }, {idx, "'weight_map'"});

    write_bytes(idx, "{\"weight_map\":");
    expect_error([&] { safetensors_model::open_dir(d.path); }, {idx, "not valid JSON"});

    write_index(d, "{\"a\":\"s1.safetensors\",\"extra\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}");
    auto m = safetensors_model::open_dir(d.path);
    EXPECT_EQ(m.names(), (std::vector<std::string>{"a", "b", "extra"}));
    EXPECT_EQ(m.file_of("b"), d / "s2.safetensors");
}

TEST(safetensors, open_dir_without_index) {
    temp_dir d;
    expect_error([&] { safetensors_model::open_dir(d.path); }, {d.path, "no model.safetensors"});
    expect_error([&] { safetensors_model::open_dir(d / "nope"); }, {d / "nope", "does not exist"});

    // All *.safetensors, sorted; names must be unique across files.
    write_one_tensor(d / "b.safetensors", "from_b");
    write_one_tensor(d / "a.safetensors", "from_a");
    auto m = safetensors_model::open_dir(d.path);
    EXPECT_EQ(m.names(), (std::vector<std::string>{"from_a", "from_b"}));
    EXPECT_EQ(m.file_of("from_b"), d / "b.safetensors");
    EXPECT_TRUE(m.has("from_a"));
    EXPECT_FALSE(m.has("x"));
    EXPECT_EQ(m.find("x"), nullptr);

    write_one_tensor(d / "c.safetensors", "from_a");
    expect_error([&] { safetensors_model::open_dir(d.path); }, {"\"from_a\"", d / "a.safetensors", d / "c.safetensors"});

    // model.safetensors takes precedence over the other files.
    write_one_tensor(d / "model.safetensors", "main");
    EXPECT_EQ(safetensors_model::open_dir(d.path).names(), std::vector<std::string>{"main"});
}

TEST(safetensors, writer_rejects_bad_input) {
    safetensors_writer w;
    uint8_t b[4] = {};
    w.add("a", dtype::U8, {4}, b);
    expect_error([&] { w.add("a", dtype::U8, {4}, b); }, {"\"a\"", "added twice"});
    expect_error([&] { w.add("__metadata__", dtype::U8, {4}, b); }, {"\"__metadata__\"", "reserved"});
    expect_error([&] { w.add("neg", dtype::U8, {-1}, b); }, {"\"neg\"", "bad shape [-1]"});
    expect_error([&] { w.add("null", dtype::U8, {4}, nullptr); }, {"\"null\"", "null data"});
    expect_error([&] { w.add("bad\xff", dtype::U8, {4}, b); }, {"not valid UTF-8"});
    expect_error([&] { w.write_file("/nonexistent_dir_tetra/x.safetensors"); }, {"/nonexistent_dir_tetra/x.safetensors"});
}

// ---- golden file from the Python safetensors library ----

namespace {
template <typename T>
std::vector<uint8_t> le_bytes(std::initializer_list<T> v) {
    static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "test assumes a little-endian host");
    std::vector<uint8_t> out(v.size() * sizeof(T));
    std::memcpy(out.data(), v.begin(), out.size());
    return out;
}
struct golden_tensor { std::string name; dtype t; std::vector<int64_t> shape; std::vector<uint8_t> bytes; };

// Same values as TENSORS in tools/gen_safetensors_golden.py, in that order.
std::vector<golden_tensor> golden_tensors() {
    return {
        {"embed.weight", dtype::F32, {2, 3}, le_bytes<float>({1.5f, -2.25f, 0.0f, 3.0e38f, -0.0f, 1e-45f})},
        {"norm.bias", dtype::F16, {4}, le_bytes<uint16_t>({0x3C00, 0xB800, 0x7BFF, 0x0001})},
        {"layer.0.w", dtype::BF16, {2, 2}, le_bytes<uint16_t>({0x3F80, 0xC000, 0x7F80, 0x0001})},
        {"layer.0.w_scale", dtype::E4M3, {3}, {0x38, 0x7E, 0x01}},
        {"ids", dtype::I64, {}, le_bytes<int64_t>({-1234567890123})},
        {"mask", dtype::BOOL, {3}, {1, 0, 1}},
        {"empty", dtype::U8, {0, 4}, {}},
        {"counts", dtype::U32, {2}, le_bytes<uint32_t>({4000000000u, 7u})},
        {"small", dtype::I8, {3}, {0x80, 0x00, 0x7F}},
        {"i16", dtype::I16, {2}, le_bytes<int16_t>({-32768, 32767})},
        {"u16", dtype::U16, {2}, le_bytes<uint16_t>({65535, 1})},
        {"i32", dtype::I32, {2}, le_bytes<int32_t>({INT32_MIN, 42})},
        {"u64", dtype::U64, {1}, le_bytes<uint64_t>({UINT64_MAX})},
        {"f64", dtype::F64, {2}, le_bytes<double>({3.141592653589793, -1e308})},
        {"na\xc3\xafve.\xc3\xa9", dtype::F32, {}, le_bytes<float>({0.25f})},
        {"odd \"q\"\\name", dtype::F32, {1}, le_bytes<float>({-1.0f})},
    };
}
const std::string k_golden = std::string(TETRA_SOURCE_DIR) + "/tests/data/safetensors/golden.safetensors";
}  // namespace

TEST(safetensors, golden_from_python_reads_exact_values) {
    auto f = safetensors_file::open(k_golden);
    EXPECT_EQ(f->header().metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
    auto want = golden_tensors();
    EXPECT_EQ(f->header().tensors.size(), want.size());
    for (const auto& g : want) {
        SCOPED_TRACE(g.name);
        ASSERT_NE(f->find(g.name), nullptr);
        tensor t = f->get(g.name);
        EXPECT_EQ(t.type, g.t);
        EXPECT_EQ(t.shape, g.shape);
        ASSERT_EQ(t.nbytes(), g.bytes.size());
        EXPECT_EQ(std::vector<uint8_t>(t.ptr<uint8_t>(), t.ptr<uint8_t>() + t.nbytes()), g.bytes);
    }
}

TEST(safetensors, writer_matches_python_bytes) {
    // The HF serializer is deterministic for one metadata key (the generator checks it over shuffled
    // insertion orders), so our file must be byte-identical. Insert in reverse order: the layout
    // must come from the HF ordering rule, not from insertion order.
    temp_dir d;
    safetensors_writer w;
    auto want = golden_tensors();
    for (auto it = want.rbegin(); it != want.rend(); ++it) w.add(it->name, it->t, it->shape, it->bytes.data());
    w.set_metadata("format", "pt");
    w.write_file(d / "ours.safetensors");
    std::string ours = read_bytes(d / "ours.safetensors"), theirs = read_bytes(k_golden);
    ASSERT_FALSE(theirs.empty());
    EXPECT_EQ(ours.size(), theirs.size());
    EXPECT_TRUE(ours == theirs) << "first 200 bytes of ours: " << ours.substr(0, 200);
}
