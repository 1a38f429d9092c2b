// The memory-operation marks of core/programmatic.h: a stream memory operation marks its stream,
// the next launch there takes (and clears) the mark, other streams and other threads are not
// affected. Host logic only: runs without a GPU (the streams are opaque handles here).
#include "gpu-worker/backends/cuda/core/programmatic.h"

#include <gtest/gtest.h>

#include <thread>

namespace ft::cuda {
namespace {

cudaStream_t fake(uintptr_t v) { return reinterpret_cast<cudaStream_t>(v); }

TEST(StreamMemopMarks, TheNextLaunchOnTheStreamTakesTheMark) {
  EXPECT_FALSE(take_stream_memop(fake(0x10)));
  note_stream_memop(fake(0x10));
  note_stream_memop(fake(0x10));  // twice in a row: still one launch to make plain
  note_stream_memop(fake(0x20));
  EXPECT_FALSE(take_stream_memop(fake(0x30)));
  EXPECT_TRUE(take_stream_memop(fake(0x10)));
  EXPECT_FALSE(take_stream_memop(fake(0x10)));
  EXPECT_TRUE(take_stream_memop(fake(0x20)));
  EXPECT_FALSE(take_stream_memop(fake(0x20)));
}

TEST(StreamMemopMarks, MarksBelongToTheThreadThatEnqueued) {
  note_stream_memop(fake(0x40));
  bool other = true;
  std::thread([&] { other = take_stream_memop(fake(0x40)); }).join();
  EXPECT_FALSE(other);
  EXPECT_TRUE(take_stream_memop(fake(0x40)));
}

}  // namespace
}  // namespace ft::cuda
