#include "daemon/state/sqlite_stmt.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "daemon/consensus/state_machine.h"

namespace traintl {
namespace {

[[noreturn]] void Die(sqlite3* db, const char* what) {
  std::fprintf(stderr, "FATAL sqlite %s: %s\n", what, sqlite3_errmsg(db));
  std::abort();
}

}  // namespace

void StmtCache::Clear(sqlite3* db) {
  for (auto& [sql, e] : entries_) sqlite3_finalize(e.stmt);
  entries_.clear();
  if (db != nullptr) db_ = db;
}

Stmt::Stmt(sqlite3* db, const char* sql) : db_(db) {
  if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) Die(db, sql);
}

Stmt::Stmt(StmtCache& cache, const std::string& sql) : db_(cache.db()) {
  StmtCache::Entry& e = cache.entries_[sql];
  if (e.busy) {
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK)
      Die(db_, sql.c_str());
    return;
  }
  if (e.stmt == nullptr && sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT,
                                              &e.stmt, nullptr) != SQLITE_OK)
    Die(db_, sql.c_str());
  e.busy = true;
  stmt_ = e.stmt;
  borrowed_ = &e;  // unordered_map entries keep their address while others are added
}

Stmt::~Stmt() {
  if (borrowed_ == nullptr) {
    sqlite3_finalize(stmt_);
    return;
  }
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  borrowed_->busy = false;
}

Stmt& Stmt::Bind(int i, const std::string& v) {
  sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::Bind(int i, int64_t v) {
  sqlite3_bind_int64(stmt_, i, v);
  return *this;
}
Stmt& Stmt::Bind(int i, const std::optional<int64_t>& v) { return v ? Bind(i, *v) : BindNull(i); }
Stmt& Stmt::Bind(int i, const std::optional<int>& v) {
  return v ? Bind(i, static_cast<int64_t>(*v)) : BindNull(i);
}
int Stmt::Index(const char* name) const {
  const int i = sqlite3_bind_parameter_index(stmt_, name);
  if (i == 0) {
    std::fprintf(stderr, "traintl: no SQL parameter %s\n", name);
    std::abort();
  }
  return i;
}

Stmt& Stmt::BindNull(int i) {
  sqlite3_bind_null(stmt_, i);
  return *this;
}

bool Stmt::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  switch (rc & 0xff) {
    // The environment's fault, not a broken invariant: the caller decides (a Raft apply
    // stops the node; StateStore::Mutate rolls back first).
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_NOMEM:
    case SQLITE_CANTOPEN:
      throw StateWriteError(std::string("sqlite: ") + sqlite3_errmsg(db_));
    default:
      Die(db_, "step");
  }
}

void Stmt::Run() {
  while (Step()) {
  }
}

std::string Stmt::Text(int col) const {
  const unsigned char* t = sqlite3_column_text(stmt_, col);
  if (t == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(t),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}
int64_t Stmt::Int(int col) const { return sqlite3_column_int64(stmt_, col); }
std::optional<int64_t> Stmt::OptInt(int col) const {
  if (sqlite3_column_type(stmt_, col) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int64(stmt_, col);
}
std::optional<int> Stmt::OptInt32(int col) const {
  if (sqlite3_column_type(stmt_, col) == SQLITE_NULL) return std::nullopt;
  return static_cast<int>(sqlite3_column_int64(stmt_, col));
}

void ExecOrDie(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::fprintf(stderr, "FATAL sqlite exec %s: %s\n", sql, err ? err : "?");
    std::abort();
  }
}

}  // namespace traintl
