/* The C ABI between traintl-worker (the host) and a user's training library.
 *
 * Only C types cross this boundary, so a library built with another compiler, C++ standard
 * library or LibTorch build than the worker's still loads. The host passes a
 * traintl_host_api to the library's entry point; the struct is versioned (abi_version) and
 * size-prefixed (struct_size) so later versions can append fields without breaking older
 * libraries. C++ code does not use this header directly: traintl/train.h wraps it.
 *
 * A library exports (TRAINTL_ENTRYPOINT in traintl/train.h generates both):
 *   uint32_t traintl_abi_version(void);      returns TRAINTL_ABI_VERSION it was built for
 *   int traintl_entry_<function>(const traintl_host_api* api, char* err, size_t err_len);
 * An entry point returns TRAINTL_ENTRY_OK, or another TRAINTL_ENTRY_* code with a
 * NUL-terminated message in err (truncated to err_len - 1 bytes). It never lets a C++
 * exception escape.
 *
 * Thread-safety: every callback may be called from any thread of the library while the
 * entry point runs. report() calls are serialized by the host (each blocks until the agent
 * has accepted the report). Strings returned by the host stay valid until the process
 * exits.
 */
#ifndef TRAINTL_ABI_H_
#define TRAINTL_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRAINTL_ABI_VERSION 1

/* Name of the exported version function, and the prefix of every entry-point symbol. */
#define TRAINTL_ABI_VERSION_SYMBOL "traintl_abi_version"
#define TRAINTL_ENTRY_SYMBOL_PREFIX "traintl_entry_"

/* Return codes of an entry point. */
#define TRAINTL_ENTRY_OK 0
/* The training function failed (an exception); retrying may help. */
#define TRAINTL_ENTRY_FAILED 1
/* The library cannot run under this host (e.g. the host's struct is too old). */
#define TRAINTL_ENTRY_INCOMPATIBLE 2

/* Levels for traintl_host_api.log. */
#define TRAINTL_LOG_DEBUG 0
#define TRAINTL_LOG_INFO 1
#define TRAINTL_LOG_WARNING 2
#define TRAINTL_LOG_ERROR 3

typedef struct traintl_host_api {
  /* sizeof(traintl_host_api) as compiled by the host. A library reads a field only when
   * TRAINTL_HOST_API_HAS(api, field) holds. */
  uint32_t struct_size;
  /* TRAINTL_ABI_VERSION of the host. */
  uint32_t abi_version;
  /* Opaque; passed back as the first argument of every callback. */
  void* host;

  /* The whole worker context (docs/WORKER_PROTOCOL.md, "Context file") as a JSON object:
   * ranks, job id and name, attempt, "config" (train_loop_config), trial_dir,
   * master_addr/master_port, collective_timeout_s, use_gpu, datasets, ... */
  const char* (*get_context_json)(void* host);

  /* Reports one metrics object (a JSON object, as text), optionally with a checkpoint
   * directory (NULL for none). The host copies the checkpoint's files durably before
   * returning, and returns only once the agent accepted the report; the caller may then
   * delete its directory. Returns 0, or non-zero with a message in err. */
  int (*report)(void* host, const char* metrics_json, const char* checkpoint_dir, char* err,
                size_t err_len);

  /* The checkpoint directory to restore from, or NULL when there is none (first attempt
   * without resume_from_checkpoint). Read-only: it is the committed checkpoint itself. */
  const char* (*get_checkpoint)(void* host);

  /* Non-zero once the job was asked to stop; the library should return soon. */
  int (*should_stop)(void* host);

  /* Writes one line to the rank's log, tagged with the level (TRAINTL_LOG_*). */
  void (*log)(void* host, int level, const char* msg);
} traintl_host_api;

/* True when the host's struct contains `field` (it may be older than the library). */
#define TRAINTL_HOST_API_HAS(api, field) \
  ((api)->struct_size >= offsetof(traintl_host_api, field) + sizeof((api)->field))

typedef uint32_t (*traintl_abi_version_fn)(void);
typedef int (*traintl_entry_fn)(const traintl_host_api* api, char* err, size_t err_len);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TRAINTL_ABI_H_ */
