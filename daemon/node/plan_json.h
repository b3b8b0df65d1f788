// JSON form of NodeAttemptPlan, for the head -> agent launch request
// (POST /v1/internal/launch).
//
// Thread-safety: free functions over values.
#pragma once

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/node/agent.h"

namespace traintl {

nlohmann::json NodeAttemptPlanToJson(const NodeAttemptPlan& plan);
// InvalidArgument naming what is missing or mistyped.
Result<NodeAttemptPlan> NodeAttemptPlanFromJson(const nlohmann::json& j);

}  // namespace traintl
