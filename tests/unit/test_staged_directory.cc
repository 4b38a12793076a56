// Output that can never destroy user data (issue #14): StagedDirectory's commit with and without
// --overwrite (RENAME_NOREPLACE refuses an OUT that appeared meanwhile; the overwrite re-check
// refuses what is no longer an hfx export), OUT with a trailing slash, the fsync pass over the staged
// tree, the side-file copy's error text on a full disk, scratch folders reaped after a SIGKILL, and
// list_files on odd trees.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/files.h"
#include "pipeline/export.h"
#include "pipeline/manifest.h"

namespace fs = std::filesystem;
using namespace hfx;

namespace {

// A fresh folder per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / ("hfx_staged_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The least hfx.json that read_manifest accepts.
void fake_export(const fs::path& dir, const std::string& marker) {
  write(dir / "hfx.json", R"({"schema_version": )" + std::to_string(pipeline::kManifestSchemaVersion) +
                              R"(, "source": {}, "recipe": {}, "model": {}, "components": [{}], "files": {}})");
  write(dir / "marker.txt", marker);
}

// Staging folders (".<name>.hfx-partial-*") left in `parent`.
int partials(const fs::path& parent) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(parent))
    if (e.path().filename().string().find(".hfx-partial-") != std::string::npos) ++n;
  return n;
}

template <typename F>
std::string error_of(F&& f, ErrorKind* kind = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.describe();
  }
  return "";
}

long dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return long(pid);
}

}  // namespace

TEST(StagedDirectory, CommitWithoutOverwriteCreatesOut) {
  TempDir t;
  const fs::path out = t.path / "out";
  {
    StagedDirectory s(out, false);
    EXPECT_EQ(s.path().parent_path(), t.path);
    write(s.path() / "onnx" / "model.onnx", "graph");
    s.commit();
  }
  EXPECT_EQ(read(out / "onnx" / "model.onnx"), "graph");
  EXPECT_EQ(partials(t.path), 0);
}

TEST(StagedDirectory, ExistingOutWithoutOverwriteIsRefused) {
  TempDir t;
  fake_export(t.path / "out", "old");
  ErrorKind kind{};
  EXPECT_NE(error_of([&] { StagedDirectory s(t.path / "out", false); }, &kind).find("output exists"), std::string::npos);
  EXPECT_EQ(kind, ErrorKind::BadInput);
}

TEST(StagedDirectory, OverwriteReplacesAPreviousExport) {
  TempDir t;
  const fs::path out = t.path / "out";
  fake_export(out, "old");
  {
    StagedDirectory s(out, true, pipeline::check_replaceable_export);
    fake_export(s.path(), "new");
    s.commit();
  }
  EXPECT_EQ(read(out / "marker.txt"), "new");
  EXPECT_EQ(partials(t.path), 0);
}

TEST(StagedDirectory, OverwriteRefusesAFolderThatIsNotAnExport) {
  TempDir t;
  const fs::path out = t.path / "mine";
  write(out / "notes.txt", "keep me");
  const std::string e = error_of([&] { StagedDirectory s(out, true, pipeline::check_replaceable_export); });
  EXPECT_NE(e.find("not an hfx export"), std::string::npos) << e;
  EXPECT_EQ(read(out / "notes.txt"), "keep me");
  write(t.path / "afile", "data");
  const std::string f = error_of([&] { StagedDirectory s(t.path / "afile", true, pipeline::check_replaceable_export); });
  EXPECT_NE(f.find("a file, not an hfx export"), std::string::npos) << f;
  EXPECT_EQ(partials(t.path), 0);
}

// D12: the OUT a concurrent export committed first is kept; ours is discarded.
TEST(StagedDirectory, CommitRefusesAnOutThatAppearedMeanwhile) {
  TempDir t;
  const fs::path out = t.path / "out";
  {
    StagedDirectory s(out, false);
    write(s.path() / "marker.txt", "ours");
    fake_export(out, "theirs");
    ErrorKind kind{};
    const std::string e = error_of([&] { s.commit(); }, &kind);
    EXPECT_NE(e.find("appeared while exporting (another export?)"), std::string::npos) << e;
    EXPECT_EQ(kind, ErrorKind::Io);
  }
  EXPECT_EQ(read(out / "marker.txt"), "theirs");
  EXPECT_EQ(partials(t.path), 0);
}

// Even an empty folder (which rename(2) would silently replace) is not ours to replace.
TEST(StagedDirectory, CommitRefusesAnEmptyFolderThatAppeared) {
  TempDir t;
  const fs::path out = t.path / "out";
  {
    StagedDirectory s(out, false);
    fs::create_directory(out);
    EXPECT_NE(error_of([&] { s.commit(); }).find("appeared"), std::string::npos);
  }
  EXPECT_TRUE(fs::is_empty(out));
  EXPECT_EQ(partials(t.path), 0);
}

// With --overwrite the check runs again right before the swap.
TEST(StagedDirectory, OverwriteRechecksBeforeTheSwap) {
  TempDir t;
  const fs::path out = t.path / "out";
  fake_export(out, "old");
  {
    StagedDirectory s(out, true, pipeline::check_replaceable_export);
    fake_export(s.path(), "new");
    fs::remove_all(out);
    write(out / "notes.txt", "a user's folder now");
    const std::string e = error_of([&] { s.commit(); });
    EXPECT_NE(e.find("not an hfx export"), std::string::npos) << e;
  }
  EXPECT_EQ(read(out / "notes.txt"), "a user's folder now");
  EXPECT_EQ(partials(t.path), 0);
}

// D14: the staging folder goes beside OUT, never inside it.
TEST(StagedDirectory, TrailingSlashNamesTheFolderItself) {
  TempDir t;
  for (const std::string spelling : {"newout/", "newout//", "newout/."}) {
    const fs::path out = t.path / spelling;
    {
      StagedDirectory s(out, false);
      EXPECT_EQ(s.final_path(), t.path / "newout") << spelling;
      EXPECT_EQ(s.path().parent_path(), t.path) << spelling;
      write(s.path() / "hfx.json", "{}");
      s.commit();
    }
    EXPECT_TRUE(fs::is_regular_file(t.path / "newout" / "hfx.json")) << spelling;
    EXPECT_EQ(partials(t.path), 0);
    fs::remove_all(t.path / "newout");
  }
}

TEST(StagedDirectory, NormalizeOutputPath) {
  EXPECT_EQ(normalize_output_path("newout/"), fs::path("newout"));
  EXPECT_EQ(normalize_output_path("newout//"), fs::path("newout"));
  EXPECT_EQ(normalize_output_path("./newout/."), fs::path("newout"));
  EXPECT_EQ(normalize_output_path("a//b/"), fs::path("a/b"));
  EXPECT_EQ(normalize_output_path("/x/y/"), fs::path("/x/y"));
  EXPECT_EQ(normalize_output_path("."), fs::current_path());
  EXPECT_EQ(normalize_output_path("sub/.."), fs::current_path());
  EXPECT_NE(error_of([] { normalize_output_path("/"); }).find("root"), std::string::npos);
  EXPECT_NE(error_of([] { normalize_output_path(""); }), "");
}

// D22: every file and folder of the staged tree is flushed (the count is what sync_tree visited).
TEST(StagedDirectory, SyncTreeFlushesEveryFileAndFolder) {
  TempDir t;
  write(t.path / "a.txt", "a");
  write(t.path / "onnx" / "model.onnx", "m");
  write(t.path / "onnx" / "deep" / "x.bin", "x");
  fs::create_symlink("a.txt", t.path / "link");  // not followed, not counted
  EXPECT_EQ(sync_tree(t.path), 6);             // 3 files + onnx + onnx/deep + the root
}

// D13: a full disk is named as such, with the file.
TEST(StagedDirectory, CopyReportsNoSpaceLeft) {
  TempDir t;
  write(t.path / "tokenizer.json", std::string(1 << 16, 'x'));
  ErrorKind kind{};
  const std::string e = error_of([&] { copy_file_checked(t.path / "tokenizer.json", "/dev/full"); }, &kind);
  EXPECT_EQ(kind, ErrorKind::Io);
  EXPECT_NE(e.find("tokenizer.json: cannot copy: No space left on device"), std::string::npos) << e;
}

TEST(StagedDirectory, CopyKeepsBytesAndMode) {
  TempDir t;
  const std::string bytes(3 << 20, 'q');
  write(t.path / "src.json", bytes);
  fs::permissions(t.path / "src.json", fs::perms(0640));
  write(t.path / "dst.json", "longer previous content that must be truncated away");
  copy_file_checked(t.path / "src.json", t.path / "dst.json");
  EXPECT_EQ(read(t.path / "dst.json"), bytes);
  EXPECT_EQ(fs::status(t.path / "dst.json").permissions(), fs::perms(0640));
}

// F#24: the error names the folder that refused, not the hidden staging folder.
TEST(StagedDirectory, UncreatableParentIsNamed) {
  TempDir t;
  write(t.path / "afile", "x");
  const std::string e = error_of([&] { check_output_creatable(t.path / "afile" / "sub" / "out"); });
  EXPECT_NE(e.find((t.path / "afile").string() + ": cannot create the output folder here: Not a directory"), std::string::npos) << e;
  const std::string s = error_of([&] { StagedDirectory d(t.path / "afile" / "out", false); });
  EXPECT_NE(s.find((t.path / "afile").string() + ": cannot create the output folder here"), std::string::npos) << s;
}

// D23: scratch folders carry the staging folders' liveness marker and stale ones are reaped.
TEST(ScratchDirectory, StaleFoldersOfDeadOwnersAreRemoved) {
  TempDir t;
  const fs::path stale = t.path / ("hfx-verify-" + std::to_string(dead_pid()) + "-AbC123");
  const fs::path live = t.path / ("hfx-verify-" + std::to_string(::getppid()) + "-AbC123");
  const fs::path other = t.path / ("hfx-other-" + std::to_string(dead_pid()) + "-AbC123");
  const fs::path legacy = t.path / "hfx-verify-Xy12Zq";  // an older hfx's name: no owner to check
  for (const auto& d : {stale, live, other, legacy}) fs::create_directories(d / "sub");
  fs::path made;
  {
    ScratchDirectory s(t.path, "hfx-verify-");
    made = s.path();
    EXPECT_TRUE(fs::is_directory(made));
    EXPECT_TRUE(made.filename().string().starts_with("hfx-verify-" + std::to_string(::getpid()) + "-"));
    EXPECT_FALSE(fs::exists(stale));
    EXPECT_TRUE(fs::exists(live) && fs::exists(other) && fs::exists(legacy));
    // Our own folder, while in use, survives another process's reaping (its pid is alive; the lock
    // holds even if the pid were reused).
    EXPECT_EQ(remove_stale_scratch(t.path, "hfx-verify-"), 0);
  }
  EXPECT_FALSE(fs::exists(made));
}

// D16: folder symlinks and dangling links are not files; a symlink loop is an hfx::Error naming it.
TEST(ListFiles, OddEntries) {
  TempDir t;
  write(t.path / "hfx.json", "{}");
  write(t.path / "onnx" / "model.onnx", "m");
  fs::create_directory_symlink("onnx", t.path / "dirlink");
  fs::create_symlink("nowhere", t.path / "dangling");
  const auto files = pipeline::list_files(t.path);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], fs::path("hfx.json"));
  EXPECT_EQ(files[1], fs::path("onnx/model.onnx"));
  fs::create_symlink("loop2", t.path / "onnx" / "loop1");
  fs::create_symlink("loop1", t.path / "onnx" / "loop2");
  ErrorKind kind{};
  const std::string e = error_of([&] { pipeline::list_files(t.path); }, &kind);
  EXPECT_EQ(kind, ErrorKind::Io);
  EXPECT_NE(e.find((t.path / "onnx" / "loop").string()), std::string::npos) << e;
  EXPECT_NE(e.find("Too many levels of symbolic links"), std::string::npos) << e;
}

TEST(ListFiles, MissingFolderIsAnIoError) {
  TempDir t;
  ErrorKind kind{};
  const std::string e = error_of([&] { pipeline::list_files(t.path / "gone"); }, &kind);
  EXPECT_EQ(kind, ErrorKind::Io);
  EXPECT_NE(e.find("gone: cannot list: No such file or directory"), std::string::npos) << e;
}
