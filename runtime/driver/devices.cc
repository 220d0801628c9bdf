#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/driver/driver_internal.h"

namespace kjit::driver {
namespace {

std::string FormatUuid(const CUuuid& id) {
  const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    absl::StrAppendFormat(&s, "%02x", b[i]);
  }
  return s;
}

StatusOr<DeviceInfo> Describe(const Api& api, int ordinal) {
  const std::string where = absl::StrCat("device ", ordinal);
  CUdevice dev = 0;
  KJIT_CU_RETURN_IF_ERROR(api.cuDeviceGet(&dev, ordinal), absl::StrCat(where, ": cuDeviceGet"));
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  KJIT_CU_RETURN_IF_ERROR(api.cuDeviceGetName(name, sizeof(name) - 1, dev),
                          absl::StrCat(where, ": cuDeviceGetName"));
  info.name = name;
  CUuuid uuid{};
  KJIT_CU_RETURN_IF_ERROR(api.cuDeviceGetUuid(&uuid, dev), absl::StrCat(where, ": cuDeviceGetUuid"));
  info.uuid = FormatUuid(uuid);
  auto attr = [&](CUdevice_attribute a, int* out, const char* label) {
    return Check(api.cuDeviceGetAttribute(out, a, dev), absl::StrCat(where, ": ", label));
  };
  KJIT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info.cc_major, "cc major"));
  KJIT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info.cc_minor, "cc minor"));
  KJIT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info.sm_count, "SM count"));
  KJIT_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                            &info.max_smem_per_block_optin, "max shared memory per block (opt-in)"));
  info.arch = absl::StrCat("sm_", info.cc_major, info.cc_minor);
  size_t total = 0;
  KJIT_CU_RETURN_IF_ERROR(api.cuDeviceTotalMem(&total, dev), absl::StrCat(where, ": cuDeviceTotalMem"));
  info.total_mem = total;
  return info;
}

}  // namespace

StatusOr<std::vector<DeviceInfo>> Devices() {
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  int count = 0;
  KJIT_CU_RETURN_IF_ERROR(api->cuDeviceGetCount(&count), "cuDeviceGetCount");
  std::vector<DeviceInfo> out;
  out.reserve(count);
  for (int i = 0; i < count; ++i) {
    KJIT_ASSIGN_OR_RETURN(DeviceInfo info, Describe(*api, i));
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace kjit::driver
