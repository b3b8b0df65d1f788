#include "daemon/tune/search_space.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/spelling.h"

namespace traintl::tune {
namespace {

using json = nlohmann::json;

// Every grid point is a trial (times num_samples): a grid past this is a typo, not a plan,
// and the bound keeps GridSize() and the trial count far from overflow.
constexpr int64_t kMaxGridPoints = 1000000;

std::string Where(const std::vector<std::string>& path) {
  std::string out = "param_space";
  for (const auto& p : path) out += "." + p;
  return out;
}

std::string NoSuchField(const std::vector<std::string>& path, const json* spec) {
  std::string msg = Where(path) + ": no such field in the trainer's job spec";
  if (spec != nullptr && spec->is_object()) {
    std::vector<std::string> keys;
    for (auto it = spec->begin(); it != spec->end(); ++it) keys.push_back(it.key());
    std::string near = Closest(path.back(), keys);
    if (!near.empty()) msg += " (did you mean \"" + near + "\"?)";
  }
  return msg;
}

// `spec` is the trainer's value at `path` (nullptr under train_loop_config, the user's own
// dict, where any key may appear).
Status Walk(const json& node, const json* spec, std::vector<std::string>& path,
            std::vector<SearchSpace::Param>* out) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    path.push_back(it.key());
    const json* child_spec = nullptr;
    const bool free = spec == nullptr || (path.size() == 1 && it.key() == "train_loop_config");
    if (!free) {
      auto found = spec->is_object() ? spec->find(it.key()) : spec->end();
      if (!spec->is_object() || found == spec->end()) {
        return Status::InvalidArgument(NoSuchField(path, spec));
      }
      child_spec = &*found;
    }
    if (IsDomain(it.value())) {
      auto domain = ParseDomain(it.value(), Where(path));
      if (!domain.ok()) return domain.status();
      out->push_back({path, std::move(domain).value()});
    } else if (it.value().is_object()) {
      TRAINTL_RETURN_IF_ERROR(Walk(it.value(), child_spec, path, out));
    }
    path.pop_back();
  }
  return Status::Ok();
}

json* At(json& root, const std::vector<std::string>& path) {
  json* node = &root;
  for (const auto& key : path) node = &(*node)[key];
  return node;
}

const json* Find(const json& root, const std::vector<std::string>& path) {
  const json* node = &root;
  for (const auto& key : path) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node;
}

void Merge(json& into, const json& from) {
  if (!into.is_object() || !from.is_object()) {
    into = from;
    return;
  }
  for (auto it = from.begin(); it != from.end(); ++it) Merge(into[it.key()], it.value());
}

std::string FormatValue(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v.get<double>());
    return buf;
  }
  return v.dump();
}

void Leaves(const json& node, const std::string& key, std::string* out) {
  if (node.is_object()) {
    for (auto it = node.begin(); it != node.end(); ++it) Leaves(it.value(), it.key(), out);
    return;
  }
  if (!out->empty()) *out += ",";
  *out += key + "=" + FormatValue(node);
}

}  // namespace

Result<SearchSpace> SearchSpace::Parse(const json& param_space, const json& trainer) {
  if (!param_space.is_object()) {
    return Status::InvalidArgument("param_space: must be an object, got " +
                                   std::string(param_space.type_name()));
  }
  SearchSpace space;
  std::vector<std::string> path;
  TRAINTL_RETURN_IF_ERROR(Walk(param_space, &trainer, path, &space.params_));
  int64_t points = 1;
  for (const auto& p : space.params_) {
    if (p.domain.kind != Domain::Kind::kGridSearch) continue;
    points *= static_cast<int64_t>(p.domain.values.size());
    if (points > kMaxGridPoints) {
      return Status::InvalidArgument("param_space: the grid_search lists make more than " +
                                     std::to_string(kMaxGridPoints) + " grid points");
    }
  }
  space.param_space_ = param_space;
  return space;
}

bool SearchSpace::has_grid() const {
  for (const auto& p : params_) {
    if (p.domain.kind == Domain::Kind::kGridSearch) return true;
  }
  return false;
}

bool SearchSpace::has_random() const {
  for (const auto& p : params_) {
    if (p.domain.kind != Domain::Kind::kGridSearch) return true;
  }
  return false;
}

int64_t SearchSpace::GridSize() const {
  int64_t points = 1;
  for (const auto& p : params_) {
    if (p.domain.kind == Domain::Kind::kGridSearch) {
      points *= static_cast<int64_t>(p.domain.values.size());
    }
  }
  return points;
}

// Grid order follows Ray's BasicVariantGenerator: parse_spec_vars sorts the grid variables
// by path (the order of this depth-first walk over sorted keys) and _grid_search_generator
// counts like an odometer whose first variable turns fastest. So with grids a: [1, 2] and
// b: [x, y], points 0..3 are (1,x) (2,x) (1,y) (2,y); trials repeat the grid num_samples
// times, trial i taking point i % GridSize().
json SearchSpace::TrialConfig(uint64_t seed, int64_t index) const {
  json config = param_space_;
  const int64_t size = GridSize();
  int64_t point = ((index % size) + size) % size;
  Rng rng = Rng::ForIndex(seed, static_cast<uint64_t>(index));
  for (const auto& p : params_) {
    if (p.domain.kind == Domain::Kind::kGridSearch) {
      const auto n = static_cast<int64_t>(p.domain.values.size());
      *At(config, p.path) = p.domain.values[static_cast<size_t>(point % n)];
      point /= n;
    } else {
      *At(config, p.path) = p.domain.Sample(rng);
    }
  }
  return config;
}

json SearchSpace::Apply(const json& trainer, const json& config) {
  json out = trainer;
  Merge(out, config);
  return out;
}

// Strings go in raw and other values as JSON: making a name safe for a directory is the
// caller's business, and a table shows it as it is.
std::string SearchSpace::ShortName(const json& config) {
  std::string out;
  if (config.is_object()) Leaves(config, "", &out);
  return out;
}

json SearchSpace::ParamValues(const json& config) const {
  json out = json::object();
  for (const auto& p : params_) {
    if (const json* v = Find(config, p.path)) *At(out, p.path) = *v;
  }
  return out;
}

}  // namespace traintl::tune
