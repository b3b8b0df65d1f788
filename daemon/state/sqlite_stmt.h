// Stmt: RAII over a prepared SQLite statement with typed binds and column reads; StmtCache
// keeps prepared statements for reuse.
// A prepare failure is a programming error (the SQL is ours) and aborts with the message.
//
// Thread-safety: none; use under the owner's lock.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

namespace traintl {

// Prepared statements of one connection, kept for reuse: preparing (parsing and planning
// the SQL) costs more than running most of the store's statements, and the FSM runs the
// same few thousands of times a second.
class StmtCache {
 public:
  explicit StmtCache(sqlite3* db) : db_(db) {}
  ~StmtCache() { Clear(); }
  StmtCache(const StmtCache&) = delete;
  StmtCache& operator=(const StmtCache&) = delete;

  sqlite3* db() const { return db_; }
  // Finalizes every statement; needed before the connection closes or its database is
  // replaced (sqlite3_deserialize), and then `db` is the connection to use from now on.
  void Clear(sqlite3* db = nullptr);

 private:
  friend class Stmt;
  struct Entry {
    sqlite3_stmt* stmt = nullptr;
    bool busy = false;  // a live Stmt uses it (a nested use of the same SQL prepares anew)
  };
  sqlite3* db_;
  std::unordered_map<std::string, Entry> entries_;
};

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql);
  // Borrows the cache's statement for `sql` (preparing it the first time); the destructor
  // resets it for the next use.
  Stmt(StmtCache& cache, const std::string& sql);
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& Bind(int i, const std::string& v);
  Stmt& Bind(int i, int64_t v);
  Stmt& Bind(int i, int v) { return Bind(i, static_cast<int64_t>(v)); }
  Stmt& Bind(int i, const std::optional<int64_t>& v);
  Stmt& Bind(int i, const std::optional<int>& v);
  Stmt& BindNull(int i);
  // By name (":name" in the SQL); a name the statement lacks is a broken invariant (abort).
  Stmt& Bind(const char* name, const std::string& v) { return Bind(Index(name), v); }
  Stmt& Bind(const char* name, int64_t v) { return Bind(Index(name), v); }

  // Steps once: true for a row, false when done. Errors abort.
  bool Step();
  // Runs to completion (for statements without rows).
  void Run();

  std::string Text(int col) const;
  int64_t Int(int col) const;
  std::optional<int64_t> OptInt(int col) const;
  std::optional<int> OptInt32(int col) const;

 private:
  int Index(const char* name) const;

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  StmtCache::Entry* borrowed_ = nullptr;  // set: stmt_ belongs to a cache
};

// Executes SQL without results; aborts on error.
void ExecOrDie(sqlite3* db, const char* sql);

}  // namespace traintl
