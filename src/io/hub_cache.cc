#include "io/hub_cache.h"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/safe_path.h"

namespace fs = std::filesystem;

namespace hfx::io {

namespace {

// A refs/ file holds one commit hash; anything longer than this is not one.
constexpr uint64_t kMaxRefBytes = 4096;

fs::path home_dir(const EnvLookup& env) {
  if (auto home = env("HOME")) return *home;
  if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir) return pw->pw_dir;
  return "/";
}

// "~" and "~/x" as Python's os.path.expanduser reads them (huggingface_hub expands its variables).
fs::path expand_user(const std::string& path, const EnvLookup& env) {
  if (path == "~") return home_dir(env);
  if (path.starts_with("~/")) return home_dir(env) / path.substr(2);
  return path;
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool hub_id_part(const std::string& part) {
  if (part.empty() || !word_char(part.front()) || !word_char(part.back())) return false;
  return std::all_of(part.begin(), part.end(), [](char c) { return word_char(c) || c == '-' || c == '.'; });
}

bool is_commit_hash(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string trimmed(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

// The revision names under refs/ ("main", "refs/pr/1"), sorted, for a message.
std::vector<std::string> ref_names(const fs::path& refs) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(refs, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) names.push_back(it->path().lexically_relative(refs).generic_string());
  std::sort(names.begin(), names.end());
  return names;
}

size_t count_folders(const fs::path& dir) {
  size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) ++n;
  return n;
}

std::string listed(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  constexpr size_t kShown = 5;
  std::vector<std::string> shown(names.begin(), names.begin() + long(std::min(names.size(), kShown)));
  return fmt::format("{}{}", fmt::join(shown, ", "), names.size() > kShown ? ", ..." : "");
}

}  // namespace

std::optional<std::string> process_env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

fs::path hub_cache_dir(const EnvLookup& env) {
  if (auto v = env("HF_HUB_CACHE")) return expand_user(*v, env);
  if (auto v = env("HUGGINGFACE_HUB_CACHE")) return expand_user(*v, env);
  if (auto v = env("HF_HOME")) return expand_user(*v, env) / "hub";
  if (auto v = env("XDG_CACHE_HOME")) return expand_user(*v, env) / "huggingface" / "hub";
  return home_dir(env) / ".cache" / "huggingface" / "hub";
}

bool looks_like_hub_id(const std::string& text) {
  if (text.empty() || text.size() > 96) return false;
  if (text.find("--") != std::string::npos || text.find("..") != std::string::npos) return false;
  const auto slash = text.find('/');
  if (slash == std::string::npos) return hub_id_part(text);
  return hub_id_part(text.substr(0, slash)) && hub_id_part(text.substr(slash + 1));
}

std::string hub_repo_folder_name(const std::string& repo_id) {
  std::string name = "models--" + repo_id;
  for (auto pos = name.find('/'); pos != std::string::npos; pos = name.find('/', pos + 2)) name.replace(pos, 1, "--");
  return name;
}

std::string hub_download_hint(const std::string& repo_id, const std::string& revision) {
  const std::string rev = revision == "main" ? "" : " --revision " + revision;
  return fmt::format("`hf download {0}{1}` (or `huggingface-cli download {0}{1}`)", repo_id, rev);
}

std::optional<HubSnapshot> find_hub_snapshot(const fs::path& cache, const std::string& repo_id,
                                             const std::string& revision) {
  const fs::path repo = cache / hub_repo_folder_name(repo_id);
  std::error_code ec;
  if (!fs::is_directory(repo, ec)) return std::nullopt;
  // The revision is joined under refs/: it must stay a name inside it.
  const fs::path rev(revision);
  const bool relative = !revision.empty() && !rev.is_absolute() && revision.find('\0') == std::string::npos &&
                        std::none_of(rev.begin(), rev.end(), [](const fs::path& p) { return p.empty() || p == "." || p == ".."; });
  if (!relative) bad_input("--revision {}: expected a branch, tag or commit name (e.g. main)", revision);

  std::string commit;
  const fs::path ref = repo / "refs" / rev;
  if (fs::is_regular_file(ref, ec)) {
    const std::string text = trimmed(read_file_capped(ref, kMaxRefBytes));
    if (!is_commit_hash(text))
      bad_input("{}: expected a 40-hex commit hash, found \"{}\"", ref.string(), text.substr(0, 64));
    commit = text;
  } else if (std::distance(rev.begin(), rev.end()) == 1 && fs::is_directory(repo / "snapshots" / rev, ec)) {
    commit = revision;  // a commit hash named directly
  } else {
    bad_input("{}: revision {} is not in the Hugging Face cache (refs: {}; {} snapshot(s)); download it with {}",
              repo.string(), revision, listed(ref_names(repo / "refs")), count_folders(repo / "snapshots"),
              hub_download_hint(repo_id, revision));
  }
  const fs::path folder = repo / "snapshots" / commit;
  if (!fs::is_directory(folder, ec))
    bad_input("{}: refs/{} points at {}, which has no snapshot folder; download it again with {}", repo.string(),
              revision, commit, hub_download_hint(repo_id, revision));
  return HubSnapshot{repo_id, revision, commit, folder};
}

std::optional<std::string> hub_blob_sha256(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_symlink(file, ec)) return std::nullopt;
  const auto target = std::filesystem::canonical(file, ec);
  if (ec || target.parent_path().filename() != "blobs") return std::nullopt;
  const std::string name = target.filename().string();
  const bool sha256 = name.size() == 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
  });
  return sha256 ? std::optional(name) : std::nullopt;
}

}  // namespace hfx::io
