// Shared-memory names: a /dev/shm object, or a file path (a hugetlbfs mount for 2 MB pages):
// create, map again read-only and see the bytes, refuse a second create, size rounded to the
// filesystem block (the huge page on hugetlbfs), remove; names that are not allowed.
#include <gtest/gtest.h>
#include <sys/vfs.h>

#include <cstring>
#include <fstream>
#include <string>

#include "shared/core/error.h"
#include "shared/ipc/shm.h"
#include "tests/ipc/child_process.h"
#include "tests/support/hugetlbfs.h"
#include "tests/support/test_paths.h"

using ft::ipc::ShmMapping;

namespace {

// block: the size a path's file is rounded up to (0: a /dev/shm object keeps its exact size).
void round_trip(const std::string& name, uint64_t block) {
  {
    ShmMapping w = ShmMapping::create(name, 5000, true);
    EXPECT_EQ(w.size(), block ? (5000 + block - 1) / block * block : 5000) << name;
    std::memcpy(w.data(), "experts", 8);
    EXPECT_THROW(ShmMapping::create(name, 5000, false), ft::Error) << name << ": created twice";
  }
  auto r = ShmMapping::open(name, false);
  ASSERT_TRUE(r.has_value()) << name;
  EXPECT_STREQ(reinterpret_cast<const char*>(r->data()), "experts");
  EXPECT_TRUE(ShmMapping::exists(name));
  EXPECT_TRUE(ShmMapping::remove(name));
  EXPECT_FALSE(ShmMapping::exists(name));
  EXPECT_FALSE(ShmMapping::open(name, false).has_value());
}

}  // namespace

TEST(Shm, NamedObjectsAndPathsMapAlike) {
  round_trip(ft::test::unique_name("shm"), 0);
  ft::test::TempDir dir;
  struct statfs fs {};
  ASSERT_EQ(statfs(dir.path().c_str(), &fs), 0);
  round_trip(dir.path() + "/segment", static_cast<uint64_t>(fs.f_bsize));
  // hugetlbfs, where one is mounted with free pages: sizes round up to the huge page.
  const std::string h = ft::test::hugetlbfs_dir();
  if (!h.empty()) {
    ASSERT_EQ(statfs(h.c_str(), &fs), 0);
    EXPECT_GE(fs.f_bsize, 2u << 20);
    round_trip(h + "/" + ft::test::unique_name("huge"), static_cast<uint64_t>(fs.f_bsize));
  } else {
    std::printf("no hugetlbfs mount with free huge pages: plain paths only\n");
  }
}

TEST(Shm, BadNamesAreRefused) {
  for (const char* bad : {"", "a/b", "/tmp/../etc/x", "/tmp//x", "/tmp/", "/tmp/bad name", ".."})
    EXPECT_THROW(ShmMapping::check_name(bad), ft::Error) << bad;
  for (const char* good : {"flashtier-experts", "/dev/hugepages/flashtier-experts", "/x/y.z_1"})
    EXPECT_NO_THROW(ShmMapping::check_name(good)) << good;
}
