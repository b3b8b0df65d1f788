#include "daemon/http/request.h"

namespace traintl::http {

std::string AsciiLower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

std::string Request::header(const std::string& name) const {
  auto it = headers.find(AsciiLower(name));
  return it == headers.end() ? std::string() : it->second;
}

}  // namespace traintl::http
