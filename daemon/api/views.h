// JSON views of state-store records for the HTTP API (docs/API.md).
// Thread-safety: free functions over values.
#pragma once

#include <nlohmann/json.hpp>

#include "daemon/state/records.h"
#include "daemon/state/state_store.h"

namespace traintl {

nlohmann::json JobSummaryJson(const JobRecord& job);
// scaling_config.num_workers of the job (1 when its definition cannot be read).
int JobNumWorkers(const JobRecord& job);
nlohmann::json JobDetailJson(const JobRecord& job, const StateStore& store);
nlohmann::json AttemptJson(const AttemptRecord& a);
nlohmann::json CheckpointJson(const CheckpointRecord& c, bool latest);

}  // namespace traintl
