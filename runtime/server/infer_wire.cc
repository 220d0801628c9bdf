#include "runtime/server/infer_wire.h"

#include <climits>

#include "absl/strings/str_cat.h"

namespace kjit::server {
namespace {

// The bytes left of one message. (protobuf's CodedInputStream does the same, at twice the cost here:
// its limit checks are calls into the library, and the walk runs on every new request.)
struct Reader {
  const unsigned char* p;
  const unsigned char* end;
  uint64_t left() const { return static_cast<uint64_t>(end - p); }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
      const unsigned char b = *p++;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (b < 0x80) return true;
    }
    return false;  // truncated, or more than 10 bytes
  }
  // A tag as protobuf reads one: at most 5 bytes, the bits past 32 dropped.
  bool Tag(uint32_t* tag) {
    const unsigned char* start = p;
    uint64_t v;
    if (!Varint(&v) || p - start > 5) return false;
    *tag = static_cast<uint32_t>(v);
    return true;
  }
  bool Skip(uint64_t n) {
    if (n > left()) return false;
    p += n;
    return true;
  }
};

// Wire types (protobuf's encoding documentation).
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kStartGroup = 3, kFixed32 = 5;

// The messages a ModelInferRequest holds (grpc_service.proto).
enum class Msg { kRequest, kInput, kOutput, kContents, kParamEntry, kParameter };

const char* NameOf(Msg m) {
  switch (m) {
    case Msg::kRequest: return "ModelInferRequest";
    case Msg::kInput: return "InferInputTensor";
    case Msg::kOutput: return "InferRequestedOutputTensor";
    case Msg::kContents: return "InferTensorContents";
    case Msg::kParamEntry: return "a parameters entry";
    case Msg::kParameter: return "InferParameter";
  }
  return "?";
}

// What one field of a message is.
struct Field {
  enum Kind { kUnknown, kString, kScalar, kMessage, kRepeatedBytes } kind = kUnknown;
  int wire = kLengthDelimited;  // a scalar's own wire type
  bool repeated = false;        // a repeated scalar (packed or not)
  Msg sub = Msg::kRequest;      // kMessage: its type
  int parsed_bytes = 0;         // a repeated scalar's bytes per element once parsed
  uint64_t* count = nullptr;    // entries counted against `cap` (per message)
  int cap = 0;
  const char* what = "";        // the entries' name in an error
};

struct Counts {  // entries of one message
  uint64_t tensors_in = 0, tensors_out = 0, raw = 0, params = 0, dims = 0;
};

Field Describe(Msg m, int number, Counts* c) {
  using L = InferWireLimits;
  Field f;
  auto string = [&] { f.kind = Field::kString; };
  auto scalar = [&](int wire) { f.kind = Field::kScalar, f.wire = wire; };
  auto array = [&](int wire, int parsed) {
    f.kind = Field::kScalar, f.wire = wire, f.repeated = true, f.parsed_bytes = parsed;
  };
  auto message = [&](Msg sub, uint64_t* count, int cap, const char* what) {
    f.kind = Field::kMessage, f.sub = sub, f.count = count, f.cap = cap, f.what = what;
  };
  switch (m) {
    case Msg::kRequest:
      if (number >= 1 && number <= 3) string();
      if (number == 4) message(Msg::kParamEntry, &c->params, L::kMaxParameters, "parameters");
      if (number == 5) message(Msg::kInput, &c->tensors_in, L::kMaxTensors, "inputs");
      if (number == 6) message(Msg::kOutput, &c->tensors_out, L::kMaxTensors, "outputs");
      if (number == 7) {
        f.kind = Field::kString, f.count = &c->raw, f.cap = L::kMaxTensors, f.what = "raw_input_contents";
      }
      break;
    case Msg::kInput:
      if (number == 1 || number == 2) string();
      if (number == 3) array(kVarint, 0), f.count = &c->dims, f.cap = L::kMaxDims, f.what = "shape dims";
      if (number == 4) message(Msg::kParamEntry, &c->params, L::kMaxParameters, "parameters");
      if (number == 5) message(Msg::kContents, nullptr, 0, "");
      break;
    case Msg::kOutput:
      if (number == 1) string();
      if (number == 2) message(Msg::kParamEntry, &c->params, L::kMaxParameters, "parameters");
      break;
    case Msg::kContents:
      if (number == 1) array(kVarint, 1);
      if (number == 2 || number == 4) array(kVarint, 4);
      if (number == 3 || number == 5) array(kVarint, 8);
      if (number == 6) array(kFixed32, 4);
      if (number == 7) array(kFixed64, 8);
      if (number == 8) f.kind = Field::kRepeatedBytes;
      break;
    case Msg::kParamEntry:
      if (number == 1) string();
      if (number == 2) message(Msg::kParameter, nullptr, 0, "");
      break;
    case Msg::kParameter:
      if (number == 1 || number == 2 || number == 5) scalar(kVarint);
      if (number == 3) string();
      if (number == 4) scalar(kFixed64);
      break;
  }
  return f;
}

class Walker {
 public:
  explicit Walker(const InferWireLimits& limits) : limits_(limits) {}

  // The fields of one message of type m: all of `in`.
  Status Walk(Reader in, Msg m) {
    Counts counts;
    while (in.left() > 0) {
      uint32_t tag;
      if (!in.Tag(&tag) || (tag >> 3) == 0) return Malformed();
      const int number = static_cast<int>(tag >> 3), wire = static_cast<int>(tag & 7);
      if (wire == kStartGroup) {
        return absl::InvalidArgumentError(absl::StrCat(NameOf(m), " field ", number,
                                                       " is a group: groups are not part of the protocol"));
      }
      const Field f = Describe(m, number, &counts);
      if (f.count != nullptr && !f.repeated && wire == kLengthDelimited) KJIT_RETURN_IF_ERROR(Count(m, f, 1));
      if (f.kind == Field::kScalar && f.repeated && (wire == f.wire || wire == kLengthDelimited)) {
        KJIT_RETURN_IF_ERROR(Array(&in, m, f, wire));
      } else if (f.kind == Field::kScalar && wire == f.wire) {
        KJIT_RETURN_IF_ERROR(Skip(&in, wire));
      } else if ((f.kind == Field::kString || f.kind == Field::kMessage || f.kind == Field::kRepeatedBytes) &&
                 wire == kLengthDelimited) {
        uint64_t len;
        if (!in.Varint(&len) || len > in.left()) return Malformed();
        if (f.kind == Field::kRepeatedBytes) KJIT_RETURN_IF_ERROR(AddContents(uint64_t{32} + len));
        if (f.kind == Field::kMessage) KJIT_RETURN_IF_ERROR(Walk(Reader{in.p, in.p + len}, f.sub));
        in.p += len;
      } else {  // a field the protocol does not define, or a known one with another wire type
        if (++unknown_ > InferWireLimits::kMaxUnknownFields) {
          return absl::InvalidArgumentError(
              absl::StrCat("the request has more than ", InferWireLimits::kMaxUnknownFields,
                           " fields that inference.ModelInferRequest does not define (the last: field ", number,
                           " of ", NameOf(m), ")"));
        }
        KJIT_RETURN_IF_ERROR(Skip(&in, wire));
      }
    }
    return absl::OkStatus();
  }

 private:
  static Status Malformed() {
    return absl::InvalidArgumentError("the request is not a serialized inference.ModelInferRequest");
  }

  static Status Count(Msg m, const Field& f, uint64_t n) {
    if ((*f.count += n) <= static_cast<uint64_t>(f.cap)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(NameOf(m), " has more than ", f.cap, " ", f.what,
                                                   "; no model takes more"));
  }

  Status AddContents(uint64_t bytes) {
    contents_ += bytes;
    if (contents_ <= limits_.max_contents_bytes) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(
        "the request's typed contents (InferTensorContents) would take more than ", limits_.max_contents_bytes,
        " bytes once parsed (--max-request-bytes); send the tensors as raw_input_contents or in shared memory"));
  }

  // One value of wire type `wire` (not a group), skipped.
  static Status Skip(Reader* in, int wire) {
    uint64_t v;
    bool ok = false;
    if (wire == kVarint) ok = in->Varint(&v);
    if (wire == kFixed64) ok = in->Skip(8);
    if (wire == kFixed32) ok = in->Skip(4);
    if (wire == kLengthDelimited) ok = in->Varint(&v) && in->Skip(v);
    return ok ? absl::OkStatus() : Malformed();
  }

  // Elements of a repeated scalar: one unpacked, or a packed run (varints counted by their last
  // bytes, which have the high bit clear).
  Status Array(Reader* in, Msg m, const Field& f, int wire) {
    uint64_t n = 1;
    if (wire != kLengthDelimited) {
      KJIT_RETURN_IF_ERROR(Skip(in, wire));
    } else {
      uint64_t len;
      if (!in->Varint(&len) || len > in->left()) return Malformed();
      if (f.wire == kVarint) {
        n = 0;
        for (uint64_t k = 0; k < len; ++k) n += in->p[k] < 0x80;
      } else {
        const uint64_t width = f.wire == kFixed32 ? 4 : 8;
        if (len % width != 0) return Malformed();
        n = len / width;
      }
      in->p += len;
    }
    if (f.count != nullptr) KJIT_RETURN_IF_ERROR(Count(m, f, n));
    return AddContents(n * static_cast<uint64_t>(f.parsed_bytes));
  }

  const InferWireLimits& limits_;
  uint64_t contents_ = 0;
  int unknown_ = 0;
};

}  // namespace

Status CheckInferRequestWire(std::string_view bytes, const InferWireLimits& limits) {
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::ResourceExhaustedError("the request is larger than 2 GiB, more than protobuf parses");
  }
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  return Walker(limits).Walk(Reader{p, p + bytes.size()}, Msg::kRequest);
}

}  // namespace kjit::server
