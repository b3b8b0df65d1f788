#include "daemon/api/dashboard_routes.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>

#include "common/crypto.h"
#include "common/file_util.h"
#include "daemon/dashboard/embedded_files.h"
#include "daemon/http/browser_session.h"
#include "daemon/http/responder.h"
#include "daemon/http/uri.h"

namespace traintl {
namespace {

// Everything the page loads comes from the daemon; no inline script or style, no framing.
constexpr char kContentSecurityPolicy[] =
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";
constexpr int kSessionMaxAgeS = 7 * 24 * 3600;

void SetPageHeaders(http::Responder& res) {
  res.SetHeader("Content-Security-Policy", kContentSecurityPolicy);
  res.SetHeader("X-Content-Type-Options", "nosniff");
  res.SetHeader("X-Frame-Options", "DENY");
  res.SetHeader("Referrer-Policy", "no-referrer");
  // Small files: always revalidated, so a new daemon's page is never mixed with old script.
  res.SetHeader("Cache-Control", "no-cache");
}

void Redirect(http::Responder& res, int status, const std::string& location) {
  res.SetHeader("Location", location);
  res.SetHeader("Cache-Control", "no-store");
  res.Send(status, "text/plain; charset=utf-8", "see " + location + "\n");
}

std::string ContentTypeFor(std::string_view name) {
  auto ends = [&](std::string_view ext) {
    return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

class Dashboard {
 public:
  explicit Dashboard(DashboardOptions options) : options_(std::move(options)) {
    for (const auto& f : DashboardFiles())
      etags_[std::string(f.name)] = "\"" + Sha256Hex(std::string(f.data)).substr(0, 32) + "\"";
  }

  void ServeFile(const std::string& name, const http::Request& req, http::Responder& res) const {
    if (!options_.files_dir.empty()) {
      // The router refuses captures with '/', "." and "..": the name stays in the dir.
      auto data = ReadFile(options_.files_dir + "/" + name);
      if (!data.ok()) {
        res.SendError(404, "no such dashboard file");
        return;
      }
      SetPageHeaders(res);
      res.Send(200, ContentTypeFor(name), std::move(*data));
      return;
    }
    for (const auto& f : DashboardFiles()) {
      if (f.name != name) continue;
      SetPageHeaders(res);
      // Revalidated on every load (no-cache): an unchanged file costs a 304, not its bytes.
      const std::string& etag = etags_.at(name);
      res.SetHeader("ETag", etag);
      if (req.header("if-none-match") == etag) {
        res.Send(304, "", "");
        return;
      }
      res.Send(200, std::string(f.content_type), std::string(f.data));
      return;
    }
    res.SendError(404, "no such dashboard file");
  }

  // A login by the cluster's token or by a code of MakeCode: the session cookie and, in the
  // body, the page key (browser_session.h); 401 otherwise.
  void Login(const std::map<std::string, std::string>& fields, const http::Request& req,
             http::Responder& res) const {
    const std::string& remote = req.remote;
    bool ok = false;
    if (auto it = fields.find("code"); it != fields.end()) {
      ok = TakeCode(it->second);
      if (!ok) {
        res.SendError(401, "this login link has expired or was used: run traintl dashboard again");
        return;
      }
    } else if (auto it = fields.find("token"); it != fields.end()) {
      // A pasted token often brings a newline or spaces along.
      std::string token = it->second;
      const size_t first = token.find_first_not_of(" \t\r\n");
      token = first == std::string::npos
                  ? std::string()
                  : token.substr(first, token.find_last_not_of(" \t\r\n") - first + 1);
      ok = !token.empty() && !options_.token.empty() && ConstantTimeEquals(token, options_.token);
    }
    if (!ok) {
      http::WarnRejectedToken(remote, "dashboard login with a wrong token");
      res.SendError(401, "wrong token");
      return;
    }
    const http::BrowserSession session =
        http::NewBrowserSession(options_.token, NowSeconds(), kSessionMaxAgeS);
    res.SetHeader("Set-Cookie", Cookie(http::SessionCookieName(req.header("host")), session.cookie,
                                       kSessionMaxAgeS));
    res.SetHeader("Cache-Control", "no-store");
    res.SendJson(200, {{"page_key", session.page_key}});
  }

  void Logout(const http::Request& req, http::Responder& res) const {
    res.SetHeader("Set-Cookie", Cookie(http::SessionCookieName(req.header("host")), "", 0));
    res.SetHeader("Cache-Control", "no-store");
    res.SendJson(200, {{"logged_out", true}});
  }

  // A single-use login code, valid kCodeTtlS: what `traintl dashboard` prints in its link
  // instead of the token, so that a browser's history keeps nothing that logs in.
  std::string MakeCode() const {
    std::lock_guard<std::mutex> l(codes_mu_);
    const int64_t now = NowSeconds();
    for (auto it = codes_.begin(); it != codes_.end();) {
      it = it->second <= now ? codes_.erase(it) : std::next(it);
    }
    if (codes_.size() >= kMaxCodes) {  // the one that expires first goes
      codes_.erase(std::min_element(codes_.begin(), codes_.end(), [](const auto& a, const auto& b) {
        return a.second < b.second;
      }));
    }
    std::string code = RandomHex(16);
    codes_[code] = now + kCodeTtlS;
    return code;
  }

  static constexpr int64_t kCodeTtlS = 120;

 private:
  static constexpr size_t kMaxCodes = 64;

  static int64_t NowSeconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  bool TakeCode(const std::string& code) const {
    std::lock_guard<std::mutex> l(codes_mu_);
    auto it = codes_.find(code);
    if (it == codes_.end()) return false;
    const bool fresh = it->second > NowSeconds();
    codes_.erase(it);
    return fresh;
  }

  std::string Cookie(const std::string& name, const std::string& value, int max_age_s) const {
    return name + "=" + value + "; Path=/; Max-Age=" + std::to_string(max_age_s) +
           "; HttpOnly; SameSite=Strict" + (options_.tls ? "; Secure" : "");
  }

  const DashboardOptions options_;
  std::map<std::string, std::string> etags_;  // embedded file -> its ETag
  mutable std::mutex codes_mu_;
  mutable std::map<std::string, int64_t> codes_;  // code -> expiry (unix s); guarded
};

}  // namespace

void RegisterDashboardRoutes(http::Router& router, DashboardOptions options) {
  auto ui = std::make_shared<const Dashboard>(std::move(options));
  http::RouteOptions open;
  open.access = http::Access::kAnyone;
  auto to_ui = [](const http::Request&, std::shared_ptr<http::Responder> res) {
    Redirect(*res, 302, "/ui/");
  };
  router.Add("GET", "/", to_ui, open);
  router.Add("GET", "/ui", to_ui, open);
  router.Add(
      "GET", "/ui/",
      [ui](const http::Request& req, std::shared_ptr<http::Responder> res) {
        // With ?code= (the link `traintl dashboard` prints) the page logs itself in.
        ui->ServeFile("index.html", req, *res);
      },
      open);
  router.Add(
      "GET", "/ui/{file}",
      [ui](const http::Request& req, std::shared_ptr<http::Responder> res) {
        ui->ServeFile(req.params.at("file"), req, *res);
      },
      open);
  http::RouteOptions form = open;
  form.max_body_bytes = 4096;
  router.Add(
      "POST", "/ui/login",
      [ui](const http::Request& req, std::shared_ptr<http::Responder> res) {
        // application/x-www-form-urlencoded has the query string's syntax.
        auto fields = http::ParseQuery(req.body);
        ui->Login(fields ? *fields : std::map<std::string, std::string>(), req, *res);
      },
      form);
  router.Add(
      "POST", "/ui/logout",
      [ui](const http::Request& req, std::shared_ptr<http::Responder> res) {
        ui->Logout(req, *res);
      },
      form);
  http::RouteOptions user;
  user.access = http::Access::kUser;
  router.Add(
      "POST", "/ui/codes",
      [ui](const http::Request&, std::shared_ptr<http::Responder> res) {
        res->SetHeader("Cache-Control", "no-store");
        res->SendJson(200, {{"code", ui->MakeCode()}, {"expires_in_s", Dashboard::kCodeTtlS}});
      },
      user);
}

}  // namespace traintl
