// Fuzz target: the job-spec parser and validator (proto/job_spec.h) on untrusted text.
// Besides not crashing, leaking or tripping a sanitizer, it checks that:
//  - ParseJobSpecText agrees with ParseJsonStrict followed by ParseJobSpec;
//  - a spec that validates survives JobSpecToJson -> dump -> ParseJobSpecText unchanged;
//  - the API's wrapped form {"spec": ...} (one more level of nesting) parses the same way;
//  - errors always name what was expected (a non-empty message).
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "proto/job_spec.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using traintl::JobSpec;
  using traintl::SpecError;
  const std::string text(reinterpret_cast<const char*>(data), size);

  SpecError text_error;
  traintl::Result<JobSpec> from_text = traintl::ParseJobSpecText(text, &text_error);
  if (!from_text.ok()) FUZZ_CHECK(!text_error.message.empty());

  SpecError doc_error;
  auto doc = traintl::ParseJsonStrict(text, traintl::kMaxSpecDepth, traintl::kMaxSpecTextBytes,
                                      &doc_error);
  if (!doc.ok()) {
    FUZZ_CHECK(!from_text.ok());
    FUZZ_CHECK(!doc_error.message.empty());
    return 0;
  }
  SpecError spec_error;
  traintl::Result<JobSpec> from_doc = traintl::ParseJobSpec(*doc, &spec_error);
  FUZZ_CHECK(from_doc.ok() == from_text.ok());
  if (!from_doc.ok()) {
    FUZZ_CHECK(!spec_error.message.empty());
    FUZZ_CHECK(spec_error.ToString() == text_error.ToString());
  }

  // The API wraps the spec in a request object and allows one more level for it.
  nlohmann::json wrapped = {{"spec", *doc}};
  std::string wrapped_text = wrapped.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  auto rewrapped = traintl::ParseJsonStrict(wrapped_text, traintl::kMaxSpecDepth + 1,
                                            traintl::kMaxSpecTextBytes + 64);
  // dump() with replace may change invalid UTF-8; strict parsing must accept its output.
  FUZZ_CHECK(rewrapped.ok());

  if (!from_doc.ok()) return 0;
  FUZZ_CHECK(*from_doc == *from_text);
  nlohmann::json canonical = traintl::JobSpecToJson(*from_doc);
  SpecError canonical_error;
  traintl::Result<JobSpec> again = traintl::ParseJobSpecText(canonical.dump(), &canonical_error);
  if (!again.ok()) {
    std::fprintf(stderr, "canonical form refused: %s\n%s\n", canonical_error.ToString().c_str(),
                 canonical.dump().c_str());
  }
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(*again == *from_doc);
  return 0;
}
