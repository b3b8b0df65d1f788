#include "tests/unit/http/test_certs.h"

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cstdio>
#include <memory>

namespace traintl::testing {
namespace {

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
  void operator()(X509* c) const { X509_free(c); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

Key NewKey() { return Key(EVP_EC_gen("P-256")); }

bool AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

Cert NewCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key,
             long serial) {
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 7L * 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  (void)issuer_key;
  return cert;
}

bool WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  bool ok = cert ? PEM_write_X509(f, cert) == 1
                 : PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  std::fclose(f);
  return ok;
}

Result<Cert> MakeCa(const std::string& cn, EVP_PKEY* key, long serial) {
  Cert ca = NewCert(key, cn, nullptr, key, serial);
  if (!AddExt(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE") ||
      !AddExt(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !AddExt(ca.get(), ca.get(), NID_subject_key_identifier, "hash") ||
      X509_sign(ca.get(), key, EVP_sha256()) == 0) {
    return Status::Internal("test pki: cannot make CA " + cn);
  }
  return ca;
}

}  // namespace

Result<TestPki> MakeTestPki(const std::string& dir, const std::vector<std::string>& sans) {
  TestPki pki;
  pki.dir = dir;
  pki.ca_cert = dir + "/ca.pem";
  pki.cert = dir + "/server.pem";
  pki.key = dir + "/server.key";
  pki.other_ca = dir + "/other-ca.pem";

  Key ca_key = NewKey(), server_key = NewKey(), other_key = NewKey();
  if (!ca_key || !server_key || !other_key) return Status::Internal("test pki: keygen failed");
  auto ca = MakeCa("traintl test CA", ca_key.get(), 1);
  if (!ca.ok()) return ca.status();
  auto other = MakeCa("traintl other CA", other_key.get(), 2);
  if (!other.ok()) return other.status();

  Cert server = NewCert(server_key.get(), "traintl test server", ca->get(), ca_key.get(), 3);
  std::string san;
  for (const auto& s : sans) san += (san.empty() ? "" : ",") + s;
  if (!AddExt(server.get(), ca->get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !AddExt(server.get(), ca->get(), NID_ext_key_usage, "serverAuth") ||
      (!san.empty() && !AddExt(server.get(), ca->get(), NID_subject_alt_name, san)) ||
      X509_sign(server.get(), ca_key.get(), EVP_sha256()) == 0) {
    return Status::Internal("test pki: cannot make the server certificate");
  }
  if (!WritePem(pki.ca_cert, ca->get(), nullptr) || !WritePem(pki.cert, server.get(), nullptr) ||
      !WritePem(pki.key, nullptr, server_key.get()) ||
      !WritePem(pki.other_ca, other->get(), nullptr)) {
    return Status::Internal("test pki: cannot write PEM files in " + dir);
  }
  ::chmod(pki.key.c_str(), 0600);
  return pki;
}

}  // namespace traintl::testing
