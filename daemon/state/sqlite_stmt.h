// Stmt: RAII over a prepared SQLite statement with typed binds and column reads.
// A prepare failure is a programming error (the SQL is ours) and aborts with the message.
//
// Thread-safety: none; use under the owner's lock.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>

namespace traintl {

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql);
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& Bind(int i, const std::string& v);
  Stmt& Bind(int i, int64_t v);
  Stmt& Bind(int i, int v) { return Bind(i, static_cast<int64_t>(v)); }
  Stmt& Bind(int i, const std::optional<int64_t>& v);
  Stmt& Bind(int i, const std::optional<int>& v);
  Stmt& BindNull(int i);

  // Steps once: true for a row, false when done. Errors abort.
  bool Step();
  // Runs to completion (for statements without rows).
  void Run();

  std::string Text(int col) const;
  int64_t Int(int col) const;
  std::optional<int64_t> OptInt(int col) const;
  std::optional<int> OptInt32(int col) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

// Executes SQL without results; aborts on error.
void ExecOrDie(sqlite3* db, const char* sql);

}  // namespace traintl
