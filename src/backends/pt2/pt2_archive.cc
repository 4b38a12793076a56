#include "backends/pt2/pt2_archive.h"

#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "core/error.h"

namespace hfx::pt2_backend {

namespace {

// Every entry's modification time: fixed, so an export is byte-identical to a re-export
// (1980-01-01, the first time a zip can hold).
constexpr time_t kEntryTime = 315532800;

// A tensor's bytes, produced when libzip reads the entry (OPEN .. CLOSE): straight from the mapped
// checkpoint when stored as is, else converted block by block of rows as libzip reads (so a cast or
// transposed weight never needs a tensor-sized buffer), else materialized whole (other transforms).
struct TensorSource {
  ir::WeightRef weight;
  std::function<void(int64_t)> on_written;
  std::exception_ptr* error;
  std::optional<Tensor> held;
  std::span<const uint8_t> bytes;  // the current bytes: the whole tensor, or the current row block
  size_t pos = 0;                  // read position in `bytes`
  // Row streaming (weight.streamable()): the next row to convert and the block buffer.
  bool by_rows = false;
  int64_t next_row = 0;
  std::vector<uint8_t> block;
  bool finished = false;  // done() ran since the last OPEN
  zip_error_t zerr;

  // Drops the tensor's bytes and its source pages, and reports it written (once per OPEN).
  void done() {
    if (finished) return;
    finished = true;
    held.reset();
    std::vector<uint8_t>().swap(block);  // (assigning {} would keep the capacity)
    bytes = {};
    pos = 0;
    weight.release_source_pages();
    if (on_written) on_written(int64_t(weight.nbytes()));
  }

  // Converts the next block of rows into `block` (about kBlockBytes of whole rows).
  void next_block() {
    static constexpr size_t kBlockBytes = size_t(4) << 20;
    const size_t row = weight.row_bytes();
    const int64_t rows = std::max<int64_t>(1, int64_t(kBlockBytes / row));
    const int64_t r1 = std::min(weight.rows(), next_row + rows);
    block.resize(size_t(r1 - next_row) * row);
    weight.write_rows(next_row, r1, block.data(), row);
    next_row = r1;
    bytes = block;
    pos = 0;
  }
};

zip_int64_t tensor_source(void* user, void* data, zip_uint64_t len, zip_source_cmd_t cmd) {
  auto* s = static_cast<TensorSource*>(user);
  try {
    switch (cmd) {
      case ZIP_SOURCE_OPEN:
        s->pos = 0;
        s->by_rows = false;
        s->finished = false;
        if (auto raw = s->weight.raw_bytes()) {
          s->bytes = *raw;
        } else if (s->weight.streamable() && s->weight.row_bytes() > 0 &&
                   size_t(s->weight.rows()) * s->weight.row_bytes() == s->weight.nbytes()) {
          s->by_rows = true;
          s->next_row = 0;
          s->bytes = {};
          return 0;
        } else {
          s->held = s->weight.materialize();
          s->bytes = {s->held->data(), s->held->nbytes()};
        }
        if (s->bytes.size() != s->weight.nbytes())
          fail(ErrorKind::Internal, "tensor {}: {} bytes for {} expected", s->weight.describe(), s->bytes.size(), s->weight.nbytes());
        return 0;
      case ZIP_SOURCE_READ: {
        if (s->by_rows && s->pos == s->bytes.size() && s->next_row < s->weight.rows()) s->next_block();
        const size_t n = std::min<size_t>(len, s->bytes.size() - s->pos);
        std::memcpy(data, s->bytes.data() + s->pos, n);
        s->pos += n;
        // Once the last byte is out, what the tensor holds goes: libzip reads exactly the STAT size and
        // closes its sources only when the whole archive is written, so CLOSE is too late.
        if (s->pos == s->bytes.size() && (!s->by_rows || s->next_row == s->weight.rows())) s->done();
        return zip_int64_t(n);
      }
      case ZIP_SOURCE_CLOSE:
        s->done();
        return 0;
      case ZIP_SOURCE_STAT: {
        auto* st = static_cast<zip_stat_t*>(data);
        zip_stat_init(st);
        st->size = s->weight.nbytes();
        st->mtime = kEntryTime;
        st->comp_method = ZIP_CM_STORE;
        st->encryption_method = ZIP_EM_NONE;
        st->valid = ZIP_STAT_SIZE | ZIP_STAT_MTIME | ZIP_STAT_COMP_METHOD | ZIP_STAT_ENCRYPTION_METHOD;
        return sizeof(*st);
      }
      case ZIP_SOURCE_ERROR:
        return zip_error_to_data(&s->zerr, data, len);
      case ZIP_SOURCE_FREE:
        zip_error_fini(&s->zerr);
        delete s;
        return 0;
      case ZIP_SOURCE_SUPPORTS:
        return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
                                              ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, ZIP_SOURCE_SUPPORTS, -1);
      default:
        zip_error_set(&s->zerr, ZIP_ER_OPNOTSUPP, 0);
        return -1;
    }
  } catch (...) {
    if (!*s->error) *s->error = std::current_exception();
    zip_error_set(&s->zerr, ZIP_ER_READ, EIO);
    return -1;
  }
}

std::string zip_message(zip_error_t* e) { return zip_error_strerror(e); }

}  // namespace

Pt2Archive::Pt2Archive(std::filesystem::path file, std::string root) : file_(std::move(file)), root_(std::move(root)) {
  int code = 0;
  zip_ = zip_open(file_.c_str(), ZIP_CREATE | ZIP_EXCL, &code);
  if (!zip_) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    const std::string msg = zip_message(&e);
    zip_error_fini(&e);
    fail(ErrorKind::Io, "{}: cannot create the archive: {}", file_.string(), msg);
  }
}

Pt2Archive::~Pt2Archive() {
  if (zip_) zip_discard(zip_);
}

void Pt2Archive::add(const std::string& name, zip_source_t* source) {
  const std::string entry = root_ + "/" + name;
  const zip_int64_t index = zip_file_add(zip_, entry.c_str(), source, ZIP_FL_ENC_UTF_8);
  if (index < 0) {
    zip_source_free(source);
    fail(ErrorKind::Io, "{}: cannot add {}: {}", file_.string(), entry, zip_strerror(zip_));
  }
  if (zip_set_file_compression(zip_, zip_uint64_t(index), ZIP_CM_STORE, 0) < 0 ||
      zip_file_set_mtime(zip_, zip_uint64_t(index), kEntryTime, 0) < 0)
    fail(ErrorKind::Io, "{}: {}: {}", file_.string(), entry, zip_strerror(zip_));
}

void Pt2Archive::add_text(const std::string& name, std::string text) {
  texts_.push_back(std::make_unique<std::string>(std::move(text)));
  zip_source_t* src = zip_source_buffer(zip_, texts_.back()->data(), texts_.back()->size(), 0);
  if (!src) fail(ErrorKind::Io, "{}: {}", file_.string(), zip_strerror(zip_));
  add(name, src);
}

void Pt2Archive::add_tensor(const std::string& name, const ir::WeightRef& weight, std::function<void(int64_t)> on_written) {
  auto* s = new TensorSource{weight, std::move(on_written), &source_error_, std::nullopt, {}, 0, false, 0, {}, false, {}};
  zip_error_init(&s->zerr);
  zip_source_t* src = zip_source_function(zip_, tensor_source, s);
  if (!src) {
    zip_error_fini(&s->zerr);
    delete s;
    fail(ErrorKind::Io, "{}: {}", file_.string(), zip_strerror(zip_));
  }
  add(name, src);
}

void Pt2Archive::close() {
  if (zip_close(zip_) < 0) {
    const std::string msg = zip_strerror(zip_);
    zip_discard(zip_);
    zip_ = nullptr;
    if (source_error_) std::rethrow_exception(source_error_);
    fail(ErrorKind::Io, "{}: cannot write the archive: {}", file_.string(), msg);
  }
  zip_ = nullptr;
}

}  // namespace hfx::pt2_backend
