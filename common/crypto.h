// SHA-256 digests (content addressing of uploaded libraries), random ids and tokens,
// and constant-time comparison of secrets. Digests and comparison: OpenSSL's libcrypto;
// randomness: the kernel (getrandom(2)), so that no OpenSSL init is needed for it.
//
// Thread-safety: free functions, safe from any thread.
#pragma once

#include <string>

#include "common/result.h"

namespace traintl {

std::string Sha256Hex(const std::string& data);
// HMAC-SHA256 of `data` under `key`, hex-encoded (64 chars).
std::string HmacSha256Hex(const std::string& key, const std::string& data);
Result<std::string> Sha256FileHex(const std::string& path);
// `n_bytes` of cryptographically secure randomness, hex-encoded (2 * n_bytes chars).
std::string RandomHex(size_t n_bytes);
// True when a == b, in time that depends only on the lengths.
bool ConstantTimeEquals(const std::string& a, const std::string& b);
// True for exactly 64 lowercase hex characters.
bool IsSha256Hex(const std::string& s);

}  // namespace traintl
