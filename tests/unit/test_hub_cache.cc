// The Hugging Face cache read offline (io/hub_cache.h): where the cache is, which snapshot a revision
// names, and core/safe_path.h's rule that a snapshot's links may lead into its own repository's
// blobs/ and nowhere else.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "core/safe_path.h"
#include "io/checkpoint.h"
#include "io/hub_cache.h"

namespace fs = std::filesystem;
using namespace hfx;
using namespace hfx::io;

namespace {

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kOther = "fedcba9876543210fedcba9876543210fedcba98";

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A safetensors file with one F32 tensor "w" of 2 elements.
void write_weights(const fs::path& p) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = char((header.size() >> (8 * i)) & 0xff);
  write_text(p, bytes + header + std::string(8, '\0'));
}

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

std::string bad_input_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

#define EXPECT_CONTAINS(haystack, needle)                                                    \
  do {                                                                                       \
    std::string h_ = (haystack);                                                             \
    EXPECT_NE(h_.find(needle), std::string::npos) << "'" << (needle) << "' not in: " << h_; \
  } while (0)

class HubCacheTest : public ::testing::Test {
 protected:
  fs::path cache, repo;
  void SetUp() override {
    static std::atomic<int> counter{0};
    cache = fs::temp_directory_path() / ("hfx-hub-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(cache);
    repo = cache / "models--org--name";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(cache, ec);
  }
  // What `hf download org/name` leaves: blobs, a snapshot of links into them, refs/main.
  fs::path add_snapshot(const std::string& commit) {
    const fs::path snap = repo / "snapshots" / commit;
    write_text(repo / "blobs" / ("cfg-" + commit), R"({"model_type": "llama"})");
    write_weights(repo / "blobs" / ("st-" + commit));
    fs::create_directories(snap);
    fs::create_symlink("../../blobs/cfg-" + commit, snap / "config.json");
    fs::create_symlink("../../blobs/st-" + commit, snap / "model.safetensors");
    return snap;
  }
};

}  // namespace

TEST(HubCacheDir, FollowsHuggingFaceHubsOrder) {
  EXPECT_EQ(hub_cache_dir(env_of({{"HF_HUB_CACHE", "/a"}, {"HF_HOME", "/b"}, {"HOME", "/h"}})), fs::path("/a"));
  EXPECT_EQ(hub_cache_dir(env_of({{"HUGGINGFACE_HUB_CACHE", "/old"}, {"HF_HOME", "/b"}})), fs::path("/old"));
  EXPECT_EQ(hub_cache_dir(env_of({{"HF_HOME", "/b"}, {"XDG_CACHE_HOME", "/x"}})), fs::path("/b/hub"));
  EXPECT_EQ(hub_cache_dir(env_of({{"XDG_CACHE_HOME", "/x"}, {"HOME", "/h"}})), fs::path("/x/huggingface/hub"));
  EXPECT_EQ(hub_cache_dir(env_of({{"HOME", "/h"}})), fs::path("/h/.cache/huggingface/hub"));
  // An empty variable is unset, as an empty HF_HUB_CACHE= in a shell means; ~ is expanded.
  EXPECT_EQ(hub_cache_dir(env_of({{"HF_HUB_CACHE", ""}, {"HF_HOME", "~/hf"}, {"HOME", "/h"}})), fs::path("/h/hf/hub"));
}

TEST(HubId, ShapeOfARepositoryId) {
  for (const char* id : {"Qwen/Qwen3-0.6B", "gpt2", "org_1/name.v2", "a/b"}) EXPECT_TRUE(looks_like_hub_id(id)) << id;
  for (const char* id : {"./model", "/abs/path", "a/b/c", "../x", "org/", "/name", "-org/name", "org/name-",
                         "org--x/name", "org/na..me", "", "org/name with space"})
    EXPECT_FALSE(looks_like_hub_id(id)) << id;
  EXPECT_FALSE(looks_like_hub_id(std::string(97, 'a')));
  EXPECT_EQ(hub_repo_folder_name("Qwen/Qwen3-0.6B"), "models--Qwen--Qwen3-0.6B");
  EXPECT_EQ(hub_repo_folder_name("gpt2"), "models--gpt2");
}

TEST_F(HubCacheTest, NotCachedIsNullopt) {
  EXPECT_FALSE(find_hub_snapshot(cache, "org/name", "main").has_value());
}

TEST_F(HubCacheTest, RevisionThroughRefsOrAsACommit) {
  const fs::path snap = add_snapshot(kCommit);
  add_snapshot(kOther);
  write_text(repo / "refs" / "main", kCommit + "\n");  // hf writes no newline; an editor might
  write_text(repo / "refs" / "refs" / "pr" / "1", kOther);
  auto main = find_hub_snapshot(cache, "org/name", "main");
  ASSERT_TRUE(main.has_value());
  EXPECT_EQ(main->commit, kCommit);
  EXPECT_EQ(main->revision, "main");
  EXPECT_EQ(main->repo_id, "org/name");
  EXPECT_EQ(main->folder, snap);
  EXPECT_EQ(find_hub_snapshot(cache, "org/name", "refs/pr/1")->commit, kOther);
  EXPECT_EQ(find_hub_snapshot(cache, "org/name", kOther)->commit, kOther);  // a commit named directly
  EXPECT_EQ(Checkpoint::open(main->folder).model_type(), "llama");
}

TEST_F(HubCacheTest, MissingRevisionNamesWhatIsThereAndTheDownload) {
  add_snapshot(kCommit);
  write_text(repo / "refs" / "main", kCommit);
  const std::string msg = bad_input_of([&] { find_hub_snapshot(cache, "org/name", "v2"); });
  EXPECT_CONTAINS(msg, repo.string());
  EXPECT_CONTAINS(msg, "revision v2 is not in the Hugging Face cache (refs: main; 1 snapshot(s))");
  EXPECT_CONTAINS(msg, "`hf download org/name --revision v2`");
  EXPECT_CONTAINS(msg, "`huggingface-cli download org/name --revision v2`");
}

TEST_F(HubCacheTest, RefWithoutItsSnapshotOrNotAHash) {
  write_text(repo / "refs" / "main", kCommit);
  fs::create_directories(repo / "snapshots");
  EXPECT_CONTAINS(bad_input_of([&] { find_hub_snapshot(cache, "org/name", "main"); }),
                  "refs/main points at " + kCommit + ", which has no snapshot folder");
  write_text(repo / "refs" / "main", "../../../../etc");
  EXPECT_CONTAINS(bad_input_of([&] { find_hub_snapshot(cache, "org/name", "main"); }),
                  "main: expected a 40-hex commit hash, found \"../../../../etc\"");
}

TEST_F(HubCacheTest, RevisionMustStayUnderRefs) {
  add_snapshot(kCommit);
  write_text(cache / "outside", kCommit);
  for (const char* rev : {"../../outside", "/etc/passwd", "", "./main", "refs/../../outside"})
    EXPECT_CONTAINS(bad_input_of([&] { find_hub_snapshot(cache, "org/name", rev); }), "expected a branch, tag or commit name");
}

TEST_F(HubCacheTest, SnapshotLinksMayOnlyLeadIntoTheirOwnBlobs) {
  const fs::path snap = add_snapshot(kCommit);
  // Its own blobs: the checkpoint opens, and an export's read-back rule (file_inside) accepts it.
  EXPECT_EQ(Checkpoint::open(snap).tensors().size(), 1u);
  EXPECT_EQ(file_inside(snap, "model.safetensors", "source file"), snap / "model.safetensors");
  // Another repository's blobs, or a file of the cache itself: outside.
  write_weights(cache / "models--other--repo" / "blobs" / "x");
  write_weights(cache / "loose");
  for (const std::string target : {"../../../models--other--repo/blobs/x", "../../../loose"}) {
    fs::remove(snap / "model.safetensors");
    fs::create_symlink(target, snap / "model.safetensors");
    EXPECT_CONTAINS(bad_input_of([&] { Checkpoint::open(snap); }), "outside the model folder");
    EXPECT_CONTAINS(bad_input_of([&] { file_inside(snap, "model.safetensors", "source file"); }), "outside");
  }
}

TEST_F(HubCacheTest, OnlyAModelsRepositoryGetsTheBlobRule) {
  // snapshots/<x> under a folder that is not a cache repository: links into ../../blobs are outside.
  const fs::path plain = cache / "mine";
  write_weights(plain / "blobs" / "w");
  write_text(plain / "blobs" / "c", R"({"model_type": "llama"})");
  const fs::path snap = plain / "snapshots" / "a";
  fs::create_directories(snap);
  fs::create_symlink("../../blobs/w", snap / "model.safetensors");
  fs::create_symlink("../../blobs/c", snap / "config.json");
  EXPECT_CONTAINS(bad_input_of([&] { Checkpoint::open(snap); }), "outside the model folder");
  EXPECT_FALSE(in_hub_snapshot_blobs(fs::canonical(snap), fs::canonical(plain / "blobs" / "w")));
}
