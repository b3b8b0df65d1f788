#include "daemon/http/uri.h"

namespace traintl::http {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> PercentDecode(std::string_view in, bool plus_as_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return std::nullopt;
      int hi = HexValue(in[i + 1]);
      int lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      char decoded = static_cast<char>(hi * 16 + lo);
      if (decoded == '\0') return std::nullopt;
      out.push_back(decoded);
      i += 2;
    } else if (c == '+' && plus_as_space) {
      out.push_back(' ');
    } else if (c == '\0') {
      return std::nullopt;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::optional<std::map<std::string, std::string>> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    if (amp == std::string_view::npos) amp = query.size();
    std::string_view part = query.substr(pos, amp - pos);
    if (!part.empty()) {
      size_t eq = part.find('=');
      std::string_view raw_key = part.substr(0, eq);
      std::string_view raw_value =
          eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1);
      auto key = PercentDecode(raw_key, /*plus_as_space=*/true);
      auto value = PercentDecode(raw_value, /*plus_as_space=*/true);
      if (!key || !value) return std::nullopt;
      if (!key->empty()) out[*key] = std::move(*value);
    }
    pos = amp + 1;
  }
  return out;
}

std::vector<std::string_view> SplitPath(std::string_view raw_path) {
  std::vector<std::string_view> segments;
  if (!raw_path.empty() && raw_path[0] == '/') raw_path.remove_prefix(1);
  size_t pos = 0;
  while (true) {
    size_t slash = raw_path.find('/', pos);
    if (slash == std::string_view::npos) {
      segments.push_back(raw_path.substr(pos));
      break;
    }
    segments.push_back(raw_path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  return segments;
}

}  // namespace traintl::http
