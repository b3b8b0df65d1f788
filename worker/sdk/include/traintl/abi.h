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
 * has accepted the report; report_async and report_deferred until their files are
 * captured). Strings returned by the host stay valid until the process exits.
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

/* ---- Datasets (traintl_host_api.datasets) ----
 *
 * A shard is this rank's part of a dataset named in the job spec's "datasets"; an iterator
 * streams one epoch of it as batches of columns, prepared on background threads. Options
 * travel as JSON objects so that later versions can add some; a host refuses keys it does
 * not know (the message names them). */

/* Element types of batch columns. */
#define TRAINTL_DTYPE_FLOAT64 1
#define TRAINTL_DTYPE_INT64 2
#define TRAINTL_DTYPE_STRING 3
#define TRAINTL_DTYPE_FLOAT32 4
#define TRAINTL_DTYPE_INT32 5

/* Results of the dataset calls. */
#define TRAINTL_DATA_OK 0
/* iter_next: the epoch has no more batches. */
#define TRAINTL_DATA_END 1
/* The data or the request is wrong (missing file, malformed row, unknown column, ...):
 * retrying cannot help. The host then ends a failing attempt as not retryable. */
#define TRAINTL_DATA_BAD -1
/* An I/O or network failure; a later attempt may succeed. */
#define TRAINTL_DATA_UNAVAILABLE -2

typedef struct traintl_dataset_shard traintl_dataset_shard; /* opaque */
typedef struct traintl_batch_iter traintl_batch_iter;       /* opaque */

/* One column of a batch. Numeric data is num_rows * (product of shape) values, row-major;
 * string data is the UTF-8 bytes of every value, value i being
 * data[offsets[i], offsets[i + 1]). The layout of this struct never changes; a batch
 * says how large the host's is (column_struct_size) so that fields can be appended. */
typedef struct traintl_column {
  const char* name;
  int32_t dtype;        /* TRAINTL_DTYPE_* */
  int32_t ndim;         /* dimensions of one row's value: 0 for a scalar */
  const int64_t* shape; /* ndim sizes */
  const void* data;
  const int64_t* offsets; /* strings: num_rows + 1 offsets; NULL otherwise */
} traintl_column;

/* A batch: valid until passed to batch_release (which every batch must be), independent of
 * its iterator and shard (they may be closed first). */
typedef struct traintl_batch {
  uint32_t struct_size;        /* sizeof(traintl_batch) as compiled by the host */
  uint32_t column_struct_size; /* the stride of `columns`, in bytes */
  int64_t num_rows;
  int64_t num_columns;
  const traintl_column* columns;
} traintl_batch;

typedef struct traintl_dataset_api {
  /* sizeof(traintl_dataset_api) as compiled by the host; check fields with
   * TRAINTL_DATASET_API_HAS. */
  uint32_t struct_size;
  /* Opaque; passed back as the first argument of every call. */
  void* ctx;

  /* Opens this rank's shard of dataset `name`. options_json: NULL or a JSON object with
   * "column_names" (CSV without a header row: the column names), "column_types" (name ->
   * "float64" | "float32" | "int64" | "int32" | "string", replacing inferred types). Reads
   * the files' heads; may scan every file to balance rows across ranks. Returns
   * TRAINTL_DATA_OK and sets *shard, or an error code with a message in err. */
  int (*shard_open)(void* ctx, const char* name, const char* options_json,
                    traintl_dataset_shard** shard, char* err, size_t err_len);
  /* The shard as a JSON object: "name", "uri", "format", "files" (their names), "split",
   * "rank", "world_size", "columns" ([{"name", "dtype", "shape"}]), "total_rows" and
   * "num_rows" (rows this rank reads per epoch; null while not yet counted). Valid until
   * the next call of shard_info on the shard or shard_close. */
  const char* (*shard_info)(void* ctx, traintl_dataset_shard* shard);
  /* Releases the shard; its iterators and batches stay valid. */
  void (*shard_close)(void* ctx, traintl_dataset_shard* shard);

  /* Starts one epoch. options_json: NULL or a JSON object with "batch_size" (256),
   * "drop_last" (false), "shuffle" (false), "seed" (0), "epoch" (0), "columns" ([] = all),
   * "column_types" ({}: name -> dtype name, to parse a column as for this epoch),
   * "prefetch_batches" (2), "shuffle_buffer_rows" (10000), "num_threads" (0 = auto),
   * "block_bytes" (1 MiB). */
  int (*iter_open)(void* ctx, traintl_dataset_shard* shard, const char* options_json,
                   traintl_batch_iter** iter, char* err, size_t err_len);
  /* The next batch: TRAINTL_DATA_OK with *batch set, TRAINTL_DATA_END, or an error code
   * with a message naming the file and line (the same error again on later calls). */
  int (*iter_next)(void* ctx, traintl_batch_iter* iter, const traintl_batch** batch, char* err,
                   size_t err_len);
  /* Stops the epoch's threads and releases the iterator. */
  void (*iter_close)(void* ctx, traintl_batch_iter* iter);
  void (*batch_release)(void* ctx, const traintl_batch* batch);
} traintl_dataset_api;

/* True when the host's dataset struct contains `field`. */
#define TRAINTL_DATASET_API_HAS(api, field) \
  ((api)->struct_size >= offsetof(traintl_dataset_api, field) + sizeof((api)->field))

/* The rank's training progress (traintl_host_api.progress): the LibTorch integration fills
 * it at every gradient synchronization and collective, so the head can name a straggler
 * or the rank a stalled collective waits for. */
typedef struct traintl_progress {
  uint64_t steps;          /* training steps completed */
  double step_s;           /* the latest step's wall time, seconds */
  double busy_s;           /* ... of which not spent waiting for peers */
  uint64_t collective_seq; /* collectives entered so far */
  int in_collective;       /* non-zero while waiting in collective collective_seq */
} traintl_progress;

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

  /* Appended in the datasets release; NULL when the host serves no datasets. */
  const traintl_dataset_api* datasets;

  /* Appended in the observability release. Records the rank's progress; cheap (the host
   * keeps the numbers and sends them on its own thread). */
  void (*progress)(void* host, const traintl_progress* progress);

  /* ---- Appended in the async checkpoint release ----
   *
   * Asynchronous reports: the call returns once the report's seq is reserved and its
   * checkpoint's files are captured; the worker persists them into the staging dir and
   * sends the report from a thread of its own. Reports keep their order: a report issued
   * after one still uploading is queued behind it (metrics alone still return at once, up
   * to the bound of unacknowledged reports), and a report with a checkpoint waits until the
   * previous upload is done (at most one upload per rank is in flight). An upload that
   * fails is not retried: every later report call, and the end of the entry point, fail
   * with its error (the report sequence of the attempt is broken; the head commits
   * nothing of it). Options travel as JSON objects, as for the dataset calls; a host
   * refuses keys it does not know. */

  /* Like report, but returns once checkpoint_dir's files are snapshotted (a copy-on-write
   * clone into the staging dir where the file system can, else a copy into memory on
   * /dev/shm); the caller may then change or delete the directory. When memory lacks room
   * (or for a held report), it copies synchronously, as report does, and logs why.
   * checkpoint_dir NULL: a metrics-only report. options_json: NULL or a JSON object;
   * no keys yet. Returns 0, or non-zero with a message in err. */
  int (*report_async)(void* host, const char* metrics_json, const char* checkpoint_dir,
                      const char* options_json, char* err, size_t err_len);

  /* A report whose checkpoint files arrive later: reserves the report's seq now (it keeps
   * its place among this rank's reports), writes the directory the files must be written
   * into to dir (NUL-terminated, at most dir_len bytes) and a ticket to *ticket, and
   * returns. The caller writes the files there (from any thread) and then calls
   * report_deferred_done; the report is sent after that. Waits first for a previous
   * upload, as report_async does. options_json: NULL or a JSON object; no keys yet. */
  int (*report_deferred)(void* host, const char* metrics_json, const char* options_json,
                         int64_t* ticket, char* dir, size_t dir_len, char* err, size_t err_len);
  /* Ends a deferred report: error NULL when every file is written (the report is then
   * sent), else why the files could not be written (the upload fails; see above). Never
   * blocks on the queue. Returns 0, or non-zero (an unknown ticket) with a message. */
  int (*report_deferred_done)(void* host, int64_t ticket, const char* error, char* err,
                              size_t err_len);

  /* Waits until every report issued so far was sent to the agent (their checkpoints
   * persisted into the staging dir). Returns 0, or non-zero with the error of a failed
   * upload. The worker does this itself when the entry point returns. */
  int (*wait_reports)(void* host, char* err, size_t err_len);
  /* ---- Appended in the peer recovery release ----
   *
   * For jobs with failure_config.peer_recovery (the context's "peer_recovery"): when a rank
   * dies, the head starts a replacement and announces a new collective generation to the
   * survivors, which rebuild their group with it and hand it their state
   * (traintl::torch::run_steps). */
  /* Waits up to timeout_ms for the head to announce a regroup of generation >=
   * min_generation. Returns the latest generation announced, 0 when none came in time, or
   * -1 once the job is asked to stop. */
  int64_t (*regroup_wait)(void* host, int64_t min_generation, int64_t timeout_ms);
  /* The seq the next report of this rank gets (0-based, per attempt). */
  int64_t (*next_report_seq)(void* host);
  /* Moves the report sequence forward to seq (a smaller seq changes nothing): after a
   * regroup, every rank continues the sequence of the replica whose state it took. Waits
   * for queued reports first. Returns 0, or non-zero with a message in err. */
  int (*skip_report_seq)(void* host, int64_t seq, char* err, size_t err_len);
  /* The latest regroup announced, as a JSON object: {"generation": G} and, for an elastic
   * job, "ranks" (the job's ranks in the new group, in group order), "store_addr" and
   * "store_port" (where the group meets). NULL before any. */
  const char* (*regroup_info)(void* host);
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
