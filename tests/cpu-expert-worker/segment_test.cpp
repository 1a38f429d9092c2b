// The expert segment: layout and contents, re-attach without reload (also after the builder was
// killed), and every reason to rebuild: other model, other layout version, unfinished build.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>

#include "cpu-expert-worker/fingerprint.h"
#include "cpu-expert-worker/segment_builder.h"
#include "shared/core/error.h"
#include "shared/ipc/expert_segment.h"
#include "shared/model/config.h"
#include "shared/model/safetensors.h"
#include "tests/cpu-expert-worker/test_models.h"
#include "tests/support/hugetlbfs.h"
#include "tests/ipc/child_process.h"

using namespace ft;
using namespace ft::cew;

namespace {

class Segment : public ::testing::Test {
 protected:
  void SetUp() override {
    name = test::unique_name("seg");
    opts.name = name;
    opts.threads = 2;
  }
  void TearDown() override { ipc::ShmMapping::remove(name); }

  OpenedSegment open(const std::string& dir) {
    return open_or_build_segment(dir, load_config(dir), model_fingerprint(dir), opts);
  }
  // Rewrites header fields of the live segment (as a crash or an older build would leave them).
  template <class F>
  void poke(F f) {
    auto m = ipc::ShmMapping::open(name, true);
    ASSERT_TRUE(m.has_value());
    f(*reinterpret_cast<ipc::SegmentHeader*>(m->data()));
  }

  std::string name;
  SegmentOptions opts;
};

}  // namespace

TEST_F(Segment, BlocksHoldTheExpertsAsOnDisk) {
  const std::string dir = test::tiny_chat();
  const ModelConfig cfg = load_config(dir);
  OpenedSegment s = open(dir);
  ASSERT_FALSE(s.reattached);
  EXPECT_GT(s.bytes_copied, 0u);
  const ipc::ExpertSegment& seg = s.segment;
  const ipc::SegmentHeader& h = seg.header();
  EXPECT_EQ(h.complete.load(), 1u);
  EXPECT_EQ(h.n_moe_layers, 5u);
  EXPECT_EQ(h.n_experts, 16u);
  EXPECT_EQ(std::string(h.fingerprint), model_fingerprint(dir));
  const TensorStore st = TensorStore::open(dir);
  std::set<uint64_t> offsets;
  for (uint32_t m = 0; m < h.n_moe_layers; ++m)
    for (uint32_t e = 0; e < h.n_experts; ++e) {
      const ipc::BlockDesc& b = seg.block(static_cast<int>(m), e);
      EXPECT_EQ(b.layer, h.moe_layers[m]);
      EXPECT_EQ(b.expert, e);
      EXPECT_EQ(b.offset % ipc::kSegmentAlign, 0u);
      EXPECT_EQ(b.format, static_cast<uint32_t>(ipc::BlockFormat::Dense));
      offsets.insert(b.offset);
      const char* names[3] = {"gate_proj", "up_proj", "down_proj"};
      for (int k = 0; k < 3; ++k) {
        const ipc::ProjDesc& p = b.proj[k];
        EXPECT_EQ(p.encoding, static_cast<uint32_t>(ipc::ProjEncoding::BF16));
        EXPECT_EQ(p.offset % 64, 0u);
        EXPECT_LE(p.offset + p.bytes, b.bytes);
        const TensorInfo& t = st.get("model.language_model.layers." + std::to_string(b.layer) + ".mlp.experts." +
                                     std::to_string(e) + "." + names[k] + ".weight");
        ASSERT_EQ(p.bytes, t.nbytes);
        EXPECT_EQ(std::memcmp(seg.block_data(b) + p.offset, t.data, t.nbytes), 0) << t.name;
        EXPECT_EQ(p.out, static_cast<uint32_t>(t.shape[0]));
        EXPECT_EQ(p.in, static_cast<uint32_t>(t.shape[1]));
      }
      // Gate, up and down sit together in one block.
      EXPECT_LT(b.proj[0].offset, b.proj[1].offset);
      EXPECT_LT(b.proj[1].offset, b.proj[2].offset);
    }
  EXPECT_EQ(offsets.size(), 80u);
  EXPECT_EQ(cfg.n_routed_experts, 16);
}

TEST_F(Segment, SecondOpenReattachesWithoutReload) {
  const std::string dir = test::tiny_chat();
  const uint64_t id = open(dir).segment.header().build_id;
  const auto t0 = std::chrono::steady_clock::now();
  OpenedSegment s = open(dir);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(s.reattached);
  EXPECT_EQ(s.bytes_copied, 0u);
  EXPECT_EQ(s.segment.header().build_id, id) << "the segment was rebuilt";
  EXPECT_LT(ms, 1000.0);
  std::printf("re-attach incl. fingerprint: %.3f ms (attach alone %.3f ms)\n", ms, s.seconds * 1e3);
}

TEST_F(Segment, BuilderKilledAfterTheBuildLeavesAReusableSegment) {
  const std::string dir = test::tiny_chat();
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      open(dir);
    } catch (...) {
      _exit(3);
    }
    raise(SIGKILL);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  uint64_t id = 0;
  poke([&](ipc::SegmentHeader& h) { id = h.build_id; });
  OpenedSegment s = open(dir);
  EXPECT_TRUE(s.reattached);
  EXPECT_EQ(s.segment.header().build_id, id);
}

TEST_F(Segment, UnfinishedBuildIsRebuilt) {
  const std::string dir = test::tiny_chat();
  const uint64_t id = open(dir).segment.header().build_id;
  poke([](ipc::SegmentHeader& h) {
    h.complete.store(0);
    h.builder_pid.store(0);
  });
  OpenedSegment s = open(dir);
  EXPECT_FALSE(s.reattached);
  EXPECT_NE(s.rebuild_reason.find("incomplete"), std::string::npos) << s.rebuild_reason;
  EXPECT_NE(s.segment.header().build_id, id);
}

TEST_F(Segment, SegmentBeingBuiltByALiveProcessIsLeftAlone) {
  const std::string dir = test::tiny_chat();
  open(dir);
  test::ChildProcess other("/bin/sleep", {"30"}, "/dev/null");
  poke([&](ipc::SegmentHeader& h) {
    h.complete.store(0);
    h.builder_pid.store(static_cast<uint32_t>(other.pid()));
  });
  try {
    open(dir);
    FAIL() << "built over another live builder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("being built by another process"), std::string::npos) << e.what();
  }
}

TEST_F(Segment, OtherModelOrLayoutIsRebuilt) {
  test::TempDir tmp;
  const std::string dir = tmp / "model";
  test::copy_model(test::tiny_chat(), dir);
  const std::string fp1 = model_fingerprint(dir);
  open(dir);
  // Same bytes, new mtime: the fingerprint moves (it never reads tensor data).
  const auto file = std::filesystem::path(dir) / "model.safetensors";
  std::filesystem::last_write_time(file, std::filesystem::last_write_time(file) + std::chrono::seconds(5));
  EXPECT_NE(model_fingerprint(dir), fp1);
  OpenedSegment s = open(dir);
  EXPECT_FALSE(s.reattached);
  EXPECT_NE(s.rebuild_reason.find("another model"), std::string::npos) << s.rebuild_reason;

  poke([](ipc::SegmentHeader& h) { h.layout_version = 999; });
  s = open(dir);
  EXPECT_FALSE(s.reattached);
  EXPECT_NE(s.rebuild_reason.find("layout version 999"), std::string::npos) << s.rebuild_reason;

  opts.force_rebuild = true;
  s = open(dir);
  EXPECT_FALSE(s.reattached);
  opts.force_rebuild = false;
  EXPECT_TRUE(open(dir).reattached);
}

TEST_F(Segment, FusedCheckpointGivesTheSameBlocks) {
  // transformers' fused layout ([E, 2Im, D] gate_up, [E, D, Im] down) of tiny-chat's experts.
  const std::string src = test::tiny_chat();
  const ModelConfig cfg = load_config(src);
  const TensorStore st = TensorStore::open(src);
  test::TempDir tmp;
  const std::string dir = tmp / "fused";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src + "/config.json", dir + "/config.json");
  SafetensorsWriter w;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    if (!cfg.is_moe(l)) continue;
    const std::string p = "model.language_model.layers." + std::to_string(l) + ".mlp.experts.";
    std::vector<uint8_t> gu, dn;
    for (int64_t e = 0; e < cfg.n_routed_experts; ++e) {
      for (const char* k : {"gate_proj", "up_proj"}) {
        const TensorInfo& t = st.get(p + std::to_string(e) + "." + k + ".weight");
        gu.insert(gu.end(), t.data, t.data + t.nbytes);
      }
      const TensorInfo& t = st.get(p + std::to_string(e) + ".down_proj.weight");
      dn.insert(dn.end(), t.data, t.data + t.nbytes);
    }
    const int64_t E = cfg.n_routed_experts, D = cfg.hidden_size, Im = cfg.moe_intermediate_size;
    w.add_raw(p + "gate_up_proj", DType::BF16, {E, 2 * Im, D}, gu);
    w.add_raw(p + "down_proj", DType::BF16, {E, D, Im}, dn);
  }
  w.write(dir + "/model.safetensors");
  OpenedSegment fused = open(dir);
  const std::string name2 = name + "-b";
  SegmentOptions o2 = opts;
  o2.name = name2;
  OpenedSegment plain = open_or_build_segment(src, cfg, model_fingerprint(src), o2);
  const auto& a = fused.segment;
  const auto& b = plain.segment;
  ASSERT_EQ(a.header().data_bytes, b.header().data_bytes);
  EXPECT_EQ(std::memcmp(a.data() + a.header().data_offset, b.data() + b.header().data_offset, a.header().data_bytes), 0);
  ipc::ShmMapping::remove(name2);
}

TEST_F(Segment, Exl3ExpertsArePacked) {
  const std::string dir = test::tiny_exl3();
  OpenedSegment s = open(dir);
  const ipc::ExpertSegment& seg = s.segment;
  const ipc::BlockDesc& b = seg.block(0, 3);
  EXPECT_EQ(b.format, static_cast<uint32_t>(ipc::BlockFormat::Exl3));
  for (const ipc::ProjDesc& p : b.proj) {
    EXPECT_EQ(p.encoding, static_cast<uint32_t>(ipc::ProjEncoding::Exl3));
    EXPECT_GE(p.exl3_k, 1u);
    EXPECT_LE(p.exl3_k, 8u);
    EXPECT_EQ(p.bytes, uint64_t{p.in_p} * p.out_p * p.exl3_k / 8);
    EXPECT_EQ(p.offset % 64, 0u);
    EXPECT_GT(p.suh_offset, p.offset);
    EXPECT_GT(p.svh_offset, p.suh_offset);
  }
}

TEST_F(Segment, UnusableExpertWeightsAreNamed) {
  test::TempDir tmp;
  const std::string dir = tmp / "bad";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(test::tiny_chat() + "/config.json", dir + "/config.json");
  const ModelConfig cfg = load_config(dir);
  SafetensorsWriter w;
  // Layer 3 (the first MoE layer): expert 0's gate stored as F64, the rest missing.
  w.add_raw("model.language_model.layers.3.mlp.experts.0.gate_proj.weight", DType::F64,
            {cfg.moe_intermediate_size, cfg.hidden_size},
            std::vector<uint8_t>(static_cast<size_t>(cfg.moe_intermediate_size * cfg.hidden_size * 8)));
  w.write(dir + "/model.safetensors");
  try {
    open(dir);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.0.gate_proj.weight has dtype F64"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(ipc::ShmMapping::exists(name));
}

// A segment named by a file path (a hugetlbfs mount in production, a plain directory here)
// builds, reads back the experts and re-attaches without reload, like a /dev/shm one.
TEST_F(Segment, PathNamedSegmentBuildsAndReattaches) {
  test::TempDir tmp;
  std::vector<std::string> dirs = {tmp.path()};
  if (const std::string h = test::hugetlbfs_dir(); !h.empty()) dirs.push_back(h);
  else std::printf("no hugetlbfs mount with free huge pages: the plain-directory case only\n");
  for (const std::string& d : dirs) {
    opts.name = d + "/" + name;
    const std::string dir = test::tiny_chat();
    const uint64_t id = open(dir).segment.header().build_id;
    OpenedSegment again = open(dir);
    EXPECT_TRUE(again.reattached) << opts.name;
    EXPECT_EQ(again.segment.header().build_id, id) << opts.name;
    const ipc::BlockDesc& b = again.segment.block(0, 3);
    const TensorStore st = TensorStore::open(dir);
    const TensorInfo& t = st.get("model.language_model.layers." + std::to_string(b.layer) + ".mlp.experts.3.gate_proj.weight");
    EXPECT_EQ(std::memcmp(again.segment.block_data(b) + b.proj[0].offset, t.data, t.nbytes), 0) << opts.name;
    EXPECT_TRUE(ipc::ShmMapping::exists(opts.name));
    EXPECT_TRUE(ipc::ShmMapping::remove(opts.name));
    EXPECT_FALSE(ipc::ShmMapping::exists(opts.name));
  }
  opts.name = name;
}
