#include "store/store.h"

#include <cstdlib>

#include <sqlite3.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <iterator>

#include "core/hash.h"
#include "core/paths.h"
#include "core/text.h"

namespace kfab {

namespace fs = std::filesystem;

namespace {

constexpr int kBusyTimeoutMs = 30000;

/// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  Stmt& bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& bind(int i, std::optional<double> v) {
    if (v) sqlite3_bind_double(s_, i, *v);
    else sqlite3_bind_null(s_, i);
    return *this;
  }
  int step() { return sqlite3_step(s_); }
  int64_t int_col(int i) { return sqlite3_column_int64(s_, i); }
  std::string text_col(int i) {
    const auto* t = sqlite3_column_text(s_, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  std::optional<double> real_col(int i) {
    if (sqlite3_column_type(s_, i) == SQLITE_NULL) return std::nullopt;
    return sqlite3_column_double(s_, i);
  }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

/// Where a write failed for want of disk space (SQLite says "disk is full", or an I/O error with the
/// store's file system all but full): what to do about it, which is never "the store is damaged".
std::string space_note(sqlite3* db) {
  const int rc = sqlite3_errcode(db);
  if (rc != SQLITE_FULL && rc != SQLITE_IOERR) return "";
  const char* file = sqlite3_db_filename(db, "main");
  const fs::path dir = file && *file ? fs::path(file).parent_path() : fs::path(".");
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return "";
  const uint64_t free_kib = static_cast<uint64_t>(st.f_bavail) * st.f_frsize / 1024;
  if (rc == SQLITE_IOERR && free_kib >= 4096) return "";
  return "no space left on the disk under the store (" + dir.string() + ", " + std::to_string(free_kib) +
         " KiB free); what it holds is intact: free some space, then go on (kfab optimize --resume RUN continues a run)";
}

Unexpected db_error(sqlite3* db, const std::string& what) {
  return make_error("store: " + what + ": " + sqlite3_errmsg(db), space_note(db));
}

}  // namespace

fs::path Store::default_path() {
  const char* db = std::getenv("KFAB_DB");  // --db of optimize, bench, mcp and worker, for the processes they start too
  return db != nullptr && *db != '\0' ? fs::path(db) : data_dir() / "kfab.db";
}

Expected<std::unique_ptr<Store>> Store::open(const fs::path& file) {
  std::error_code ec;
  if (file.has_parent_path()) fs::create_directories(file.parent_path(), ec);
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return make_error(file.string() + ": cannot open the store: " + msg, "choose another file with --db PATH");
  }
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  std::unique_ptr<Store> s(new Store(db));
  for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA foreign_keys=ON"}) {
    if (auto ok = s->exec(pragma); !ok) {
      const std::string space = space_note(db);
      return make_error(file.string() + ": " + ok.error().message, space.empty() ? "is it a kfab store? --db PATH chooses another" : space);
    }
  }
  if (auto ok = s->migrate(); !ok) return make_error(file.string() + ": " + ok.error().message, ok.error().hint);
  return s;
}

Store::~Store() { sqlite3_close(db_); }

Expected<void> Store::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return make_error("store: " + m, space_note(db_));
  }
  return {};
}

namespace {

/// The migration to each schema version from the one before: kMigrations[v] takes a store at version v
/// to v + 1. A new version is a new entry, never an edit of an old one (stores in use have run it).
constexpr const char* kMigrations[] = {
    R"sql(
      CREATE TABLE tasks (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        path TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (path, content_hash));
      CREATE TABLE candidates (
        hash TEXT PRIMARY KEY,
        task_id INTEGER NOT NULL REFERENCES tasks(id),
        dsl TEXT NOT NULL,
        path TEXT NOT NULL,
        source TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
      CREATE TABLE evaluations (
        id INTEGER PRIMARY KEY,
        task_id INTEGER NOT NULL REFERENCES tasks(id),
        candidate_hash TEXT NOT NULL REFERENCES candidates(hash),
        target TEXT NOT NULL,
        disposition TEXT NOT NULL,
        detail TEXT NOT NULL,
        speedup REAL,
        verdict TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
      CREATE INDEX evaluations_by_candidate ON evaluations(candidate_hash);
      CREATE INDEX evaluations_by_task ON evaluations(task_id);
      PRAGMA user_version = 1;
    )sql",
    // Optimization runs (kfab optimize): their steps, and every LLM exchange, content-addressed.
    R"sql(
      CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        task TEXT NOT NULL,
        task_path TEXT NOT NULL,
        target TEXT NOT NULL,
        llm TEXT NOT NULL,
        strategy TEXT NOT NULL,
        config TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
      CREATE TABLE llm_calls (
        hash TEXT PRIMARY KEY,
        provider TEXT NOT NULL,
        request TEXT NOT NULL,
        response TEXT NOT NULL,
        tokens_in INTEGER NOT NULL,
        tokens_out INTEGER NOT NULL,
        cost REAL NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
      CREATE TABLE steps (
        run_id TEXT NOT NULL REFERENCES runs(id),
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        call_hash TEXT REFERENCES llm_calls(hash),
        candidate_hash TEXT,
        candidate_path TEXT,
        evaluation_id INTEGER,
        disposition TEXT,
        speedup REAL,
        detail TEXT NOT NULL,
        tokens_in INTEGER NOT NULL DEFAULT 0,
        tokens_out INTEGER NOT NULL DEFAULT 0,
        cost REAL NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        PRIMARY KEY (run_id, seq));
      PRAGMA user_version = 2;
    )sql",
};

}  // namespace

Expected<void> Store::migrate() {
  if (auto ok = exec("BEGIN IMMEDIATE"); !ok) return ok;
  int version = 0;
  {
    Stmt st(db_, "PRAGMA user_version");
    if (st.ok() && st.step() == SQLITE_ROW) version = static_cast<int>(st.int_col(0));
  }
  if (version > kSchemaVersion) {
    (void)exec("ROLLBACK");
    return make_error("store schema version " + std::to_string(version) + " is newer than this kfab understands (" +
                      std::to_string(kSchemaVersion) + ")");
  }
  static_assert(std::size(kMigrations) == kSchemaVersion);
  for (int v = std::max(version, 0); v < kSchemaVersion; ++v) {
    if (auto ok = exec(kMigrations[v]); !ok) {
      (void)exec("ROLLBACK");
      return ok;
    }
  }
  return exec("COMMIT");
}

Expected<int64_t> Store::record_evaluation(const Task& task, const std::string& source, const Verdict& v) {
  auto manifest = read_file(task.manifest);
  auto reference = read_file(task.reference);
  const std::string content = hash_hex((manifest ? *manifest : "") + '\0' + (reference ? *reference : ""));
  if (auto ok = exec("BEGIN IMMEDIATE"); !ok) return Unexpected{ok.error()};
  auto fail = [&](const std::string& what) -> Expected<int64_t> {
    auto e = db_error(db_, what);
    (void)exec("ROLLBACK");
    return e;
  };
  {
    Stmt st(db_, "INSERT OR IGNORE INTO tasks(name, path, content_hash) VALUES (?, ?, ?)");
    if (!st.ok() || st.bind(1, task.name).bind(2, task.dir.string()).bind(3, content).step() != SQLITE_DONE)
      return fail("recording the task");
  }
  int64_t task_id = 0;
  {
    Stmt st(db_, "SELECT id FROM tasks WHERE path = ? AND content_hash = ?");
    if (!st.ok() || st.bind(1, task.dir.string()).bind(2, content).step() != SQLITE_ROW) return fail("finding the task");
    task_id = st.int_col(0);
  }
  {
    Stmt st(db_, "INSERT OR IGNORE INTO candidates(hash, task_id, dsl, path, source) VALUES (?, ?, ?, ?, ?)");
    if (!st.ok() ||
        st.bind(1, v.candidate_hash).bind(2, task_id).bind(3, v.dsl).bind(4, v.candidate).bind(5, source).step() != SQLITE_DONE)
      return fail("recording the candidate");
  }
  int64_t id = 0;
  {
    Stmt st(db_,
            "INSERT INTO evaluations(task_id, candidate_hash, target, disposition, detail, speedup, verdict) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)");
    if (!st.ok() || st.bind(1, task_id)
                            .bind(2, v.candidate_hash)
                            .bind(3, v.target)
                            .bind(4, std::string(disposition_name(v.disposition)))
                            .bind(5, v.detail)
                            .bind(6, v.speedup)
                            .bind(7, dump_json(v.to_json()))
                            .step() != SQLITE_DONE)
      return fail("recording the evaluation");
    id = sqlite3_last_insert_rowid(db_);
  }
  if (auto ok = exec("COMMIT"); !ok) {
    (void)exec("ROLLBACK");
    return Unexpected{ok.error()};
  }
  return id;
}

Expected<std::vector<Store::EvaluationRow>> Store::recent_evaluations(int limit) {
  Stmt st(db_,
          "SELECT e.id, t.name, e.candidate_hash, e.target, e.disposition, e.speedup, e.created_at "
          "FROM evaluations e JOIN tasks t ON t.id = e.task_id ORDER BY e.id DESC LIMIT ?");
  if (!st.ok()) return db_error(db_, "reading evaluations");
  st.bind(1, static_cast<int64_t>(limit));
  std::vector<EvaluationRow> rows;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW)
    rows.push_back({st.int_col(0), st.text_col(1), st.text_col(2), st.text_col(3), st.text_col(4), st.real_col(5), st.text_col(6)});
  if (rc != SQLITE_DONE) return db_error(db_, "reading evaluations");
  return rows;
}

Expected<std::vector<Store::TaskEvaluation>> Store::task_evaluations(const std::string& task, int limit) {
  Stmt st(db_,
          "SELECT e.id, t.name, e.candidate_hash, e.target, e.disposition, e.speedup, e.created_at, c.path, c.dsl, e.verdict "
          "FROM evaluations e JOIN tasks t ON t.id = e.task_id JOIN candidates c ON c.hash = e.candidate_hash "
          "WHERE t.name = ? ORDER BY e.id DESC LIMIT ?");
  if (!st.ok()) return db_error(db_, "reading evaluations");
  st.bind(1, task).bind(2, static_cast<int64_t>(limit));
  std::vector<TaskEvaluation> rows;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW)
    rows.push_back({{st.int_col(0), st.text_col(1), st.text_col(2), st.text_col(3), st.text_col(4), st.real_col(5), st.text_col(6)},
                    st.text_col(7), st.text_col(8), st.text_col(9)});
  if (rc != SQLITE_DONE) return db_error(db_, "reading evaluations");
  return rows;
}

Expected<void> Store::create_run(const std::string& id, const std::string& task, const std::string& task_path,
                                 const std::string& target, const std::string& llm, const std::string& strategy,
                                 const std::string& config_json) {
  Stmt st(db_, "INSERT INTO runs(id, task, task_path, target, llm, strategy, config, status) VALUES (?, ?, ?, ?, ?, ?, ?, 'running')");
  if (!st.ok() || st.bind(1, id).bind(2, task).bind(3, task_path).bind(4, target).bind(5, llm).bind(6, strategy).bind(7, config_json).step() != SQLITE_DONE)
    return db_error(db_, "recording the run");
  return {};
}

Expected<void> Store::set_run_status(const std::string& id, const std::string& status) {
  Stmt st(db_, "UPDATE runs SET status = ?, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?");
  if (!st.ok() || st.bind(1, status).bind(2, id).step() != SQLITE_DONE) return db_error(db_, "updating the run");
  return {};
}

Expected<std::string> Store::latest_run() {
  Stmt st(db_, "SELECT id FROM runs ORDER BY created_at DESC, rowid DESC LIMIT 1");
  if (!st.ok()) return db_error(db_, "reading runs");
  if (st.step() != SQLITE_ROW) return std::string();
  return st.text_col(0);
}

Expected<nlohmann::json> Store::run_info(const std::string& id) {
  Stmt st(db_, "SELECT task, task_path, target, llm, strategy, config, status FROM runs WHERE id = ?");
  if (!st.ok()) return db_error(db_, "reading the run");
  st.bind(1, id);
  if (st.step() != SQLITE_ROW) return make_error("no run " + id + " in the store", "kfab optimize --json prints a run's id");
  return nlohmann::json{{"task", st.text_col(0)}, {"task_path", st.text_col(1)}, {"target", st.text_col(2)},
                        {"llm", st.text_col(3)}, {"strategy", st.text_col(4)}, {"config", nlohmann::json::parse(st.text_col(5))},
                        {"status", st.text_col(6)}};
}

Expected<void> Store::add_step(const std::string& run_id, const Step& s) {
  if (auto ok = exec("BEGIN IMMEDIATE"); !ok) return ok;
  Stmt st(db_,
          "INSERT INTO steps(run_id, seq, role, call_hash, candidate_hash, candidate_path, evaluation_id, disposition, speedup, "
          "detail, tokens_in, tokens_out, cost) VALUES (?, ?, ?, NULLIF(?, ''), NULLIF(?, ''), NULLIF(?, ''), ?, NULLIF(?, ''), ?, ?, ?, ?, ?)");
  if (!st.ok()) {
    (void)exec("ROLLBACK");
    return db_error(db_, "recording a step");
  }
  st.bind(1, run_id).bind(2, s.seq).bind(3, s.role).bind(4, s.call_hash).bind(5, s.candidate_hash).bind(6, s.candidate_path);
  if (s.evaluation_id) st.bind(7, *s.evaluation_id);
  else st.bind(7, std::optional<double>());
  st.bind(8, s.disposition).bind(9, s.speedup).bind(10, s.detail).bind(11, s.tokens_in).bind(12, s.tokens_out).bind(13, std::optional<double>(s.cost));
  if (st.step() != SQLITE_DONE) {
    auto e = db_error(db_, "recording a step");
    (void)exec("ROLLBACK");
    return e;
  }
  Stmt up(db_, "UPDATE runs SET updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?");
  if (up.ok()) (void)up.bind(1, run_id).step();
  return exec("COMMIT");
}

Expected<std::vector<Store::Step>> Store::run_steps(const std::string& run_id) {
  Stmt st(db_,
          "SELECT seq, role, IFNULL(call_hash, ''), IFNULL(candidate_hash, ''), IFNULL(candidate_path, ''), evaluation_id, "
          "IFNULL(disposition, ''), speedup, detail, tokens_in, tokens_out, cost FROM steps WHERE run_id = ? ORDER BY seq");
  if (!st.ok()) return db_error(db_, "reading steps");
  st.bind(1, run_id);
  std::vector<Step> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) {
    Step s;
    s.seq = st.int_col(0);
    s.role = st.text_col(1);
    s.call_hash = st.text_col(2);
    s.candidate_hash = st.text_col(3);
    s.candidate_path = st.text_col(4);
    if (auto e = st.real_col(5)) s.evaluation_id = static_cast<int64_t>(*e);
    s.disposition = st.text_col(6);
    s.speedup = st.real_col(7);
    s.detail = st.text_col(8);
    s.tokens_in = st.int_col(9);
    s.tokens_out = st.int_col(10);
    s.cost = st.real_col(11).value_or(0.0);
    out.push_back(std::move(s));
  }
  if (rc != SQLITE_DONE) return db_error(db_, "reading steps");
  return out;
}

Expected<void> Store::put_llm_call(const std::string& hash, const std::string& provider, const std::string& request,
                                   const std::string& response, int64_t tokens_in, int64_t tokens_out, double cost) {
  Stmt st(db_, "INSERT OR IGNORE INTO llm_calls(hash, provider, request, response, tokens_in, tokens_out, cost) VALUES (?, ?, ?, ?, ?, ?, ?)");
  if (!st.ok() || st.bind(1, hash).bind(2, provider).bind(3, request).bind(4, response).bind(5, tokens_in).bind(6, tokens_out)
                          .bind(7, std::optional<double>(cost)).step() != SQLITE_DONE)
    return db_error(db_, "recording an LLM exchange");
  return {};
}

Expected<std::string> Store::llm_response(const std::string& hash) {
  Stmt st(db_, "SELECT response FROM llm_calls WHERE hash = ?");
  if (!st.ok()) return db_error(db_, "reading an LLM exchange");
  st.bind(1, hash);
  if (st.step() != SQLITE_ROW) return make_error("store: no LLM exchange " + hash);
  return st.text_col(0);
}

Expected<std::string> Store::candidate_source(const std::string& hash) {
  Stmt st(db_, "SELECT source FROM candidates WHERE hash = ?");
  if (!st.ok()) return db_error(db_, "reading a candidate");
  st.bind(1, hash);
  if (st.step() != SQLITE_ROW) return make_error("store: no candidate " + hash);
  return st.text_col(0);
}

Expected<nlohmann::json> Store::evaluation_verdict(int64_t id) {
  Stmt st(db_, "SELECT verdict FROM evaluations WHERE id = ?");
  if (!st.ok()) return db_error(db_, "reading an evaluation");
  st.bind(1, id);
  if (st.step() != SQLITE_ROW) return make_error("store: no evaluation " + std::to_string(id));
  try {
    return nlohmann::json::parse(st.text_col(0));
  } catch (const nlohmann::json::exception& e) {
    return make_error("store: evaluation " + std::to_string(id) + " holds a damaged verdict: " + e.what());
  }
}

Expected<int64_t> Store::count(const std::string& table) {
  if (table != "tasks" && table != "candidates" && table != "evaluations") return make_error("store: no table " + table);
  Stmt st(db_, ("SELECT count(*) FROM " + table).c_str());
  if (!st.ok() || st.step() != SQLITE_ROW) return db_error(db_, "counting " + table);
  return st.int_col(0);
}

Expected<bool> Store::integrity_ok() {
  Stmt st(db_, "PRAGMA integrity_check");
  if (!st.ok() || st.step() != SQLITE_ROW) return db_error(db_, "integrity check");
  return st.text_col(0) == "ok";
}

}  // namespace kfab
