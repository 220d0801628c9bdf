#include "runtime/server/library_logs.h"

#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>

#include <string>

#include "runtime/common/log.h"

namespace kjit::server {
namespace {

void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
  const LogLevel l = level >= google::protobuf::LOGLEVEL_ERROR ? LogLevel::kError
                     : level == google::protobuf::LOGLEVEL_WARNING ? LogLevel::kWarn : LogLevel::kInfo;
  const std::string where = std::string("protobuf ") + (file ? file : "") + ":" + std::to_string(line);
  LogRateLimited(l, where, where + ": " + message);
}

void GrpcLog(gpr_log_func_args* args) {
  const LogLevel l = args->severity == GPR_LOG_SEVERITY_ERROR ? LogLevel::kError
                     : args->severity == GPR_LOG_SEVERITY_INFO ? LogLevel::kInfo : LogLevel::kDebug;
  const std::string where = std::string("grpc ") + (args->file ? args->file : "") + ":" + std::to_string(args->line);
  LogRateLimited(l, where, where + ": " + (args->message ? args->message : ""));
}

}  // namespace

void RouteLibraryLogs() {
  google::protobuf::SetLogHandler(&ProtobufLog);
  gpr_set_log_function(&GrpcLog);
}

}  // namespace kjit::server
