#include "io/checkpoint.h"

#include <algorithm>

#include "core/error.h"
#include "core/safe_path.h"
#include "core/mapped_file.h"

namespace fs = std::filesystem;

namespace hfx::io {

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";

// Resolves `dir/name`, which must be a regular file whose real location stays inside the folder.
// The Hugging Face cache is the one allowed exception (core/safe_path.h, in_hub_snapshot_blobs):
// snapshots/<commit>/<file> are symlinks into the same repository's blobs/ folder.
fs::path checked_file(const fs::path& dir, const std::string& name, std::string_view role) {
  fs::path p = dir / name;
  std::error_code ec;
  fs::path real = fs::canonical(p, ec);
  if (ec) bad_input("{}: {} {} does not exist", dir.string(), role, name);
  if (!fs::is_regular_file(real)) bad_input("{}: {} {} is not a regular file", dir.string(), role, name);
  fs::path root = fs::canonical(dir);
  if (!path_is_within(root, real) && !in_hub_snapshot_blobs(root, real))
    bad_input("{}: {} {} is a link to {}, outside the model folder", dir.string(), role, name,
              real.string());
  return p;
}

// Shard names come from an untrusted index: only plain file names inside the folder.
void check_plain_name(const JsonFile& index, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos)
    bad_input("{}: shard \"{}\" is not a plain file name in the model folder", index.path.string(),
              name);
}

std::vector<std::string> names_in(const fs::path& dir, auto&& pred) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (pred(name)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool ends_with_any(const std::string& name, std::initializer_list<std::string_view> suffixes) {
  for (auto s : suffixes)
    if (name.ends_with(s)) return true;
  return false;
}

[[noreturn]] void refuse_pickles(const fs::path& dir) {
  auto pickles = names_in(dir, [](const std::string& n) {
    return n == "pytorch_model.bin.index.json" || ends_with_any(n, {".bin", ".pt", ".pth", ".ckpt"});
  });
  if (pickles.empty())
    bad_input("{}: no weights found (expected model.safetensors.index.json, model.safetensors or "
              "*.safetensors)",
              dir.string());
  auto shown = std::find(pickles.begin(), pickles.end(), "pytorch_model.bin") != pickles.end()
                   ? std::string("pytorch_model.bin")
                   : pickles.front();
  bad_input("{}: only pickled PyTorch weights ({}) found; hfx never unpickles files. Convert them "
            "to safetensors first (e.g. `safetensors` convert script)",
            dir.string(), shown);
}

}  // namespace

Checkpoint Checkpoint::open(const fs::path& dir) {
  // The std::filesystem calls below throw on OS failures (permissions, races); report those in
  // hfx's error model like every other I/O failure.
  try {
    return open_folder(dir);
  } catch (const fs::filesystem_error& e) {
    fs::path where = e.path1().empty() ? dir : e.path1();
    fail(ErrorKind::Io, "{}: {}", where.string(), e.code().message());
  }
}

Checkpoint Checkpoint::open_folder(const fs::path& dir) {
  if (!fs::exists(dir)) bad_input("{}: no such model folder", dir.string());
  if (!fs::is_directory(dir)) bad_input("{}: not a folder (expected a Hugging Face model folder)", dir.string());
  if (!fs::exists(dir / "config.json"))
    bad_input("{}: no config.json; a Hugging Face model folder needs one", dir.string());

  Checkpoint ck;
  ck.dir_ = dir;
  ck.config_ = JsonFile::load(checked_file(dir, "config.json", "config"));
  if (fs::exists(dir / "generation_config.json"))
    ck.generation_config_ = JsonFile::load(checked_file(dir, "generation_config.json", "file"));
  for (const char* name : {"config.json", "generation_config.json", "tokenizer.json",
                           "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                           "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json",
                           "chat_template.jinja", "preprocessor_config.json", "source.spm", "target.spm",
                           "target_vocab.json"})
    if (fs::exists(dir / name)) ck.side_files_.push_back(checked_file(dir, name, "file"));

  // Weight files, and for a sharded checkpoint the tensor -> shard map that must match them exactly.
  std::optional<JsonFile> index;
  std::map<std::string, std::string> weight_map;
  std::vector<std::string> files;
  if (fs::exists(dir / kIndexName)) {
    index = JsonFile::load(checked_file(dir, kIndexName, "index"));
    auto it = index->json.find("weight_map");
    if (it == index->json.end() || !it->is_object() || it->empty())
      bad_input("{}: field \"weight_map\": expected a non-empty object of tensor -> shard file",
                index->path.string());
    for (const auto& [tensor, shard] : it->items()) {
      if (!shard.is_string())
        bad_input("{}: weight_map \"{}\": expected a shard file name, found {}",
                  index->path.string(), tensor, shard.dump());
      check_plain_name(*index, shard.get<std::string>());
      weight_map[tensor] = shard.get<std::string>();
    }
    for (const auto& [tensor, shard] : weight_map) files.push_back(shard);
    std::sort(files.begin(), files.end());
    files.erase(std::unique(files.begin(), files.end()), files.end());
  } else if (fs::exists(dir / "model.safetensors")) {
    files = {"model.safetensors"};
  } else {
    files = names_in(dir, [](const std::string& n) { return n.ends_with(".safetensors"); });
    if (files.empty()) refuse_pickles(dir);
  }

  for (const std::string& name : files) {
    fs::path path = checked_file(dir, name, index ? "shard" : "weight file");
    ck.weight_files_.push_back(path);
    for (TensorEntry& t : read_safetensors(MappedFile::open(path)).tensors) {
      if (index) {
        auto m = weight_map.find(t.name);
        if (m == weight_map.end())
          bad_input("{}: tensor {} is not listed in {}", path.string(), t.name, kIndexName);
        if (m->second != name)
          bad_input("{}: tensor {} is stored here, but {} maps it to {}", path.string(), t.name,
                    kIndexName, m->second);
      }
      if (auto prev = ck.tensors_.find(t.name); prev != ck.tensors_.end())
        bad_input("{}: tensor {} is in both {} and {}", dir.string(), t.name,
                  prev->second.file->path().filename().string(), name);
      std::string key = t.name;
      ck.tensors_.emplace(std::move(key), std::move(t));
    }
  }
  for (const auto& [tensor, shard] : weight_map)
    if (!ck.tensors_.count(tensor))
      bad_input("{}: tensor {} is mapped to {} by {}, but that shard has no such tensor",
                dir.string(), tensor, shard, kIndexName);
  return ck;
}

std::string Checkpoint::model_type() const { return require_string(config_, config_.json, "model_type"); }

const TensorEntry* Checkpoint::find(std::string_view name) const {
  auto it = tensors_.find(std::string(name));
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorEntry& Checkpoint::get(std::string_view name) const {
  const TensorEntry* t = find(name);
  if (!t) bad_input("missing tensor {} (expected by the model definition) in {}", name, dir_.string());
  return *t;
}

int64_t Checkpoint::total_weight_bytes() const {
  int64_t total = 0;
  for (const auto& [name, t] : tensors_) total += int64_t(t.nbytes);
  return total;
}

void Checkpoint::mark_used(std::string_view name) const {
  std::lock_guard lock(*used_mutex_);
  used_.emplace(name);
}

std::vector<std::string> Checkpoint::unused() const {
  std::lock_guard lock(*used_mutex_);
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_)
    if (!used_.count(name)) out.push_back(name);
  return out;
}

}  // namespace hfx::io
