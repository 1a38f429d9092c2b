// --device auto: each claimant takes the first device no one else holds, none is handed out
// twice, every device taken is refused with the reason, and a released device (its holder
// gone: the descriptor closed) is taken again. flock conflicts between open file descriptions
// whether they are in one process or several, so one process can stand for several workers;
// a forked child shows the lock holds across processes too.
#include "gpu-worker/engine/device_claim.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>

#include "shared/core/error.h"
#include "tests/support/test_paths.h"

using ft::worker::DeviceClaim;

TEST(DeviceClaim, OneWorkerPerDeviceAndAFreedDeviceIsTakenAgain) {
  ft::test::TempDir dir;
  const std::vector<std::string> ids = {"0000:41:00.0", "0000:c1:00.0"};
  std::optional<DeviceClaim> a(DeviceClaim::first_free(ids, dir.path()));
  DeviceClaim b = DeviceClaim::first_free(ids, dir.path());
  EXPECT_EQ(a->index(), 0);
  EXPECT_EQ(b.index(), 1);
  EXPECT_NE(a->path(), b.path());
  try {
    DeviceClaim::first_free(ids, dir.path());
    FAIL() << "a third worker got a device";
  } catch (const ft::Error& e) {
    EXPECT_NE(std::string(e.what()).find("every GPU is taken"), std::string::npos) << e.what();
  }
  // Another process sees the same: both devices held.
  const pid_t child = fork();
  if (child == 0) {
    try {
      DeviceClaim::first_free(ids, dir.path());
      _exit(1);
    } catch (const ft::Error&) {
      _exit(0);
    }
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "a process got a held device";
  a.reset();  // the first worker exits
  const DeviceClaim c = DeviceClaim::first_free(ids, dir.path());
  EXPECT_EQ(c.index(), 0);
  EXPECT_THROW(DeviceClaim::first_free({}, dir.path()), ft::Error);
  EXPECT_THROW(DeviceClaim::first_free(ids, dir.path() + "/missing"), ft::Error);
}
