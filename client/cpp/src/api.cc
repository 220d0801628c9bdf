// The C ABI of kjit_client.h over kjit::client::Client: statuses become codes and a message per
// thread; nothing thrown crosses it.
#include <cuda.h>

#include <string>

#include "client/cpp/include/kjit_client.h"
#include "client/cpp/src/client.h"
#include "runtime/common/log.h"

struct kjit_client {
  std::unique_ptr<kjit::client::Client> impl;
};

namespace {

thread_local std::string g_last_error;

int Fail(int code, std::string message) {
  g_last_error = std::move(message);
  return code;
}

int Code(const kjit::Status& s) {
  if (s.ok()) {
    g_last_error.clear();
    return KJIT_OK;
  }
  return Fail(static_cast<int>(s.code()), std::string(s.message()));
}

// Runs `f`, turning anything thrown (an allocation failure) into KJIT_INTERNAL.
template <typename F>
int Guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Fail(KJIT_INTERNAL, std::string("kjit client: ") + e.what());
  } catch (...) {
    return Fail(KJIT_INTERNAL, "kjit client: unknown exception");
  }
}

CUstream AsStream(uint64_t s) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(s)); }

}  // namespace

extern "C" {

const char* kjit_last_error(void) { return g_last_error.c_str(); }

const char* kjit_version(void) { return KJIT_VERSION; }

int kjit_abi_version(void) { return KJIT_CLIENT_ABI_VERSION; }

int kjit_client_create(const kjit_client_options* options, kjit_client** out) {
  if (out == nullptr) return Fail(KJIT_INVALID_ARGUMENT, "kjit_client_create: out is NULL");
  *out = nullptr;
  return Guarded([&] {
    kjit::SetLogProgram("kjit");
    auto c = kjit::client::Client::Create(options);
    if (!c.ok()) return Code(c.status());
    *out = new kjit_client{*std::move(c)};
    return Code(kjit::Status());
  });
}

void kjit_client_destroy(kjit_client* client) {
  try {
    delete client;
  } catch (...) {
  }
}

int kjit_client_mode(const kjit_client* client) { return client == nullptr ? 0 : static_cast<int>(client->impl->mode()); }

const char* kjit_client_describe(const kjit_client* client) {
  return client == nullptr ? "" : client->impl->describe().c_str();
}

int kjit_client_prepare(kjit_client* client, const char* arch) {
  if (client == nullptr || arch == nullptr) return Fail(KJIT_INVALID_ARGUMENT, "kjit_client_prepare: NULL argument");
  return Guarded([&] { return Code(client->impl->Prepare(arch)); });
}

int kjit_mla_verify(kjit_client* client, const kjit_mla_verify_args* args, uint64_t stream, uint64_t* workspace_needed) {
  if (client == nullptr || args == nullptr) return Fail(KJIT_INVALID_ARGUMENT, "kjit_mla_verify: NULL argument");
  return Guarded([&] {
    uint64_t needed = 0;
    const kjit::Status s = client->impl->Verify(args, AsStream(stream), &needed);
    if (workspace_needed != nullptr) *workspace_needed = needed;
    if (!s.ok() && needed > 0) return Fail(KJIT_WORKSPACE_TOO_SMALL, std::string(s.message()));
    return Code(s);
  });
}

int kjit_check_errors(kjit_client* client, int64_t device, uint64_t stream) {
  if (client == nullptr) return Fail(KJIT_INVALID_ARGUMENT, "kjit_check_errors: NULL client");
  return Guarded([&] { return Code(client->impl->CheckErrors(device, AsStream(stream))); });
}

}  // extern "C"
