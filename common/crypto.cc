#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

namespace traintl {
namespace {

std::string ToHex(const unsigned char* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[p[i] >> 4];
    out[2 * i + 1] = kHex[p[i] & 15];
  }
  return out;
}

}  // namespace

std::string Sha256Hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return ToHex(md, len);
}

std::string HmacSha256Hex(const std::string& key, const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &len);
  return ToHex(md, len);
}

Result<std::string> Sha256FileHex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open " + path);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  return ToHex(md, len);
}

std::string RandomHex(size_t n_bytes) {
  // The kernel's CSPRNG rather than RAND_bytes: the first RAND_bytes of a process loads
  // OpenSSL's config file and seeds a DRBG, a good part of a short CLI call (a submission
  // id is all a `traintl submit` needs randomness for).
  std::vector<unsigned char> buf(n_bytes);
  size_t filled = 0;
  while (filled < n_bytes) {
    const ssize_t n = getrandom(buf.data() + filled, n_bytes - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::perror("getrandom");
      std::abort();  // no safe fallback for secrets
    }
    filled += static_cast<size_t>(n);
  }
  return ToHex(buf.data(), n_bytes);
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool IsSha256Hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace traintl
