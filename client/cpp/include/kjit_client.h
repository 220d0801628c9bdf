/* libkjit_client: call kjit's kernels from an inference process (an SGLang worker) without
 * rebuilding it. A C ABI: opaque handles, integer status codes (gRPC's numbering) with a message per
 * thread, plain structs of 8-byte fields (so any FFI, ctypes included, can fill them), no C++ types.
 *
 * One call, several ways to launch (kjit_client_options.modes, or $KJIT_MODES; the first that
 * works when the client is created is used, and kjit_client_describe says which and why):
 *   in-process  cubins from kjitd (GetKernel) loaded into the caller's CUDA context, launched on the
 *               caller's stream with the daemon's own plan and checks: no RPC, no allocation and no
 *               synchronization per call, so CUDA-graph capture works. The workspace is the caller's.
 *   ring        ModelInfer through a shared-memory launch ring polled by kjitd: synchronous, or
 *               ordered by CUDA IPC events (KJIT_MODE_FLAG_EVENTS) with no host wait.
 *   remote      ModelInfer over gRPC, tensors as CUDA IPC regions (one per allocation, cached).
 *   embedded    no daemon: the library compiles with NVRTC into the same on-disk cache (same keys,
 *               same locks) and launches in-process.
 * Every RPC has a deadline: a dead or stuck daemon is an error within it, never a hang. A call
 * that makes more than one RPC can take a few deadlines: a ring call left unanswered is followed by
 * a status request (did kjitd restart?), and the next launch replaces the ring; a kernel kjitd
 * compiles for GetKernel is waited for longer (kjit_client_prepare).
 *
 * Thread safety: a client may be used from several threads; calls on one client are serialized
 * only where they share state (loading kernels, registering memory).
 */
#ifndef KJIT_CLIENT_H_
#define KJIT_CLIENT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KJIT_CLIENT_ABI_VERSION 1

#if defined(__GNUC__)
#define KJIT_CLIENT_API __attribute__((visibility("default")))
#else
#define KJIT_CLIENT_API
#endif

/* Status codes: 0 is success; 1..16 are gRPC's canonical codes. */
enum {
  KJIT_OK = 0,
  KJIT_CANCELLED = 1,
  KJIT_UNKNOWN = 2,
  KJIT_INVALID_ARGUMENT = 3,
  KJIT_DEADLINE_EXCEEDED = 4,
  KJIT_NOT_FOUND = 5,
  KJIT_ALREADY_EXISTS = 6,
  KJIT_PERMISSION_DENIED = 7,
  KJIT_RESOURCE_EXHAUSTED = 8,
  KJIT_FAILED_PRECONDITION = 9,
  KJIT_ABORTED = 10,
  KJIT_OUT_OF_RANGE = 11,
  KJIT_UNIMPLEMENTED = 12,
  KJIT_INTERNAL = 13,
  KJIT_UNAVAILABLE = 14,
  KJIT_DATA_LOSS = 15,
  KJIT_UNAUTHENTICATED = 16,
  /* Not a gRPC code: the caller's workspace is smaller than the launch needs (nothing was queued;
   * *workspace_needed says how much to allocate before calling again). */
  KJIT_WORKSPACE_TOO_SMALL = 100,
};

/* Launch modes (kjit_client_mode). */
enum { KJIT_MODE_IN_PROCESS = 1, KJIT_MODE_RING = 2, KJIT_MODE_REMOTE = 3, KJIT_MODE_EMBEDDED = 4 };

/* Tensor element types. */
enum {
  KJIT_DTYPE_BOOL = 1,
  KJIT_DTYPE_UINT8 = 2,
  KJIT_DTYPE_INT32 = 3,
  KJIT_DTYPE_INT64 = 4,
  KJIT_DTYPE_UINT32 = 5,
  KJIT_DTYPE_BF16 = 6,
  KJIT_DTYPE_FP32 = 7,
  KJIT_DTYPE_FP16 = 8,
  KJIT_DTYPE_FP8_E4M3 = 9, /* OCP e4m3 ("float8_e4m3fn"), one byte per element */
};

/* How an fp8 cache is computed with (kjit_mla_verify_args.fp8_numerics; KERNEL.md "FP8"). */
enum {
  KJIT_FP8_NUMERICS_DEQUANT = 0, /* cache values converted to bf16 on chip, bf16 MMAs (the default) */
  KJIT_FP8_NUMERICS_FP8 = 1,     /* SGLang Triton's: q and P rounded to e4m3 for the prefix */
};

/* The message of the last call that failed on this thread ("" after a success). Valid until the
 * thread's next kjit call. */
KJIT_CLIENT_API const char* kjit_last_error(void);

/* The library's version string and ABI version (KJIT_CLIENT_ABI_VERSION it was built with). */
KJIT_CLIENT_API const char* kjit_version(void);
KJIT_CLIENT_API int kjit_abi_version(void);

typedef struct kjit_client kjit_client;

typedef struct kjit_client_options {
  uint64_t struct_size;     /* sizeof(kjit_client_options) */
  const char* target;       /* "unix:///path" or "host:port"; NULL: $KJIT_TARGET, else PROTOCOL.md's socket */
  const char* modes;        /* e.g. "in-process,ring,remote,embedded" (the default); NULL: $KJIT_MODES */
  int64_t deadline_ms;      /* of every RPC and ring call; <= 0: $KJIT_DEADLINE_MS, else 10000;
                             * at most 30 days (larger values, INT64_MAX included, are cut to it) */
  const char* cache_dir;    /* embedded mode; NULL: $KJIT_CACHE_DIR, else the default cache */
  const char* client_name;  /* shown in kjitd's log for this client's session; NULL: "kjit pid N" */
  int64_t flags;            /* KJIT_MODE_FLAG_* */
  /* A file holding the token kjitd's --token-file requires over TCP (sent as gRPC metadata
   * kjit-token; a trailing newline is dropped). NULL: $KJIT_TOKEN_FILE, else no token. Absent from
   * callers built before it (their struct_size ends at flags): then $KJIT_TOKEN_FILE. */
  const char* token_file;
} kjit_client_options;

/* The ring and remote modes: order the daemon's launch after the caller's stream with CUDA IPC
 * events and return once it is queued (no host wait), instead of synchronizing. */
#define KJIT_MODE_FLAG_EVENTS 1
/* Do not open a session: registrations then live until the client unregisters them or is
 * destroyed (a killed process leaves them behind in kjitd). */
#define KJIT_MODE_FLAG_NO_SESSION 2

/* Creates a client: options may be NULL (all defaults). On failure *out is NULL and the message
 * says why each mode was refused. */
KJIT_CLIENT_API int kjit_client_create(const kjit_client_options* options, kjit_client** out);
KJIT_CLIENT_API void kjit_client_destroy(kjit_client* client);

/* The mode in use (KJIT_MODE_*), and a line that says which and why (e.g. "in-process: cubins from
 * kjitd at unix:///run/kjit/kjitd.sock"). The string lives as long as the client. */
KJIT_CLIENT_API int kjit_client_mode(const kjit_client* client);
KJIT_CLIENT_API const char* kjit_client_describe(const kjit_client* client);

/* Fetches (in-process, from kjitd) or compiles (embedded, into the cache) every kernel the client
 * launches for `arch` ("sm_90", "sm_120"), without a GPU. Other modes: nothing to do. A kernel that
 * kjitd has to compile for the call is waited for beyond deadline_ms, up to $KJIT_COMPILE_DEADLINE_MS
 * (default 600000, never less than deadline_ms), while kjitd answers ServerLive within deadline_ms;
 * a daemon that stops answering is KJIT_DEADLINE_EXCEEDED within two deadline_ms.
 * The first launch for an arch does the same when prepare was not called. */
KJIT_CLIENT_API int kjit_client_prepare(kjit_client* client, const char* arch);

/* One tensor: a device address and its layout. An absent optional tensor has data == 0 and
 * ndim == 0. strides are in elements (torch's tensor.stride()). */
typedef struct kjit_tensor {
  uint64_t data;
  int64_t dtype; /* KJIT_DTYPE_* */
  int64_t ndim;  /* 0..4 */
  int64_t shape[4];
  int64_t strides[4];
} kjit_tensor;

/* MLA tree-verify attention (KERNEL.md): SGLang's extend_attention_fwd tensors on the MLA verify
 * path. v_extend is optional: when given and not the same memory as k_extend[..., :512], the
 * kernels check that it holds the same values (V is read from k_extend). kv_cache is bf16, or an
 * fp8 e4m3 cache (SGLang's --kv-cache-dtype fp8_e4m3) as KJIT_DTYPE_FP8_E4M3 or as its bytes,
 * KJIT_DTYPE_UINT8: k_scale then multiplies the prefix scores and v_scale the prefix values, and
 * fp8_numerics says how it is computed with. Every other tensor keeps its dtype. */
typedef struct kjit_mla_verify_args {
  uint64_t struct_size; /* sizeof(kjit_mla_verify_args) */
  kjit_tensor q;           /* [N, H, 576] bf16 */
  kjit_tensor k_extend;    /* [N, 1, 576] bf16 */
  kjit_tensor v_extend;    /* optional [N, 1, 512] bf16 */
  kjit_tensor kv_cache;    /* [S, 1, 576] bf16, fp8 e4m3 or uint8 (e4m3 bytes), row stride 576 */
  kjit_tensor qo_indptr;   /* [B + 1] int32 or int64 */
  kjit_tensor kv_indptr;   /* [B + 1] int32 or int64, prefix only */
  kjit_tensor kv_indices;  /* [M] int64 */
  kjit_tensor custom_mask; /* bool or uint8 (with mask_indptr), or absent with packed_mask */
  kjit_tensor packed_mask; /* uint32, or absent */
  kjit_tensor mask_indptr; /* [B + 1] int64, with custom_mask */
  kjit_tensor o;           /* [N, H, 512] bf16, written */
  kjit_tensor lse;         /* optional [N, H] fp32, written */
  double sm_scale;
  double k_scale;  /* 1.0 for a bf16 cache; SGLang's k_scale_float for an fp8 one */
  double v_scale;
  int64_t is_causal;
  int64_t max_draft;   /* a bound on every D_b (SGLang's max_len_extend), 1..64; 0: min(N, 64) */
  int64_t max_prefix;  /* a bound on every P_b, for the plan only; < 0: kv_indices' length */
  int64_t device;      /* CUDA ordinal of the tensors in this process's numbering */
  uint64_t workspace;       /* in-process: device memory of workspace_bytes for the launch */
  uint64_t workspace_bytes; /* (other modes ignore both) */
  /* KJIT_FP8_NUMERICS_*: with an fp8 kv_cache, how it is computed with; 0 (dequant) with a bf16
   * one. Absent from callers built before it (their struct_size ends at workspace_bytes): then 0. */
  int64_t fp8_numerics;
} kjit_mla_verify_args;

/* Queues the launch on `stream` (a CUstream / cudaStream_t; 0: the legacy default stream).
 * In-process: returns once queued (a CUDA-graph capture of the stream records it). Kernel errors
 * (a kv_indices entry >= S, index pointers that leave their tensors, v_extend differing) are kept
 * on the device and reported by kjit_check_errors. Ring and remote: synchronous unless
 * KJIT_MODE_FLAG_EVENTS; kernel errors come back from this call (or, ordered by events, from the
 * next one). KJIT_WORKSPACE_TOO_SMALL: nothing queued, *workspace_needed set. */
KJIT_CLIENT_API int kjit_mla_verify(kjit_client* client, const kjit_mla_verify_args* args, uint64_t stream,
                    uint64_t* workspace_needed);

/* The kernels' errors since the last check on `device` (in-process and embedded): synchronizes
 * `stream` (0: the whole device), reads and clears the device's accumulated error word. OK when
 * there were none; INVALID_ARGUMENT saying what the kernels found otherwise. */
KJIT_CLIENT_API int kjit_check_errors(kjit_client* client, int64_t device, uint64_t stream);

#ifdef __cplusplus
}
#endif

#endif /* KJIT_CLIENT_H_ */
