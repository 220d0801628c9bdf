// Synchronous methods whose requests are checked before protobuf parses them.
//
// gRPC parses a synchronous method's request before its handler runs, up to --max-request-bytes
// (the bound ModelInfer needs for tensors sent inline), and a parse may take far more memory than
// its bytes: about 44 times for KernelService/Compile's repeated names, 7.5 times for fields the
// protocol does not define, 20 MB of which took kjitd 0.9 GB. Every method but ServerLive and
// ModelInfer (grpc_queues.h; ServerLive's request is checked the same way there) is therefore
// served through these (KernelService/OpenSession checks each of its messages itself): gRPC hands
// the handler the request's bytes (its ByteBuffer, on the same synchronous threads as before),
// which checks, in order:
//   1. the token, where the service takes one (TCP clients): UNAUTHENTICATED, nothing parsed;
//   2. the size: at most kMaxControlRequestBytes, RESOURCE_EXHAUSTED past it (no such request
//      needs more than a few KB);
//   3. the parse: INVALID_ARGUMENT when the bytes are not the method's request;
// then runs the service's typed handler as before (whose first line checks the token again: a
// string compare, kept so that no handler depends on how it is reached). A service takes the
// generated method out with its WithGenericMethod_X base and adds this one under the same name
// (AddMethod); gRPC then needs a generic service, which answers the names no service has
// (grpc_queues.h).
//
// What stays as gRPC parses it, under --max-request-bytes: gRPC's reflection service, which is
// therefore served only where asked for or where kjitd's own user alone can call (flags.h,
// ReflectionServed).
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/method_handler.h>

#include <cstddef>
#include <string>

namespace kjit::server {

constexpr size_t kMaxControlRequestBytes = size_t{1} << 20;

// Steps 1 and 2 (token: null for a method without one; `type`: the request's full name).
grpc::Status CheckControlRequest(const grpc::ServerContext& ctx, const std::string* token,
                                 const grpc::ByteBuffer& bytes, const std::string& type);

// Steps 1-3: *out parsed from `bytes`.
template <typename Request>
grpc::Status ParseControlRequest(const grpc::ServerContext& ctx, const std::string* token,
                                 const grpc::ByteBuffer& bytes, Request* out) {
  const std::string& type = Request::descriptor()->full_name();
  if (grpc::Status s = CheckControlRequest(ctx, token, bytes, type); !s.ok()) return s;
  grpc::ByteBuffer copy(bytes);  // shares the slices: Deserialize takes its argument's
  if (!grpc::SerializationTraits<Request>::Deserialize(&copy, out).ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the request's bytes are not a " + type + " (protobuf could not parse them)");
  }
  return grpc::Status::OK;
}

// The unary method `path` ("/package.Service/Method") of `service`, answered by `handler` (a
// member of S or of its generated base) once its request has passed ParseControlRequest.
template <typename S, typename C, typename Request, typename Response>
grpc::internal::RpcServiceMethod* BoundedUnary(
    const char* path, grpc::Status (C::*handler)(grpc::ServerContext*, const Request*, Response*), S* service,
    const std::string* token) {
  auto run = [handler, token](S* s, grpc::ServerContext* ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
    Request req;
    if (grpc::Status parsed = ParseControlRequest(*ctx, token, *in, &req); !parsed.ok()) return parsed;
    Response resp;
    const grpc::Status status = (s->*handler)(ctx, &req, &resp);
    if (!status.ok()) return status;
    bool own_buffer = false;
    return grpc::SerializationTraits<Response>::Serialize(resp, out, &own_buffer);
  };
  return new grpc::internal::RpcServiceMethod(
      path, grpc::internal::RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<S, grpc::ByteBuffer, grpc::ByteBuffer>(run, service));
}

// The same for a server stream.
template <typename S, typename C, typename Request, typename Response>
grpc::internal::RpcServiceMethod* BoundedServerStream(
    const char* path, grpc::Status (C::*handler)(grpc::ServerContext*, const Request*, grpc::ServerWriter<Response>*),
    S* service, const std::string* token) {
  auto run = [handler, token](S* s, grpc::ServerContext* ctx, const grpc::ByteBuffer* in,
                              grpc::ServerWriter<Response>* writer) {
    Request req;
    if (grpc::Status parsed = ParseControlRequest(*ctx, token, *in, &req); !parsed.ok()) return parsed;
    return (s->*handler)(ctx, &req, writer);
  };
  return new grpc::internal::RpcServiceMethod(
      path, grpc::internal::RpcMethod::SERVER_STREAMING,
      new grpc::internal::ServerStreamingHandler<S, grpc::ByteBuffer, Response>(run, service));
}

}  // namespace kjit::server
