#include "proto/node_status.h"

#include "proto/json_fields.h"

namespace traintl {

using nlohmann::json;
using proto_internal::FieldError;
using proto_internal::Fields;

json NodeStatusToJson(const NodeStatus& s) {
  json running = json::array();
  for (const auto& [job, attempt] : s.running)
    running.push_back({{"job_id", job}, {"attempt", attempt}});
  return {{"node_id", s.node_id}, {"api_address", s.api_address}, {"host", s.host},
          {"role", s.role},       {"raft_id", s.raft_id},         {"resources_total", s.total},
          {"gpus", s.gpus},       {"num_gpus", s.num_gpus},       {"running", running}};
}

Result<NodeStatus> NodeStatusFromJson(const json& j) {
  NodeStatus s;
  try {
    Fields f(j, "");
    f.Req("node_id", &s.node_id);
    f.Req("api_address", &s.api_address);
    f.Req("host", &s.host);
    f.Req("role", &s.role);
    f.Opt("raft_id", &s.raft_id);
    f.Req("resources_total", &s.total);
    f.Opt("gpus", &s.gpus);
    f.Opt("num_gpus", &s.num_gpus);
    if (s.node_id.empty()) throw FieldError(f.Name("node_id") + "empty");
    if (s.api_address.empty()) throw FieldError(f.Name("api_address") + "empty");
    if (s.num_gpus < 0 || s.num_gpus > 1024) throw FieldError(f.Name("num_gpus") + "out of range");
    if (auto r = j.find("running"); r != j.end() && !r->is_null()) {
      if (!r->is_array()) throw FieldError(f.Name("running") + "must be an array");
      for (const json& e : *r) {
        Fields rf(e, "running[].");
        std::pair<std::string, int> attempt;
        rf.Req("job_id", &attempt.first);
        rf.Req("attempt", &attempt.second);
        s.running.push_back(std::move(attempt));
      }
    }
  } catch (const FieldError& e) {
    return Status::InvalidArgument(std::string("malformed heartbeat: ") + e.what());
  }
  return s;
}

}  // namespace traintl
