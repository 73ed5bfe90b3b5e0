#include "dist/queue.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#ifdef KFAB_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

#include "core/text.h"

namespace kfab {

using json = nlohmann::json;

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr long kResultTtlS = 7 * 24 * 3600;

struct Url {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
};

Expected<Url> parse_url(const std::string& url) {
  const std::string scheme = "redis://";
  if (url.rfind(scheme, 0) != 0) return make_error("not a Redis URL: " + url, "redis://HOST[:PORT][/DB], e.g. redis://127.0.0.1:6379");
  Url u;
  std::string rest = url.substr(scheme.size());
  if (const auto slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      char* end = nullptr;
      u.db = static_cast<int>(std::strtol(db.c_str(), &end, 10));
      if (*end != '\0' || u.db < 0) return make_error("not a Redis database number in " + url + ": " + db);
    }
  }
  if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
    char* end = nullptr;
    const std::string port = rest.substr(colon + 1);
    u.port = static_cast<int>(std::strtol(port.c_str(), &end, 10));
    if (port.empty() || *end != '\0' || u.port <= 0 || u.port > 65535) return make_error("not a port in " + url + ": " + port);
    rest = rest.substr(0, colon);
  }
  if (!rest.empty()) u.host = rest;
  return u;
}

/// The fields of a stream entry ([id, [f1, v1, ...]]) as an object.
json entry_fields(const json& fields) {
  json o = json::object();
  if (!fields.is_array()) return o;
  for (size_t i = 0; i + 1 < fields.size(); i += 2)
    if (fields[i].is_string() && fields[i + 1].is_string()) o[fields[i].get<std::string>()] = fields[i + 1];
  return o;
}

Expected<ClaimedJob> claimed_from(const json& entry, bool taken_over) {
  if (!entry.is_array() || entry.size() < 2 || !entry[0].is_string())
    return make_error("the job stream holds an entry kfab cannot read: " + printable(entry.dump(), 200));
  const json f = entry_fields(entry[1]);
  ClaimedJob j;
  j.entry = entry[0].get<std::string>();
  j.job = f.value("job", std::string());
  j.taken_over = taken_over;
  try {
    j.payload = json::parse(f.value("payload", std::string("null")));
  } catch (const json::exception& e) {
    return make_error("job " + j.job + " carries a payload that is not JSON: " + printable(e.what(), 200));
  }
  return j;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Expected<std::string> base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return make_error("base64 text whose length is not a multiple of 4");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + static_cast<size_t>(k)];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if (pad > 0 || (v[k] = value(c)) < 0) {
        return make_error("not base64 text");
      }
    }
    const unsigned n = (static_cast<unsigned>(v[0]) << 18) | (static_cast<unsigned>(v[1]) << 12) | (static_cast<unsigned>(v[2]) << 6) |
                       static_cast<unsigned>(v[3]);
    out += static_cast<char>((n >> 16) & 255);
    if (pad < 2) out += static_cast<char>((n >> 8) & 255);
    if (pad < 1) out += static_cast<char>(n & 255);
  }
  return out;
}

#ifdef KFAB_HAVE_HIREDIS

bool queue_available() { return true; }

namespace {

json to_json(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      return std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER:
      return r->integer;
    case REDIS_REPLY_ARRAY: {
      json a = json::array();
      for (size_t i = 0; i < r->elements; ++i) a.push_back(to_json(r->element[i]));
      return a;
    }
    default:
      return nullptr;
  }
}

timeval to_timeval(double s) {
  timeval tv;
  tv.tv_sec = static_cast<long>(s);
  tv.tv_usec = static_cast<long>((s - static_cast<double>(tv.tv_sec)) * 1e6);
  return tv;
}

}  // namespace

Expected<Redis> Redis::connect(const std::string& url, double timeout_s) {
  auto u = parse_url(url);
  if (!u) return Unexpected{u.error()};
  redisContext* c = redisConnectWithTimeout(u->host.c_str(), u->port, to_timeval(timeout_s));
  if (c == nullptr || c->err) {
    const std::string why = c ? c->errstr : "out of memory";
    if (c) redisFree(c);
    return make_error(fmt::format("cannot reach Redis at {}: {}", url, why),
                      "start one (`redis-server`, or `redis-server --port 6380 --bind 0.0.0.0` for other hosts) or give --redis URL");
  }
  Redis r;
  r.ctx_ = c;
  r.set_timeout(timeout_s);
  if (u->db != 0)
    if (auto ok = r.command({"SELECT", std::to_string(u->db)}); !ok) return Unexpected{ok.error()};
  return r;
}

Redis::Redis(Redis&& o) noexcept : ctx_(std::exchange(o.ctx_, nullptr)) {}

Redis& Redis::operator=(Redis&& o) noexcept {
  if (this != &o) {
    if (ctx_) redisFree(static_cast<redisContext*>(ctx_));
    ctx_ = std::exchange(o.ctx_, nullptr);
  }
  return *this;
}

Redis::~Redis() {
  if (ctx_) redisFree(static_cast<redisContext*>(ctx_));
}

void Redis::set_timeout(double seconds) {
  if (ctx_) redisSetTimeout(static_cast<redisContext*>(ctx_), to_timeval(seconds));
}

Expected<json> Redis::command(const std::vector<std::string>& args) {
  auto* c = static_cast<redisContext*>(ctx_);
  if (c == nullptr) return make_error("no connection to Redis");
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (r == nullptr) return make_error(fmt::format("Redis {}: {}", args.empty() ? "" : args[0], c->errstr[0] ? c->errstr : "no reply"));
  if (r->type == REDIS_REPLY_ERROR) {
    std::string e(r->str, r->len);
    freeReplyObject(r);
    return make_error(fmt::format("Redis {}: {}", args.empty() ? "" : args[0], e));
  }
  json j = to_json(r);
  freeReplyObject(r);
  return j;
}

#else

bool queue_available() { return false; }

Expected<Redis> Redis::connect(const std::string&, double) {
  return make_error("this kfab was built without hiredis: no Redis job queue",
                    "install libhiredis-dev (`make` does on Debian) and build again");
}
Redis::Redis(Redis&& o) noexcept : ctx_(std::exchange(o.ctx_, nullptr)) {}
Redis& Redis::operator=(Redis&& o) noexcept {
  ctx_ = std::exchange(o.ctx_, nullptr);
  return *this;
}
Redis::~Redis() = default;
void Redis::set_timeout(double) {}
Expected<json> Redis::command(const std::vector<std::string>&) { return make_error("this kfab was built without hiredis"); }

#endif

Expected<JobQueue> JobQueue::open(const QueueOptions& opt) {
  auto r = Redis::connect(opt.url);
  if (!r) return Unexpected{r.error()};
  JobQueue q(opt, std::move(*r));
  // The stream and its group, made by whichever side comes first.
  auto made = q.redis_.command({"XGROUP", "CREATE", q.key("jobs"), q.key("workers"), "0", "MKSTREAM"});
  if (!made && made.error().message.find("BUSYGROUP") == std::string::npos) return Unexpected{made.error()};
  return q;
}

Expected<bool> JobQueue::submit(const std::string& job, const json& payload) {
  // One script, so that the mark and the entry come together: a submitter killed between the two
  // would leave a job marked as sent that no worker ever sees.
  static const char* kOnce =
      "if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[3]) then "
      "redis.call('XADD', KEYS[2], '*', 'job', ARGV[1], 'payload', ARGV[2]) return 1 end return 0";
  auto r = redis_.command({"EVAL", kOnce, "2", key("sent:" + job), key("jobs"), job, payload.dump(), std::to_string(kResultTtlS)});
  if (!r) return Unexpected{r.error()};
  return r->is_number_integer() && r->get<int64_t>() == 1;
}

Expected<std::vector<json>> JobQueue::results(const std::vector<std::string>& jobs) {
  std::vector<json> out;
  for (size_t at = 0; at < jobs.size(); at += 256) {
    std::vector<std::string> args{"MGET"};
    for (size_t i = at; i < std::min(jobs.size(), at + 256); ++i) args.push_back(key("result:" + jobs[i]));
    auto r = redis_.command(args);
    if (!r) return Unexpected{r.error()};
    for (const auto& v : *r) {
      if (!v.is_string()) {
        out.push_back(nullptr);
        continue;
      }
      try {
        out.push_back(json::parse(v.get<std::string>()));
      } catch (const json::exception&) {
        out.push_back(json{{"error", "a result that is not JSON"}});
      }
    }
  }
  return out;
}

Expected<json> JobQueue::result(const std::string& job) {
  auto r = results({job});
  if (!r) return Unexpected{r.error()};
  return r->empty() ? json() : (*r)[0];
}

Expected<std::optional<ClaimedJob>> JobQueue::claim(const std::string& consumer, double block_s) {
  // First a job whose worker stopped renewing it.
  const auto idle_ms = std::to_string(static_cast<long long>(opt_.lease_s * 1000));
  auto stale = redis_.command({"XAUTOCLAIM", key("jobs"), key("workers"), consumer, idle_ms, "0-0", "COUNT", "1"});
  if (!stale) return Unexpected{stale.error()};
  if (stale->is_array() && stale->size() >= 2 && (*stale)[1].is_array())
    for (const auto& e : (*stale)[1])
      if (e.is_array() && e.size() >= 2 && !e[1].is_null()) {
        auto j = claimed_from(e, true);
        if (!j) return Unexpected{j.error()};
        return std::optional<ClaimedJob>(std::move(*j));
      }
  redis_.set_timeout(block_s + 10.0);
  auto r = redis_.command({"XREADGROUP", "GROUP", key("workers"), consumer, "COUNT", "1", "BLOCK",
                           std::to_string(static_cast<long long>(block_s * 1000)), "STREAMS", key("jobs"), ">"});
  redis_.set_timeout(10.0);
  if (!r) return Unexpected{r.error()};
  // [[stream, [[id, fields]]]] or null
  if (!r->is_array() || r->empty() || !(*r)[0].is_array() || (*r)[0].size() < 2 || !(*r)[0][1].is_array() || (*r)[0][1].empty())
    return std::optional<ClaimedJob>();
  auto j = claimed_from((*r)[0][1][0], false);
  if (!j) return Unexpected{j.error()};
  return std::optional<ClaimedJob>(std::move(*j));
}

Expected<void> JobQueue::renew(const std::string& consumer, const ClaimedJob& j) {
  auto r = redis_.command({"XCLAIM", key("jobs"), key("workers"), consumer, "0", j.entry, "JUSTID"});
  if (!r) return Unexpected{r.error()};
  return {};
}

Expected<bool> JobQueue::complete(const ClaimedJob& j, const json& result) {
  auto set = redis_.command({"SET", key("result:" + j.job), result.dump(), "NX", "EX", std::to_string(kResultTtlS)});
  if (!set) return Unexpected{set.error()};
  const bool wrote = set->is_string() && set->get<std::string>() == "OK";
  if (auto a = redis_.command({"XACK", key("jobs"), key("workers"), j.entry}); !a) return Unexpected{a.error()};
  if (auto d = redis_.command({"XDEL", key("jobs"), j.entry}); !d) return Unexpected{d.error()};
  return wrote;
}

Expected<void> JobQueue::join(const std::string& consumer) {
  auto r = redis_.command({"XGROUP", "CREATECONSUMER", key("jobs"), key("workers"), consumer});
  if (!r) return Unexpected{r.error()};
  return {};
}

Expected<void> JobQueue::leave(const std::string& consumer) {
  auto r = redis_.command({"XGROUP", "DELCONSUMER", key("jobs"), key("workers"), consumer});
  if (!r) return Unexpected{r.error()};
  return {};
}

Expected<json> JobQueue::counts() {
  auto len = redis_.command({"XLEN", key("jobs")});
  if (!len) return Unexpected{len.error()};
  auto pending = redis_.command({"XPENDING", key("jobs"), key("workers")});
  if (!pending) return Unexpected{pending.error()};
  const long long jobs = len->is_number() ? len->get<long long>() : 0;
  const long long held = pending->is_array() && !pending->empty() && (*pending)[0].is_number() ? (*pending)[0].get<long long>() : 0;
  return json{{"jobs", jobs}, {"held", held}, {"waiting", std::max(0LL, jobs - held)}};
}

Expected<json> JobQueue::workers() {
  auto r = redis_.command({"XINFO", "CONSUMERS", key("jobs"), key("workers")});
  if (!r) return Unexpected{r.error()};
  json out = json::array();
  for (const auto& c : *r) {
    const json f = entry_fields(c);  // name, pending, idle (ms) as alternating fields
    json w = {{"name", f.value("name", std::string())}};
    for (size_t i = 0; c.is_array() && i + 1 < c.size(); i += 2) {
      if (c[i] == "pending" && c[i + 1].is_number()) w["pending"] = c[i + 1];
      if (c[i] == "idle" && c[i + 1].is_number()) w["idle_s"] = c[i + 1].get<double>() / 1000.0;
    }
    out.push_back(w);
  }
  return out;
}

}  // namespace kfab
