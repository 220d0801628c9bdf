#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/driver/cuda_driver.h"
#include "runtime/driver/driver_internal.h"

namespace kjit::driver {
namespace {

Status CheckRange(const char* op, size_t offset, size_t bytes, size_t size) {
  if (RangeInside(offset, bytes, size)) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat(op, ": [", offset, ", +", bytes,
                                            ") is outside the device buffer of ", size, " bytes"));
}

}  // namespace

StatusOr<DeviceBuffer> DeviceBuffer::Alloc(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("DeviceBuffer::Alloc: 0 bytes");
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  CUdeviceptr p = 0;
  KJIT_CU_RETURN_IF_ERROR(api->cuMemAlloc(&p, bytes), absl::StrCat("cuMemAlloc(", bytes, " bytes)"));
  return DeviceBuffer(p, bytes);
}

StatusOr<DeviceBuffer> DeviceBuffer::AllocOnStream(size_t bytes, CUstream stream) {
  if (bytes == 0) return absl::InvalidArgumentError("DeviceBuffer::AllocOnStream: 0 bytes");
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  CUdeviceptr p = 0;
  const CUresult r = api->cuMemAllocAsync(&p, bytes, stream);
  if (r == CUDA_ERROR_NOT_SUPPORTED) return Alloc(bytes);
  KJIT_CU_RETURN_IF_ERROR(r, absl::StrCat("cuMemAllocAsync(", bytes, " bytes)"));
  return DeviceBuffer(p, bytes, stream);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), size_(std::exchange(other.size_, 0)),
      stream_(std::exchange(other.stream_, nullptr)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    ptr_ = std::exchange(other.ptr_, 0);
    size_ = std::exchange(other.size_, 0);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Reset(); }

void DeviceBuffer::Reset() {
  if (ptr_ == 0) return;
  if (const Api* api = LoadedApi()) {
    if (stream_ != nullptr) {
      api->cuMemFreeAsync(ptr_, stream_);
    } else {
      api->cuMemFree(ptr_);
    }
  }
  ptr_ = 0;
  size_ = 0;
  stream_ = nullptr;
}

Status DeviceBuffer::CopyFromHost(const void* src, size_t bytes, size_t offset) {
  KJIT_RETURN_IF_ERROR(CheckRange("CopyFromHost", offset, bytes, size_));
  if (bytes == 0) return absl::OkStatus();
  if (src == nullptr) return absl::InvalidArgumentError("CopyFromHost: null source");
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  return Check(api->cuMemcpyHtoD(ptr_ + offset, src, bytes), "cuMemcpyHtoD");
}

Status DeviceBuffer::CopyToHost(void* dst, size_t bytes, size_t offset) const {
  KJIT_RETURN_IF_ERROR(CheckRange("CopyToHost", offset, bytes, size_));
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr) return absl::InvalidArgumentError("CopyToHost: null destination");
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  return Check(api->cuMemcpyDtoH(dst, ptr_ + offset, bytes), "cuMemcpyDtoH");
}

Status DeviceBuffer::Fill(uint8_t byte) {
  if (ptr_ == 0) return absl::FailedPreconditionError("Fill on an empty DeviceBuffer");
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  return Check(api->cuMemsetD8(ptr_, byte, size_), "cuMemsetD8");
}

StatusOr<PinnedHostBuffer> PinnedHostBuffer::Alloc(size_t bytes, unsigned register_flags) {
  constexpr size_t kPage = 4096;
  const size_t rounded = bytes <= kPage ? kPage : (bytes + kPage - 1) & ~(kPage - 1);
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  auto* data = static_cast<uint8_t*>(std::aligned_alloc(kPage, rounded));
  if (data == nullptr) return absl::ResourceExhaustedError(absl::StrCat("no host memory for ", rounded, " bytes to page-lock"));
  const CUresult r = api->cuMemHostRegister(data, rounded, register_flags);
  if (r != CUDA_SUCCESS) {
    std::free(data);
    return Check(r, absl::StrCat("cuMemHostRegister(", rounded, " bytes)"));
  }
  return PinnedHostBuffer(data, rounded);
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PinnedHostBuffer::~PinnedHostBuffer() { Reset(); }

void PinnedHostBuffer::Reset() {
  if (data_ == nullptr) return;
  if (const Api* api = LoadedApi()) api->cuMemHostUnregister(data_);
  std::free(data_);
  data_ = nullptr;
  size_ = 0;
}

StatusOr<CUdeviceptr> PinnedHostBuffer::DevicePointer() const {
  KJIT_ASSIGN_OR_RETURN(const Api* api, Get());
  CUdeviceptr dev = 0;
  KJIT_CU_RETURN_IF_ERROR(api->cuMemHostGetDevicePointer(&dev, data_, 0), "cuMemHostGetDevicePointer");
  return dev;
}

}  // namespace kjit::driver
