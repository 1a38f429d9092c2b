#pragma once
// Which CUDA devices this process can use, and what they are.
#include <cstdint>
#include <string>

namespace ft::cuda {

// Number of usable devices; 0 when there is no driver or no GPU (never throws).
int device_count();

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  uint64_t total_bytes = 0, free_bytes = 0;
  int clock_khz = 0;
  std::string summary() const;  // one line for logs
};

// The device's PCI bus id ("0000:41:00.0"): names one GPU whatever order a process sees them in.
std::string device_pci_id(int index);

// Makes `index` the current device of the calling thread and describes it. Throws ft::Error
// when the index is out of range.
DeviceInfo use_device(int index);

}  // namespace ft::cuda
