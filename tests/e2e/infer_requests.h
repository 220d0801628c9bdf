// Test helper: ModelInfer requests for the mla_verify model (a small valid one to mutate) and a
// call with a deadline, for the end-to-end tests against a compile-only kjitd.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "inference/grpc_service.grpc.pb.h"

namespace kjit::testing {

using Req = inference::ModelInferRequest;

template <typename T>
inline std::string Bytes(std::initializer_list<T> v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

inline void AddInput(Req* r, const std::string& name, const std::string& dt, std::vector<int64_t> shape,
                     std::string raw) {
  auto* in = r->add_inputs();
  in->set_name(name);
  in->set_datatype(dt);
  for (int64_t d : shape) in->add_shape(d);
  r->add_raw_input_contents(std::move(raw));
}

// B = 1, D = 2, P = 3, H = 8, S = `slots`. Inputs in schema order: q 0, k_extend 1, kv_cache 2,
// qo_indptr 3, kv_indptr 4, kv_indices 5, custom_mask 6, mask_indptr 7.
inline Req ValidRequest(int64_t slots = 4) {
  Req r;
  r.set_model_name("mla_verify");
  r.set_id("req-1");
  (*r.mutable_parameters())["sm_scale"].set_double_param(0.125);
  AddInput(&r, "q", "BF16", {2, 8, 576}, std::string(2 * 8 * 576 * 2, '\0'));
  AddInput(&r, "k_extend", "BF16", {2, 1, 576}, std::string(2 * 576 * 2, '\0'));
  AddInput(&r, "kv_cache", "BF16", {slots, 1, 576}, std::string(slots * 576 * 2, '\0'));
  AddInput(&r, "qo_indptr", "INT32", {2}, Bytes<int32_t>({0, 2}));
  AddInput(&r, "kv_indptr", "INT32", {2}, Bytes<int32_t>({0, 3}));
  AddInput(&r, "kv_indices", "INT64", {3}, Bytes<int64_t>({1, 2, 3}));
  AddInput(&r, "custom_mask", "BOOL", {10}, std::string(10, '\1'));
  AddInput(&r, "mask_indptr", "INT64", {2}, Bytes<int64_t>({0, 10}));
  r.add_outputs()->set_name("o");
  return r;
}

// ValidRequest with an fp8 e4m3 cache: kv_cache as its bytes (UINT8 [S, 1, 576], one byte per
// element; 0x38 is 1.0) and parameter kjit_kv_dtype "fp8_e4m3", as PROTOCOL.md has it travel.
inline Req Fp8Request(int64_t slots = 4) {
  Req r = ValidRequest(slots);
  r.mutable_inputs(2)->set_datatype("UINT8");
  r.set_raw_input_contents(2, std::string(slots * 576, '\x38'));
  (*r.mutable_parameters())["kjit_kv_dtype"].set_string_param("fp8_e4m3");
  return r;
}

// Points a tensor's parameters (an input's or an output's) at `bytes` bytes of a shared memory
// region from `offset`.
inline void SetRegion(google::protobuf::Map<std::string, inference::InferParameter>* p, const std::string& region,
                      int64_t offset, int64_t bytes) {
  (*p)["shared_memory_region"].set_string_param(region);
  (*p)["shared_memory_offset"].set_int64_param(offset);
  (*p)["shared_memory_byte_size"].set_int64_param(bytes);
}

// Input `input` of a request with one raw entry per input reads its bytes from a region instead;
// its raw entry goes, so later inputs' entries move up: move the highest input first.
inline void UseRegion(Req* r, int input, const std::string& region, int64_t offset, int64_t bytes) {
  SetRegion(r->mutable_inputs(input)->mutable_parameters(), region, offset, bytes);
  r->mutable_raw_input_contents()->DeleteSubrange(input, 1);
}

inline void DropInput(Req* r, int i) {
  r->mutable_inputs()->DeleteSubrange(i, 1);
  r->mutable_raw_input_contents()->DeleteSubrange(i, 1);
}

inline grpc::Status Infer(inference::GRPCInferenceService::Stub* stub, const Req& r) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  inference::ModelInferResponse resp;
  grpc::Status s = stub->ModelInfer(&ctx, r, &resp);
  if (!s.ok()) {
    EXPECT_EQ(resp.raw_output_contents_size(), 0) << "an error carries no outputs";
  }
  return s;
}

// Expects `code` and, when `what` is not empty, a message containing it.
inline void ExpectInfer(inference::GRPCInferenceService::Stub* stub, const Req& r, grpc::StatusCode code,
                        const std::string& what = "") {
  const grpc::Status s = Infer(stub, r);
  EXPECT_EQ(s.error_code(), code) << what << ": " << s.error_message();
  if (!what.empty()) {
    EXPECT_NE(s.error_message().find(what), std::string::npos) << s.error_message();
  }
}

}  // namespace kjit::testing
