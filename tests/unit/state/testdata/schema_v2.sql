-- A state database as the release of issue 13's first half (schema 2) wrote it: its DDL
-- verbatim, plus rows. migration_test restores its image and checks the migration to the
-- current schema (job definitions made from the stored specs).
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta(key, value) VALUES('schema_version', '2');
CREATE TABLE IF NOT EXISTS jobs(
  id TEXT PRIMARY KEY, name TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
  attempt INTEGER NOT NULL, failures INTEGER NOT NULL, priority INTEGER NOT NULL,
  submitted_at INTEGER NOT NULL, started_at INTEGER, ended_at INTEGER,
  message TEXT NOT NULL, pending_reason TEXT NOT NULL, metrics TEXT NOT NULL,
  library_sha256 TEXT NOT NULL, library_path TEXT NOT NULL, trial_dir TEXT NOT NULL,
  stop_requested INTEGER NOT NULL, submission_id TEXT,
  max_failures INTEGER NOT NULL DEFAULT 0, ckpt_num_to_keep INTEGER NOT NULL DEFAULT 0,
  ckpt_score_attribute TEXT NOT NULL DEFAULT '', ckpt_score_max INTEGER NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_by_submission ON jobs(submission_id)
  WHERE submission_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state);
CREATE INDEX IF NOT EXISTS jobs_by_time ON jobs(submitted_at);
CREATE TABLE IF NOT EXISTS attempts(
  job_id TEXT NOT NULL, attempt INTEGER NOT NULL, state TEXT NOT NULL,
  started_at INTEGER NOT NULL, ended_at INTEGER, restored_from TEXT NOT NULL,
  failed_rank INTEGER, exit_code INTEGER, signal INTEGER, reason TEXT NOT NULL,
  log_tail TEXT NOT NULL, head_node TEXT NOT NULL DEFAULT '',
  head_run TEXT NOT NULL DEFAULT '', PRIMARY KEY(job_id, attempt));
CREATE TABLE IF NOT EXISTS checkpoints(
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, attempt INTEGER NOT NULL,
  seq INTEGER NOT NULL, path TEXT NOT NULL, metrics TEXT NOT NULL, created_at INTEGER NOT NULL,
  UNIQUE(job_id, attempt, seq));
CREATE TABLE IF NOT EXISTS metrics(
  job_id TEXT NOT NULL, attempt INTEGER NOT NULL, seq INTEGER NOT NULL, time INTEGER NOT NULL,
  metrics TEXT NOT NULL, PRIMARY KEY(job_id, attempt, seq));
CREATE TABLE IF NOT EXISTS worker_events(
  job_id TEXT NOT NULL, attempt INTEGER NOT NULL, rank INTEGER NOT NULL, time INTEGER NOT NULL,
  event TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS worker_events_by_job ON worker_events(job_id);
CREATE TABLE IF NOT EXISTS applied(rid TEXT PRIMARY KEY, result TEXT NOT NULL);
INSERT INTO jobs VALUES('aa01', 'mnist',
  '{"name":"mnist","entrypoint":{"library":"/lib.so","function":"train"},"scaling_config":{"num_workers":2,"resources_per_worker":{"CPU":2},"placement_strategy":"SPREAD"},"run_config":{"failure_config":{"max_failures":3},"checkpoint_config":{"num_to_keep":2,"checkpoint_score_attribute":"loss","checkpoint_score_order":"min"}},"datasets":{"train":{"uri":"file:///d/train.csv"}}}',
  'RUNNING', 1, 0, 0, 1000, 1100, NULL, '', '', '{"loss":0.5}', '', '/lib.so', '/t/mnist-aa01', 0, 'sub-1',
  3, 2, 'loss', 0);
INSERT INTO jobs VALUES('bb02', 'plain', '{"name":"plain","entrypoint":{"library":"/lib2.so"},"priority":5}',
  'PENDING', 0, 0, 5, 2000, NULL, NULL, '', 'waiting for the scheduler', '{}', 'ff', '/lib2.so',
  '/t/plain-bb02', 0, NULL, 0, 0, '', 0);
INSERT INTO jobs VALUES('cc03', 'pq', '{"name":"pq","entrypoint":{"library":"/lib3.so"},"datasets":{"train":{"uri":"s3://d/t.csv"}}}',
  'PENDING', 0, 0, 0, 3000, NULL, NULL, '', 'waiting for the scheduler', '{}', '', '/lib3.so',
  '/t/pq-cc03', 0, NULL, 0, 0, '', 0);
INSERT INTO attempts VALUES('aa01', 1, 'RUNNING', 1100, NULL, '', NULL, NULL, NULL, '', '', 'node-1', 'run1');
INSERT INTO checkpoints(job_id, attempt, seq, path, metrics, created_at)
  VALUES('aa01', 1, 0, '/t/mnist-aa01/checkpoint_000000', '{"loss":0.5}', 1200);
INSERT INTO applied VALUES('0123456789abcdef01234567', '{"ok":true}');
