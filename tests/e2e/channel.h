// The gRPC channel every test client opens to kjitd: unlimited message sizes (as Triton clients
// assume) and quick reconnects, so a client started beside a starting daemon connects promptly.
#pragma once

#include <grpcpp/grpcpp.h>

#include <climits>
#include <memory>
#include <string>

namespace kjit::testing {

inline std::shared_ptr<grpc::Channel> DaemonChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(INT_MAX);
  args.SetMaxSendMessageSize(INT_MAX);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

}  // namespace kjit::testing
