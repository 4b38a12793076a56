#include "core/pipelined_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hfx {

PipelinedFile::PipelinedFile(std::filesystem::path path, size_t max_in_flight)
    : path_(std::move(path)), max_in_flight_(std::max<size_t>(max_in_flight, 1)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(ErrorKind::Io, "{}: cannot create: {}", path_.string(), std::strerror(errno));
  writer_ = std::thread([this] { run_writer(); });
  hasher_ = std::thread([this] { run_hasher(); });
}

PipelinedFile::~PipelinedFile() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (hasher_.joinable()) hasher_.join();
  // What is still queued is dropped unwritten; its owners are told.
  std::set<Item*> told;
  for (auto* queue : {&to_write_, &to_hash_})
    for (auto& item : *queue)
      if (item->done && told.insert(item.get()).second) item->done();
  if (fd_ >= 0) ::close(fd_);
}

void PipelinedFile::check_failed() {
  if (error_) fail(ErrorKind::Io, "{}: write failed: {}", path_.string(), std::strerror(error_));
}

PipelinedFile::Buffer PipelinedFile::buffer(size_t size) {
  {
    std::lock_guard lock(mutex_);
    // The smallest recycled buffer that fits: its pages are already ours, no faults to pay again.
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->capacity >= size && (best == free_.end() || it->capacity < best->capacity)) best = it;
    if (best != free_.end()) {
      Buffer b = std::move(*best);
      free_.erase(best);
      b.size = size;
      return b;
    }
  }
  Buffer b;
  b.data.reset(new uint8_t[std::max<size_t>(size, 1)]);
  b.capacity = b.size = size;
  return b;
}

void PipelinedFile::write(Buffer buffer) {
  Item item;
  item.bytes = {buffer.data.get(), buffer.size};
  item.owned = std::move(buffer);
  enqueue(std::move(item));
}

void PipelinedFile::write(std::span<const uint8_t> bytes, std::function<void()> done) {
  Item item;
  item.bytes = bytes;
  item.done = std::move(done);
  enqueue(std::move(item));
}

void PipelinedFile::pad_to(size_t offset) {
  HFX_CHECK(offset >= queued_, "pad_to({}) below {}", offset, queued_);
  if (offset == queued_) return;
  Buffer b = buffer(offset - queued_);
  std::memset(b.data.get(), 0, b.size);
  write(std::move(b));
}

void PipelinedFile::enqueue(Item item) {
  const size_t n = item.bytes.size();
  auto shared = std::make_shared<Item>(std::move(item));
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return error_ || in_flight_ == 0 || in_flight_ + n <= max_in_flight_; });
  if (error_) {
    lock.unlock();
    if (shared->done) shared->done();
    check_failed();
  }
  in_flight_ += n;
  queued_ += n;
  to_write_.push_back(shared);
  to_hash_.push_back(std::move(shared));
  lock.unlock();
  changed_.notify_all();
}

void PipelinedFile::finished_with(const std::shared_ptr<Item>& item) {
  if (--item->pending > 0) return;
  if (item->done) item->done();
  in_flight_ -= item->bytes.size();
  // Keep buffers for the producer to refill, up to the in-flight budget.
  size_t idle = item->owned.capacity;
  for (const auto& f : free_) idle += f.capacity;
  if (item->owned.data && idle <= max_in_flight_) free_.push_back(std::move(item->owned));
  changed_.notify_all();
}

void PipelinedFile::run_writer() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !to_write_.empty(); });
    if (stop_) return;
    std::shared_ptr<Item> item = to_write_.front();
    int err = error_;
    lock.unlock();
    const uint8_t* p = item->bytes.data();
    size_t left = err ? 0 : item->bytes.size();  // after a failure, blocks are only drained
    while (left > 0) {
      const ssize_t w = ::write(fd_, p, std::min<size_t>(left, size_t(1) << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        err = w < 0 ? errno : ENOSPC;
        break;
      }
      p += w;
      left -= size_t(w);
    }
    if (!err) start_writeback(item->bytes.size());
    lock.lock();
    to_write_.pop_front();
    if (err && !error_) error_ = err;
    finished_with(item);
  }
}

// The disk starts on what is written while the export goes on, instead of all of it in the commit's
// fsync: the export then takes the longer of its work and the disk's, not their sum. Only started,
// never waited for here (the commit's fsync waits); a file system without it (EINVAL, ESPIPE) just
// writes back at the commit.
void PipelinedFile::start_writeback(size_t bytes) {
  constexpr size_t kWritebackBytes = size_t(32) << 20;
  written_ += bytes;
  if (written_ - written_back_ < kWritebackBytes) return;
  ::sync_file_range(fd_, off_t(written_back_), off_t(written_ - written_back_), SYNC_FILE_RANGE_WRITE);
  written_back_ = written_;
}

void PipelinedFile::run_hasher() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !to_hash_.empty(); });
    if (stop_) return;
    std::shared_ptr<Item> item = to_hash_.front();
    lock.unlock();
    sha_.update(item->bytes);
    lock.lock();
    to_hash_.pop_front();
    finished_with(item);
  }
}

std::string PipelinedFile::finish() {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return to_write_.empty() && to_hash_.empty(); });
    stop_ = true;
  }
  changed_.notify_all();
  writer_.join();
  hasher_.join();
  free_.clear();
  check_failed();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(ErrorKind::Io, "{}: write failed: {}", path_.string(), std::strerror(errno));
  return sha_.hex_digest();
}

}  // namespace hfx
