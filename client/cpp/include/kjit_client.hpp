// The C++ API of libkjit_client: header-only RAII over the C ABI of kjit_client.h, so no C++ type
// crosses the library boundary (any compiler and standard library can use it).
//
//   kjit::Client client = kjit::Client::Create();            // throws kjit::Error
//   kjit_mla_verify_args args = kjit::VerifyArgs();          // struct_size set, optional tensors absent
//   ... fill args ...
//   client.Verify(args, stream, [&](uint64_t bytes) {        // asked for a bigger workspace:
//     return std::pair{MyAlloc(bytes), bytes};               // (device address, bytes)
//   });
//   client.CheckErrors(device);
#ifndef KJIT_CLIENT_HPP_
#define KJIT_CLIENT_HPP_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "kjit_client.h"

namespace kjit {

class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }  // KJIT_* (gRPC's numbering)

 private:
  int code_;
};

inline void Check(int code) {
  if (code != KJIT_OK) throw Error(code, kjit_last_error());
}

inline kjit_mla_verify_args VerifyArgs() {
  kjit_mla_verify_args a{};
  a.struct_size = sizeof(a);
  a.k_scale = a.v_scale = 1.0;
  a.is_causal = 1;
  a.max_prefix = -1;
  return a;
}

class Client {
 public:
  static Client Create(const kjit_client_options* options = nullptr) {
    kjit_client* c = nullptr;
    Check(kjit_client_create(options, &c));
    return Client(c);
  }
  Client(Client&& other) noexcept : c_(std::exchange(other.c_, nullptr)) {}
  Client& operator=(Client&& other) noexcept {
    std::swap(c_, other.c_);
    return *this;
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client() { kjit_client_destroy(c_); }

  int mode() const { return kjit_client_mode(c_); }
  std::string describe() const { return kjit_client_describe(c_); }
  void Prepare(const std::string& arch) { Check(kjit_client_prepare(c_, arch.c_str())); }

  // Launches with args.workspace / workspace_bytes; on KJIT_WORKSPACE_TOO_SMALL calls
  // grow(bytes) -> (address, bytes) for a bigger one and tries again.
  template <typename Grow>
  void Verify(kjit_mla_verify_args& args, uint64_t stream, Grow&& grow) {
    uint64_t needed = 0;
    int code = kjit_mla_verify(c_, &args, stream, &needed);
    if (code == KJIT_WORKSPACE_TOO_SMALL) {
      std::tie(args.workspace, args.workspace_bytes) = grow(needed);
      code = kjit_mla_verify(c_, &args, stream, &needed);
    }
    Check(code);
  }
  void CheckErrors(int64_t device, uint64_t stream = 0) { Check(kjit_check_errors(c_, device, stream)); }
  kjit_client* get() const { return c_; }

 private:
  explicit Client(kjit_client* c) : c_(c) {}
  kjit_client* c_;
};

}  // namespace kjit

#endif  // KJIT_CLIENT_HPP_
