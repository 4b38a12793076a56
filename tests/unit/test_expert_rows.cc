// bind_expert_rows (models/weights.h): one expert's rows of a stacked [experts, rows, cols] tensor, read
// in place as a weight of its own (Granite's input_linear, Transformers 5's experts.gate_up_proj).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unistd.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "ir/builder.h"
#include "models/weights.h"

namespace fs = std::filesystem;
using namespace hfx;

namespace {

// A checkpoint folder with one F32 tensor "w" [3, 4, 2] holding 0, 1, ..., 23 after a 2-element "a"
// (so "w" does not start at the data's first byte).
fs::path write_checkpoint() {
  const fs::path dir = fs::temp_directory_path() / ("hfx-expert-rows-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "granitemoehybrid"})";
  nlohmann::json h = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                      {"w", {{"dtype", "F32"}, {"shape", {3, 4, 2}}, {"data_offsets", {8, 8 + 4 * 24}}}}};
  const std::string header = h.dump();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  std::vector<float> values(26);
  std::iota(values.begin() + 2, values.end(), 0.0f);
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  out << bytes << header;
  out.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
  return dir;
}

TEST(ExpertRows, ReadsOneExpertsRowsInPlace) {
  const fs::path dir = write_checkpoint();
  {
    const io::Checkpoint ckpt = io::Checkpoint::open(dir);
    ir::Graph g;
    ir::Builder b(g);
    // Expert 1, rows 2..3: elements (1 * 4 + 2) * 2 = 12 .. 15.
    const ir::ValueId v = models::bind_expert_rows(b, ckpt, "w", {3, 4, 2}, 1, 2, 4, "test");
    EXPECT_EQ(models::bind_expert_rows(b, ckpt, "w", {3, 4, 2}, 1, 2, 4, "test"), v);  // bound once
    const ir::WeightRef* w = g.weight(v);
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->shape(), (std::vector<int64_t>{2, 2}));
    const Tensor t = w->materialize();
    EXPECT_EQ(std::vector<float>(t.values<float>().begin(), t.values<float>().end()),
              (std::vector<float>{12, 13, 14, 15}));
    // Another block of the same tensor is another weight, with its own description (written weights
    // are matched by it).
    const ir::ValueId other = models::bind_expert_rows(b, ckpt, "w", {3, 4, 2}, 2, 2, 4, "test");
    EXPECT_NE(g.weight(other)->describe(), w->describe());
    EXPECT_EQ(g.weight(other)->materialize().values<float>()[0], 20.0f);
    EXPECT_EQ(ckpt.unused(), (std::vector<std::string>{"a"}));  // "w" counts as used
    // A tensor whose shape is not the one the config implies is refused, naming it.
    try {
      models::bind_expert_rows(b, ckpt, "w", {3, 8, 1}, 0, 0, 8, "hidden_size=1");
      FAIL() << "a wrong shape was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_NE(e.describe().find("tensor w has shape [3, 4, 2]"), std::string::npos) << e.describe();
    }
  }
  fs::remove_all(dir);
}

}  // namespace
