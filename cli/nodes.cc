// `traintl nodes`: the cluster's nodes, their roles, health and resources.

#include <algorithm>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/verbs.h"

namespace traintl {
namespace cli {
namespace {

double Amount(const nlohmann::json& resources, const std::string& key) {
  const auto& v = JsonField(resources, key.c_str());
  return v.is_number() ? v.get<double>() : 0.0;
}

std::string UsedOfTotal(const nlohmann::json& used, const nlohmann::json& total,
                        const std::string& key) {
  if (!JsonField(total, key.c_str()).is_number()) return "-";
  if (key == "memory") {
    return FormatBytes(Amount(used, key)) + " / " + FormatBytes(Amount(total, key));
  }
  return FormatScalar(nlohmann::json(Amount(used, key))) + "/" +
         FormatScalar(nlohmann::json(Amount(total, key)));
}

}  // namespace

std::string FormatNodeTable(const nlohmann::json& nodes, int64_t now_ms) {
  if (!nodes.is_array() || nodes.empty()) return "no nodes\n";
  Table table({"NODE", "ROLE", "STATE", "ADDRESS", "CPU", "GPU", "MEMORY", "OTHER", "HEARTBEAT"});
  for (const auto& node : nodes) {
    const auto& total = JsonField(node, "resources_total");
    const auto& used = JsonField(node, "resources_used");
    std::string other;
    if (total.is_object()) {
      for (auto it = total.begin(); it != total.end(); ++it) {
        if (it.key() == "CPU" || it.key() == "GPU" || it.key() == "memory") continue;
        if (!other.empty()) other += ' ';
        other += it.key() + "=" + UsedOfTotal(used, total, it.key());
      }
    }
    auto heartbeat = JsonInt(node, "last_heartbeat");
    table.AddRow(
        {JsonString(node, "node_id"), JsonString(node, "role"), JsonString(node, "state"),
         JsonString(node, "address"), UsedOfTotal(used, total, "CPU"),
         UsedOfTotal(used, total, "GPU"), UsedOfTotal(used, total, "memory"),
         other.empty() ? "-" : other,
         heartbeat ? FormatDuration(std::max<int64_t>(0, now_ms - *heartbeat)) + " ago" : "-"});
  }
  return table.Render();
}

int RunNodes(CliContext& ctx) {
  return GetAndShow(ctx, "/v1/nodes", [&](const nlohmann::json& body) {
    return FormatNodeTable(JsonField(body, "nodes"), ctx.now_ms());
  });
}

}  // namespace cli
}  // namespace traintl
