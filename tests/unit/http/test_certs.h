// Test certificates generated at run time: a self-signed CA and a server certificate it
// signed (EC P-256, SHA-256), written as PEM files, for TLS tests. Nothing is checked in.
//
// Thread-safety: free functions with no shared state.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace traintl::testing {

struct TestPki {
  std::string dir;       // where the files are
  std::string ca_cert;   // <dir>/ca.pem
  std::string cert;      // <dir>/server.pem: the server certificate, signed by the CA
  std::string key;       // <dir>/server.key (mode 0600)
  std::string other_ca;  // <dir>/other-ca.pem: a CA that signed nothing here
};

// Writes a PKI into `dir` (which must exist). The server certificate names
// `subject_alt_names`, each "DNS:name" or "IP:1.2.3.4". Internal on OpenSSL failures.
Result<TestPki> MakeTestPki(const std::string& dir,
                            const std::vector<std::string>& subject_alt_names = {"IP:127.0.0.1",
                                                                                 "DNS:localhost"});

}  // namespace traintl::testing
