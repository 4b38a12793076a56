// Safetensors reader and JSON field helpers. Files are written by hand so every malformed case is
// exactly the one under test.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/error.h"
#include "core/mapped_file.h"
#include "io/json_fields.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace hfx;
using namespace hfx::io;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("hfx-st-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// 8-byte little-endian length, header, data.
std::string raw_file(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  TempDir dir;
  fs::path file = dir.path / "model.safetensors";

  void write(const std::string& header, const std::string& data = "") {
    write_bytes(file, raw_file(header, data));
  }
  SafetensorsFile read() { return read_safetensors(MappedFile::open(file)); }

  // The reader must fail with `kind`, in one line naming the file and containing every part.
  void expect_error(ErrorKind kind, const std::vector<std::string>& parts) {
    try {
      read();
      ADD_FAILURE() << "no error; expected one containing " << parts.at(0);
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(e.kind(), kind) << msg;
      EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  }
  void expect_bad(const std::vector<std::string>& parts) { expect_error(ErrorKind::BadInput, parts); }
};

}  // namespace

TEST_F(SafetensorsTest, ParsesValidFileWithOffsetsShapesAndMetadata) {
  std::vector<float> f32 = {1, 2, 3, 4, 5, 6};
  std::string data(reinterpret_cast<const char*>(f32.data()), 24);  // w_f32 [0, 24)
  data += std::string(8, '\x01');                                    // w_f16 [24, 32)
  data += std::string(8, '\x02');                                    // w_bf16 [32, 40)
  std::vector<int64_t> i64 = {7, -8, 9};
  data += std::string(reinterpret_cast<const char*>(i64.data()), 24);  // ids [40, 64)
  json h = {{"__metadata__", {{"format", "pt"}}},
            {"w_f32", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
            {"w_f16", {{"dtype", "F16"}, {"shape", {4}}, {"data_offsets", {24, 32}}}},
            {"w_bf16", {{"dtype", "BF16"}, {"shape", {2, 2}}, {"data_offsets", {32, 40}}}},
            {"ids", {{"dtype", "I64"}, {"shape", {3}}, {"data_offsets", {40, 64}}}},
            {"empty", {{"dtype", "F32"}, {"shape", {0, 5}}, {"data_offsets", {64, 64}}}}};
  std::string header = h.dump();
  header.resize((header.size() + 7) / 8 * 8, ' ');  // writers pad the header with spaces
  write(header, data);

  SafetensorsFile st = read();
  EXPECT_EQ(st.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(st.tensors.size(), 5u);
  std::vector<std::string> names;
  for (const auto& t : st.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"empty", "ids", "w_bf16", "w_f16", "w_f32"}));

  const size_t base = 8 + header.size();
  const TensorEntry& w = st.tensors[4];
  EXPECT_EQ(w.dtype, DType::F32);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.offset, base);
  EXPECT_EQ(w.nbytes, 24u);
  float back[6];
  std::memcpy(back, w.data(), 24);
  EXPECT_EQ(back[5], 6.0f);

  EXPECT_EQ(st.tensors[3].dtype, DType::F16);
  EXPECT_EQ(st.tensors[3].offset, base + 24);
  EXPECT_EQ(st.tensors[2].dtype, DType::BF16);
  EXPECT_EQ(st.tensors[2].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(st.tensors[2].offset, base + 32);
  const TensorEntry& ids = st.tensors[1];
  EXPECT_EQ(ids.dtype, DType::I64);
  EXPECT_EQ(ids.offset, base + 40);
  int64_t id2;
  std::memcpy(&id2, ids.data() + 8, 8);
  EXPECT_EQ(id2, -8);
  EXPECT_EQ(st.tensors[0].nbytes, 0u);
  EXPECT_EQ(st.tensors[0].shape, (std::vector<int64_t>{0, 5}));
}

TEST_F(SafetensorsTest, ScalarTensor) {
  write(R"({"s":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})", std::string(4, '\0'));
  auto st = read();
  ASSERT_EQ(st.tensors.size(), 1u);
  EXPECT_TRUE(st.tensors[0].shape.empty());
  EXPECT_EQ(st.tensors[0].nbytes, 4u);
}

TEST_F(SafetensorsTest, RejectsShortFile) {
  write_bytes(file, "abc");
  expect_bad({"3 bytes", "too short"});
}

TEST_F(SafetensorsTest, RejectsHeaderPastEndOfFile) {
  write_bytes(file, raw_file("{}").substr(0, 8) + "{}");  // length 2 is fine
  EXPECT_NO_THROW(read());
  std::string bytes = raw_file(std::string(100, ' '));
  write_bytes(file, bytes.substr(0, 50));
  expect_bad({"header length 100", "past the end", "50 bytes"});
}

TEST_F(SafetensorsTest, RejectsAbsurdHeaderLength) {
  std::string bytes(16, '\0');
  bytes[5] = 1;  // 2^40
  write_bytes(file, bytes);
  expect_bad({"1099511627776", "100 MB"});
}

TEST_F(SafetensorsTest, RejectsInvalidJsonAndNonObject) {
  write("{\"a\": ");
  expect_bad({"not valid JSON"});
  write("[1, 2]");
  expect_bad({"expected a JSON object", "array"});
}

TEST_F(SafetensorsTest, RejectsUnknownDtype) {
  write(R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", "x");
  expect_bad({"tensor w", "unknown dtype \"Q7\""});
  // A real safetensors dtype that hfx cannot hold is Unsupported, not bad input.
  write(R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "x");
  expect_error(ErrorKind::Unsupported, {"tensor w", "F8_E4M3"});
}

TEST_F(SafetensorsTest, RejectsBadShape) {
  for (std::string shape : {"[2,-1]", "\"abc\"", "[2.5]", "[true]"}) {
    write(R"({"w":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,8]}})", std::string(8, 0));
    expect_bad({"tensor w", "shape: expected a list of non-negative integers", shape});
  }
}

TEST_F(SafetensorsTest, RejectsMissingField) {
  write(R"({"w":{"dtype":"F32","shape":[2]}})", std::string(8, 0));
  expect_bad({"tensor w", "missing \"data_offsets\""});
  write(R"({"w":[1]})");
  expect_bad({"tensor w", "expected an object"});
}

TEST_F(SafetensorsTest, RejectsBadDataOffsets) {
  for (std::string offsets : {"[0]", "[0,4,8]", "[\"0\",8]", "[-1,8]", "8"}) {
    write(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":)" + offsets + "}}", std::string(8, 0));
    expect_bad({"tensor w", "data_offsets: expected two non-negative integers"});
  }
  write(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(8, 0));
  expect_bad({"tensor w", "[8, 0]: begin is after end"});
}

TEST_F(SafetensorsTest, RejectsDataPastEnd) {
  write(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, 0));
  expect_bad({"tensor w: data ends at byte 16 but the file's data section has only 8 bytes"});
}

TEST_F(SafetensorsTest, RejectsSizeMismatch) {
  write(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,6]}})", std::string(8, 0));
  expect_bad({"tensor w: shape [2, 2] of BF16 needs 8 bytes, data_offsets give 6"});
}

TEST_F(SafetensorsTest, RejectsOverflowingAndHugeShapes) {
  write(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})",
        std::string(8, 0));
  expect_bad({"tensor w", "overflows"});
  write(R"({"w":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,8]}})", std::string(8, 0));
  expect_bad({"tensor w", "needs 4398046511104 bytes, data_offsets give 8"});
}

TEST_F(SafetensorsTest, RejectsOverlappingTensors) {
  write(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
        std::string(12, 0));
  expect_bad({"tensors a and b overlap"});
  // Zero-byte tensors occupy nothing, so they never overlap.
  write(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
        std::string(8, 0));
  EXPECT_NO_THROW(read());
}

TEST_F(SafetensorsTest, RejectsDuplicateNames) {
  write(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
        R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
        std::string(8, 0));
  expect_bad({"tensor a is listed twice"});
  write(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", std::string(4, 0));
  expect_bad({"repeats the key \"dtype\""});
}

TEST_F(SafetensorsTest, RejectsNonStringMetadata) {
  write(R"({"__metadata__":{"format":5}})");
  expect_bad({"__metadata__ \"format\"", "expected a string, found 5"});
  write(R"({"__metadata__":[]})");
  expect_bad({"__metadata__", "expected an object of strings"});
}

// ---- JSON field helpers ----

namespace {

class JsonFieldsTest : public ::testing::Test {
 protected:
  TempDir dir;
  JsonFile file{dir.path / "config.json", json::object()};

  template <typename F>
  std::string error_of(F&& f, ErrorKind kind = ErrorKind::BadInput) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
  }
};

}  // namespace

TEST_F(JsonFieldsTest, LoadErrors) {
  EXPECT_NE(error_of([&] { JsonFile::load(dir.path / "nope.json"); }, ErrorKind::Io).find("nope.json"),
            std::string::npos);
  write_bytes(dir.path / "bad.json", "{\"a\": 1,");
  std::string msg = error_of([&] { JsonFile::load(dir.path / "bad.json"); });
  EXPECT_NE(msg.find("bad.json: not valid JSON: parse error at line 1"), std::string::npos) << msg;
  write_bytes(dir.path / "arr.json", "[1]");
  msg = error_of([&] { JsonFile::load(dir.path / "arr.json"); });
  EXPECT_NE(msg.find("arr.json: expected a JSON object at the top level, found array"),
            std::string::npos) << msg;
  write_bytes(dir.path / "ok.json", R"({"a": 1})");
  EXPECT_EQ(JsonFile::load(dir.path / "ok.json").json["a"], 1);
}

TEST_F(JsonFieldsTest, Ints) {
  file.json = {{"heads", "abc"}, {"layers", 4.0}, {"half", 4.5}, {"flag", true},
               {"zero", 0},      {"neg", -1},     {"big", 18446744073709551615ull},
               {"none", nullptr}};
  const json& j = file.json;
  std::string msg = error_of([&] { require_int(file, j, "heads"); });
  EXPECT_NE(msg.find("config.json: field \"heads\": expected a positive integer, found \"abc\""),
            std::string::npos) << msg;
  EXPECT_EQ(require_int(file, j, "layers"), 4);
  EXPECT_NE(error_of([&] { require_int(file, j, "half"); }).find("found 4.5"), std::string::npos);
  EXPECT_NE(error_of([&] { require_int(file, j, "flag"); }).find("found true"), std::string::npos);
  EXPECT_NE(error_of([&] { require_int(file, j, "zero"); }).find("positive integer, found 0"),
            std::string::npos);
  EXPECT_EQ(require_int(file, j, "zero", 0), 0);
  EXPECT_NE(error_of([&] { require_int(file, j, "neg", 0); }).find("non-negative integer, found -1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { require_int(file, j, "layers", 1, 3); }).find("an integer in [1, 3], found 4.0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { require_int(file, j, "big", INT64_MIN); }).find("expected an integer, found"),
            std::string::npos);
  EXPECT_NE(error_of([&] { require_int(file, j, "missing"); }).find("field \"missing\": missing"),
            std::string::npos);
  EXPECT_NE(error_of([&] { require_int(file, j, "none"); }).find("found null"), std::string::npos);
  EXPECT_EQ(optional_int(file, j, "none"), std::nullopt);
  EXPECT_EQ(optional_int(file, j, "missing"), std::nullopt);
  EXPECT_EQ(optional_int(file, j, "layers"), 4);
  EXPECT_THROW(optional_int(file, j, "heads"), Error);
}

TEST_F(JsonFieldsTest, NumbersBoolsStrings) {
  file.json = {{"eps", 1e-5}, {"n", 3}, {"s", "1e-5"}, {"b", false}, {"nan", NAN},
               {"inf", INFINITY}, {"type", "llama"}};
  const json& j = file.json;
  EXPECT_DOUBLE_EQ(require_number(file, j, "eps"), 1e-5);
  EXPECT_DOUBLE_EQ(require_number(file, j, "n"), 3.0);
  EXPECT_NE(error_of([&] { require_number(file, j, "s"); }).find("expected a finite number, found \"1e-5\""),
            std::string::npos);
  EXPECT_THROW(require_number(file, j, "b"), Error);
  EXPECT_THROW(require_number(file, j, "nan"), Error);
  EXPECT_THROW(optional_number(file, j, "inf"), Error);
  EXPECT_EQ(optional_number(file, j, "missing"), std::nullopt);
  EXPECT_EQ(optional_bool(file, j, "b"), false);
  EXPECT_NE(error_of([&] { optional_bool(file, j, "n"); }).find("expected true or false, found 3"),
            std::string::npos);
  EXPECT_EQ(require_string(file, j, "type"), "llama");
  EXPECT_EQ(optional_string(file, j, "missing"), std::nullopt);
  EXPECT_NE(error_of([&] { optional_string(file, j, "n"); }).find("expected a string, found 3"),
            std::string::npos);
}

TEST_F(JsonFieldsTest, Lists) {
  file.json = {{"eos", 2},          {"eos_list", {2, 32000}}, {"bad", {1, "x"}},
               {"arch", "Llama"},   {"archs", {"A", "B"}},    {"bad_s", {1}},
               {"rope", {{"factor", 8.0}}}};
  const json& j = file.json;
  EXPECT_EQ(optional_int_list(file, j, "eos", 0), (std::vector<int64_t>{2}));
  EXPECT_EQ(optional_int_list(file, j, "eos_list", 0), (std::vector<int64_t>{2, 32000}));
  EXPECT_EQ(optional_int_list(file, j, "missing"), std::nullopt);
  std::string msg = error_of([&] { optional_int_list(file, j, "bad", 0); });
  EXPECT_NE(msg.find("expected a non-negative integer or a list of non-negative integers, found [1,\"x\"]"),
            std::string::npos) << msg;
  EXPECT_EQ(optional_string_list(file, j, "arch"), (std::vector<std::string>{"Llama"}));
  EXPECT_EQ(optional_string_list(file, j, "archs"), (std::vector<std::string>{"A", "B"}));
  EXPECT_THROW(optional_string_list(file, j, "bad_s"), Error);
  const json* rope = optional_object(file, j, "rope");
  ASSERT_NE(rope, nullptr);
  EXPECT_DOUBLE_EQ(require_number(file, *rope, "factor"), 8.0);
  EXPECT_EQ(optional_object(file, j, "missing"), nullptr);
  EXPECT_NE(error_of([&] { optional_object(file, j, "eos"); }).find("expected an object, found 2"),
            std::string::npos);
}
