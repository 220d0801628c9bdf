// CheckInferRequestWire: the walk of a ModelInferRequest's bytes before they are parsed. Requests a
// client builds pass; requests whose parse would take far more memory than their bytes are refused
// with a message naming the entries; and on random damage the walk calls bytes malformed only where
// protobuf's own parse fails too.
#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/server/infer_wire.h"
#include "runtime/server/request_cache.h"

namespace kjit::server {
namespace {

using L = InferWireLimits;

// A request as clients send one: parameters at both levels, a shape, raw and typed contents.
inference::ModelInferRequest Typical() {
  inference::ModelInferRequest r;
  r.set_model_name("mla_verify");
  r.set_id("step 7");
  (*r.mutable_parameters())["sm_scale"].set_double_param(0.1446);
  (*r.mutable_parameters())["kjit_wait_event"].set_string_param("ready");
  (*r.mutable_parameters())["flag"].set_bool_param(true);
  (*r.mutable_parameters())["n"].set_int64_param(-3);
  (*r.mutable_parameters())["u"].set_uint64_param(uint64_t{1} << 40);
  auto* q = r.add_inputs();
  q->set_name("q"), q->set_datatype("BF16");
  for (int d : {2, 8, 576}) q->add_shape(d);
  (*q->mutable_parameters())["shared_memory_region"].set_string_param("input0");
  (*q->mutable_parameters())["shared_memory_byte_size"].set_int64_param(18432);
  auto* idx = r.add_inputs();
  idx->set_name("kv_indices"), idx->set_datatype("INT64"), idx->add_shape(3);
  for (int64_t v : {1, 200000, -1}) idx->mutable_contents()->add_int64_contents(v);
  auto* m = r.add_inputs();
  m->set_name("custom_mask"), m->set_datatype("BOOL"), m->add_shape(4);
  for (bool v : {true, false, true, true}) m->mutable_contents()->add_bool_contents(v);
  auto* f = r.add_inputs();
  f->set_name("scales"), f->set_datatype("FP32"), f->add_shape(2);
  f->mutable_contents()->add_fp32_contents(0.5f), f->mutable_contents()->add_fp32_contents(2.f);
  f->mutable_contents()->add_fp64_contents(1.0);
  f->mutable_contents()->add_bytes_contents("abc");
  f->mutable_contents()->add_int_contents(-7), f->mutable_contents()->add_uint_contents(7);
  f->mutable_contents()->add_uint64_contents(9);
  r.add_raw_input_contents(std::string(100, '\x01'));
  r.add_outputs()->set_name("o");
  (*r.mutable_outputs(0)->mutable_parameters())["shared_memory_region"].set_string_param("output0");
  return r;
}

// A length-delimited field: its tag byte, the payload's length as a varint, the payload.
std::string Delimited(char tag, const std::string& payload) {
  std::string out(1, tag);
  for (uint64_t v = payload.size();; v >>= 7) {
    out.push_back(static_cast<char>((v & 0x7f) | (v >= 0x80 ? 0x80 : 0)));
    if (v < 0x80) break;
  }
  out.append(payload);
  return out;
}

L Limits(uint64_t contents) {
  L l;
  l.max_contents_bytes = contents;
  return l;
}

void ExpectRefused(const std::string& bytes, absl::StatusCode code, const std::string& says) {
  const Status s = CheckInferRequestWire(bytes, Limits(1 << 20));
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(s.message().find(says), std::string::npos) << s;
}

TEST(InferWire, RequestsThatClientsBuildPass) {
  const std::string bytes = Typical().SerializeAsString();
  EXPECT_TRUE(CheckInferRequestWire(bytes, Limits(1 << 20)).ok()) << CheckInferRequestWire(bytes, Limits(1 << 20));
  EXPECT_TRUE(CheckInferRequestWire("", Limits(0)).ok());  // every field at its default
  // The limits themselves: 128 inputs, outputs and raw contents, 64 parameters, 32 dims.
  inference::ModelInferRequest r;
  for (int i = 0; i < L::kMaxTensors; ++i) r.add_inputs(), r.add_outputs(), r.add_raw_input_contents("");
  for (int i = 0; i < L::kMaxParameters; ++i) {
    (*r.mutable_parameters())[absl::StrCat("p", i)].set_bool_param(true);
    (*r.mutable_inputs(0)->mutable_parameters())[absl::StrCat("p", i)].set_bool_param(true);
    (*r.mutable_outputs(0)->mutable_parameters())[absl::StrCat("p", i)].set_bool_param(true);
  }
  for (int i = 0; i < L::kMaxDims; ++i) r.mutable_inputs(1)->add_shape(i);
  EXPECT_TRUE(CheckInferRequestWire(r.SerializeAsString(), Limits(0)).ok());
}

TEST(InferWire, TooManyEntriesAreRefusedByName) {
  auto one_more = [](auto add) {
    inference::ModelInferRequest r;
    add(r);
    return r.SerializeAsString();
  };
  ExpectRefused(one_more([](auto& r) { for (int i = 0; i <= L::kMaxTensors; ++i) r.add_inputs(); }),
                absl::StatusCode::kInvalidArgument, "more than 128 inputs");
  ExpectRefused(one_more([](auto& r) { for (int i = 0; i <= L::kMaxTensors; ++i) r.add_outputs(); }),
                absl::StatusCode::kInvalidArgument, "more than 128 outputs");
  ExpectRefused(one_more([](auto& r) {
                  for (int i = 0; i <= L::kMaxTensors; ++i) r.add_raw_input_contents()->push_back(1);
                }),
                absl::StatusCode::kInvalidArgument, "more than 128 raw_input_contents");
  ExpectRefused(one_more([](auto& r) {
                  for (int i = 0; i <= L::kMaxParameters; ++i) (*r.mutable_parameters())[absl::StrCat(i)];
                }),
                absl::StatusCode::kInvalidArgument, "ModelInferRequest has more than 64 parameters");
  ExpectRefused(one_more([](auto& r) {
                  auto* p = r.add_outputs()->mutable_parameters();
                  for (int i = 0; i <= L::kMaxParameters; ++i) (*p)[absl::StrCat(i)];
                }),
                absl::StatusCode::kInvalidArgument, "InferRequestedOutputTensor has more than 64 parameters");
  // Packed dims, and the same dims unpacked (field 3, varint, one by one); dims count per tensor.
  const std::string one_dim_each =
      one_more([](auto& r) { for (int i = 0; i <= L::kMaxDims; ++i) r.add_inputs()->add_shape(1); });
  EXPECT_TRUE(CheckInferRequestWire(one_dim_each, Limits(0)).ok());
  ExpectRefused(one_more([](auto& r) {
                  auto* t = r.add_inputs();
                  for (int i = 0; i <= L::kMaxDims; ++i) t->add_shape(1 << 20);
                }),
                absl::StatusCode::kInvalidArgument, "InferInputTensor has more than 32 shape dims");
  std::string unpacked;
  for (int i = 0; i <= L::kMaxDims; ++i) unpacked.append("\x18\x01", 2);  // field 3, varint 1
  ExpectRefused(Delimited('\x2a', unpacked), absl::StatusCode::kInvalidArgument,
                "more than 32 shape dims");
}

// The amplification that motivated the walk: 2-byte empty inputs by the million, and fields no
// message defines.
TEST(InferWire, FloodsOfTinyEntriesAreRefusedBeforeAnyParse) {
  std::string flood = "\x0a\x0amla_verify";
  for (int i = 0; i < 1000000; ++i) flood.append("\x2a\x00", 2);
  ExpectRefused(flood, absl::StatusCode::kInvalidArgument, "more than 128 inputs");
  std::string unknown;
  for (int i = 0; i <= L::kMaxUnknownFields; ++i) unknown.append("\xf8\x01\x00", 3);  // field 31, varint 0
  ExpectRefused(unknown, absl::StatusCode::kInvalidArgument, "fields that inference.ModelInferRequest does not define");
  // A known field with another wire type is unknown to protobuf too: model_name as a varint.
  std::string wrong;
  for (int i = 0; i <= L::kMaxUnknownFields; ++i) wrong.append("\x08\x00", 2);
  ExpectRefused(wrong, absl::StatusCode::kInvalidArgument, "(the last: field 1 of ModelInferRequest)");
  ExpectRefused(std::string("\xfb\x01\xfc\x01", 4), absl::StatusCode::kInvalidArgument, "is a group");
}

TEST(InferWire, TypedContentsAreBoundedAsParsed) {
  // INT64 zeros: one byte each on the wire, eight parsed. 2^17 of them parse to exactly 1 MiB.
  auto zeros = [](int n, bool packed) {
    inference::ModelInferRequest r;
    auto* c = r.add_inputs()->mutable_contents();
    for (int i = 0; i < n; ++i) c->add_int64_contents(0);
    std::string bytes = r.SerializeAsString();
    if (packed) return bytes;
    std::string contents;  // the same values unpacked: field 3, varint 0, one by one
    for (int i = 0; i < n; ++i) contents.append("\x18\x00", 2);
    return Delimited('\x2a', Delimited('\x2a', contents));  // inputs { contents { ... } }
  };
  for (bool packed : {true, false}) {
    SCOPED_TRACE(packed);
    const std::string fits = zeros(1 << 17, packed), over = zeros((1 << 17) + 1, packed);
    inference::ModelInferRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(over));  // protobuf takes both encodings
    EXPECT_EQ(parsed.inputs(0).contents().int64_contents_size(), (1 << 17) + 1);
    EXPECT_TRUE(CheckInferRequestWire(fits, Limits(1 << 20)).ok());
    ExpectRefused(over, absl::StatusCode::kResourceExhausted,
                  "typed contents (InferTensorContents) would take more than 1048576");
  }
  // bytes_contents: an empty string is 2 bytes on the wire and a 32-byte string object parsed.
  inference::ModelInferRequest strings;
  auto* c = strings.add_inputs()->mutable_contents();
  for (int i = 0; i <= (1 << 15); ++i) c->add_bytes_contents("");
  ExpectRefused(strings.SerializeAsString(), absl::StatusCode::kResourceExhausted,
                "raw_input_contents or in shared memory");
}

TEST(InferWire, TruncatedOrInvalidBytesAreNotARequest) {
  const std::string bytes = Typical().SerializeAsString();
  for (size_t cut : {size_t{1}, size_t{5}, bytes.size() / 2, bytes.size() - 1}) {
    inference::ModelInferRequest parsed;
    if (parsed.ParseFromString(bytes.substr(0, cut))) continue;  // a cut at a field's end still parses
    ExpectRefused(bytes.substr(0, cut), absl::StatusCode::kInvalidArgument, "not a serialized");
  }
  ExpectRefused(std::string("\x00\x01", 2), absl::StatusCode::kInvalidArgument, "not a serialized");  // field 0
  // A 5-byte tag past 32 bits: protobuf drops the high bits (an undefined varint field here), as
  // the walk does; a 6-byte tag fails in both. (Found by the fuzzer.)
  const std::string wide_tag("\x98\x98\x98\x98\x64\x00", 6), longer_tag("\x98\x98\x98\x98\x98\x01\x00", 7);
  inference::ModelInferRequest parsed;
  EXPECT_TRUE(parsed.ParseFromString(wide_tag));
  EXPECT_TRUE(CheckInferRequestWire(wide_tag, Limits(0)).ok());
  EXPECT_FALSE(parsed.ParseFromString(longer_tag));
  ExpectRefused(longer_tag, absl::StatusCode::kInvalidArgument, "not a serialized");
  ExpectRefused("\x32\x05\x0a\x01", absl::StatusCode::kInvalidArgument, "not a serialized");  // length past the end
  ExpectRefused(std::string("\x2a\x03\x1a\x02\x80", 5), absl::StatusCode::kInvalidArgument, "not a serialized");
}

// Random damage to real requests: wherever the walk says "not a serialized request", protobuf's
// parse fails as well (the walk never refuses what protobuf reads as a request on those grounds),
// and whatever it accepts parses within the limits.
TEST(InferWire, AgreesWithProtobufOnDamagedRequests) {
  const google::protobuf::LogSilencer quiet;  // protobuf logs each string field with invalid UTF-8
  std::mt19937 rng(20261207);
  const std::string base = Typical().SerializeAsString();
  int refused = 0, accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string b = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % b.size();
      switch (rng() % 4) {
        case 0: b[at] = static_cast<char>(rng()); break;
        case 1: b.erase(at, 1 + rng() % 3); break;
        case 2: b.insert(at, 1, static_cast<char>(rng())); break;
        case 3: b.resize(at); break;
      }
      if (b.empty()) b = base;
    }
    const Status s = CheckInferRequestWire(b, Limits(4096));
    inference::ModelInferRequest parsed;
    const bool parses = parsed.ParseFromString(b);
    if (!s.ok() && s.message().find("not a serialized") != std::string::npos) {
      ++refused;
      EXPECT_FALSE(parses) << "trial " << trial << ": the walk refused bytes protobuf parses";
    }
    if (s.ok() && parses) {
      ++accepted;
      EXPECT_LE(parsed.inputs_size(), L::kMaxTensors);
      EXPECT_LE(parsed.parameters_size(), L::kMaxParameters);
      for (const auto& t : parsed.inputs()) EXPECT_LE(t.shape_size(), L::kMaxDims);
    }
  }
  EXPECT_GT(refused, 1000);
  EXPECT_GT(accepted, 100);
}

// Over kWalkAbove bytes; a smaller request parses to a few MB at most, and skips the walk.
TEST(InferWire, TheRequestCacheChecksBeforeItParses) {
  RequestCache cache;
  cache.incoming()->clear();
  for (size_t i = 0; i <= L::kWalkAbove / 2; ++i) cache.incoming()->append("\x2a\x00", 2);
  const auto refused = cache.Parse(Limits(0));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("more than 128 inputs"), std::string::npos) << refused.status();
  *cache.incoming() = Typical().SerializeAsString();
  const auto parsed = cache.Parse(Limits(1 << 20));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)->inputs_size(), 4);
  *cache.incoming() = "\x32\x05";
  EXPECT_EQ(cache.Parse(Limits(1 << 20)).status().code(), absl::StatusCode::kInvalidArgument);
  cache.incoming()->clear();  // 129 inputs in 258 bytes: parsed (the decoder refuses their names)
  for (int i = 0; i <= L::kMaxTensors; ++i) cache.incoming()->append("\x2a\x00", 2);
  const auto small = cache.Parse(Limits(0));
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ((*small)->inputs_size(), L::kMaxTensors + 1);
}

}  // namespace
}  // namespace kjit::server
