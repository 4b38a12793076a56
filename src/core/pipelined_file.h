// An output file written by a background thread while the caller computes the next bytes: a bounded
// queue between one producer (the caller) and two consumers, each taking the blocks in order: a
// writer thread (write(2), the page-cache copy that is most of an export's time) and a hashing thread
// (SHA-256 of the file as written, so the manifest gets the digest without reading the file back).
// Three stages on their own threads let the scheduler spread converting, copying and hashing over the
// cores, whichever of them is the slowest on a given machine; the writer also starts the disk on each
// 32 MiB written (sync_file_range), so the commit's fsync finds little left to write.
//
// Memory is bounded: write() blocks while more than `max_in_flight` bytes are queued (a block larger
// than that is admitted alone, once the queue is empty), and recycled buffers are capped likewise.
// Errors: a failed write(2) is recorded and reported, naming the path, by the next write() or by
// finish(). The destructor (an error elsewhere, an exception) stops the thread without writing what is
// still queued; the caller's staging folder is removed by its owner.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/sha256.h"

namespace hfx {

class PipelinedFile {
 public:
  // A block of bytes the caller fills and hands back to write(); its storage is recycled.
  struct Buffer {
    std::unique_ptr<uint8_t[]> data;
    size_t capacity = 0, size = 0;
    std::span<uint8_t> span() { return {data.get(), size}; }
  };

  PipelinedFile(std::filesystem::path path, size_t max_in_flight);
  ~PipelinedFile();
  PipelinedFile(const PipelinedFile&) = delete;
  PipelinedFile& operator=(const PipelinedFile&) = delete;

  // An uninitialised buffer of `size` bytes (a recycled one when one is large enough).
  Buffer buffer(size_t size);
  void write(Buffer buffer);
  // Bytes owned elsewhere (a mapped checkpoint, a tensor kept alive by `done`): they must stay valid
  // until `done` runs, on the writer thread, once they are written or dropped.
  void write(std::span<const uint8_t> bytes, std::function<void()> done);
  // Zero bytes up to `offset` (alignment padding).
  void pad_to(size_t offset);
  // Bytes queued so far: the file's size once finished.
  size_t size() const { return queued_; }
  // Waits for the writer, closes the file and returns its sha256 (lower-case hex). Throws Io on a
  // failed write or close.
  std::string finish();

 private:
  struct Item {
    std::span<const uint8_t> bytes;
    Buffer owned;
    std::function<void()> done;
    int pending = 2;  // consumers (writer, hasher) not yet done with it
  };
  void enqueue(Item item);
  void run_writer();
  void run_hasher();
  void start_writeback(size_t bytes);  // on the writer thread
  void finished_with(const std::shared_ptr<Item>& item);  // under mutex_
  void check_failed();

  std::filesystem::path path_;
  size_t max_in_flight_;
  int fd_ = -1;
  Sha256 sha_;
  size_t queued_ = 0;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Item>> to_write_, to_hash_;
  std::vector<Buffer> free_;
  size_t in_flight_ = 0;  // bytes queued and not yet written
  bool stop_ = false;
  int error_ = 0;  // errno of the first failed write
  size_t written_ = 0, written_back_ = 0;  // the writer thread's: bytes written, and handed to the disk
  std::thread writer_, hasher_;
};

}  // namespace hfx
