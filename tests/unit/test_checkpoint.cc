// Checkpoint folders: single file, shards with an index, glob, pickles, and the HF cache layout.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/error.h"
#include "io/checkpoint.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace hfx;
using namespace hfx::io;

namespace {

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A valid safetensors file holding one F32 tensor of `count` elements per name, packed in order.
void write_st(const fs::path& p, const std::vector<std::pair<std::string, int64_t>>& tensors) {
  json h = json::object();
  int64_t off = 0;
  for (const auto& [name, count] : tensors) {
    h[name] = {{"dtype", "F32"}, {"shape", {count}}, {"data_offsets", {off, off + 4 * count}}};
    off += 4 * count;
  }
  std::string header = h.dump();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = char((header.size() >> (8 * i)) & 0xff);
  write_text(p, bytes + header + std::string(size_t(off), '\0'));
}

class CheckpointTest : public ::testing::Test {
 protected:
  fs::path root, dir;
  void SetUp() override {
    static std::atomic<int> counter{0};
    root = fs::temp_directory_path() /
           ("hfx-ck-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(root);
    dir = root / "model";
    fs::create_directories(dir);
    write_text(dir / "config.json", R"({"model_type": "llama", "hidden_size": 8})");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root, ec);
  }

  void write_index(const json& weight_map) {
    write_text(dir / "model.safetensors.index.json",
               json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
  }

  std::string open_error(ErrorKind kind = ErrorKind::BadInput) {
    try {
      Checkpoint::open(dir);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return e.what();
    }
    ADD_FAILURE() << "Checkpoint::open succeeded";
    return "";
  }
};

#define EXPECT_CONTAINS(haystack, needle)                                           \
  do {                                                                              \
    std::string h_ = (haystack);                                                    \
    EXPECT_NE(h_.find(needle), std::string::npos) << "'" << (needle) << "' not in: " << h_; \
  } while (0)

}  // namespace

TEST_F(CheckpointTest, SingleFileWithSideFilesAndAccounting) {
  write_st(dir / "model.safetensors", {{"embed.weight", 6}, {"norm.weight", 2}});
  write_st(dir / "other.safetensors", {{"ignored", 1}});  // model.safetensors wins over the glob
  write_text(dir / "generation_config.json", R"({"eos_token_id": [1, 2]})");
  write_text(dir / "tokenizer.json", "{}");
  write_text(dir / "merges.txt", "");
  write_text(dir / "chat_template.jinja", "");

  Checkpoint ck = Checkpoint::open(dir);
  EXPECT_EQ(ck.model_type(), "llama");
  EXPECT_EQ(require_int(ck.config(), ck.config().json, "hidden_size"), 8);
  ASSERT_TRUE(ck.generation_config().has_value());
  EXPECT_EQ(ck.tensors().size(), 2u);
  EXPECT_EQ(ck.weight_files(), (std::vector<fs::path>{dir / "model.safetensors"}));
  EXPECT_EQ(ck.side_files(),
            (std::vector<fs::path>{dir / "config.json", dir / "generation_config.json",
                                   dir / "tokenizer.json", dir / "merges.txt",
                                   dir / "chat_template.jinja"}));
  EXPECT_EQ(ck.total_weight_bytes(), 32);
  EXPECT_EQ(ck.get("embed.weight").shape, (std::vector<int64_t>{6}));
  EXPECT_EQ(ck.find("nope"), nullptr);
  try {
    ck.get("lm_head.weight");
    ADD_FAILURE() << "get succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_CONTAINS(e.what(), "missing tensor lm_head.weight (expected by the model definition) in " + dir.string());
  }
  EXPECT_EQ(ck.unused(), (std::vector<std::string>{"embed.weight", "norm.weight"}));
  ck.mark_used("embed.weight");
  EXPECT_EQ(ck.unused(), (std::vector<std::string>{"norm.weight"}));
}

TEST_F(CheckpointTest, ModelTypeRequired) {
  write_text(dir / "config.json", R"({"hidden_size": 8})");
  write_st(dir / "model.safetensors", {{"w", 1}});
  Checkpoint ck = Checkpoint::open(dir);
  EXPECT_FALSE(ck.generation_config().has_value());
  try {
    ck.model_type();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "config.json: field \"model_type\": missing (expected a string)");
  }
}

TEST_F(CheckpointTest, GlobsSafetensorsSortedAndRejectsDuplicates) {
  write_st(dir / "b.safetensors", {{"y", 1}});
  write_st(dir / "a.safetensors", {{"x", 1}});
  Checkpoint ck = Checkpoint::open(dir);
  EXPECT_EQ(ck.weight_files(), (std::vector<fs::path>{dir / "a.safetensors", dir / "b.safetensors"}));
  EXPECT_EQ(ck.tensors().size(), 2u);

  write_st(dir / "b.safetensors", {{"x", 1}});
  EXPECT_CONTAINS(open_error(), "tensor x is in both a.safetensors and b.safetensors");
}

TEST_F(CheckpointTest, ShardedIndex) {
  write_st(dir / "model-00001-of-00002.safetensors", {{"a", 2}});
  write_st(dir / "model-00002-of-00002.safetensors", {{"b", 1}, {"c", 3}});
  write_st(dir / "consolidated.safetensors", {{"a", 2}});  // not in the index: not read
  write_index({{"a", "model-00001-of-00002.safetensors"},
               {"b", "model-00002-of-00002.safetensors"},
               {"c", "model-00002-of-00002.safetensors"}});
  Checkpoint ck = Checkpoint::open(dir);
  EXPECT_EQ(ck.tensors().size(), 3u);
  EXPECT_EQ(ck.weight_files().size(), 2u);
  EXPECT_EQ(ck.get("c").file->path(), dir / "model-00002-of-00002.safetensors");
  EXPECT_EQ(ck.total_weight_bytes(), 24);
}

TEST_F(CheckpointTest, ShardedMissingShard) {
  write_st(dir / "s1.safetensors", {{"a", 1}});
  write_index({{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  EXPECT_CONTAINS(open_error(), "shard s2.safetensors does not exist");
}

TEST_F(CheckpointTest, ShardedRejectsNamesOutsideTheFolder) {
  write_st(root / "evil.safetensors", {{"a", 1}});
  std::vector<std::string> names = {"../evil.safetensors", "..", (root / "evil.safetensors").string(),
                                    "sub/x.safetensors", "sub\\x.safetensors", ""};
  for (const std::string& name : names) {
    write_index({{"a", name}});
    std::string msg = open_error();
    EXPECT_CONTAINS(msg, "model.safetensors.index.json");
    EXPECT_CONTAINS(msg, "is not a plain file name");
  }
}

TEST_F(CheckpointTest, ShardedRejectsSymlinkOutsideTheFolder) {
  write_st(root / "evil.safetensors", {{"a", 1}});
  fs::create_symlink(root / "evil.safetensors", dir / "s1.safetensors");
  write_index({{"a", "s1.safetensors"}});
  EXPECT_CONTAINS(open_error(), "shard s1.safetensors is a link to");
  // A link that stays inside the folder is fine.
  fs::rename(root / "evil.safetensors", dir / "real.safetensors");
  fs::remove(dir / "s1.safetensors");
  fs::create_symlink("real.safetensors", dir / "s1.safetensors");
  EXPECT_EQ(Checkpoint::open(dir).tensors().size(), 1u);
}

TEST_F(CheckpointTest, AcceptsHubCacheSnapshotLinks) {
  // ~/.cache/huggingface/hub/models--org--name/snapshots/<rev>/file -> ../../blobs/<sha>
  fs::path repo = root / "models--org--name";
  fs::path snap = repo / "snapshots" / "abc123";
  write_st(repo / "blobs" / "sha1", {{"w", 2}});
  write_text(repo / "blobs" / "sha2", R"({"model_type": "gpt2"})");
  fs::create_directories(snap);
  fs::create_symlink("../../blobs/sha1", snap / "model.safetensors");
  fs::create_symlink("../../blobs/sha2", snap / "config.json");
  Checkpoint ck = Checkpoint::open(snap);
  EXPECT_EQ(ck.model_type(), "gpt2");
  EXPECT_EQ(ck.tensors().size(), 1u);
}

TEST_F(CheckpointTest, SideFileLinkOutsideTheFolderRefused) {
  write_st(dir / "model.safetensors", {{"w", 1}});
  write_text(root / "secret", "{}");
  fs::create_symlink(root / "secret", dir / "tokenizer.json");
  EXPECT_CONTAINS(open_error(), "tokenizer.json is a link to");
}

TEST_F(CheckpointTest, ShardedTensorMissingFromShard) {
  write_st(dir / "s1.safetensors", {{"a", 1}});
  write_index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}});
  EXPECT_CONTAINS(open_error(), "tensor b is mapped to s1.safetensors by model.safetensors.index.json, but that shard has no such tensor");
}

TEST_F(CheckpointTest, ShardedTensorNotInIndex) {
  write_st(dir / "s1.safetensors", {{"a", 1}, {"extra", 1}});
  write_index({{"a", "s1.safetensors"}});
  EXPECT_CONTAINS(open_error(), "s1.safetensors: tensor extra is not listed in model.safetensors.index.json");
}

TEST_F(CheckpointTest, ShardedTensorInTheWrongShard) {
  write_st(dir / "s1.safetensors", {{"a", 1}});
  write_st(dir / "s2.safetensors", {{"a", 1}, {"b", 1}});
  write_index({{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  EXPECT_CONTAINS(open_error(), "s2.safetensors: tensor a is stored here, but model.safetensors.index.json maps it to s1.safetensors");
}

TEST_F(CheckpointTest, ShardedBadIndex) {
  write_text(dir / "model.safetensors.index.json", R"({"weight_map": {}})");
  EXPECT_CONTAINS(open_error(), "field \"weight_map\": expected a non-empty object");
  write_index({{"a", 5}});
  EXPECT_CONTAINS(open_error(), "weight_map \"a\": expected a shard file name, found 5");
}

TEST_F(CheckpointTest, RefusesPickleOnlyFolder) {
  write_text(dir / "pytorch_model.bin", "PK\x03\x04 not really");
  write_text(dir / "training_args.bin", "");
  std::string msg = open_error();
  EXPECT_CONTAINS(msg, dir.string() + ": only pickled PyTorch weights (pytorch_model.bin) found");
  EXPECT_CONTAINS(msg, "hfx never unpickles files");
  EXPECT_CONTAINS(msg, "Convert them to safetensors first");

  fs::remove(dir / "pytorch_model.bin");
  fs::remove(dir / "training_args.bin");
  write_text(dir / "weights.ckpt", "");
  EXPECT_CONTAINS(open_error(), "only pickled PyTorch weights (weights.ckpt) found");
}

TEST_F(CheckpointTest, NoWeightsAtAll) {
  EXPECT_CONTAINS(open_error(), "no weights found");
}

TEST_F(CheckpointTest, MissingFolderAndConfig) {
  fs::remove(dir / "config.json");
  write_st(dir / "model.safetensors", {{"w", 1}});
  EXPECT_CONTAINS(open_error(), dir.string() + ": no config.json");
  fs::remove_all(dir);
  EXPECT_CONTAINS(open_error(), dir.string() + ": no such model folder");
}

TEST_F(CheckpointTest, InvalidConfigJson) {
  write_text(dir / "config.json", "{\"model_type\": ");
  write_st(dir / "model.safetensors", {{"w", 1}});
  EXPECT_CONTAINS(open_error(), "config.json: not valid JSON");
}

TEST_F(CheckpointTest, BrokenShardNamesFileAndTensor) {
  write_st(dir / "model.safetensors", {{"w", 1}});
  std::string bytes;
  {
    std::ifstream in(dir / "model.safetensors", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  write_text(dir / "model.safetensors", bytes.substr(0, bytes.size() - 2));  // truncated data
  std::string msg = open_error();
  EXPECT_CONTAINS(msg, "model.safetensors: tensor w: data ends at byte 4");
}
