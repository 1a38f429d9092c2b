#pragma once
// Memory layout of a request ring (/dev/shm/<ring>), shared by RingServer and RingClient.
//
//   [RingHeader, 4 KiB][channel 0][channel 1]…   each channel: [ChannelCtl, 4 KiB][payload]
//   payload: x [max_tokens·hidden] f32 | ids [max_tokens·max_slots] i32 | w [same] f32 |
//            out [max_tokens·hidden] f32, each 64-byte aligned.
//
// Multiple gpu-workers on one host: one ring, one channel per client. A client claims a free
// channel for as long as it is connected and has at most one request in flight on it (the
// gpu-worker asks once per MoE layer per step and waits for the answer). The server serves the
// channels in index order from one dispatcher thread; the expert thread pool parallelises inside a
// request. One channel per client (instead of a shared queue) means no client can ever see or
// corrupt another's payload, and a dead client costs one channel, reclaimed by pid. Each pass of
// the dispatcher serves every pending channel once, starting after the one it served last, so no
// client waits behind more than one request of each other client (each has at most one in
// flight, of at most max_tokens tokens).
//
// Channel protocol (state is the futex word the client sleeps on; doorbell the server's):
//   client: write payload → state = Request → ++doorbell → wake(doorbell) if server_sleeping
//   server: state == Request → compute → write out / error → state = Done|Error
//           → wake(state) if client_waiting
//   client: state == Done|Error → read → state = Idle
// Sleepers announce themselves (server_sleeping / client_waiting) before re-checking, and wakers
// read the flag after publishing (all seq_cst), so a wake is never lost and never needed when the
// other side still spins.
#include <atomic>
#include <cstdint>

namespace ft::ipc::ring {

inline constexpr char kMagic[8] = {'F', 'T', 'R', 'I', 'N', 'G', '0', '1'};
inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr uint64_t kPage = 4096;
inline constexpr uint32_t kMaxMoeLayers = 512;
inline constexpr uint32_t kErrorBytes = 1024;

enum State : uint32_t { Idle = 0, Request = 1, Working = 2, Done = 3, Failed = 4 };

struct RingHeader {
  char magic[8];
  uint32_t layout_version;
  uint32_t channels;
  uint32_t hidden, max_tokens, max_slots, reserved0;
  uint64_t channel_stride, total_bytes;
  // Model description for clients (valid while `ready`; rewritten by each new server).
  uint32_t intermediate, n_layers, n_experts, top_k, n_moe_layers, reserved1;
  uint32_t moe_layers[kMaxMoeLayers];
  char fingerprint[96];
  char segment[224];

  // Server liveness. epoch changes every time a server (re)starts on this ring.
  alignas(64) std::atomic<uint32_t> ready;
  std::atomic<uint32_t> server_pid;
  std::atomic<uint32_t> epoch;
  std::atomic<uint64_t> server_pid_ns;
  alignas(64) std::atomic<uint64_t> heartbeat_ns;
  // The server's doorbell: its own cache line, hammered by clients.
  alignas(64) std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> server_sleeping;
};
static_assert(sizeof(RingHeader) <= kPage);

struct ChannelCtl {
  // Written by the claiming client; owner = pid << 32 | random, 0 when free.
  alignas(64) std::atomic<uint64_t> owner;
  std::atomic<uint64_t> owner_pid_ns;
  // The exchange.
  alignas(64) std::atomic<uint32_t> state;
  std::atomic<uint32_t> client_waiting;
  uint64_t seq;  // request number, echoed in done_seq
  uint32_t layer, n_tokens, slots, flags;  // flags: ExpertBatch::flags (0 from older clients)
  alignas(64) uint64_t done_seq;
  uint32_t error_len, reserved1;
  char error[kErrorBytes];
  // Written by the client before it posts (CLOCK_MONOTONIC, host-wide; 0 from older clients):
  // the server's queueing time per client starts here.
  uint64_t posted_ns;
};
static_assert(sizeof(ChannelCtl) <= kPage);

inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct PayloadLayout {
  uint64_t x = 0, ids = 0, w = 0, out = 0, end = 0;  // offsets from the payload start
  PayloadLayout(uint32_t hidden, uint32_t max_tokens, uint32_t max_slots) {
    const uint64_t act = uint64_t{max_tokens} * hidden * 4, route = uint64_t{max_tokens} * max_slots * 4;
    x = 0;
    ids = align_up(x + act, 64);
    w = align_up(ids + route, 64);
    out = align_up(w + route, 64);
    end = align_up(out + act, kPage);
  }
};

inline uint64_t channel_stride(uint32_t hidden, uint32_t max_tokens, uint32_t max_slots) {
  return kPage + PayloadLayout(hidden, max_tokens, max_slots).end;
}

}  // namespace ft::ipc::ring
