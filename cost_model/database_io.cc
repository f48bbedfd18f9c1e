#include "cost_model/database_io.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/lower.h"
#include "ir/schedule.h"
#include "ir/trace.h"
#include "ir/workload.h"

namespace lathe::cost_model {

std::string BlobFormat() { return absl::StrCat("lathe-xgb-ubj-f", kFeatureVersion); }

absl::Status SaveToDatabase(db::Database& db, const std::string& device_class,
                            const CostModel& model) {
  absl::StatusOr<std::string> bytes = model.Save();
  if (!bytes.ok()) return bytes.status();
  db::CostModelBlob blob;
  blob.device_class = device_class;
  blob.format = BlobFormat();
  blob.model = std::move(*bytes);
  blob.trained_on = model.trained_on();
  return db.PutCostModel(blob);
}

absl::StatusOr<CostModel> LoadFromDatabase(db::Database& db, const std::string& device_class,
                                           CostModelOptions options) {
  absl::StatusOr<std::optional<db::CostModelBlob>> blob = db.GetCostModel(device_class);
  if (!blob.ok()) return blob.status();
  if (!blob->has_value()) {
    return absl::NotFoundError(
        absl::StrCat("no cost model saved for device class '", device_class, "'"));
  }
  if ((*blob)->format != BlobFormat()) {
    return absl::InvalidArgumentError(absl::StrCat("cost model of device class '", device_class,
                                                   "' has format '", (*blob)->format,
                                                   "'; this build reads '", BlobFormat(), "'"));
  }
  absl::StatusOr<CostModel> model = CostModel::Load((*blob)->model, options);
  if (!model.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cost model of device class '", device_class,
                                                   "': ", model.status().message()));
  }
  return model;
}

absl::StatusOr<ir::LoweredFunc> LowerTraceJson(const std::string& trace_json) {
  absl::StatusOr<ir::Trace> trace = ir::TraceFromJson(trace_json);
  if (!trace.ok()) return trace.status();
  absl::StatusOr<ir::Workload> w = ir::MakeWorkload(trace->workload);
  if (!w.ok()) return w.status();
  absl::StatusOr<ir::Schedule> sch = ir::ApplyTrace(*w, *trace);
  if (!sch.ok()) return sch.status();
  return codegen::Lower(*sch, "kernel");
}

absl::StatusOr<TrainFromDatabaseStats> TrainFromDatabase(db::Database& db,
                                                         const std::string& device_class,
                                                         CostModel& model) {
  struct Row {
    std::string trace_json, key;
    double median_us;
  };
  std::vector<Row> rows;
  absl::Status st = db.ForEachRecord([&](const db::Record& r) {
    if (r.device_class == device_class && r.error_class == db::ErrorClass::kOk && r.median_us > 0) {
      rows.push_back({r.trace_json, r.workload_key, r.median_us});
    }
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  TrainFromDatabaseStats stats;
  stats.records = static_cast<int64_t>(rows.size());
  std::vector<FeatureMatrix> features;
  std::vector<double> throughputs;
  std::vector<std::string> keys;
  for (const Row& r : rows) {
    absl::StatusOr<ir::LoweredFunc> f = LowerTraceJson(r.trace_json);
    absl::StatusOr<FeatureMatrix> m =
        f.ok() ? ExtractFeatures(*f) : absl::StatusOr<FeatureMatrix>(f.status());
    if (!m.ok()) {
      ++stats.skipped;
      continue;
    }
    features.push_back(std::move(*m));
    throughputs.push_back(1.0 / r.median_us);
    keys.push_back(r.key);
  }
  stats.used = static_cast<int64_t>(features.size());
  if (absl::Status u = model.Update(features, throughputs, keys); !u.ok()) return u;
  if (!model.trained() || model.trained_on() < model.num_programs()) {
    if (absl::Status t = model.Train(); !t.ok()) return t;
  }
  return stats;
}

}  // namespace lathe::cost_model
