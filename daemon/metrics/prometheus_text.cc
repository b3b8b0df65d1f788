#include "daemon/metrics/prometheus_text.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace traintl {
namespace {

std::string EscapeLabel(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // The shortest of 15 or 17 significant digits that reads back as `v` (0.005, not
  // 0.0050000000000000001).
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

void PrometheusText::Family(const std::string& name, const char* type, const std::string& help) {
  out_ += "# HELP " + name + " " + EscapeHelp(help) + "\n# TYPE " + name + " " + type + "\n";
}

void PrometheusText::Sample(const std::string& name, const PromLabels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ += ',';
      out_ += labels[i].first + "=\"" + EscapeLabel(labels[i].second) + '"';
    }
    out_ += '}';
  }
  out_ += ' ' + Number(value) + '\n';
}

std::string PrometheusText::SanitizeName(const std::string& raw) {
  std::string out;
  for (char c : raw) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
  return out;
}

void LatencyHistogram::Record(double seconds) {
  ++count_;
  sum_ += seconds;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) {
      ++buckets_[i];
      return;
    }
  }
}

void LatencyHistogram::Write(PrometheusText& out, const std::string& name,
                             const std::string& help) const {
  out.Family(name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i];
    out.Sample(name + "_bucket", {{"le", Number(kBounds[i])}}, static_cast<double>(cumulative));
  }
  out.Sample(name + "_bucket", {{"le", "+Inf"}}, static_cast<double>(count_));
  out.Sample(name + "_sum", {}, sum_);
  out.Sample(name + "_count", {}, static_cast<double>(count_));
}

}  // namespace traintl
